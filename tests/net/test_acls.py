"""CreateAcls, DescribeAcls and DeleteAcls (net/handlers/acls.py) against a broker in this
process: confluent-kafka's and kafka-python's AdminClients manage ACLs with them; with an
authorizer, Alter (Describe to list) on the Cluster is needed; Kafka's per-item errors."""

from __future__ import annotations

import asyncio
import logging

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding as KafkaAclBinding
from confluent_kafka.admin import AclBindingFilter as KafkaAclBindingFilter
from confluent_kafka.admin import AclOperation as KafkaOperation
from confluent_kafka.admin import AclPermissionType as KafkaPermission
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ResourcePatternType as KafkaPatternType
from confluent_kafka.admin import ResourceType as KafkaResourceType
from kafka.admin import KafkaAdminClient
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern
from kafka.admin import ResourcePatternFilter, ResourceType as KafkaPythonResourceType
from kio.schema.errors import ErrorCode

from replog.admin.acls import describe_acls
from replog.net import authorization
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from replog.security.acls import AclBindingFilter, AclOperation, ResourceType
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

TIMEOUT_S = 30


class ClusterAdmins:
    """An authorizer that lets `allowed` (principal, operation) pairs on the Cluster through."""

    def __init__(self, *allowed: tuple[str, AclOperation]):
        self.allowed = set(allowed)
        self.asked: list[tuple] = []

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked.append((principal, operation, resource_type, name))
        return resource_type == ResourceType.CLUSTER and (principal, operation) in self.allowed

    def authorize_any(self, principal, host, operation, resource_type) -> bool:
        return False


@pytest.fixture
async def broker(tmp_path):
    async with in_process_broker(tmp_path) as started:
        yield started


async def done(future):
    return await asyncio.wrap_future(future)


def creation(resource_type=2, name="orders-", pattern_type=4, principal="User:alice", host="*", operation=4,
             permission=3) -> dict:
    return {"resource_type": resource_type, "resource_name": name, "resource_pattern_type": pattern_type,
            "principal": principal, "host": host, "operation": operation, "permission_type": permission}


def wire_filter(resource_type=1, name=None, pattern_type=1, principal=None, operation=1, permission=1) -> dict:
    return {"resource_type_filter": resource_type, "resource_name_filter": name, "pattern_type_filter": pattern_type,
            "principal_filter": principal, "host_filter": None, "operation": operation, "permission_type": permission}


async def test_confluent_kafkas_admin_client_manages_acls(broker):
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.server.port}"})
    writers = KafkaAclBinding(KafkaResourceType.TOPIC, "orders-", KafkaPatternType.PREFIXED, "User:alice", "*",
                              KafkaOperation.WRITE, KafkaPermission.ALLOW)
    readers = KafkaAclBinding(KafkaResourceType.GROUP, "billing", KafkaPatternType.LITERAL, "User:bob", "*",
                              KafkaOperation.READ, KafkaPermission.ALLOW)
    denied = KafkaAclBinding(KafkaResourceType.TOPIC, "*", KafkaPatternType.LITERAL, "User:mallory", "10.0.0.1",
                             KafkaOperation.ALL, KafkaPermission.DENY)
    misnamed = KafkaAclBinding(KafkaResourceType.BROKER, "kafka", KafkaPatternType.LITERAL, "User:alice", "*",
                               KafkaOperation.ALTER, KafkaPermission.ALLOW)
    futures = admin.create_acls([writers, readers, denied, misnamed], request_timeout=TIMEOUT_S)
    for binding in (writers, readers, denied):
        assert await done(futures[binding]) is None
    with pytest.raises(KafkaException) as refused:
        await done(futures[misnamed])
    assert refused.value.args[0].code() == ErrorCode.invalid_request

    everything = KafkaAclBindingFilter(KafkaResourceType.ANY, None, KafkaPatternType.ANY, None, None,
                                       KafkaOperation.ANY, KafkaPermission.ANY)
    assert sorted(map(str, await done(admin.describe_acls(everything, request_timeout=TIMEOUT_S)))) == \
        sorted(map(str, [writers, readers, denied]))
    orders_1 = KafkaAclBindingFilter(KafkaResourceType.TOPIC, "orders-1", KafkaPatternType.MATCH, None, None,
                                     KafkaOperation.ANY, KafkaPermission.ANY)
    assert sorted(map(str, await done(admin.describe_acls(orders_1, request_timeout=TIMEOUT_S)))) == \
        sorted(map(str, [writers, denied]))

    deleted = admin.delete_acls([orders_1], request_timeout=TIMEOUT_S)
    assert sorted(map(str, await done(deleted[orders_1]))) == sorted(map(str, [writers, denied]))
    assert list(map(str, await done(admin.describe_acls(everything, request_timeout=TIMEOUT_S)))) == [str(readers)]


async def test_kafka_pythons_admin_client_manages_acls(broker):
    def manage():
        admin = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.server.port}", request_timeout_ms=TIMEOUT_S * 1000)
        try:
            pattern = ResourcePattern(KafkaPythonResourceType.TOPIC, "orders-", ACLResourcePatternType.PREFIXED)
            acl = ACL("User:alice", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
            created = admin.create_acls([acl])
            selected = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY, ResourcePatternFilter(
                KafkaPythonResourceType.TOPIC, "orders-9", ACLResourcePatternType.MATCH))
            described, error = admin.describe_acls(selected)
            [(_, removed, delete_error)] = admin.delete_acls([selected])
            return created, described, error, removed, delete_error
        finally:
            admin.close()

    created, described, error, removed, delete_error = await asyncio.to_thread(manage)
    assert not created["failed"] and len(created["succeeded"]) == 1
    assert [(acl.principal, acl.resource_pattern.resource_name) for acl in described] == [("User:alice", "orders-")]
    assert error.errno == 0 and delete_error.errno == 0
    assert [acl.operation for acl in removed] == [ACLOperation.WRITE]
    assert await describe_acls(broker.store, AclBindingFilter()) == []


async def test_an_authorizer_requires_alter_or_describe_on_the_cluster(broker, caplog, monkeypatch):
    monkeypatch.setattr(authorization, "_denials", authorization.DenialLog())  # the budget of lines others spent is not ours
    broker.authorizer = ClusterAdmins(("User:ANONYMOUS", AclOperation.DESCRIBE))
    async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
        with caplog.at_level(logging.INFO, logger="replog.audit"):
            created = await connection.request(ApiKey.CREATE_ACLS, None, {"creations": [creation(), creation(operation=3)]})
        assert [result.error_code for result in created.results] == [ErrorCode.cluster_authorization_failed] * 2
        assert "denied principal=User:ANONYMOUS host=127.0.0.1 operation=Alter resource_type=Cluster resource=kafka-cluster " \
               "api=create_acls" in caplog.text
        caplog.clear()
        deleted = await connection.request(ApiKey.DELETE_ACLS, None, {"filters": [wire_filter()]})
        assert [result.error_code for result in deleted.filter_results] == [ErrorCode.cluster_authorization_failed]
        described = await connection.request(ApiKey.DESCRIBE_ACLS, None, wire_filter())
        assert described.error_code == ErrorCode.none and described.resources == ()
        assert await describe_acls(broker.store, AclBindingFilter()) == []

        broker.authorizer = ClusterAdmins(("User:ANONYMOUS", AclOperation.ALTER))
        with caplog.at_level(logging.INFO, logger="replog.audit"):
            created = await connection.request(ApiKey.CREATE_ACLS, None, {"creations": [creation()]})
        assert [result.error_code for result in created.results] == [ErrorCode.none]
        assert [record.getMessage().split(" principal=")[0] for record in caplog.records if record.name == "replog.audit"] \
            == ["ACL added by=User:ANONYMOUS"]
        described = await connection.request(ApiKey.DESCRIBE_ACLS, None, wire_filter())
        assert described.error_code == ErrorCode.cluster_authorization_failed and described.resources == ()
        assert ("User:ANONYMOUS", AclOperation.DESCRIBE, ResourceType.CLUSTER, "kafka-cluster") in broker.authorizer.asked


async def test_codes_kafka_does_not_know_are_invalid_requests_per_item(broker):
    async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
        created = await connection.request(ApiKey.CREATE_ACLS, None, {"creations": [
            creation(resource_type=0), creation(pattern_type=9), creation(operation=99), creation(name="orders-1", pattern_type=3),
            creation(pattern_type=2)]})
        assert [(result.error_code, result.error_message) for result in created.results] == [
            (ErrorCode.invalid_request, "Invalid resourceType UNKNOWN"),
            (ErrorCode.invalid_request, "Invalid patternType UNKNOWN"),
            (ErrorCode.invalid_request, "Invalid operation UNKNOWN"),
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "Invalid patternType MATCH")]

        described = await connection.request(ApiKey.DESCRIBE_ACLS, None, wire_filter(operation=0))
        assert (described.error_code, described.error_message) == (ErrorCode.invalid_request, "Unknown entryFilter.")
        described = await connection.request(ApiKey.DESCRIBE_ACLS, None, wire_filter(2, "orders-1", 2))
        assert [(resource.resource_name, resource.pattern_type, [acl.principal for acl in resource.acls])
                for resource in described.resources] == [("orders-1", 3, ["User:alice"])]

        deleted = await connection.request(ApiKey.DELETE_ACLS, None, {"filters": [wire_filter(resource_type=42),
                                                                                  wire_filter(principal="User:alice")]})
        first, second = deleted.filter_results
        assert (first.error_code, first.error_message, first.matching_acls) == \
            (ErrorCode.invalid_request, "Unknown patternFilter.", ())
        assert second.error_code == ErrorCode.none
        assert [(acl.resource_name, acl.pattern_type, acl.operation, acl.error_code) for acl in second.matching_acls] == \
            [("orders-1", 3, 4, ErrorCode.none)]


async def test_what_the_apis_change_the_brokers_authorizer_follows(tmp_path):
    async with in_process_broker(tmp_path, **{"authorizer.class.name": "StandardAuthorizer",
                                              "super.users": "User:ANONYMOUS"}) as broker:
        def may_write(topic: str) -> bool:
            return broker.authorizer.authorize("User:alice", "10.0.0.7", AclOperation.WRITE, ResourceType.TOPIC, topic)

        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            created = await connection.request(ApiKey.CREATE_ACLS, None, {"creations": [creation()]})
            assert [result.error_code for result in created.results] == [ErrorCode.none]
            await eventually(lambda: may_write("orders-1"), TIMEOUT_S, "the created ACL followed")
            assert not may_write("payments")

            deleted = await connection.request(ApiKey.DELETE_ACLS, None, {"filters": [wire_filter(principal="User:alice")]})
            assert len(deleted.filter_results[0].matching_acls) == 1
            await eventually(lambda: not may_write("orders-1"), TIMEOUT_S, "the deleted ACL followed")
