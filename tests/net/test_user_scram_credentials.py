"""DescribeUserScramCredentials and AlterUserScramCredentials (net/handlers/user_scram_credentials.py)
against a broker in this process: confluent-kafka's AdminClient manages users with them, the
broker keeps what librdkafka salted, and no salted password reaches a log line."""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kio.schema.errors import ErrorCode

from replog.admin.scram_credentials import credential
from replog.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential_from_password
from replog.net.client import BrokerConnection
from replog.net import handlers
from replog.net.codec import ApiKey
from tests.net.in_process_broker import in_process_broker

PASSWORD = b"correct horse battery staple"
TIMEOUT_S = 30


async def done(future):
    return await asyncio.wrap_future(future)


async def test_confluent_kafkas_admin_client_manages_users(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.server.port}"})
        futures = admin.alter_user_scram_credentials([
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD),
            UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD, b"s" * 16),
            UserScramCredentialUpsertion("bob", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), PASSWORD),
        ], request_timeout=TIMEOUT_S)
        for future in futures.values():
            await done(future)

        # What librdkafka salted is what a client proves it knows the password with.
        stored = await credential(broker.store, "alice", "SCRAM-SHA-256")
        assert stored == credential_from_password(SCRAM_SHA_256, PASSWORD.decode(), 4096, b"s" * 16)
        stored = await credential(broker.store, "alice", "SCRAM-SHA-512")
        assert stored == credential_from_password(SCRAM_SHA_512, PASSWORD.decode(), 8192, stored.salt)

        everyone = await done(admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S))
        assert {user: sorted((info.mechanism, info.iterations) for info in description.scram_credential_infos)
                for user, description in everyone.items()} == {
            "alice": [(ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 8192)],
            "bob": [(ScramMechanism.SCRAM_SHA_256, 4096)]}

        named = admin.describe_user_scram_credentials(["bob", "nobody"], request_timeout=TIMEOUT_S)
        assert (await done(named["bob"])).user == "bob"
        with pytest.raises(KafkaException) as unknown:
            await done(named["nobody"])
        assert unknown.value.args[0].code() == ErrorCode.resource_not_found

        deletions = admin.alter_user_scram_credentials([
            UserScramCredentialDeletion("bob", ScramMechanism.SCRAM_SHA_256),
            UserScramCredentialDeletion("carol", ScramMechanism.SCRAM_SHA_256)], request_timeout=TIMEOUT_S)
        await done(deletions["bob"])
        with pytest.raises(KafkaException) as absent:
            await done(deletions["carol"])
        assert absent.value.args[0].code() == ErrorCode.resource_not_found
        assert list(await done(admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S))) == ["alice"]


async def test_each_user_is_answered_once_with_its_error_and_nothing_secret_is_logged(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(handlers, "_refusals", handlers.RefusalLog())  # the budget of lines others spent is not ours
    salted = bytes(range(64))
    async with in_process_broker(tmp_path) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            caplog.set_level(logging.DEBUG)
            upsert = lambda user, mechanism, iterations: {  # noqa: E731
                "name": user, "mechanism": mechanism, "iterations": iterations, "salt": b"pepper-salt", "salted_password": salted}
            answer = await connection.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {
                "deletions": [{"name": "gone", "mechanism": 2}],
                "upsertions": [upsert("ok", 2, 4096), upsert("few", 2, 100), upsert("twice", 2, 4096),
                               upsert("twice", 2, 5000), upsert("", 2, 4096), upsert("odd", 7, 4096)]})
            assert [(result.user, result.error_code, result.error_message) for result in answer.results] == [
                ("gone", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
                ("ok", ErrorCode.none, None),
                ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
                ("twice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
                ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
                ("odd", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
            ]
            described = await connection.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None})
            assert [(result.user, [(info.mechanism, info.iterations) for info in result.credential_infos])
                    for result in described.results] == [("ok", [(2, 4096)])]
            assert described.error_code == ErrorCode.none
    logged = caplog.text
    assert "refused SCRAM credentials subject='few' error=93" in logged
    for secret in (salted.hex(), repr(salted), "pepper-salt", "cGVwcGVy"):
        assert secret not in logged


async def test_api_versions_advertises_both_apis(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            answer = await connection.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    versions = {key.api_key: (key.min_version, key.max_version) for key in answer.api_keys}
    assert versions[50] == versions[51] == (0, 0)
