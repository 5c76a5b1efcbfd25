"""Random and mutated frames at a running broker; then it must still serve a real client.

Seeds are valid requests of every kind the broker handles, encoded with kio at several
versions; hypothesis mutates them (flipped bytes, truncation, garbage tails, other versions,
lying size prefixes) and adds frames of pure noise. Each goes to the broker on a connection of
its own, which it may answer or close. Afterwards: the process is alive, a real client
produces and consumes, and the broker never logged an internal error (a handler that raises
on a client's bytes is a bug, even if the connection survives it).
"""

from __future__ import annotations

import io
import socket
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from replog.net import codec
from replog.net import handlers  # noqa: F401  (registering the handlers fills codec.SUPPORTED_VERSIONS)
from replog.net.codec import ApiKey
from tests.broker_process import BrokerProcess
from tests.unit.replica_batches import build_batch

SOCKET_TIMEOUT_S = 5
FUZZ_TOPIC = "fuzz-target"


def encode_request(api_key: int, version: int, values: dict, correlation_id: int = 1) -> bytes:
    schema = codec.request_schema(api_key, version)  # replog's own APIs too, which kio does not know
    header_schema = schema.__header_schema__
    out = io.BytesIO()
    entity_writer(header_schema)(
        out, header_schema(request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="fuzz")
    )
    entity_writer(schema)(out, codec.build(schema, values))
    payload = out.getvalue()
    return struct.pack(">i", len(payload)) + payload


def seed_frames() -> list[bytes]:
    batch = bytes(build_batch(record_count=3))
    topics_all = {"topics": None, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
                  "include_cluster_authorized_operations": False}
    metadata_one = topics_all | {"topics": [{"name": FUZZ_TOPIC, "topic_id": None}]}
    produce = {"transactional_id": None, "acks": 1, "timeout": 1000,
               "topic_data": [{"name": FUZZ_TOPIC, "partition_data": [{"index": 0, "records": batch}]}]}
    fetch = {"replica_id": -1, "max_wait": 10, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
             "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
             "topics": [{"topic": FUZZ_TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                                                              "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]}
    list_offsets = {"replica_id": -1, "isolation_level": 0,
                    "topics": [{"name": FUZZ_TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": -1}]}]}
    create = {"timeout": 1000, "validate_only": True,
              "topics": [{"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]}
    configs = {"include_synonyms": False, "include_documentation": False,
               "resources": [{"resource_type": 2, "resource_name": FUZZ_TOPIC, "configuration_keys": None}]}
    epoch = {"replica_id": -1, "topics": [{"topic": FUZZ_TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}]}
    init_producer = {"transactional_id": None, "transaction_timeout": 1000, "producer_id": -1, "producer_epoch": -1}
    api_versions = {"client_software_name": "fuzz", "client_software_version": "1"}
    group = {"group_id": "fuzz-group", "generation_id": 1, "member_id": "fuzz-member", "group_instance_id": None}
    find_coordinator = {"key": "fuzz-group", "key_type": 0, "coordinator_keys": ["fuzz-group"]}
    join = group | {"session_timeout": 10_000, "rebalance_timeout": 10_000, "member_id": "", "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b"subscription"}], "reason": None}
    sync = group | {"protocol_type": "consumer", "protocol_name": "range",
                    "assignments": [{"member_id": "fuzz-member", "assignment": b"assignment"}]}
    leave = group | {"members": [{"member_id": "fuzz-member", "group_instance_id": None, "reason": None}]}
    commit = group | {"generation_id_or_member_epoch": 1, "retention_time": -1, "topics": [{"name": FUZZ_TOPIC, "partitions": [
        {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": "m"}]}]}
    offset_fetch = group | {"topics": [{"name": FUZZ_TOPIC, "partition_indexes": [0]}], "require_stable": False}
    group_admin = {"states_filter": [], "groups": ["fuzz-group"], "include_authorized_operations": False,
                   "groups_names": ["fuzz-group"], "group_id": "fuzz-group",
                   "topics": [{"name": FUZZ_TOPIC, "partitions": [{"partition_index": 0}]}]}
    seeds = []
    for api_key, versions, values in [
        (ApiKey.API_VERSIONS, (0, 3), api_versions),
        (ApiKey.METADATA, (0, 9, 12), topics_all),
        (ApiKey.METADATA, (4, 12), metadata_one),
        (ApiKey.PRODUCE, (3, 9), produce),
        (ApiKey.FETCH, (4, 11, 12), fetch),
        (ApiKey.LIST_OFFSETS, (1, 7), list_offsets),
        (ApiKey.CREATE_TOPICS, (2, 5), create),
        (ApiKey.DESCRIBE_CONFIGS, (1, 4), configs),
        (ApiKey.OFFSET_FOR_LEADER_EPOCH, (2, 4), epoch),
        (ApiKey.INIT_PRODUCER_ID, (0, 2), init_producer),
        (ApiKey.FIND_COORDINATOR, (0, 3, 4), find_coordinator),
        (ApiKey.JOIN_GROUP, (5, 9), join),  # v4+: a new member is answered at once (MEMBER_ID_REQUIRED)
        (ApiKey.SYNC_GROUP, (0, 5), sync),
        (ApiKey.HEARTBEAT, (0, 4), group),
        (ApiKey.LEAVE_GROUP, (0, 5), leave),
        (ApiKey.OFFSET_COMMIT, (2, 8), commit),
        (ApiKey.OFFSET_FETCH, (1, 7), offset_fetch),
        (ApiKey.OFFSET_FETCH, (8, 9), {"groups": [offset_fetch | {"member_id": None, "member_epoch": -1}],
                                       "require_stable": False}),
        (ApiKey.LIST_GROUPS, (0, 5), group_admin),
        (ApiKey.DESCRIBE_GROUPS, (0, 5), group_admin),
        (ApiKey.DELETE_GROUPS, (0, 2), group_admin),
        (ApiKey.OFFSET_DELETE, (0,), group_admin),
        (ApiKey.STATE_CHANGE_EVENTS, (0,), {"topic": FUZZ_TOPIC, "partition": 0, "incarnation": 1, "since_cursor": 0,
                                            "max_events": 10, "include_queued": True}),
    ]:
        seeds.extend(encode_request(int(api_key), version, values) for version in versions)
    return seeds


SEEDS = seed_frames()


@st.composite
def mutated_frames(draw) -> bytes:
    frame = bytearray(draw(st.sampled_from(SEEDS)))
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["flip", "flip", "flip", "flip", "truncate", "extend", "version", "size"]))
        if kind == "flip" and len(frame) > 4:
            position = draw(st.integers(4, len(frame) - 1))
            frame[position] ^= draw(st.integers(1, 255))
        elif kind == "truncate" and len(frame) > 4:
            frame = frame[: draw(st.integers(4, len(frame)))]
            struct.pack_into(">i", frame, 0, len(frame) - 4)
        elif kind == "extend":
            frame += draw(st.binary(min_size=1, max_size=64))
            struct.pack_into(">i", frame, 0, len(frame) - 4)
        elif kind == "version" and len(frame) >= 8:
            struct.pack_into(">h", frame, 6, draw(st.integers(-1, 40)))
        elif kind == "size":
            struct.pack_into(">i", frame, 0, draw(st.integers(-(2**31), 2**31 - 1)))
    return bytes(frame)


noise_frames = st.binary(min_size=0, max_size=256).map(lambda body: struct.pack(">i", len(body)) + body)


@st.composite
def noise_behind_a_plausible_header(draw) -> bytes:
    """Garbage that gets past the header check, so that it reaches the request decoders."""
    header = struct.pack(">hhih", draw(st.sampled_from(sorted(codec.SUPPORTED_VERSIONS))), draw(st.integers(0, 16)), 1, 4) + b"fuzz"
    payload = header + draw(st.binary(max_size=512))
    return struct.pack(">i", len(payload)) + payload


# Mutated requests weighted up: they reach the handlers, where bugs hide.
any_frame = st.one_of(mutated_frames(), mutated_frames(), mutated_frames(), noise_behind_a_plausible_header(), noise_frames)


def throw(port: int, frame: bytes) -> None:
    """Send one frame on a fresh connection; read whatever comes back until the broker answers
    or closes (a lying size prefix may leave it waiting for more: the timeout ends that)."""
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as connection:
        try:
            connection.sendall(frame)
            connection.shutdown(socket.SHUT_WR)
            while connection.recv(65536):
                pass
        except (TimeoutError, ConnectionError):
            pass


@pytest.fixture(scope="module")
def fuzzed_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("fuzz") / "data")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(FUZZ_TOPIC, 1, 1)])[FUZZ_TOPIC].result(timeout=30)
    yield broker
    broker.stop()


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(frame=any_frame)
def test_fuzzed_frames_never_take_the_broker_down(fuzzed_broker, frame):
    throw(fuzzed_broker.port, frame)
    assert fuzzed_broker.process.poll() is None, "".join(fuzzed_broker.output[-30:])


def test_after_the_fuzzing_a_real_client_is_served_and_nothing_failed_inside(fuzzed_broker):
    topic = f"after-fuzz-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": fuzzed_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": fuzzed_broker.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce(topic, value=b"after %d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": fuzzed_broker.bootstrap, "group.id": "fuzz", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values = []
    for _ in range(200):  # bounded: at most 200 polls of up to 0.5 s
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
        if len(values) == 100:
            break
    consumer.close()
    assert values == [b"after %d" % i for i in range(100)]
    first_error = next((index for index, line in enumerate(fuzzed_broker.output) if "request failed" in line), None)
    assert first_error is None, "".join(fuzzed_broker.output[first_error:first_error + 60])
