"""OAUTHBEARER's token validation (KIP-768, as Kafka's BrokerJwtValidator): a compact JWS signed by
one of the keys a JWKS publishes, with the claims Kafka requires (exp, iat, the subject claim),
the issuer and audience the listener expects, and exp/nbf/iat within the clock skew of now.

Accepted signatures: RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA. Never `none`, never
HMAC: a JWKS holds public keys, and a token that names HS256 with one would be checked against
the public key as its secret. Every input is bounded before it is parsed: the token (and so the
depth of its JSON) by MAX_TOKEN_BYTES, the JWKS document by MAX_JWKS_BYTES and its keys by
MAX_JWKS_KEYS. Nothing here logs or raises a token's text.

Clocks are injected: `wall_ms` for the claims, `monotonic_ms` for the JWKS's age.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import jwt

logger = logging.getLogger(__name__)

ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"})
# The algorithms a key of each type and curve can check. An RSA key without an "alg" of its own
# serves every RSA algorithm, as jose4j's key selection lets it.
_RSA = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512")
_CURVE_ALGORITHM = {"P-256": "ES256", "P-384": "ES384", "P-521": "ES512", "Ed25519": "EdDSA"}

# Identity providers' tokens run to a few KiB; Azure's with group claims to ~10 KiB.
MAX_TOKEN_BYTES = 64 * 1024
MAX_JWKS_BYTES = 1024 * 1024
MAX_JWKS_KEYS = 100
# jose4j's default for Kafka's JWKS fetches is no read timeout; a broker should not wait forever.
JWKS_FETCH_TIMEOUT_S = 10.0


class InvalidToken(Exception):
    """Why a token was refused, for the broker's log: never the token's text."""


class ValidToken(NamedTuple):
    principal_name: str  # the subject claim's value
    expires_at_ms: int
    scopes: frozenset[str]


class JwksError(Exception):
    """The JWKS could not be read or holds no usable key."""


def read_jwks(url: str) -> bytes:
    """The document at `url`, at most MAX_JWKS_BYTES of it (blocking: run in a thread)."""
    if url.lower().startswith("file:"):
        with open(urllib.request.url2pathname(urllib.parse.urlparse(url).path), "rb") as file:
            data = file.read(MAX_JWKS_BYTES + 1)
    else:
        with urllib.request.urlopen(url, timeout=JWKS_FETCH_TIMEOUT_S) as response:
            data = response.read(MAX_JWKS_BYTES + 1)
    if len(data) > MAX_JWKS_BYTES:
        raise JwksError(f"the JWKS is larger than {MAX_JWKS_BYTES} bytes")
    return data


def parse_jwks(data: bytes) -> dict[str | None, dict[str, jwt.PyJWK]]:
    """kid -> algorithm -> key, for the keys of a JWKS document that can check an accepted
    algorithm; symmetric ("oct") and unknown keys are left out."""
    try:
        document = json.loads(data)
    except (ValueError, RecursionError) as error:
        raise JwksError(f"the JWKS is not JSON: {error}") from None
    entries = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise JwksError('the JWKS has no "keys" list')
    if len(entries) > MAX_JWKS_KEYS:
        raise JwksError(f"the JWKS has {len(entries)} keys, more than {MAX_JWKS_KEYS}")
    keys: dict[str | None, dict[str, jwt.PyJWK]] = {}
    for entry in entries:  # bounded: MAX_JWKS_KEYS
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        kid = entry.get("kid")
        if kid is not None and not isinstance(kid, str):
            continue
        for algorithm in _algorithms_of(entry):
            try:
                keys.setdefault(kid, {})[algorithm] = jwt.PyJWK(entry, algorithm)
            except jwt.PyJWTError:
                continue
    if not keys:
        raise JwksError("the JWKS holds no key for RS*, PS*, ES* or EdDSA signatures")
    return keys


def _algorithms_of(entry: Mapping[str, Any]) -> tuple[str, ...]:
    own = entry.get("alg")
    if own is not None:
        return (own,) if own in ALGORITHMS else ()
    if entry.get("kty") == "RSA":
        return _RSA
    if entry.get("kty") in ("EC", "OKP") and entry.get("crv") in _CURVE_ALGORITHM:
        return (_CURVE_ALGORITHM[entry["crv"]],)
    return ()


class JwksKeys:
    """The verification keys of one JWKS endpoint, shared by a listener's connections.

    Fetched when first needed and again once older than `refresh_ms`, before the token that finds
    them old is checked; early for a token naming a kid the keys lack. Never twice within the
    backoff, which starts at `backoff_ms` and doubles, up to `backoff_max_ms`, while fetches fail
    or find no key for the kid wanted, so that tokens with invented kids, or an identity provider
    that is down, cannot make every authentication wait on a fetch. A failed fetch keeps the
    keys already held.
    """

    def __init__(self, url: str, refresh_ms: int, backoff_ms: int, backoff_max_ms: int,
                 monotonic_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000,
                 read: Callable[[str], bytes] = read_jwks) -> None:
        self._url = url
        # A URL's user:password@ stays out of the log lines that name it.
        parts = urllib.parse.urlsplit(url)
        self._shown_url = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        self._refresh_ms = refresh_ms
        self._backoff_min_ms = backoff_ms
        self._backoff_max_ms = max(backoff_ms, backoff_max_ms)
        self._backoff_ms = backoff_ms
        self._monotonic_ms = monotonic_ms
        self._read = read
        self._keys: dict[str | None, dict[str, jwt.PyJWK]] = {}
        self._fetched_at_ms: int | None = None
        self._next_fetch_ms = 0
        self._lock = asyncio.Lock()

    async def keys_for(self, kid: str | None, algorithm: str) -> list[jwt.PyJWK]:
        """The keys that may have signed a token with this kid and algorithm: the key of that kid,
        or for a token without a kid every key for the algorithm."""
        if self._stale() or (kid is not None and kid not in self._keys):
            async with self._lock:  # one fetch at a time; those who waited find it done
                if self._stale() or (kid is not None and kid not in self._keys):
                    await self._fetch(kid)
        if kid is not None:
            key = self._keys.get(kid, {}).get(algorithm)
            return [key] if key is not None else []
        return [by_algorithm[algorithm] for by_algorithm in self._keys.values() if algorithm in by_algorithm]

    def _stale(self) -> bool:
        return self._fetched_at_ms is None or self._monotonic_ms() - self._fetched_at_ms >= self._refresh_ms

    async def _fetch(self, kid: str | None) -> None:
        now_ms = self._monotonic_ms()
        if now_ms < self._next_fetch_ms:
            return
        try:
            keys = parse_jwks(await asyncio.to_thread(self._read, self._url))
        except (OSError, ValueError, JwksError) as error:  # urllib's errors are OSErrors
            logger.warning("JWKS fetch failed url=%s key_ids_kept=%d reason=%s", self._shown_url, len(self._keys),
                           error)
            self._back_off(now_ms, found=False)
            return
        found = kid is None or kid in keys
        if keys.keys() != self._keys.keys():
            logger.info("JWKS fetched url=%s key_ids=%s", self._shown_url, ",".join(sorted(map(str, keys))))
        self._keys, self._fetched_at_ms = keys, now_ms
        self._back_off(now_ms, found)

    def _back_off(self, now_ms: int, found: bool) -> None:
        self._next_fetch_ms = now_ms + self._backoff_ms
        self._backoff_ms = self._backoff_min_ms if found else min(2 * self._backoff_ms or 1, self._backoff_max_ms)


class TokenValidator:
    """Checks tokens for one listener; shared by its connections."""

    def __init__(self, keys: JwksKeys, *, expected_issuer: str | None = None,
                 expected_audience: tuple[str, ...] = (), sub_claim_name: str = "sub",
                 scope_claim_name: str = "scope", clock_skew_seconds: int = 30,
                 wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000) -> None:
        self._keys = keys
        self._issuer = expected_issuer
        self._audience = frozenset(expected_audience)
        self._sub_claim = sub_claim_name
        self._scope_claim = scope_claim_name
        self._skew_ms = clock_skew_seconds * 1000
        self._wall_ms = wall_ms

    async def validate(self, token: str) -> ValidToken:
        """The token's subject, expiry and scopes; InvalidToken says why it is refused."""
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken(f"the token is longer than {MAX_TOKEN_BYTES} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, RecursionError):
            raise InvalidToken("the token is not a compact JWS") from None
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in ALGORITHMS:
            raise InvalidToken(f"the token's algorithm {str(algorithm)[:16]!r} is not accepted "
                               f"(accepted: {', '.join(sorted(ALGORITHMS))})")
        if kid is not None and not isinstance(kid, str):
            raise InvalidToken("the token's kid is not a string")
        claims = self._verified_claims(token, algorithm, await self._keys.keys_for(kid, algorithm), kid)
        return self._checked(claims)

    def _verified_claims(self, token: str, algorithm: str, keys: list[jwt.PyJWK], kid: str | None) -> dict:
        if not keys:
            raise InvalidToken(f"no key in the JWKS for kid {str(kid)[:64]!r} and algorithm {algorithm}")
        for key in keys:  # bounded: MAX_JWKS_KEYS
            try:
                # Claims are checked below, against the injected clock and in Kafka's terms.
                return jwt.decode(token, key=key, algorithms=[algorithm], options={
                    "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
                    "verify_aud": False, "verify_iss": False, "verify_sub": False, "verify_jti": False})
            except jwt.InvalidSignatureError:
                continue
            except (jwt.PyJWTError, RecursionError) as error:
                raise InvalidToken(f"the token cannot be read: {type(error).__name__}") from None
        raise InvalidToken(f"the token's signature does not verify with the JWKS's key for kid {str(kid)[:64]!r}")

    def _checked(self, claims: dict) -> ValidToken:
        now_ms = self._wall_ms()
        expires_at_ms = _time_claim(claims, "exp", required=True)
        issued_at_ms = _time_claim(claims, "iat", required=True)
        not_before_ms = _time_claim(claims, "nbf", required=False)
        if now_ms - self._skew_ms >= expires_at_ms:
            raise InvalidToken(f"the token expired at {expires_at_ms} ms, now is {now_ms} ms")
        if not_before_ms is not None and now_ms + self._skew_ms < not_before_ms:
            raise InvalidToken(f"the token is not valid before {not_before_ms} ms, now is {now_ms} ms")
        if now_ms + self._skew_ms < issued_at_ms:
            raise InvalidToken(f"the token was issued in the future, at {issued_at_ms} ms, now is {now_ms} ms")
        if self._issuer is not None and claims.get("iss") != self._issuer:
            raise InvalidToken("the token's iss claim is not the expected issuer")
        if self._audience:
            audience = claims.get("aud")
            audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
            if not self._audience.intersection(a for a in audiences if isinstance(a, str)):
                raise InvalidToken("the token's aud claim names none of the expected audiences")
        subject = claims.get(self._sub_claim)
        if not isinstance(subject, str) or not subject.strip():
            raise InvalidToken(f"the token's {self._sub_claim} claim is missing or empty")
        return ValidToken(subject.strip(), expires_at_ms, self._scopes(claims.get(self._scope_claim)))

    def _scopes(self, raw: Any) -> frozenset[str]:
        # Kafka's: a string is one scope, as it stands; a list, one scope per item.
        items = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
        scopes = set()
        for item in items:  # bounded by the token's size
            if not isinstance(item, str) or not item.strip():
                raise InvalidToken(f"the token's {self._scope_claim} claim holds an empty scope")
            scopes.add(item.strip())
        return frozenset(scopes)


def _time_claim(claims: dict, name: str, required: bool) -> int | None:
    """A NumericDate claim (seconds since the epoch) in ms."""
    value = claims.get(name)
    if value is None:
        if required:
            raise InvalidToken(f"the token has no {name} claim")
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidToken(f"the token's {name} claim is not a time")
    return int(value * 1000)
