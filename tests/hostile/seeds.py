"""A valid request of every API and every version replog advertises, built from the schemas
(kio's, and replog's own in net/replog_apis.py) rather than written by hand per API.

Each field's value comes from its name and `kafka_type`: names of things that exist on the
broker under test (`Names`: its topics, a group, partition 0), so that a mutated request gets
past the lookups and into the handlers; small waits and timeouts, so that nothing parks; one
element in every array. Requests that change the cluster name only what a case may lose (a
throwaway topic, a broker that is not there) or only validate, so that a fuzzer replaying them
thousands of times leaves the topics the well-behaved clients use alone.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid
from typing import Any, NamedTuple

from kio.serial import entity_writer
from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, is_optional

from replog.net import codec
from replog.net import handlers  # noqa: F401  (registering the handlers fills codec.SUPPORTED_VERSIONS)
from replog.net.codec import ApiKey

from . import batches

CLIENT_ID = "hostile"
WAIT_MS = 10  # Fetch's max_wait, and every request timeout: answered at once, never parked
SIZE = struct.Struct(">i")


@dataclasses.dataclass(frozen=True)
class Names:
    """What exists on the broker under test, for requests that reach past the lookups."""

    topic: str = "hostile-target"  # 1 partition: the requests of every API name it
    doomed_topic: str = "hostile-doomed"  # DeleteTopics deletes it (or finds it gone)
    created_topic: str = "hostile-created"  # CreateTopics creates it, validate_only
    group: str = "hostile-group"
    member: str = "hostile-member"  # unknown to the group: answered at once, never waits for a rebalance
    absent_broker: int = 7  # UnregisterBroker's subject: not this broker
    user: str = "hostile-user"  # the SCRAM credential requests' subject: no client authenticates as it


class Seed(NamedTuple):
    api_key: int
    version: int
    frame: bytes  # size prefix included

    @property
    def label(self) -> str:
        return f"{_api_name(self.api_key)} v{self.version}"


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return f"api {api_key}"


def all_seeds(names: Names) -> list[Seed]:
    """One valid request per API and version in codec.SUPPORTED_VERSIONS."""
    return [
        Seed(api_key, version, encode(api_key, version, request_values(api_key, version, names)))
        for api_key, (low, high) in sorted(codec.SUPPORTED_VERSIONS.items())
        for version in range(low, high + 1)
    ]


def encode(api_key: int, version: int, values: dict, correlation_id: int = 1) -> bytes:
    """The request frame, size prefix first, written by kio's entity_writer."""
    schema = codec.request_schema(api_key, version)
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(out, header_schema(request_api_key=api_key, request_api_version=version,
                                                    correlation_id=correlation_id, client_id=CLIENT_ID))
    entity_writer(schema)(out, codec.build(schema, values))
    payload = out.getvalue()
    return SIZE.pack(len(payload)) + payload


def request_values(api_key: int, version: int, names: Names) -> dict:
    """Plain values (codec.build's input) for every field of the request's schema."""
    return _entity_values(codec.request_schema(api_key, version), _Context(api_key, names))


class _Context(NamedTuple):
    api_key: int
    names: Names


def _entity_values(schema: type, context: _Context) -> dict:
    values = {}
    for field in dataclasses.fields(schema):
        if field.metadata.get("tag") is not None:
            continue  # tagged fields stay at their defaults, which are not written
        values[field.name] = _field_value(schema, field, context)
    return values


def _field_value(schema: type, field: dataclasses.Field, context: _Context) -> Any:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return [_entity_values(kind.type_, context)]
    if isinstance(kind, EntityField):
        return _entity_values(kind.type_, context)
    value = _primitive(schema.__name__, field.name, field.metadata["kafka_type"], context)
    if value is _NULL:
        return None if is_optional(field) else _zero(field.metadata["kafka_type"])
    if isinstance(kind, PrimitiveTupleField):
        return value if isinstance(value, list) else [value]
    return value


_NULL = object()  # "no value": null where the schema allows it, else the type's zero


def _zero(kafka_type: str) -> Any:
    zeros = {"string": "", "bytes": b"", "records": b"", "uuid": uuid.UUID(int=0)}
    return zeros.get(kafka_type, 0)


# A field's value by its name, where the name alone says what it is.
_BY_NAME: dict[str, Any] = {
    # partitions that exist: the target topic has one
    "partition": 0, "partition_index": 0, "index": 0, "partition_indexes": [0], "partitions": [0],
    "replicas": [0], "broker_ids": [0],
    "replica_id": -1,  # a consumer, not a follower (a follower's fetch is a case of its own)
    "num_partitions": 1, "replication_factor": 1, "count": 2,
    "acks": 1, "min_bytes": 1, "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20,
    "max_wait": WAIT_MS, "timeout": WAIT_MS, "session_timeout": 10_000, "rebalance_timeout": 10_000,
    "transaction_timeout": 60_000, "retention_time": -1,
    "generation_id": 1, "generation_id_or_member_epoch": -1, "member_epoch": -1,
    "current_leader_epoch": -1, "last_fetched_epoch": -1, "committed_leader_epoch": -1, "leader_epoch": 0,
    "session_id": 0, "session_epoch": -1,  # a full fetch, outside any session
    "fetch_offset": 0, "log_start_offset": -1, "committed_offset": 1, "timestamp": -1,
    "producer_id": -1, "producer_epoch": -1,
    "coordinator_epoch": 0, "transaction_version": 0,  # WriteTxnMarkers': an abort marker, as a coordinator sends
    "v3_and_below_transactional_id": "hostile-txn", "transactional_ids": ["hostile-txn"], "state_filters": [],
    "producer_id_filters": [], "duration_filter": -1, "verify_only": False,
    "v3_and_below_producer_id": -1, "v3_and_below_producer_epoch": -1,
    "max_events": 10, "incarnation": 0, "since_cursor": 0,
    "isolation_level": 0, "key_type": 0, "resource_type": 2, "config_operation": 0, "election_type": 0,
    "endpoint_type": 1,
    "validate_only": True, "allow_auto_topic_creation": False, "require_stable": False, "include_queued": True,
    "protocol_type": "consumer", "protocol_name": "range", "client_software_name": CLIENT_ID,
    "client_software_version": "1.0", "rack_id": "", "committed_metadata": "hostile",
    "group_instance_id": _NULL, "transactional_id": _NULL, "cluster_id": _NULL, "reason": _NULL,
    "configuration_keys": _NULL,
    "topic_id": _NULL,  # replog's Metadata names topics, never their ids: a request by id names none
    "states_filter": [], "types_filter": [],
    "assignment": b"",
    "auth_bytes": b"n,,n=hostile,r=hostile-nonce",  # SaslAuthenticate's: SCRAM's client-first message
    "mechanism": 2, "iterations": 4096, "salt": b"hostile-salt", "salted_password": bytes(64),  # SCRAM-SHA-512's
    # ACLs: a literal Read on the target topic, and filters selecting it
    "resource_type_filter": 2, "resource_name_filter": _NULL, "pattern_type_filter": 3, "resource_pattern_type": 3,
    "principal": "User:hostile", "host": "*", "principal_filter": _NULL, "host_filter": _NULL, "operation": 3,
    "permission_type": 3,
    "entity_type": "user", "entity_name": "hostile", "match_type": 0, "match": "hostile",  # client quotas'
    # transactions: an id never initialised, so each request is refused without writing
    "v3_and_below_transactional_id": "hostile-transaction", "v3_and_below_producer_id": -1,
    "v3_and_below_producer_epoch": -1, "transactional_ids": ["hostile-transaction"], "state_filters": [],
    "producer_id_filters": [], "duration_filter": -1, "coordinator_epoch": 0, "transaction_result": False, "transaction_version": 0,
}
_GROUP_FIELDS = {"group_id", "key", "groups", "groups_names", "coordinator_keys"}
_TOPIC_FIELDS = {"topic", "resource_name", "topic_names"}


def _primitive(entity: str, name: str, kafka_type: str, context: _Context) -> Any:
    names = context.names
    if name == "name":
        return _name(entity, context)
    if name in _TOPIC_FIELDS:
        return names.doomed_topic if context.api_key == ApiKey.DELETE_TOPICS else names.topic
    if name in _GROUP_FIELDS:
        return names.group
    if name == "member_id":
        return names.member
    if name == "broker_id":
        return names.absent_broker
    if name == "records":
        return bytes(batches.batch([batches.record(0, b"seed-key", b"seed-value")]))
    if name == "metadata":  # JoinGroup's protocol metadata: a consumer's subscription, v0
        return batches.consumer_subscription([names.topic])
    if name == "value":
        return _CONFIG_VALUES.get(entity, "")
    if name == "mechanism" and kafka_type == "string":  # SaslHandshake's, not a SCRAM credential's number
        return "SCRAM-SHA-512"
    if name in _BY_NAME:
        return _BY_NAME[name]
    if kafka_type == "bool":
        return False  # the include_* flags: the plain answer
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    raise AssertionError(f"no seed value for {entity}.{name} ({kafka_type}): name it in seeds._BY_NAME")


# Config entries: a harmless change to the target topic (IncrementalAlterConfigs), a topic
# created only to be validated (CreateTopics).
_CONFIG_NAMES = {"AlterableConfig": "retention.ms", "CreatableTopicConfig": "cleanup.policy"}
_CONFIG_VALUES = {"AlterableConfig": "604800000", "CreatableTopicConfig": "delete", "OpData": 1048576.0}


def _name(entity: str, context: _Context) -> str:
    names = context.names
    if entity in _CONFIG_NAMES:
        return _CONFIG_NAMES[entity]
    if entity.endswith("Protocol"):
        return "range"
    if context.api_key == ApiKey.CREATE_TOPICS:
        return names.created_topic
    if context.api_key == ApiKey.DELETE_TOPICS:
        return names.doomed_topic
    if "Topic" in entity or "Reassignable" in entity:
        return names.topic
    if "Scram" in entity or entity == "UserName":
        return names.user
    raise AssertionError(f"no seed value for {entity}.name: say what it names in seeds._name")
