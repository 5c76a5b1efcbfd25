"""Every API replog serves checks what Kafka's KafkaApis checks before acting: one row per API
(or per way of asking it) names the ACLs it needs and the error each missing one is answered
with. Against one broker in this process, with a real AclAuthorizer filled in-process, each row
is asked by a principal with all of its ACLs (no authorization error anywhere in the answer),
and by one with all but each in turn (that one's error somewhere in the answer).

An API in codec.SUPPORTED_VERSIONS with neither a row nor a reason to be unchecked fails the
test, so that an API added later without a check is noticed.
"""

from __future__ import annotations

import dataclasses
import uuid

from kio.schema.errors import ErrorCode

from replog import admin
from replog.groups import OffsetCommit
from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.handlers import HANDLERS
from replog.net.leader_connections import follower_client_id
from replog.security.acls import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from replog.security.authorizer import AclAuthorizer
from replog.storage.segment import HeldSlice
from tests.net.in_process_broker import in_process_broker
from tests.support.batches import build_batch
from tests.support.polling import eventually

TOPIC, GROUP, TRANSACTIONAL_ID = "t", "g", "tx"
LISTENER, HOST = "PLAINTEXT", "127.0.0.1"
WAIT_S = 30
AUTHORIZATION_ERRORS = frozenset({ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed,
                                  ErrorCode.cluster_authorization_failed,
                                  ErrorCode.transactional_id_authorization_failed})
TOPIC_DENIED, GROUP_DENIED = ErrorCode.topic_authorization_failed, ErrorCode.group_authorization_failed
CLUSTER_DENIED, TRANSACTIONAL_ID_DENIED = ErrorCode.cluster_authorization_failed, ErrorCode.transactional_id_authorization_failed
FORGED_FOLLOWER = follower_client_id(2, "feedface")  # a life of broker 2 never seen: read as a consumer's


@dataclasses.dataclass(frozen=True)
class Need:
    operation: AclOperation
    resource_type: ResourceType
    name: str
    error: ErrorCode  # what the answer carries without it


def on_topic(operation: AclOperation, name: str = TOPIC) -> Need:
    return Need(operation, ResourceType.TOPIC, name, TOPIC_DENIED)


def on_group(operation: AclOperation, name: str = GROUP) -> Need:
    return Need(operation, ResourceType.GROUP, name, GROUP_DENIED)


def on_transactional_id(operation: AclOperation) -> Need:
    return Need(operation, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED)


def on_cluster(operation: AclOperation, error: ErrorCode = CLUSTER_DENIED) -> Need:
    return Need(operation, ResourceType.CLUSTER, CLUSTER_NAME, error)


@dataclasses.dataclass(frozen=True)
class Row:
    api_key: int
    version: int
    body: dict
    needs: tuple[Need, ...]
    why: str = ""  # which way of asking, when an API has several rows
    client_id: str = "authorization-table"


def _fetch(replica_id: int) -> dict:
    return {"replica_id": replica_id, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                 "last_fetched_epoch": -1, "log_start_offset": -1,
                                                 "partition_max_bytes": 1 << 20}]}]}


def _produce(transactional_id: str | None) -> dict:
    return {"transactional_id": transactional_id, "acks": 1, "timeout": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": bytes(build_batch())}]}]}


def _epochs(replica_id: int) -> dict:
    return {"replica_id": replica_id, "topics": [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}


def _create_topic(validate_only: bool = True) -> dict:
    return {"topics": [{"name": "made", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
            "timeout": 5000, "validate_only": validate_only}


def _configs(resource_type: int, name: str, configs: list[dict]) -> dict:
    return {"resources": [{"resource_type": resource_type, "resource_name": name, "configs": configs}], "validate_only": True}


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
# To a partition nobody hosts: answered UNKNOWN_TOPIC_OR_PARTITION when allowed, nothing written.
_MARKERS = {"markers": [{"producer_id": 1, "producer_epoch": 0, "transaction_result": False, "coordinator_epoch": 0,
                         "topics": [{"name": "absent", "partition_indexes": [0]}]}]}
THROTTLE = "leader.replication.throttled.rate"

# In the order asked: OffsetDelete, which deletes the group's committed offset, after those
# that read it.
TABLE: tuple[Row, ...] = (
    Row(ApiKey.PRODUCE, 9, _produce(None), (on_topic(AclOperation.WRITE),)),
    Row(ApiKey.PRODUCE, 9, _produce(TRANSACTIONAL_ID),
        (Need(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED),
         on_topic(AclOperation.WRITE)), "transactional"),
    Row(ApiKey.FETCH, 12, _fetch(-1), (on_topic(AclOperation.READ),), "consumer"),
    Row(ApiKey.FETCH, 12, _fetch(2), (on_cluster(AclOperation.CLUSTER_ACTION, TOPIC_DENIED),), "follower",
        FORGED_FOLLOWER),
    Row(ApiKey.LIST_OFFSETS, 7, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]},
        (on_topic(AclOperation.DESCRIBE),)),
    Row(ApiKey.METADATA, 10, {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                              "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
        (on_topic(AclOperation.DESCRIBE),), "named"),
    Row(ApiKey.METADATA, 10, {"topics": [{"name": "auto-made", "topic_id": None}], "allow_auto_topic_creation": True,
                              "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
        (on_topic(AclOperation.DESCRIBE, "auto-made"), on_topic(AclOperation.CREATE, "auto-made")), "auto-creating"),
    Row(ApiKey.OFFSET_COMMIT, 8, {"group_id": GROUP, "generation_id_or_member_epoch": -1, "member_id": "",
                                  "group_instance_id": None, "topics": [{"name": TOPIC, "partitions": [
                                      {"partition_index": 0, "committed_offset": 0, "committed_leader_epoch": -1,
                                       "committed_metadata": ""}]}]},
        (on_group(AclOperation.READ), on_topic(AclOperation.READ))),
    Row(ApiKey.TXN_OFFSET_COMMIT, 3, {"transactional_id": TRANSACTIONAL_ID, "group_id": GROUP, "producer_id": 1,
                                      "producer_epoch": 0, "generation_id": 1, "member_id": "m", "group_instance_id": None,
                                      "topics": [{"name": TOPIC, "partitions": [
                                          {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
                                           "committed_metadata": ""}]}]},
        (Need(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED),
         on_group(AclOperation.READ), on_topic(AclOperation.READ))),
    Row(ApiKey.OFFSET_FETCH, 7, {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                                 "require_stable": False},
        (on_group(AclOperation.DESCRIBE), on_topic(AclOperation.DESCRIBE))),
    Row(ApiKey.FIND_COORDINATOR, 3, {"key": GROUP, "key_type": 0}, (on_group(AclOperation.DESCRIBE),)),
    Row(ApiKey.JOIN_GROUP, 7, {"group_id": "joining", "session_timeout": 10_000, "rebalance_timeout": 10_000,
                               "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                               "protocols": [{"name": "range", "metadata": b""}]},
        (on_group(AclOperation.READ, "joining"),)),
    Row(ApiKey.SYNC_GROUP, 5, {"group_id": GROUP, "generation_id": 1, "member_id": "m", "group_instance_id": None,
                               "protocol_type": "consumer", "protocol_name": "range", "assignments": []},
        (on_group(AclOperation.READ),)),
    Row(ApiKey.HEARTBEAT, 4, {"group_id": GROUP, "generation_id": 1, "member_id": "m", "group_instance_id": None},
        (on_group(AclOperation.READ),)),
    Row(ApiKey.LEAVE_GROUP, 4, {"group_id": GROUP, "members": [{"member_id": "m", "group_instance_id": None}]},
        (on_group(AclOperation.READ),)),
    Row(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [GROUP], "include_authorized_operations": True},
        (on_group(AclOperation.DESCRIBE),)),
    Row(ApiKey.DELETE_GROUPS, 2, {"groups_names": ["gone"]}, (on_group(AclOperation.DELETE, "gone"),)),
    Row(ApiKey.CREATE_TOPICS, 7, _create_topic(),
        (on_topic(AclOperation.CREATE, "made"), on_topic(AclOperation.DESCRIBE_CONFIGS, "made")), "created on the topic"),
    Row(ApiKey.CREATE_TOPICS, 7, _create_topic(),
        (on_cluster(AclOperation.CREATE, TOPIC_DENIED), on_topic(AclOperation.DESCRIBE_CONFIGS, "made")),
        "created on the cluster"),
    Row(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": "absent", "topic_id": None}], "timeout": 1000},
        (on_topic(AclOperation.DELETE, "absent"),)),
    Row(ApiKey.CREATE_PARTITIONS, 3, {"topics": [{"name": TOPIC, "count": 1, "assignments": None}], "timeout": 1000,
                                      "validate_only": True}, (on_topic(AclOperation.ALTER),)),
    Row(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
                                     "producer_epoch": -1},
        (on_cluster(AclOperation.IDEMPOTENT_WRITE),), "idempotent write on the cluster"),
    Row(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None, "transaction_timeout": 60_000, "producer_id": -1,
                                     "producer_epoch": -1},
        (Need(AclOperation.WRITE, ResourceType.TOPIC, TOPIC, CLUSTER_DENIED),), "write on a topic"),
    Row(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": TRANSACTIONAL_ID, "transaction_timeout": 60_000,
                                     "producer_id": -1, "producer_epoch": -1},
        (on_transactional_id(AclOperation.WRITE),), "transactional"),
    Row(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {"v3_and_below_transactional_id": TRANSACTIONAL_ID, "v3_and_below_producer_id": 1,
                                          "v3_and_below_producer_epoch": 0,
                                          "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]},
        (on_transactional_id(AclOperation.WRITE), on_topic(AclOperation.WRITE)), "client"),
    Row(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": TRANSACTIONAL_ID, "producer_id": 1, "producer_epoch": 0, "verify_only": True,
         "topics": [{"name": TOPIC, "partitions": [0]}]}]}, (on_cluster(AclOperation.CLUSTER_ACTION),), "broker"),
    Row(ApiKey.ADD_OFFSETS_TO_TXN, 3, {"transactional_id": TRANSACTIONAL_ID, "producer_id": 1, "producer_epoch": 0,
                                       "group_id": GROUP},
        (on_transactional_id(AclOperation.WRITE), on_group(AclOperation.READ))),
    Row(ApiKey.END_TXN, 3, {"transactional_id": TRANSACTIONAL_ID, "producer_id": 1, "producer_epoch": 0,
                            "committed": True}, (on_transactional_id(AclOperation.WRITE),)),
    Row(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [TRANSACTIONAL_ID]},
        (on_transactional_id(AclOperation.DESCRIBE),)),
    Row(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, _epochs(-1), (on_topic(AclOperation.DESCRIBE),), "consumer"),
    Row(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, _epochs(-1), (on_cluster(AclOperation.CLUSTER_ACTION, TOPIC_DENIED),),
        "consumer with cluster action"),
    Row(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, _epochs(2), (on_cluster(AclOperation.CLUSTER_ACTION, TOPIC_DENIED),),
        "replica"),
    Row(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": TOPIC,
                                                    "configuration_keys": None}],
                                     "include_synonyms": False, "include_documentation": False},
        (on_topic(AclOperation.DESCRIBE_CONFIGS),), "topic"),
    Row(ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{"resource_type": BROKER_RESOURCE, "resource_name": "1",
                                                    "configuration_keys": None}],
                                     "include_synonyms": False, "include_documentation": False},
        (on_cluster(AclOperation.DESCRIBE_CONFIGS),), "broker"),
    Row(ApiKey.ALTER_CONFIGS, 2, _configs(TOPIC_RESOURCE, TOPIC, [{"name": "retention.ms", "value": "1000"}]),
        (on_topic(AclOperation.ALTER_CONFIGS),), "topic"),
    Row(ApiKey.ALTER_CONFIGS, 2, _configs(BROKER_RESOURCE, "1", [{"name": THROTTLE, "value": "1000000"}]),
        (on_cluster(AclOperation.ALTER_CONFIGS),), "broker"),
    Row(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _configs(TOPIC_RESOURCE, TOPIC, [
        {"name": "retention.ms", "config_operation": 0, "value": "1000"}]), (on_topic(AclOperation.ALTER_CONFIGS),),
        "topic"),
    Row(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, _configs(BROKER_RESOURCE, "", [
        {"name": THROTTLE, "config_operation": 0, "value": "1000000"}]), (on_cluster(AclOperation.ALTER_CONFIGS),),
        "cluster default"),
    Row(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None}, (on_cluster(AclOperation.DESCRIBE),)),
    Row(ApiKey.DESCRIBE_PRODUCERS, 0, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        (on_topic(AclOperation.READ),)),
    Row(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [0]}],
                                  "timeout": 1000}, (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": [
        {"name": "absent", "partitions": [{"partition_index": 0, "replicas": [1]}]}]}, (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 1000, "topics": None}, (on_cluster(AclOperation.DESCRIBE),)),
    Row(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}, (on_cluster(AclOperation.DESCRIBE),)),
    Row(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, {"deletions": [{"name": "nobody", "mechanism": 1}], "upsertions": []},
        (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.WRITE_TXN_MARKERS, 2, _MARKERS, (on_cluster(AclOperation.CLUSTER_ACTION),), "broker"),
    Row(ApiKey.WRITE_TXN_MARKERS, 2, _MARKERS, (on_cluster(AclOperation.ALTER),), "operator"),
    Row(ApiKey.UNREGISTER_BROKER, 0, {"broker_id": 99}, (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.STATE_CHANGE_EVENTS, 0, {"max_events": 10}, (on_cluster(AclOperation.DESCRIBE),)),
    Row(ApiKey.OFFSET_DELETE, 0, {"group_id": GROUP, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
        (on_group(AclOperation.DELETE), on_topic(AclOperation.READ))),
    Row(ApiKey.DESCRIBE_ACLS, 3, {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
                "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1},
        (on_cluster(AclOperation.DESCRIBE),)),
    Row(ApiKey.CREATE_ACLS, 3, {"creations": [{"resource_type": 2, "resource_name": "acl-made", "resource_pattern_type": 3,
                               "principal": "User:carol", "host": "*", "operation": 3, "permission_type": 3}]},
        (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.DELETE_ACLS, 3, {"filters": [{"resource_type_filter": 2, "resource_name_filter": "acl-made", "pattern_type_filter": 3,
                             "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}]},
        (on_cluster(AclOperation.ALTER),)),
    Row(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [], "strict": False}, (on_cluster(AclOperation.DESCRIBE_CONFIGS),)),
    Row(ApiKey.ALTER_CLIENT_QUOTAS, 1, {"entries": [{"entity": [{"entity_type": "user", "entity_name": "carol"}],
                             "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}]}],
                "validate_only": True}, (on_cluster(AclOperation.ALTER_CONFIGS),)),
)

UNCHECKED = {
    ApiKey.API_VERSIONS: "asked before anything else, to learn what to ask; Kafka checks nothing",
    ApiKey.SASL_HANDSHAKE: "authentication itself, before there is a principal to authorize",
    ApiKey.SASL_AUTHENTICATE: "authentication itself, before there is a principal to authorize",
    ApiKey.DESCRIBE_CLUSTER: "Kafka's checks nothing and tells cluster_authorized_operations when asked "
                             "(test_describe_cluster_tells_authorized_operations)",
}

# Asked besides the rows, in test_authorization_lists.py.
FILTERING = {ApiKey.LIST_GROUPS: "lists only the groups a principal may Describe, refuses none",
             ApiKey.LIST_TRANSACTIONS: "lists only the transactional ids a principal may Describe, refuses none"}


def test_every_served_api_has_a_row_or_a_reason():
    covered = {row.api_key for row in TABLE} | set(UNCHECKED) | set(FILTERING)
    missing = sorted(ApiKey(key).name for key in codec.SUPPORTED_VERSIONS if key not in covered)
    assert not missing, f"APIs without an authorization row: {missing}"
    assert {row.api_key for row in TABLE} <= set(codec.SUPPORTED_VERSIONS)


def _error_codes(entity) -> set[int]:
    """Every *error_code field's value anywhere in a response."""
    codes = set()
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name.endswith("error_code"):
            codes.add(int(value))
        for item in value if isinstance(value, tuple) else (value,):
            if dataclasses.is_dataclass(item):
                codes |= _error_codes(item)
    return codes


async def ask(broker, api_key: int, version: int, values: dict, principal: str, client_id: str = "authorization"):
    """The decoded answer of the broker's handler to a request as `principal` sent it from HOST."""
    body = codec.build(codec.request_schema(api_key, version), values)
    frame = codec.encode_request(api_key, version, 7, client_id, body)
    request = codec.decode_request(memoryview(frame)[4:], LISTENER, principal, HOST)
    answer = await HANDLERS[api_key](broker, request)
    parts = codec.encode_response(api_key, version, 7, answer)
    raw = b"".join(part.read_from(0) if isinstance(part, HeldSlice) else bytes(part) for part in parts)
    return codec.decode_response(api_key, version, raw[4:])[1]


def binding(principal: str, operation: AclOperation, resource_type: ResourceType, name: str,
            permission: AclPermissionType = AclPermissionType.ALLOW, host: str = HOST,
            pattern_type: PatternType = PatternType.LITERAL) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


def set_acls(authorizer: AclAuthorizer, *bindings: AclBinding) -> None:
    """The authorizer's ACLs are now `bindings`, as the feed would set them from the store."""
    acls: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for each in bindings:
        acls.setdefault(each.pattern, []).append(each.entry)
    authorizer.replace_all(acls)


def grant(authorizer: AclAuthorizer, principal: str, needs: tuple[Need, ...]) -> None:
    set_acls(authorizer, *(binding(principal, need.operation, need.resource_type, need.name) for need in needs))


async def prepared_broker(broker) -> AclAuthorizer:
    """TOPIC led here, GROUP coordinated here with an offset committed, and an authorizer."""
    await admin.create_topic(broker.store, TOPIC, 1, 1)
    await eventually(lambda: broker.serving(TOPIC, 0), WAIT_S, "the topic led here")
    broker.create_offsets_topic()
    await eventually(lambda: broker.groups.fetch(GROUP, [])[0] == ErrorCode.none, WAIT_S, "the group coordinated here")
    assert await broker.groups.commit(GROUP, "", None, -1, [OffsetCommit(TOPIC, 0, 0, -1, "")]) == [ErrorCode.none]
    broker.authorizer = AclAuthorizer()
    return broker.authorizer


def _name(row: Row) -> str:
    return f"{ApiKey(row.api_key).name} v{row.version}" + (f" ({row.why})" if row.why else "")


async def test_each_api_refuses_without_each_acl_it_needs_and_not_with_them(tmp_path):
    failures = []
    async with in_process_broker(tmp_path, **{"auto.create.topics.enable": "true"}) as broker:
        authorizer = await prepared_broker(broker)
        for row in TABLE:
            principal = f"User:p-{uuid.uuid4().hex[:8]}"  # a fresh one: no decision remembered
            for missing in row.needs:
                grant(authorizer, principal, tuple(need for need in row.needs if need is not missing))
                codes = _error_codes(await ask(broker, row.api_key, row.version, row.body, principal, row.client_id))
                if missing.error not in codes:
                    failures.append(f"{_name(row)} without {missing.operation.name} on {missing.resource_type.name} "
                                    f"{missing.name}: {sorted(map(ErrorCode, codes))}")
            grant(authorizer, principal, row.needs)
            codes = _error_codes(await ask(broker, row.api_key, row.version, row.body, principal, row.client_id))
            if codes & AUTHORIZATION_ERRORS:
                failures.append(f"{_name(row)} with every ACL it needs: {sorted(map(ErrorCode, codes))}")
    assert not failures, "\n".join(failures)

