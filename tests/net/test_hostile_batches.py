"""The hostile batches of the probes, at a real broker under a 2 GiB address-space limit: each is
refused with Kafka's error, nothing of it is appended, and afterwards a confluent-kafka producer
and consumer are served and read back every record acknowledged so far.

Probes: a 61-byte batch claiming 2**31 - 1 records; 40 bytes of garbage claiming 3 records; one
Produce of 2,000 batches of 2,000 producers stamped 2**62 for one partition (and one batch of
that stamp); decompression bombs of every codec on a compacted topic and on a plain one.
"""

from __future__ import annotations

import resource
import socket
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.serial import entity_reader

from replog.net import codec
from replog.net.codec import ApiKey
from replog.storage.batch_format import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, HEADER, set_crc
from tests.support.broker_process import BrokerProcess
from tests.hostile.seeds import encode as encode_request
from tests.support.batches import BOMB_BYTES, bomb, build_batch

pytestmark = pytest.mark.cluster  # each test runs against a broker process

ADDRESS_SPACE_BYTES = 2 << 30
PRODUCE_VERSION = 9
PLAIN, COMPACTED, SERVED = "hostile-plain", "hostile-compacted", "well-behaved"
SOCKET_TIMEOUT_S = 30
INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP = 87, 2, 10, 32


class Served:
    """The broker, and every record a well-behaved producer had acknowledged on it."""

    def __init__(self, broker: BrokerProcess):
        self.broker = broker
        self.acknowledged: list[bytes] = []


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("hostile") / "data",
                           rlimits={resource.RLIMIT_AS: ADDRESS_SPACE_BYTES})
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        created = admin.create_topics([NewTopic(PLAIN, 1, 1), NewTopic(SERVED, 1, 1),
                                       NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact"})])
        for future in created.values():
            future.result(timeout=30)
        yield Served(broker)
    finally:
        broker.stop()


def produce(port: int, topic: str, *records: bytes, version: int = PRODUCE_VERSION) -> list[dict]:
    """One Produce (acks=1) of each of `records` to partition 0 of `topic`: the partitions' answers."""
    frame = encode_request(ApiKey.PRODUCE, version, {
        "transactional_id": None, "acks": 1, "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch} for batch in records]}]})
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_S) as connection:
        connection.sendall(frame)
        (size,) = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))
        response = connection.recv(size, socket.MSG_WAITALL)
    # Response header v1 (flexible versions): correlation id, no tagged fields; v0 before.
    header_bytes = 5 if version >= 9 else 4
    body, _ = entity_reader(codec.response_schema(ApiKey.PRODUCE, version))(response, header_bytes)
    return [{"error_code": int(answer.error_code), "error_message": getattr(answer, "error_message", None),
             "record_errors": [(error.batch_index, error.batch_index_error_message)
                               for error in getattr(answer, "record_errors", ())]}
            for answer in body.responses[0].partition_responses]


def log_end(served: Served, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": served.broker.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def assert_refused_and_others_served(served: Served, topic: str, records: bytes, error_code: int) -> dict:
    end_before = log_end(served, topic)
    (answer,) = produce(served.broker.port, topic, records)
    assert answer["error_code"] == error_code, answer
    assert served.broker.process.poll() is None, "".join(served.broker.output[-30:])
    assert log_end(served, topic) == end_before, "nothing of a refused batch may be appended"
    assert_clients_served(served)
    return answer


def assert_clients_served(served: Served) -> None:
    """A confluent-kafka producer's records are acknowledged, and a consumer reads back every
    record acknowledged on the broker so far."""
    producer = Producer({"bootstrap.servers": served.broker.bootstrap, "acks": "all", "compression.type": "zstd"})
    values = [b"served %s %d" % (uuid.uuid4().hex.encode(), i) for i in range(20)]
    for value in values:
        producer.produce(SERVED, value=value)
    assert producer.flush(30) == 0
    served.acknowledged += values
    consumer = Consumer({"bootstrap.servers": served.broker.bootstrap, "group.id": "hostile", "enable.auto.commit": False})
    consumer.assign([TopicPartition(SERVED, 0, 0)])
    read = []
    try:
        for _ in range(60):  # bounded: at most 60 waits of up to 0.5 s
            read += [message.value() for message in consumer.consume(1000, 0.5) if not message.error()]
            if len(read) >= len(served.acknowledged):
                break
    finally:
        consumer.close()
    assert read == served.acknowledged


def claiming(body: bytes, record_count: int) -> bytes:
    """A batch header claiming `record_count` records around `body`, with a right CRC."""
    batch = bytearray(HEADER.size) + body
    HEADER.pack_into(batch, 0, 0, len(batch) - 12, -1, 2, 0, 0, record_count - 1, 0, 0, -1, -1, -1, record_count)
    set_crc(batch)
    return bytes(batch)


def test_a_61_byte_batch_claiming_2_pow_31_minus_1_records_is_refused(served):
    answer = assert_refused_and_others_served(served, PLAIN, claiming(b"", 2**31 - 1), INVALID_RECORD)
    assert answer["record_errors"] == [(0, "record 0 of 2147483647 is missing")]


def test_40_bytes_of_garbage_claiming_3_records_is_refused(served):
    garbage = bytes((i * 37 + 11) % 256 for i in range(40))
    assert_refused_and_others_served(served, PLAIN, claiming(garbage, 3), INVALID_RECORD)


def test_2000_batches_of_2000_producers_stamped_2_pow_62_in_one_produce_are_refused(served):
    batches = b"".join(bytes(build_batch(max_timestamp=2**62, producer_id=pid, producer_epoch=0, base_sequence=0))
                       for pid in range(2000))
    answer = assert_refused_and_others_served(served, PLAIN, batches, INVALID_RECORD)
    assert answer["error_message"].startswith("only one record batch per partition is accepted")
    answer = assert_refused_and_others_served(served, PLAIN, bytes(build_batch(max_timestamp=2**62)), INVALID_TIMESTAMP)
    assert answer["record_errors"][0][0] == 0


@pytest.mark.parametrize("topic", [COMPACTED, PLAIN])
@pytest.mark.parametrize("compression", [CODEC_ZSTD, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4],
                         ids=["zstd", "gzip", "snappy", "lz4"])
def test_a_decompression_bomb_is_refused(served, topic, compression):
    batch = bomb(compression, BOMB_BYTES[{CODEC_ZSTD: "zstd", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy",
                                          CODEC_LZ4: "lz4"}[compression]])
    # Snappy cannot inflate 1 MiB past 64 MiB: its bomb's zeros are refused as not records.
    expected = INVALID_RECORD if compression == CODEC_SNAPPY else MESSAGE_TOO_LARGE
    answer = assert_refused_and_others_served(served, topic, bytes(batch), expected)
    if expected == MESSAGE_TOO_LARGE:
        assert answer["error_message"] == f"records inflate past {64 * (1024 * 1024 + 12)} bytes"


def test_a_partition_named_twice_in_one_produce_is_refused_in_every_entry(served):
    end_before = log_end(served, PLAIN)
    answers = produce(served.broker.port, PLAIN, bytes(build_batch()), bytes(build_batch()))
    assert [answer["error_code"] for answer in answers] == [INVALID_RECORD, INVALID_RECORD]
    assert answers[0]["error_message"] == f"partition {PLAIN}-0 is named more than once in the request"
    assert log_end(served, PLAIN) == end_before
    assert_clients_served(served)


def test_zstd_before_produce_v7_is_an_unsupported_compression_type(served):
    batch = bytes(build_batch(attributes=CODEC_ZSTD))
    assert [answer["error_code"] for answer in produce(served.broker.port, PLAIN, batch, version=6)] == [76]
    assert_clients_served(served)
