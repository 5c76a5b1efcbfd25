"""DescribeClientQuotas and AlterClientQuotas (net/handlers/client_quotas.py): through the wire
of a broker in this process, whose own quotas follow what they write; and refused without the
cluster permission when an authorizer is configured."""

from __future__ import annotations

import types

import pytest
from kio.schema.errors import ErrorCode

from replog.coord_backends.memory import MemoryStore
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey, Request, build, request_schema
from replog.net.handlers import client_quotas as handler
from replog.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from replog.security.quota_limits import QuotaType
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually


def entry(entity: dict, **ops) -> dict:
    return {"entity": [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity.items()],
            "ops": [{"key": key, "value": value or 0.0, "remove": value is None} for key, value in ops.items()]}


@pytest.mark.parametrize("version", [0, 1])
async def test_alter_then_describe_through_the_wire_and_the_broker_applies_it(tmp_path, version):
    async with in_process_broker(tmp_path) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            altered = await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, version, {"validate_only": False, "entries": [
                entry({"user": "alice"}, producer_byte_rate=1048576.0),
                entry({"user": "alice", "client-id": None}, consumer_byte_rate=2048.0),
                entry({"user": "bob"}, producer_byte_rate=-1.0),
                entry({"client-id": "app"}, request_percentage=None)]})
            assert [(result.error_code, result.error_message, [(part.entity_type, part.entity_name) for part in result.entity])
                    for result in altered.entries] == [
                (ErrorCode.none, None, [("user", "alice")]),
                (ErrorCode.none, None, [("user", "alice"), ("client-id", None)]),
                (ErrorCode.invalid_request, "Quota producer_byte_rate must be greater than 0", [("user", "bob")]),
                (ErrorCode.none, None, [("client-id", "app")])]

            described = await connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {"strict": False, "components": [
                {"entity_type": "user", "match_type": 0, "match": "alice"}]})
            assert described.error_code == ErrorCode.none
            assert sorted(([(part.entity_type, part.entity_name) for part in found.entity],
                           [(value.key, value.value) for value in found.values]) for found in described.entries) == [
                ([("user", "alice")], [("producer_byte_rate", 1048576.0)]),
                ([("user", "alice"), ("client-id", None)], [("consumer_byte_rate", 2048.0)])]

            refused = await connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {"strict": False, "components": [
                {"entity_type": "user", "match_type": 0, "match": None}]})
            assert (refused.error_code, refused.error_message, refused.entries) == (
                ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null.", None)

        await eventually(lambda: broker.client_quotas.quota(QuotaType.FETCH, "alice", "app") == (("alice", "app"), 2048.0),
                         10, "the broker's own quotas to follow")
        assert broker.client_quotas.quota(QuotaType.PRODUCE, "alice", "app") == (("alice", ""), 1048576.0)


async def test_validate_only_changes_nothing(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            altered = await connection.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"validate_only": True, "entries": [
                entry({"user": "alice"}, producer_byte_rate=1.0), entry({"user": "alice"}, producer_byte_rate=1.5)]})
            assert [result.error_code for result in altered.entries] == [ErrorCode.none, ErrorCode.invalid_request]
            described = await connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"strict": False, "components": []})
            assert described.entries == ()


class Authorizer:
    """Grants the operations listed on the cluster, to anyone; records what was asked."""

    def __init__(self, *allowed: AclOperation):
        self.allowed = set(allowed)
        self.asked: list[tuple] = []

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked.append((principal, operation, resource_type, name))
        return resource_type == ResourceType.CLUSTER and name == CLUSTER_NAME and operation in self.allowed


def request(api_key: ApiKey, body: dict) -> Request:
    return Request(api_key, 1, 7, "test", build(request_schema(api_key, 1), body), principal="User:mallory")


@pytest.fixture
async def services(tmp_path):
    store = MemoryStore(str(tmp_path / "store.db"))
    await store.start()
    yield types.SimpleNamespace(store=store, authorizer=None)
    await store.close()


async def test_altering_needs_alter_configs_on_the_cluster(services):
    services.authorizer = Authorizer(AclOperation.DESCRIBE_CONFIGS)
    body = {"validate_only": False, "entries": [entry({"user": "alice"}, producer_byte_rate=1.0),
                                                entry({"client-id": "x"}, producer_byte_rate=1.0)]}
    answer = await handler.alter_client_quotas(services, request(ApiKey.ALTER_CLIENT_QUOTAS, body))
    assert [(result.error_code, result.error_message) for result in answer.entries] == [
        (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")] * 2
    assert services.authorizer.asked == [("User:mallory", AclOperation.ALTER_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME)]
    assert await services.store.exists("/config/users/alice") is None

    services.authorizer.allowed.add(AclOperation.ALTER_CONFIGS)
    answer = await handler.alter_client_quotas(services, request(ApiKey.ALTER_CLIENT_QUOTAS, body))
    assert [result.error_code for result in answer.entries] == [ErrorCode.none] * 2


async def test_describing_needs_describe_configs_on_the_cluster(services):
    services.authorizer = Authorizer(AclOperation.ALTER_CONFIGS)
    body = {"strict": False, "components": []}
    answer = await handler.describe_client_quotas(services, request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body))
    assert (answer.error_code, answer.entries) == (ErrorCode.cluster_authorization_failed, None)
    services.authorizer.allowed.add(AclOperation.DESCRIBE_CONFIGS)
    answer = await handler.describe_client_quotas(services, request(ApiKey.DESCRIBE_CLIENT_QUOTAS, body))
    assert (answer.error_code, answer.entries) == (ErrorCode.none, ())


async def test_api_versions_advertises_kafkas_ranges(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            answer = await connection.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    versions = {key.api_key: (key.min_version, key.max_version) for key in answer.api_keys}
    assert versions[48] == versions[49] == (0, 1)  # Kafka 4.4's
