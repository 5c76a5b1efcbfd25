"""Frames that killed a broker or held it for seconds, sent to a real broker process under an
address-space limit of 2 GiB: each closes its own connection only, and afterwards the broker is
alive and a confluent-kafka producer and consumer work on it. And requests naming one thing
many times, whose answers grew by the size of that thing each time."""

from __future__ import annotations

import resource
import socket
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.frame_check import ITEMS_MAX
from tests.support.broker_process import BrokerProcess
from tests.net.test_frame_check import METADATA_V1_HUGE_ARRAY, METADATA_V9_HUGE_ARRAY, metadata_v1
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster  # each test runs against a broker process

RECORDS = 20


@pytest.fixture(scope="module")
def limited_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data", rlimits={resource.RLIMIT_AS: 2 << 30})
    broker.start()
    yield broker
    broker.stop()


def closed_without_answer(port: int, frame: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(struct.pack(">i", len(frame)) + frame)
        try:
            return connection.recv(4) == b""
        except ConnectionResetError:
            return True


def api_versions_answered(port: int) -> bool:
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 9, 4) + b"test"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))[0]
        return struct.unpack(">i", connection.recv(size, socket.MSG_WAITALL)[:4])[0] == 9


def produce_and_consume(bootstrap: str) -> list[bytes]:
    """What a consumer reads back of RECORDS records a producer wrote with acks=all to a new topic."""
    topic = f"after-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for index in range(RECORDS):
        producer.produce(topic, value=b"record %d" % index)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    for _ in range(100):  # bounded: at most 100 polls of up to 0.5 s
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            values.append(message.value())
        if len(values) == RECORDS:
            break
    consumer.close()
    return values


@pytest.mark.parametrize("frame,claimed", [(METADATA_V9_HUGE_ARRAY, 2**32 - 2), (METADATA_V1_HUGE_ARRAY, 2**31 - 1)],
                         ids=["v9-19-bytes", "v1-18-bytes"])
def test_a_count_the_frame_cannot_hold_closes_that_connection_only(limited_broker, frame, claimed):
    # Before the check, kio reserved 34 GB (v9) or 16 GB (v1) for the claimed items and the
    # process aborted.
    assert closed_without_answer(limited_broker.port, frame)
    wait_until(lambda: any("closing connection" in line and f"count {claimed} " in line for line in limited_broker.output),
               "the warning", 10)
    assert limited_broker.process.poll() is None, "".join(limited_broker.output[-30:])
    assert api_versions_answered(limited_broker.port)
    assert produce_and_consume(limited_broker.bootstrap) == [b"record %d" % index for index in range(RECORDS)]


def test_a_metadata_request_past_the_item_budget_is_refused(limited_broker):
    # Well-formed, and 600 KB: without the budget, 200,001 topics to decode and answer on the
    # event loop, which a million made wait 7 s.
    assert closed_without_answer(limited_broker.port, metadata_v1(ITEMS_MAX + 1))
    wait_until(lambda: any(f"more than {ITEMS_MAX} items" in line for line in limited_broker.output), "the warning", 10)
    assert limited_broker.process.poll() is None
    assert api_versions_answered(limited_broker.port)


def answer(port: int, api_key: int, version: int, values: dict):
    """The decoded response to one request."""
    frame = codec.encode_request(api_key, version, 5, "test", codec.build(codec.request_schema(api_key, version), values))
    with socket.create_connection(("127.0.0.1", port), timeout=30) as connection:
        connection.sendall(frame)
        size = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))[0]
        return codec.decode_response(api_key, version, connection.recv(size, socket.MSG_WAITALL))[1]


def test_a_topic_named_again_in_metadata_is_answered_once(limited_broker):
    # Kafka reads the names as a set; answered each time, one name repeated 200,000 times for a
    # topic of 10 partitions made a 58 MB answer.
    body = answer(limited_broker.port, ApiKey.METADATA, 12, {
        "topics": [{"name": name, "topic_id": None} for name in ("absent-a", "absent-b", "absent-a", "absent-a")],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    assert [topic.name for topic in body.topics] == ["absent-a", "absent-b"]


def test_a_resource_named_again_in_describe_configs_is_refused_the_second_time(limited_broker):
    resource = {"resource_type": 4, "resource_name": "", "configuration_keys": None}  # this broker's configs
    body = answer(limited_broker.port, ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [resource, resource], "include_synonyms": False, "include_documentation": False})
    first, second = body.results
    assert (first.error_code, second.error_code) == (ErrorCode.none, ErrorCode.invalid_request)
    assert len(first.configs) > 10 and second.configs == ()


def test_a_group_named_again_in_describe_groups_or_offset_fetch_is_refused_the_second_time(limited_broker):
    described = answer(limited_broker.port, ApiKey.DESCRIBE_GROUPS, 5, {
        "groups": ["g", "h", "g"], "include_authorized_operations": False})
    assert [group.error_code == ErrorCode.invalid_request for group in described.groups] == [False, False, True]
    fetched = answer(limited_broker.port, ApiKey.OFFSET_FETCH, 8, {"require_stable": False, "groups": [
        {"group_id": group_id, "member_id": None, "member_epoch": -1, "topics": None} for group_id in ("g", "g")]})
    assert [group.error_code == ErrorCode.invalid_request for group in fetched.groups] == [False, True]
