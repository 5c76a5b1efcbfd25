"""OAUTHBEARER token validation: signatures against a JWKS (fetched over loopback HTTP or from a
file, refreshed on age and on an unknown kid, within a backoff), and the claims Kafka checks."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import time

import pytest
from cryptography.hazmat.primitives import serialization

from replog.security.oauthbearer_jwt import (MAX_JWKS_BYTES, MAX_TOKEN_BYTES, InvalidToken, JwksError, JwksKeys,
                                             TokenValidator, parse_jwks, read_jwks)
from tests.support.oauthbearer import AUDIENCE, ISSUER, JwksServer, SigningKey, jwks


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("RS256", kid="k1")


def validator(document: dict | bytes, monotonic: Clock | None = None, refresh_ms: int = 3_600_000,
              **options) -> tuple[TokenValidator, list[int]]:
    """A validator whose JWKS reads return `document`; the list counts the reads."""
    reads = [0]

    def read(url: str) -> bytes:
        reads[0] += 1
        return document if isinstance(document, bytes) else json.dumps(document).encode()

    keys = JwksKeys("http://127.0.0.1:1/jwks", refresh_ms, 100, 10_000, monotonic_ms=monotonic or Clock(), read=read)
    return TokenValidator(keys, **({"expected_issuer": ISSUER, "expected_audience": (AUDIENCE,)} | options)), reads


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: dict, payload: dict, signature: bytes = b"") -> str:
    return f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}.{b64(signature)}"


async def refused(check: TokenValidator, token: str, reason: str) -> None:
    with pytest.raises(InvalidToken, match=reason):
        await check.validate(token)


async def test_a_good_token_gives_its_subject_expiry_and_scopes(key):
    check, _ = validator(jwks(key))
    token = key.token("alice", scope=["produce", "consume"])
    valid = await check.validate(token)
    assert valid.principal_name == "alice"
    assert valid.scopes == {"produce", "consume"}
    assert abs(valid.expires_at_ms - (time.time() + 300) * 1000) < 5_000


@pytest.mark.parametrize("algorithm", ["RS256", "RS512", "PS256", "ES256", "ES384", "ES512"])
async def test_each_asymmetric_algorithm_is_accepted(algorithm):
    signer = SigningKey(algorithm)
    check, _ = validator(jwks(signer))
    assert (await check.validate(signer.token("bob"))).principal_name == "bob"


async def test_an_expired_token_is_refused_past_the_clock_skew_only(key):
    check, _ = validator(jwks(key), clock_skew_seconds=30)
    await refused(check, key.token(lifetime_s=-60), "expired")
    assert (await check.validate(key.token(lifetime_s=-10))).principal_name == "alice"


async def test_wrong_issuer_or_audience_is_refused(key):
    check, _ = validator(jwks(key))
    await refused(check, key.token(iss="https://elsewhere.example"), "iss")
    await refused(check, key.token(aud="another-service"), "aud")
    await refused(check, key.token(aud=None), "aud")
    assert (await check.validate(key.token(aud=["another-service", AUDIENCE]))).principal_name == "alice"


async def test_required_claims_and_times(key):
    check, _ = validator(jwks(key))
    await refused(check, key.token(exp=None), "no exp")
    await refused(check, key.token(iat=None), "no iat")
    await refused(check, key.token(sub=None), "sub claim")
    await refused(check, key.token(sub="  "), "sub claim")
    await refused(check, key.token(nbf=int(time.time()) + 600), "not valid before")
    await refused(check, key.token(iat=int(time.time()) + 600), "issued in the future")
    await refused(check, key.token(exp="tomorrow"), "exp claim is not a time")
    await refused(check, key.token(scope=["read", ""]), "empty scope")


async def test_the_subject_and_scope_claims_are_configurable(key):
    check, _ = validator(jwks(key), sub_claim_name="client_id", scope_claim_name="scp")
    valid = await check.validate(key.token("ignored", client_id="svc-7", scp="write"))
    assert (valid.principal_name, valid.scopes) == ("svc-7", {"write"})


async def test_a_token_signed_by_another_key_is_refused(key):
    impostor = SigningKey("RS256", kid=key.kid)
    check, _ = validator(jwks(key))
    await refused(check, impostor.token(), "signature does not verify")


async def test_alg_none_and_hmac_with_the_public_key_are_refused(key):
    check, _ = validator(jwks(key))
    claims = {"sub": "mallory", "iss": ISSUER, "aud": AUDIENCE, "iat": int(time.time()), "exp": int(time.time()) + 300}
    await refused(check, unsigned({"alg": "none", "kid": key.kid}, claims), "algorithm 'none' is not accepted")
    # The classic confusion: the RSA public key, which anyone can read from the JWKS, as an HMAC secret.
    public_pem = key.private_key.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo)
    header = {"alg": "HS256", "kid": key.kid}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    forged = f"{signing_input}.{b64(hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest())}"
    await refused(check, forged, "algorithm 'HS256' is not accepted")


async def test_an_algorithm_other_than_the_keys_own_is_refused():
    signer = SigningKey("RS256", kid="rsa")
    signer.jwk["alg"] = "RS512"  # the JWKS binds the key to RS512
    check, _ = validator(jwks(signer))
    await refused(check, signer.token(), "no key in the JWKS for kid 'rsa' and algorithm RS256")


async def test_malformed_truncated_and_oversized_tokens_are_refused(key):
    check, _ = validator(jwks(key))
    token = key.token()
    # Cut in the signature, it is a well-formed JWS whose signature fails; elsewhere, not one.
    await refused(check, token[: len(token) // 2], "not a compact JWS|cannot be read|does not verify")
    await refused(check, token.rsplit(".", 1)[0], "not a compact JWS")
    await refused(check, "not-a-token", "not a compact JWS")
    await refused(check, "A" * (MAX_TOKEN_BYTES + 1), "longer than")
    deep = b64(b"[" * 20_000)  # nested past the recursion limit, within the size bound
    await refused(check, f"{deep}.{deep}.AAAA", "not a compact JWS")


async def test_an_unknown_kid_fetches_the_rotated_jwks_over_http(key):
    rotated = SigningKey("ES256", kid="k2")
    with JwksServer(jwks(key)) as server:
        keys = JwksKeys(server.url, 3_600_000, 0, 0)
        check = TokenValidator(keys, expected_issuer=ISSUER, expected_audience=(AUDIENCE,))
        assert (await check.validate(key.token())).principal_name == "alice"
        assert server.requests == 1
        await check.validate(key.token("bob"))
        assert server.requests == 1  # cached
        server.document = jwks(key, rotated)
        assert (await check.validate(rotated.token("carol"))).principal_name == "carol"
        assert server.requests == 2


async def test_unknown_kids_fetch_at_most_once_per_backoff_which_doubles(key):
    monotonic = Clock()
    check, reads = validator(jwks(key), monotonic)
    await check.validate(key.token())
    assert reads[0] == 1
    monotonic.ms += 100  # past the backoff (100 ms) after a fetch that found what it looked for
    for index in range(20):
        await refused(check, SigningKey("RS256", kid=f"invented-{index}").token(), "no key in the JWKS")
    assert reads[0] == 2
    # Each fetch that finds no key for the kid doubles the wait before the next: 100 ms, 200 ms.
    for wait_ms, expected_reads in ((99, 2), (1, 3), (199, 3), (1, 4)):
        monotonic.ms += wait_ms
        await refused(check, SigningKey("RS256", kid=f"invented-at-{monotonic.ms}").token(), "no key")
        assert reads[0] == expected_reads


async def test_the_jwks_is_fetched_again_once_older_than_refresh_ms(key):
    monotonic = Clock()
    check, reads = validator(jwks(key), monotonic, refresh_ms=60_000)
    await check.validate(key.token())
    monotonic.ms += 59_999
    await check.validate(key.token())
    assert reads[0] == 1
    monotonic.ms += 1
    await check.validate(key.token())
    assert reads[0] == 2


async def test_a_failed_fetch_keeps_the_keys_held(key, tmp_path):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(key)))
    monotonic = Clock()
    keys = JwksKeys(path.as_uri(), 1000, 100, 10_000, monotonic_ms=monotonic)
    check = TokenValidator(keys)
    await check.validate(key.token())
    path.write_text("{not json")
    monotonic.ms += 1000
    assert (await check.validate(key.token())).principal_name == "alice"
    path.unlink()
    monotonic.ms += 1000
    assert (await check.validate(key.token())).principal_name == "alice"


def test_jwks_bounds_and_unusable_keys(key):
    oct_key = {"kty": "oct", "k": b64(b"secret"), "kid": "hmac"}
    assert set(parse_jwks(json.dumps({"keys": [oct_key, key.jwk]}).encode())) == {"k1"}
    with pytest.raises(JwksError, match="no key"):
        parse_jwks(json.dumps({"keys": [oct_key]}).encode())
    with pytest.raises(JwksError, match="more than"):
        parse_jwks(json.dumps({"keys": [key.jwk] * 101}).encode())
    with pytest.raises(JwksError, match="not JSON"):
        parse_jwks(b"[" * 100_000)


def test_a_jwks_file_larger_than_the_bound_is_refused(tmp_path):
    path = tmp_path / "huge.json"
    path.write_bytes(b" " * (MAX_JWKS_BYTES + 1))
    with pytest.raises(JwksError, match="larger than"):
        read_jwks(path.as_uri())


async def test_a_failed_fetch_is_logged_without_the_urls_credentials(key, caplog):
    def unreachable(url: str) -> bytes:
        raise OSError("connection refused")

    keys = JwksKeys("https://user:s3cr3t@idp.example/jwks", 1000, 100, 10_000, read=unreachable)
    with caplog.at_level(logging.WARNING):
        await refused(TokenValidator(keys), key.token(), "no key")
    assert "url=https://idp.example/jwks " in caplog.text
    assert "s3cr3t" not in caplog.text
