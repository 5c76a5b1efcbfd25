"""The OAUTHBEARER exchange on the broker's side: RFC 7628's first message, Kafka's answers to a
good token, a refused one (the JSON challenge, then the failure) and a malformed message, and the
factory built from a listener's settings."""

from __future__ import annotations

import json
import logging

import jwt
import pytest

from replog import config
from replog.security.oauthbearer import OAuthBearerServer, server_factory, token_of
from replog.security.oauthbearer_jwt import JwksKeys, TokenValidator
from replog.security.sasl import Authenticated, AuthenticationFailed, InvalidCredentials, Step
from replog.security.sasl_mechanisms import ListenerSasl, SaslSettingsError, listener_mechanisms
from tests.support.oauthbearer import AUDIENCE, ISSUER, SigningKey, jwks


INVALID_CREDENTIALS = str(InvalidCredentials("OAUTHBEARER"))


def first_message(token: str, authzid: str = "", extensions: str = "") -> bytes:
    """What Kafka's and librdkafka's clients send."""
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}\x01{extensions}\x01".encode()


@pytest.fixture(scope="module")
def key() -> SigningKey:
    return SigningKey("RS256", kid="k1")


@pytest.fixture()
def exchange(key) -> OAuthBearerServer:
    document = json.dumps(jwks(key)).encode()
    keys = JwksKeys("http://127.0.0.1:1/jwks", 3_600_000, 100, 10_000, read=lambda url: document)
    return OAuthBearerServer(TokenValidator(keys, expected_issuer=ISSUER, expected_audience=(AUDIENCE,)), "SASL_SSL")


async def test_a_valid_token_authenticates_its_subject_until_it_expires(exchange, key):
    token = key.token("alice", lifetime_s=120)
    step = await exchange.evaluate(first_message(token))
    assert step.challenge == b""
    assert step.authenticated is not None and step.authenticated.principal == "User:alice"
    assert step.authenticated.expires_at_ms == jwt.decode(token, options={"verify_signature": False})["exp"] * 1000


async def test_extensions_and_a_matching_authorization_id_are_accepted(exchange, key):
    step = await exchange.evaluate(first_message(key.token("bob"), "bob", "traceId=abc 123\x01logicalCluster=lc-1\x01"))
    assert step.authenticated == Authenticated("User:bob", step.authenticated.expires_at_ms)


async def test_an_authorization_id_other_than_the_subject_fails(exchange, key):
    with pytest.raises(AuthenticationFailed) as failed:
        await exchange.evaluate(first_message(key.token("bob"), "admin"))
    assert str(failed.value) == ("Authentication failed: Client requested an authorization id (admin) that is "
                                 "different from the token's principal name (bob)")


async def test_a_refused_token_gets_the_json_challenge_then_fails_on_the_clients_answer(exchange, key, caplog):
    token = key.token(lifetime_s=-3600)
    with caplog.at_level(logging.DEBUG):
        step = await exchange.evaluate(first_message(token))
        assert step == Step(b'{"status":"invalid_token"}')
        with pytest.raises(AuthenticationFailed) as failed:
            await exchange.evaluate(b"\x01")
    assert str(failed.value) == '{"status":"invalid_token"}'
    assert "expired" in caplog.text
    assert token not in caplog.text and token.split(".")[2] not in caplog.text


async def test_a_lone_ctrl_a_before_any_refusal_is_a_malformed_message(exchange):
    with pytest.raises(AuthenticationFailed, match=INVALID_CREDENTIALS):
        await exchange.evaluate(b"\x01")


@pytest.mark.parametrize("message", [
    b"",
    b"garbage",
    b"n,,\x01auth=Bearer\x01\x01",  # no token
    b"n,,\x01auth=Basic dXNlcjpwYXNz\x01\x01",  # another scheme
    b"n,,\x01host=example\x01\x01",  # no auth
    b"y,,\x01auth=Bearer a.b.c\x01\x01",  # a channel-binding flag Kafka does not take
    b"n,,\x01auth=Bearer a.b.c\x01",  # unterminated
    b"n,,\x01auth=Bearer a.b.c\x01bad key=1\x01\x01",  # an extension name that is not letters
    "n,,\x01auth=Bearer a.b.c\x01k=\u00e9\x01\x01".encode(),  # a value that is not ASCII
    b"n,,\x01auth=Bearer " + b"a" * (128 * 1024) + b"\x01\x01",  # oversized
])
async def test_a_malformed_first_message_fails_with_kafkas_message(exchange, message):
    with pytest.raises(AuthenticationFailed) as failed:
        await exchange.evaluate(message)
    assert str(failed.value) == INVALID_CREDENTIALS


def test_the_authorization_id_is_unescaped():
    assert token_of(b"n,a=a=2Cb=3Dc,\x01auth=bearer t0k.e-n_~+/==\x01\x01") == ("t0k.e-n_~+/==", "a,b=c")


async def test_the_factory_takes_the_listeners_own_settings_over_the_brokers(key, tmp_path):
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks(key)))
    settings = config.load_broker_config(overrides={
        "sasl.oauthbearer.jwks.endpoint.url": "http://127.0.0.1:1/unused",
        "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url": path.as_uri(),
        "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.sub.claim.name": "client_id",
        "sasl.oauthbearer.expected.issuer": ISSUER,
    })
    new_exchange = server_factory(settings, "SASL_SSL")
    assert new_exchange() is not new_exchange()  # one exchange per (re)authentication
    step = await new_exchange().evaluate(first_message(key.token("ignored", client_id="svc-1")))
    assert step.authenticated.principal == "User:svc-1"
    step = await new_exchange().evaluate(first_message(key.token(iss="https://other.example", client_id="svc-1")))
    assert step.challenge == b'{"status":"invalid_token"}'


def test_a_listener_enabling_oauthbearer_without_a_jwks_stops_the_start_in_one_line():
    settings = config.load_broker_config(overrides={"sasl.enabled.mechanisms": "SCRAM-SHA-512,OAUTHBEARER"})
    with pytest.raises(SaslSettingsError, match="listener SASL_SSL enables OAUTHBEARER: set sasl.oauthbearer.jwks"):
        listener_mechanisms(ListenerSasl("SASL_SSL", settings, scram_credential=None))
