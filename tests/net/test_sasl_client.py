"""replog's own client over SASL (net/client.py, security/sasl_client.py) against an in-process
broker's SASL_PLAINTEXT listener: each mechanism authenticates, a refusal names the broker and
Kafka's message and never the password, and a session with a lifetime (KIP-368) is renewed on
the same connection while requests keep flowing."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from replog.admin.scram_credentials import ScramUpsertion, alter_user_scram_credentials
from replog.net.client import BrokerConnection, SaslAuthenticationFailed
from replog.net.client_security import ClientSecurity
from replog.security.scram import MECHANISMS_BY_NAME, new_salt, salted_password
from replog.tls_settings import Secret
from tests.net.in_process_broker import in_process_broker

PASSWORD = "s3cret-Dora-63"
PLAIN_PASSWORD = "s3cret-Eve-18"
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_eve="{PLAIN_PASSWORD}";'
WAIT_S = 10
REAUTH_MS = 1000
SESSIONS_OUTLIVED = 3


@contextlib.asynccontextmanager
async def sasl_broker(tmp_path, **settings: str):
    async with in_process_broker(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **settings,
    }) as broker:
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            scram = MECHANISMS_BY_NAME[mechanism]
            salt = new_salt()
            await alter_user_scram_credentials(broker.store, [], [ScramUpsertion(
                "dora", scram.type, 4096, salt, salted_password(scram, PASSWORD.encode(), salt, 4096))])
        yield broker


def as_user(mechanism: str, username: str, password: str) -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", None, mechanism, username, Secret(password))


@pytest.mark.parametrize("mechanism, username, password", [
    ("SCRAM-SHA-256", "dora", PASSWORD), ("SCRAM-SHA-512", "dora", PASSWORD), ("PLAIN", "eve", PLAIN_PASSWORD)])
async def test_each_mechanism_authenticates_and_a_wrong_password_is_refused_with_kafkas_message(
        tmp_path, mechanism, username, password):
    async with sasl_broker(tmp_path) as broker:
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
            await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user("PLAIN", "eve", PLAIN_PASSWORD),
                                        request_timeout_s=WAIT_S)


async def test_a_session_with_a_lifetime_is_renewed_on_the_connection_while_requests_flow(tmp_path):
    async with sasl_broker(tmp_path, **{"connections.max.reauth.ms": str(REAUTH_MS)}) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S,
                                               security=as_user("SCRAM-SHA-512", "dora", PASSWORD)) as connection:
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
