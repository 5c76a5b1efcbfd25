"""replog's own client over SASL (net/client.py, security/sasl_client.py) against an in-process
broker's SASL_PLAINTEXT listener: each mechanism authenticates, a refusal names the broker and
Kafka's message and never the password, and a session with a lifetime (KIP-368) is renewed on
the same connection while requests keep flowing."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from replog.admin.scram_credentials import ScramUpsertion, alter_user_scram_credentials
from kio.schema.errors import ErrorCode

from replog.coord_backends.paths import BrokerRegistration
from replog.net import high_watermarks
from replog.net.client import BrokerConnection, SaslAuthenticationFailed
from replog.net.client_security import ClientSecurity
from replog.security.scram import SCRAM_SHA_256, new_salt, salted_password
from replog.tls_settings import Secret
from tests.net.test_listeners import create_led_topic
from tests.net.test_sasl_connections import PASSWORD, PLAIN_PASSWORD, sasl_broker
from tests.support.batches import build_batch

WAIT_S = 10
REAUTH_MS = 1000
SESSIONS_OUTLIVED = 3
ALL_MECHANISMS = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"


async def with_sha_256(broker) -> None:
    """alice's SCRAM-SHA-256 credential, beside the SCRAM-SHA-512 one sasl_broker made."""
    salt = new_salt()
    await alter_user_scram_credentials(broker.store, [], [ScramUpsertion(
        "alice", SCRAM_SHA_256.type, 4096, salt, salted_password(SCRAM_SHA_256, PASSWORD.encode(), salt, 4096))])


def as_user(mechanism: str, username: str, password: str) -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", None, mechanism, username, Secret(password))


@pytest.mark.parametrize("mechanism, username, password", [
    ("SCRAM-SHA-256", "alice", PASSWORD), ("SCRAM-SHA-512", "alice", PASSWORD), ("PLAIN", "carol", PLAIN_PASSWORD)])
async def test_each_mechanism_authenticates_and_a_wrong_password_is_refused_with_kafkas_message(
        tmp_path, mechanism, username, password):
    async with sasl_broker(tmp_path, **{"sasl.enabled.mechanisms": ALL_MECHANISMS}) as broker:
        await with_sha_256(broker)
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user(mechanism, username, password),
                                               request_timeout_s=WAIT_S) as connection:
            assert (await connection.metadata(None)).brokers
            assert connection.authentications == 1
        for wrong_user, wrong_password in ((username, password + "x"), ("nobody", password)):
            with pytest.raises(SaslAuthenticationFailed) as refused:
                await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S,
                                            security=as_user(mechanism, wrong_user, wrong_password))
            message = str(refused.value)
            assert message.startswith(f"127.0.0.1:{broker.server.port}: SASL authentication as {wrong_user} with {mechanism}")
            assert "SASL_AUTHENTICATION_FAILED: Authentication failed" in message
            assert password not in message


async def test_a_mechanism_the_listener_does_not_enable_is_refused_naming_those_it_does(tmp_path):
    async with sasl_broker(tmp_path, **{"sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as broker:
        with pytest.raises(SaslAuthenticationFailed, match="UNSUPPORTED_SASL_MECHANISM .the broker enables SCRAM-SHA-512"):
            await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user("PLAIN", "carol", PLAIN_PASSWORD),
                                        request_timeout_s=WAIT_S)


async def test_a_session_with_a_lifetime_is_renewed_on_the_connection_while_requests_flow(tmp_path):
    async with sasl_broker(tmp_path, **{"connections.max.reauth.ms": str(REAUTH_MS)}) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S,
                                               security=as_user("SCRAM-SHA-512", "alice", PASSWORD)) as connection:
            answered = 0

            async def ask_until_renewed() -> None:
                nonlocal answered
                # Bounded by the sessions to outlive: each lasts REAUTH_MS of the loop's clock.
                while connection.authentications <= SESSIONS_OUTLIVED:
                    await connection.metadata(None)
                    answered += 1
                    await asyncio.sleep(0.01)  # a client's pace, not a wait for anything

            # Several at once: a re-authentication holds the others back and lets them go after.
            await asyncio.wait_for(asyncio.gather(*(ask_until_renewed() for _ in range(8))),
                                   WAIT_S + SESSIONS_OUTLIVED * REAUTH_MS / 1000)
            assert not connection.closed
            assert answered > SESSIONS_OUTLIVED


async def test_the_lag_scrape_asks_other_leaders_with_the_brokers_credentials(tmp_path):
    async with sasl_broker(tmp_path) as broker:
        security = as_user("SCRAM-SHA-512", "alice", PASSWORD)
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=security,
                                               request_timeout_s=WAIT_S) as connection:
            topic = await create_led_topic(broker, connection)
            produced = await connection.produce(topic, 0, bytes(build_batch(record_count=3)), acks=-1, timeout_ms=WAIT_S * 1000)
            assert produced.error_code == ErrorCode.none
        address = BrokerRegistration("127.0.0.1", broker.server.port)
        for asking_as, expected in ((security, {(topic, 0): 3}), (as_user("SCRAM-SHA-512", "alice", "wrong"), {})):
            learnt = await high_watermarks.learn([(topic, 0)], led_here=lambda name, partition: None,
                                                 leader_of=lambda name, partition: 1, address_of=lambda broker_id: address,
                                                 timeout_s=WAIT_S, security=asking_as)
            assert learnt == expected


def test_a_security_protocol_and_its_tls_context_go_together():
    context = ssl.create_default_context()
    for protocol, tls in (("SSL", None), ("SASL_SSL", None), ("PLAINTEXT", context), ("SASL_PLAINTEXT", context),
                          ("TLS", context)):
        with pytest.raises(ValueError, match="security.protocol"):
            ClientSecurity(protocol, tls)
