"""What the checks of net/authorization.py leave a principal to see and do, beyond refusals
(test_authorization_table.py): Metadata, ListGroups and OffsetFetch leave out what it may not
Describe; authorized operations are Kafka's bit fields; Deny beats Allow, prefixes match,
super users pass; Produce and Fetch ask once per topic, not per partition; the host ACLs name is
the connection's; denials are audited within bounds, and as JSON with --log-format json."""

from __future__ import annotations

import collections
import json
import logging
import uuid

from kio.schema.errors import ErrorCode

from replog import admin
from replog.groups import OffsetCommit
from replog.net.authorization import (
    DENIAL_LINES_PER_INTERVAL_MAX,
    DENIAL_LOG_INTERVAL_S,
    OPERATIONS_NOT_REQUESTED,
    DenialLog,
)
from replog.net.client import BrokerConnection
from replog.net.codec import ANONYMOUS, ApiKey, Request
from replog.obs.logs import JsonFormatter
from replog.security.acls import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from replog.security.authorizer import AclAuthorizer
from tests.net.in_process_broker import in_process_broker
from tests.net.test_authorization_table import (
    GROUP,
    TOPIC,
    WAIT_S,
    _produce,
    ask,
    binding,
    prepared_broker,
    set_acls,
)
from tests.support.batches import build_batch
from tests.support.polling import eventually

ALICE, MALLORY, ADMIN = "User:alice", "User:mallory", "User:admin"
TOPIC_ = ResourceType.TOPIC
DESCRIBE, READ, WRITE, ALTER = AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.ALTER


def bits(*operations: AclOperation) -> int:
    return sum(1 << operation for operation in operations)


async def topic_led_here(broker, name: str, partitions: int = 1) -> None:
    await admin.create_topic(broker.store, name, partitions, 1)
    await eventually(lambda: all(broker.serving(name, index) for index in range(partitions)), WAIT_S, f"{name} led here")


def _metadata(topics: list[dict] | None) -> dict:
    return {"topics": topics, "allow_auto_topic_creation": False, "include_cluster_authorized_operations": True,
            "include_topic_authorized_operations": True}


async def test_metadata_tells_only_topics_a_principal_may_describe_and_what_it_may_do(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        authorizer = await prepared_broker(broker)
        await topic_led_here(broker, "secret")
        set_acls(authorizer, binding(ALICE, WRITE, TOPIC_, TOPIC), binding(ALICE, DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME))

        every = await ask(broker, ApiKey.METADATA, 10, _metadata(None), ALICE)
        # Write implies Describe; neither secret nor __consumer_offsets is told of.
        assert [(topic.name, topic.error_code, topic.topic_authorized_operations) for topic in every.topics] == [
            (TOPIC, ErrorCode.none, bits(WRITE, DESCRIBE))]
        assert every.cluster_authorized_operations == bits(DESCRIBE)

        named = await ask(broker, ApiKey.METADATA, 10, _metadata([{"name": TOPIC, "topic_id": None},
                                                                  {"name": "secret", "topic_id": None}]), ALICE)
        answers = {topic.name: topic for topic in named.topics}
        assert answers[TOPIC].error_code == ErrorCode.none and answers[TOPIC].partitions
        assert answers["secret"].error_code == ErrorCode.topic_authorization_failed
        assert not answers["secret"].partitions and answers["secret"].topic_id is None  # nor its id (the null id)
        assert answers["secret"].topic_authorized_operations == OPERATIONS_NOT_REQUESTED

        secret_id = uuid.UUID(hex=broker.metadata.topic_id("secret"))
        by_id = await ask(broker, ApiKey.METADATA, 12, _metadata([{"name": None, "topic_id": secret_id}]), ALICE)
        assert [(topic.name, topic.error_code) for topic in by_id.topics] == [(None, ErrorCode.topic_authorization_failed)]

        nothing = await ask(broker, ApiKey.METADATA, 10, _metadata(None), MALLORY)
        assert nothing.topics == () and nothing.cluster_authorized_operations == 0


async def test_groups_and_offsets_a_principal_may_not_describe_are_left_out(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        authorizer = await prepared_broker(broker)  # GROUP committed TOPIC-0
        await topic_led_here(broker, "secret")
        assert await broker.groups.commit(GROUP, "", None, -1, [OffsetCommit("secret", 0, 5, -1, "")]) == [ErrorCode.none]
        assert await broker.groups.commit("other", "", None, -1, [OffsetCommit(TOPIC, 0, 1, -1, "")]) == [ErrorCode.none]
        set_acls(authorizer, binding(ALICE, READ, ResourceType.GROUP, GROUP), binding(ALICE, DESCRIBE, TOPIC_, TOPIC),
                 binding(ADMIN, DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME))

        async def listed(principal: str) -> list[str]:
            answer = await ask(broker, ApiKey.LIST_GROUPS, 4, {"states_filter": []}, principal)
            assert answer.error_code == ErrorCode.none
            return sorted(group.group_id for group in answer.groups)

        assert await listed(ALICE) == [GROUP]
        assert await listed(ADMIN) == [GROUP, "other"]
        assert await listed(MALLORY) == []

        fetched = await ask(broker, ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "topics": None, "require_stable": False},
                            ALICE)
        assert fetched.error_code == ErrorCode.none
        assert [(topic.name, [partition.committed_offset for partition in topic.partitions]) for topic in fetched.topics] == [
            (TOPIC, [0])]

        described = await ask(broker, ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": True},
                              ALICE)
        assert described.groups[0].authorized_operations == bits(READ, DESCRIBE)


async def test_describe_cluster_tells_authorized_operations(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        authorizer = await prepared_broker(broker)
        set_acls(authorizer, binding(ALICE, ALTER, ResourceType.CLUSTER, CLUSTER_NAME))
        values = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
        alice = await ask(broker, ApiKey.DESCRIBE_CLUSTER, 1, values, ALICE)
        mallory = await ask(broker, ApiKey.DESCRIBE_CLUSTER, 1, values, MALLORY)
        assert (alice.error_code, alice.cluster_authorized_operations) == (ErrorCode.none, bits(ALTER, DESCRIBE))
        assert (mallory.error_code, mallory.cluster_authorized_operations) == (ErrorCode.none, 0)
        assert [broker.broker_id for broker in mallory.brokers] == [1]  # Kafka's asks nothing to tell them


async def test_deny_beats_allow_prefixes_match_and_super_users_pass(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        await prepared_broker(broker)
        broker.authorizer = authorizer = AclAuthorizer(super_users=[ADMIN])
        for name in ("orders-1", "orders-secret", "payments"):
            await topic_led_here(broker, name)
        set_acls(authorizer, binding(ALICE, WRITE, TOPIC_, "orders-", pattern_type=PatternType.PREFIXED),
                 binding(ALICE, WRITE, TOPIC_, "orders-secret", AclPermissionType.DENY))

        async def produced(principal: str, topic: str) -> ErrorCode:
            body = _produce(None) | {"topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": bytes(build_batch())}]}]}
            answer = await ask(broker, ApiKey.PRODUCE, 9, body, principal)
            return answer.responses[0].partition_responses[0].error_code

        assert await produced(ALICE, "orders-1") == ErrorCode.none
        assert await produced(ALICE, "payments") == ErrorCode.topic_authorization_failed
        assert await produced(ALICE, "orders-secret") == ErrorCode.topic_authorization_failed
        assert await produced(ADMIN, "payments") == ErrorCode.none


class CountingAuthorizer:
    """An authorizer that counts the questions it is asked."""

    def __init__(self, inner: AclAuthorizer):
        self.inner = inner
        self.asked: collections.Counter = collections.Counter()

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        self.asked[operation, resource_type, name] += 1
        return self.inner.authorize(principal, host, operation, resource_type, name)

    def authorize_any(self, principal, host, operation, resource_type) -> bool:
        return self.inner.authorize_any(principal, host, operation, resource_type)


async def test_produce_and_fetch_ask_once_per_topic_not_per_partition(tmp_path):
    partitions = 8
    async with in_process_broker(tmp_path) as broker:
        acls = await prepared_broker(broker)
        await topic_led_here(broker, "wide", partitions)
        set_acls(acls, binding(ALICE, WRITE, TOPIC_, "wide"), binding(ALICE, READ, TOPIC_, "wide"))
        broker.authorizer = counting = CountingAuthorizer(acls)
        produced = await ask(broker, ApiKey.PRODUCE, 9, _produce(None) | {"topic_data": [{"name": "wide", "partition_data": [
            {"index": index, "records": bytes(build_batch())} for index in range(partitions)]}]}, ALICE)
        assert {answer.error_code for answer in produced.responses[0].partition_responses} == {ErrorCode.none}
        fetched = await ask(broker, ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": [{"topic": "wide", "partitions": [
                {"partition": index, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20} for index in range(partitions)]}]}, ALICE)
        assert {answer.error_code for answer in fetched.responses[0].partitions} == {ErrorCode.none}
        assert counting.asked == {(WRITE, TOPIC_, "wide"): 1, (READ, TOPIC_, "wide"): 1}


async def test_the_host_acls_name_is_the_connections(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        authorizer = await prepared_broker(broker)

        async def described_from(host: str) -> ErrorCode:
            set_acls(authorizer, binding(ANONYMOUS, DESCRIBE, TOPIC_, TOPIC, host=host))
            async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S) as client:
                answer = await client.request(ApiKey.METADATA, 9, {"topics": [{"name": TOPIC}],
                                                                   "allow_auto_topic_creation": False,
                                                                   "include_cluster_authorized_operations": False,
                                                                   "include_topic_authorized_operations": False})
            return answer.topics[0].error_code

        assert await described_from("10.9.8.7") == ErrorCode.topic_authorization_failed
        assert await described_from("127.0.0.1") == ErrorCode.none


REQUEST = Request(ApiKey.PRODUCE, 9, 1, "client", None, principal=MALLORY, client_host="127.0.0.1")


def test_a_denial_is_audited_once_an_interval_and_an_interval_within_its_budget(caplog):
    now_s = [0.0]
    denials = DenialLog(clock=lambda: now_s[0])
    with caplog.at_level(logging.WARNING, logger="replog.audit"):
        for _ in range(10):
            denials.log(REQUEST, WRITE, TOPIC_, "payments")
        assert len(caplog.records) == 1
        for index in range(DENIAL_LINES_PER_INTERVAL_MAX + 50):
            denials.log(REQUEST, WRITE, TOPIC_, f"payments-{index}")
        assert len(caplog.records) == DENIAL_LINES_PER_INTERVAL_MAX
        now_s[0] += DENIAL_LOG_INTERVAL_S
        denials.log(REQUEST, WRITE, TOPIC_, "payments")
    held_back, again = caplog.records[-2:]
    assert "held_back=51" in held_back.getMessage()
    assert "resource=payments " in again.getMessage()


def test_a_denial_names_principal_host_operation_and_resource_and_reads_as_json(caplog):
    with caplog.at_level(logging.WARNING, logger="replog.audit"):
        DenialLog().log(REQUEST, WRITE, TOPIC_, "payments")
    [record] = caplog.records
    document = json.loads(JsonFormatter().format(record))
    assert document["logger"] == "replog.audit" and document["event"] == "denied"
    assert {key: document[key] for key in ("principal", "host", "operation", "resource_type", "resource", "api")} == {
        "principal": MALLORY, "host": "127.0.0.1", "operation": "Write", "resource_type": "Topic",
        "resource": "payments", "api": "produce"}
