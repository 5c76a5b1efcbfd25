"""SASL on a connection of a SASL_PLAINTEXT listener, spoken by hand (net/sasl_session.py):
Kafka's order of requests before authentication, its errors and messages, the close after a
failure, sessions bounded by connections.max.reauth.ms and renewed by re-authentication, and
no secret in any log line."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import struct

import pytest
import scramp
from kio.schema.errors import ErrorCode

from replog.admin.scram_credentials import ScramUpsertion, alter_user_scram_credentials
from replog.broker import Broker
from replog.config import load_broker_config
from replog.net import codec
from replog.net.codec import ApiKey
from replog.net import handlers
from replog.net.handlers import HANDLERS
from replog.security.sasl import SaslSettingsError
from replog.security.scram import SCRAM_SHA_512, new_salt, salted_password
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

PASSWORD = "s3cret-Alice-91"
BOB_PASSWORD = "s3cret-Bob-27"
PLAIN_PASSWORD = "s3cret-Carol-44"
PLAIN_JAAS = f'org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="{PLAIN_PASSWORD}";'
TIMEOUT_S = 10
FAILED = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"


@contextlib.asynccontextmanager
async def sasl_broker(tmp_path, **settings: str):
    async with in_process_broker(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS, **settings,
    }) as broker:
        for user, password in (("alice", PASSWORD), ("bob", BOB_PASSWORD)):
            salt = new_salt()
            await alter_user_scram_credentials(broker.store, [], [ScramUpsertion(
                user, SCRAM_SHA_512.type, 4096, salt, salted_password(SCRAM_SHA_512, password.encode(), salt, 4096))])
        yield broker


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self._correlation_id = 0

    def send(self, api_key: int, version: int, values: dict) -> None:
        self._correlation_id += 1
        body = codec.build(codec.request_schema(api_key, version), values)
        self.writer.write(codec.encode_request(api_key, version, self._correlation_id, "sasl-test", body))

    async def ask(self, api_key: int, version: int, values: dict):
        self.send(api_key, version, values)
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), TIMEOUT_S))[0]
        return codec.decode_response(api_key, version, await self.reader.readexactly(size))[1]

    async def closed(self) -> bool:
        """Whether the broker closes the connection without a further answer."""
        return await asyncio.wait_for(self.reader.read(), TIMEOUT_S) == b""

    async def handshake(self, mechanism: str, version: int = 1):
        return await self.ask(ApiKey.SASL_HANDSHAKE, version, {"mechanism": mechanism})

    async def raw(self, token: bytes) -> bytes:
        """A token after SaslHandshake v0: size-prefixed, without a request header; the answer."""
        self.writer.write(struct.pack(">i", len(token)) + token)
        size = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), TIMEOUT_S))[0]
        return await self.reader.readexactly(size)

    async def authenticate(self, auth_bytes: bytes, version: int = 2):
        return await self.ask(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": auth_bytes})

    async def scram(self, user: str, password: str, version: int = 2):
        """The whole SCRAM-SHA-512 exchange; the last SaslAuthenticate answer."""
        assert (await self.handshake("SCRAM-SHA-512")).error_code == ErrorCode.none
        client = scramp.ScramClient(["SCRAM-SHA-512"], user, password)
        first = await self.authenticate(client.get_client_first().encode(), version)
        assert first.error_code == ErrorCode.none, first.error_message
        client.set_server_first(first.auth_bytes.decode())
        final = await self.authenticate(client.get_client_final().encode(), version)
        if final.error_code == ErrorCode.none:
            client.set_server_final(final.auth_bytes.decode())
        return final

    async def metadata(self):
        return await self.ask(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                    "include_topic_authorized_operations": False})


@contextlib.asynccontextmanager
async def connected(broker):
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.server.port)
    try:
        yield Connection(reader, writer)
    finally:
        writer.close()


def counted(broker, name: str, **labels: str) -> float:
    return broker.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_scram_authenticates_and_each_request_after_carries_the_user(tmp_path, monkeypatch):
    principals = []
    metadata = HANDLERS[ApiKey.METADATA]

    async def recording(services, request):
        principals.append(request.principal)
        return await metadata(services, request)

    monkeypatch.setitem(HANDLERS, ApiKey.METADATA, recording)
    async with sasl_broker(tmp_path) as broker, connected(broker) as connection:
        versions = await connection.ask(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                                 "client_software_version": "1"})
        advertised = {api.api_key: (api.min_version, api.max_version) for api in versions.api_keys}
        assert advertised[ApiKey.SASL_HANDSHAKE] == (0, 1) and advertised[ApiKey.SASL_AUTHENTICATE] == (0, 2)
        final = await connection.scram("alice", PASSWORD)
        assert final.error_code == ErrorCode.none and final.session_lifetime == datetime.timedelta(0)
        assert (await connection.metadata()).brokers
        assert principals == ["User:alice"]
        assert counted(broker, "replog_sasl_authentications_total", listener="SASL_PLAINTEXT",
                       mechanism="SCRAM-SHA-512", kind="authentication") == 1


async def test_plain_from_the_listeners_jaas_config(tmp_path, caplog, monkeypatch):
    # Refusal lines are held back per subject and per interval: earlier tests' must not count.
    monkeypatch.setattr(handlers, "_refusals", handlers.RefusalLog())
    async with sasl_broker(tmp_path) as broker, connected(broker) as connection:
        assert (await connection.handshake("PLAIN")).mechanisms == ("SCRAM-SHA-512", "PLAIN")
        answer = await connection.authenticate(f"\0carol\0{PLAIN_PASSWORD}".encode())
        assert answer.error_code == ErrorCode.none
        assert (await connection.metadata()).brokers
        refused = await connection.ask(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "absent", "topic_id": None}],
                                                                 "timeout": 1000})
        assert refused.responses[0].error_code == ErrorCode.unknown_topic_or_partition
    assert "principal=User:carol" in caplog.text  # the refusal's line names who asked


async def test_handshake_v0_hands_the_connection_to_raw_tokens(tmp_path):
    async with sasl_broker(tmp_path) as broker:
        async with connected(broker) as connection:
            assert (await connection.handshake("SCRAM-SHA-512", version=0)).error_code == ErrorCode.none
            client = scramp.ScramClient(["SCRAM-SHA-512"], "alice", PASSWORD)
            client.set_server_first((await connection.raw(client.get_client_first().encode())).decode())
            client.set_server_final((await connection.raw(client.get_client_final().encode())).decode())
            assert (await connection.metadata()).brokers
        async with connected(broker) as connection:
            assert (await connection.handshake("PLAIN", version=0)).error_code == ErrorCode.none
            assert await connection.raw(f"\0carol\0{PLAIN_PASSWORD}".encode()) == b""
            assert (await connection.metadata()).brokers
        async with connected(broker) as connection:
            await connection.handshake("PLAIN", version=0)
            token = b"\0carol\0wrong"
            connection.writer.write(struct.pack(">i", len(token)) + token)
            assert await connection.closed()  # a raw exchange has no way to say why


@pytest.mark.parametrize("user, password", [("alice", "not-her-password"), ("mallory", PASSWORD)],
                         ids=["wrong password", "unknown user"])
async def test_a_failed_authentication_is_answered_in_kafkas_words_then_closed(tmp_path, caplog, user, password):
    caplog.set_level(logging.DEBUG)
    async with sasl_broker(tmp_path) as broker:
        async with connected(broker) as connection:
            final = await connection.scram(user, password)
            assert (final.error_code, final.error_message) == (ErrorCode.sasl_authentication_failed, FAILED)
            assert await connection.closed()
        assert counted(broker, "replog_sasl_authentication_failures_total", listener="SASL_PLAINTEXT",
                       mechanism="SCRAM-SHA-512") == 1
        async with connected(broker) as other:  # nothing else is affected
            assert (await other.scram("alice", PASSWORD)).error_code == ErrorCode.none
        async with connected(broker) as plain:
            await plain.handshake("PLAIN")
            answer = await plain.authenticate(f"\0carol\0{password}".encode())
            assert answer.error_message == "Authentication failed: Invalid username or password"
            assert await plain.closed()
    assert "Authentication failed" in caplog.text
    for secret in (password, PASSWORD, BOB_PASSWORD, PLAIN_PASSWORD):
        assert secret not in caplog.text


async def test_an_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed(tmp_path):
    async with sasl_broker(tmp_path) as broker, connected(broker) as connection:
        answer = await connection.handshake("GSSAPI")
        assert (answer.error_code, answer.mechanisms) == (ErrorCode.unsupported_sasl_mechanism,
                                                          ("SCRAM-SHA-512", "PLAIN"))
        assert await connection.closed()
        assert counted(broker, "replog_sasl_authentication_failures_total", listener="SASL_PLAINTEXT",
                       mechanism="unknown") == 1


@pytest.mark.parametrize("after", ["nothing", "api versions", "handshake", "first message"])
async def test_a_request_before_authentication_completes_closes_the_connection(tmp_path, after):
    async with sasl_broker(tmp_path) as broker:
        async with connected(broker) as connection:
            if after == "api versions":
                await connection.ask(ApiKey.API_VERSIONS, 0, {})
            if after in ("handshake", "first message"):
                await connection.handshake("SCRAM-SHA-512")
            if after == "first message":
                await connection.authenticate(b"n,,n=alice,r=abcdefgh")
            connection.send(ApiKey.METADATA, 12, {"topics": [], "allow_auto_topic_creation": False,
                                                  "include_topic_authorized_operations": False})
            assert await connection.closed()
        async with connected(broker) as other:
            assert (await other.scram("alice", PASSWORD)).error_code == ErrorCode.none


async def test_a_frame_past_sasl_server_max_receive_size_before_authentication_closes_the_connection(tmp_path):
    async with sasl_broker(tmp_path, **{"sasl.server.max.receive.size": "4096"}) as broker:
        async with connected(broker) as connection:
            await connection.handshake("PLAIN")
            connection.writer.write(struct.pack(">i", 4097))  # announced only: the size alone is refused
            assert await connection.closed()
        async with connected(broker) as connection:  # authenticated, the broker's own limit holds
            await connection.handshake("PLAIN")
            await connection.authenticate(f"\0carol\0{PLAIN_PASSWORD}".encode())
            topics = [{"name": f"t{index:05}-{'x' * 200}", "topic_id": None} for index in range(30)]
            answer = await connection.ask(ApiKey.METADATA, 12, {"topics": topics, "allow_auto_topic_creation": False,
                                                                "include_topic_authorized_operations": False})
            assert len(answer.topics) == 30


async def test_a_second_api_versions_or_an_early_authenticate_closes_the_connection(tmp_path):
    async with sasl_broker(tmp_path) as broker:
        async with connected(broker) as connection:
            await connection.ask(ApiKey.API_VERSIONS, 0, {})
            connection.send(ApiKey.API_VERSIONS, 0, {})
            assert await connection.closed()
        async with connected(broker) as connection:
            connection.send(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=abcdefgh"})
            assert await connection.closed()


async def test_a_session_past_connections_max_reauth_ms_is_closed_at_its_next_request(tmp_path):
    async with sasl_broker(tmp_path, **{"connections.max.reauth.ms": "300"}) as broker, connected(broker) as connection:
        final = await connection.scram("alice", PASSWORD)
        assert final.session_lifetime == datetime.timedelta(milliseconds=300)
        answered = 0

        async def closed_at_a_request() -> bool:
            nonlocal answered
            try:
                await connection.metadata()
            except asyncio.IncompleteReadError:
                return True
            answered += 1
            return False

        await eventually(closed_at_a_request, TIMEOUT_S, "the expired session's connection closed")
        assert answered >= 1


async def test_reauthentication_renews_the_session_and_keeps_principal_and_mechanism(tmp_path):
    async with sasl_broker(tmp_path, **{"connections.max.reauth.ms": "60000"}) as broker:
        async with connected(broker) as connection:
            assert (await connection.scram("alice", PASSWORD)).error_code == ErrorCode.none
            renewed = await connection.scram("alice", PASSWORD, version=1)
            assert (renewed.error_code, renewed.session_lifetime) == (ErrorCode.none, datetime.timedelta(seconds=60))
            assert (await connection.metadata()).brokers
            assert counted(broker, "replog_sasl_authentications_total", listener="SASL_PLAINTEXT",
                           mechanism="SCRAM-SHA-512", kind="reauthentication") == 1
        async with connected(broker) as connection:
            await connection.scram("alice", PASSWORD)
            other = await connection.scram("bob", BOB_PASSWORD)
            assert (other.error_code, other.error_message) == (
                ErrorCode.sasl_authentication_failed,
                "Cannot change principals during re-authentication from User.alice: User.bob")
            assert await connection.closed()
        async with connected(broker) as connection:
            await connection.scram("alice", PASSWORD)
            assert (await connection.handshake("PLAIN")).error_code == ErrorCode.none  # refused at the next step
            answer = await connection.authenticate(f"\0carol\0{PLAIN_PASSWORD}".encode())
            assert (answer.error_code, answer.error_message) == (
                ErrorCode.sasl_authentication_failed,
                "SASL mechanism 'PLAIN' requested by client is not supported for re-authentication of mechanism "
                "'SCRAM-SHA-512'")
            assert await connection.closed()


async def test_a_wrong_password_on_reauthentication_says_re_authentication(tmp_path):
    async with sasl_broker(tmp_path) as broker, connected(broker) as connection:
        await connection.scram("alice", PASSWORD)
        final = await connection.scram("alice", "not-her-password")
        assert final.error_message == FAILED.replace("during authentication", "during re-authentication")
        assert await connection.closed()


async def test_sasl_requests_on_a_listener_without_sasl_are_illegal_there(tmp_path):
    async with in_process_broker(tmp_path) as broker, connected(broker) as connection:
        assert (await connection.handshake("PLAIN")).error_code == ErrorCode.illegal_sasl_state
        answer = await connection.authenticate(b"\0a\0b")
        assert (answer.error_code, answer.error_message) == (  # as Kafka 4.4 answers on its PLAINTEXT listener
            ErrorCode.illegal_sasl_state, "SaslAuthenticate request received after successful authentication")
        assert (await connection.metadata()).brokers


@pytest.mark.parametrize("settings, complaint", [
    ({"sasl.enabled.mechanisms": "GSSAPI,PLAIN"},
     "sasl.enabled.mechanisms of listener SASL_PLAINTEXT names GSSAPI, which replog does not serve"),
    ({"sasl.enabled.mechanisms": "PLAIN"}, "PLAIN on listener SASL_PLAINTEXT has no users"),
    ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "SCRAM-SHA-1"},  # the listener's own wins
     "sasl.enabled.mechanisms of listener SASL_PLAINTEXT names SCRAM-SHA-1"),
    ({"sasl.enabled.mechanisms": "PLAIN", "sasl.plain.users.file": "/nonexistent-users"},
     "PLAIN on listener SASL_PLAINTEXT: /nonexistent-users: "),
    ({"sasl.enabled.mechanisms": "PLAIN",
      "listener.name.sasl_plaintext.plain.sasl.jaas.config": f'PlainLoginModule required user_carol="{PLAIN_PASSWORD}"'},
     "listener.name.sasl_plaintext.plain.sasl.jaas.config: JAAS config entry not terminated by semi-colon"),
])
def test_sasl_settings_that_cannot_be_served_are_refused_at_start(tmp_path, settings, complaint):
    with pytest.raises(SaslSettingsError) as refused:
        Broker(load_broker_config(None, {"log.dirs": str(tmp_path / "data"), "metrics.listeners": "",
                                         "listeners": "SASL_PLAINTEXT://127.0.0.1:0"} | settings))
    assert complaint in str(refused.value) and PLAIN_PASSWORD not in str(refused.value)
