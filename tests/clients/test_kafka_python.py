"""kafka-python against a replog broker process."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import time
import urllib.request
import uuid

from kafka import codec
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError
from kafka.record.default_records import DefaultRecordBatchBuilder
from prometheus_client.parser import text_string_to_metric_families

from .conftest import create_topic
from .records import COMPRESSIONS, UNKNOWN_TOPIC_OR_PARTITION, Record, assert_same, collect, records
from .suite import ClientSuite, NewTopicAdapter, ProduceFailed

TIMEOUT_S = 30
LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER = 5, 6
UNKNOWN_TOPIC_LOGGED = "not found in cluster metadata"  # kafka.cluster's log line for UNKNOWN_TOPIC_OR_PARTITION


@contextlib.contextmanager
def logged(logger_name: str):
    """The messages `logger_name` logs meanwhile."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


class KafkaPython(NewTopicAdapter):
    new_topic = NewTopic
    compressions = tuple(c for c in COMPRESSIONS if getattr(codec, f"has_{c}")())  # all but gzip need zstandard, lz4, python-snappy
    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=compression,
                                 enable_idempotence=idempotent, linger_ms=5, max_block_ms=3000)
        try:
            with logged("kafka.cluster") as cluster_log:
                futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0,
                                         timestamp_ms=r.timestamp_ms) for r in batch]
            producer.flush(TIMEOUT_S)
            offsets = [future.get(TIMEOUT_S).offset for future in futures]
        except KafkaTimeoutError as e:
            # kafka-python waits out max_block_ms for a topic the broker calls unknown, logging why
            unknown = any(UNKNOWN_TOPIC_LOGGED in message for message in cluster_log)
            raise ProduceFailed(UNKNOWN_TOPIC_OR_PARTITION if unknown else e.errno, repr(e)) from e
        except KafkaError as e:
            raise ProduceFailed(getattr(e, "errno", -1), repr(e)) from e
        finally:
            producer.close(TIMEOUT_S)
        return [offset if offset >= 0 else None for offset in offsets]

    def _consumer(self, bootstrap) -> KafkaConsumer:
        return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)

    def read(self, bootstrap, topic, count, start=0):
        partition = TopicPartition(topic, 0)

        def poll():
            return [Record(m.key, m.value, tuple(m.headers), m.timestamp, m.offset)
                    for m in consumer.poll(timeout_ms=500).get(partition, ())]

        with contextlib.closing(self._consumer(bootstrap)) as consumer:
            consumer.assign([partition])
            consumer.seek(partition, start)
            return collect(poll, count)

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        partition = TopicPartition(topic, 0)
        with contextlib.closing(self._consumer(bootstrap)) as consumer:
            found = consumer.offsets_for_times({partition: timestamp_ms})[partition]
        return None if found is None else found.offset

    def _admin(self, bootstrap, call):
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            return call(admin)
        finally:
            admin.close()

    def _error_code(self, bootstrap, call) -> int:
        try:
            self._admin(bootstrap, call)
        except KafkaError as e:
            return e.errno
        return 0

    def describe_config(self, bootstrap, name):
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        described = self._admin(bootstrap, lambda admin: admin.describe_configs([resource], config_filter="all"))
        return {key: config["value"] for key, config in described["topic"][name].items()}

    def set_config(self, bootstrap, name, key, value):
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs={key: value})
        self._admin(bootstrap, lambda admin: admin.alter_configs([resource], incremental=True))


class TestKafkaPython(ClientSuite):
    client = KafkaPython()


class Wire:
    """Raw requests on one connection, for what no client does on demand: resending a produce
    batch byte for byte, as a producer retrying after a lost response does."""

    def __init__(self, bootstrap: str):
        host, port = bootstrap.split(":")
        self.socket = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.correlation_id = 0

    def call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation_id += 1
        client_id = b"replog-tests"
        request = struct.pack(">hhih", api_key, version, self.correlation_id, len(client_id)) + client_id + body
        self.socket.sendall(struct.pack(">i", len(request)) + request)
        size, = struct.unpack(">i", self._exactly(4))
        response = self._exactly(size)
        assert struct.unpack_from(">i", response)[0] == self.correlation_id
        return response[4:]  # after the v0 header

    def _exactly(self, size: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < size:  # bounded by the socket timeout
            chunk = self.socket.recv(size - len(chunks))
            assert chunk, "connection closed"
            chunks += chunk
        return bytes(chunks)

    def init_producer_id(self) -> tuple[int, int]:
        throttle, error, producer_id, epoch = struct.unpack(">ihqh", self.call(22, 0, struct.pack(">hi", -1, 60_000)))
        assert error == 0
        return producer_id, epoch

    def produce(self, topic: str, batch: bytes) -> tuple[int, int]:
        """(error code, base offset) of an acks=all Produce v3 of `batch` to partition 0."""
        name = topic.encode()
        body = struct.pack(">hhii", -1, -1, 30_000, 1) + struct.pack(">h", len(name)) + name
        body += struct.pack(">iii", 1, 0, len(batch)) + batch
        response = self.call(0, 3, body)
        name_size, = struct.unpack_from(">h", response, 4)
        _, error, base_offset = struct.unpack_from(">ihq", response, 4 + 2 + name_size + 4)
        return error, base_offset

    def produce_when_led(self, topic: str, batch: bytes) -> tuple[int, int]:
        """produce(), retried while the new topic's partition has no leader yet (as clients retry)."""
        deadline = time.monotonic() + TIMEOUT_S
        while (answer := self.produce(topic, batch))[0] in (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE):
            assert time.monotonic() < deadline, f"{topic} still has no leader"
            time.sleep(0.02)  # the poll interval of a bounded wait
        return answer

    def close(self) -> None:
        self.socket.close()


def producer_batch(sent: list[Record], producer_id: int, epoch: int, base_sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=producer_id,
                                        producer_epoch=epoch, base_sequence=base_sequence, batch_size=1 << 20)
    for i, r in enumerate(sent):
        builder.append(i, timestamp=r.timestamp_ms, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


def test_resent_produce_batch_is_acknowledged_at_its_first_offset_and_not_appended_again(broker, make_topic):
    topic = make_topic()
    sent = records(8)
    wire = Wire(broker.bootstrap)
    try:
        producer_id, epoch = wire.init_producer_id()
        first, second = producer_batch(sent[:5], producer_id, epoch, 0), producer_batch(sent[5:], producer_id, epoch, 5)
        assert [wire.produce_when_led(topic, first), wire.produce(topic, second)] == [(0, 0), (0, 5)]
        # retries of the latest batch and of an earlier one: acknowledged where they went the first time
        assert [wire.produce(topic, second), wire.produce(topic, first)] == [(0, 5), (0, 0)]
        # a batch past a gap in the sequence is refused: OUT_OF_ORDER_SEQUENCE_NUMBER
        assert wire.produce(topic, producer_batch(sent[:1], producer_id, epoch, 20))[0] == 45
    finally:
        wire.close()
    assert_same(sent, KafkaPython().read(broker.bootstrap, topic, len(sent)))
    assert KafkaPython().offset_for_time(broker.bootstrap, topic, sent[-1].timestamp_ms + 1) is None  # nothing after


def test_describe_log_dirs_gives_each_hosted_partition_its_size_on_disk(broker, make_topic):
    """kafka-python's describe_log_dirs (DescribeLogDirs): the broker's data directory, the size of
    each replica's log, and the filter by partition."""
    topic, idle = make_topic(), make_topic()
    KafkaPython().produce(broker.bootstrap, topic, records(20))
    size = sum(segment.stat().st_size for segment in (broker.data_dir / f"{topic}-0").glob("*.log"))
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        everything = admin.describe_log_dirs()
        asked = admin.describe_log_dirs(topic_partitions={topic: [0]})
    finally:
        admin.close()

    def sizes(answer) -> dict[str, list]:
        [(log_dir, topics)] = [(result["log_dir"], result["topics"]) for broker_answer in answer for result in broker_answer["log_dirs"]]
        assert log_dir == str(broker.data_dir.resolve())
        return {entry["name"]: [(p["partition_index"], p["partition_size"], p["offset_lag"]) for p in entry["partitions"]]
                for entry in topics}

    described = sizes(everything)
    assert size > 0 and described[topic] == [(0, size, 0)] and described[idle] == [(0, 0, 0)]
    assert sizes(asked) == {topic: [(0, size, 0)]}


def fetch_session_partitions(broker) -> float:
    """The partitions cached in the broker's fetch sessions, from its metrics endpoint."""
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=TIMEOUT_S) as answer:
        body = answer.read().decode()
    return next(sample.value for family in text_string_to_metric_families(body) for sample in family.samples
                if sample.name == "replog_fetch_session_partitions")


def test_a_consumer_reads_every_partition_through_an_incremental_fetch_session(broker):
    """kafka-python fetches in a session (KIP-227) by default: after its first fetch it names
    only what changed, and each answer carries only the partitions with records; none is lost."""
    topic = create_topic(broker.bootstrap, f"t-{uuid.uuid4().hex[:10]}", partitions=4)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=0)
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100)
    try:
        cached_before = fetch_session_partitions(broker)
        partitions = [TopicPartition(topic, index) for index in range(4)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        read: dict[int, list[bytes]] = {index: [] for index in range(4)}

        def produce_and_read(values: dict[int, list[bytes]]) -> None:
            for index, sent in values.items():
                for value in sent:
                    producer.send(topic, value=value, partition=index)
            producer.flush(TIMEOUT_S)
            expected = {index: read[index] + values.get(index, []) for index in read}
            deadline = time.monotonic() + TIMEOUT_S
            while read != expected:
                assert time.monotonic() < deadline, f"read {read}, not {expected}"
                for partition, messages in consumer.poll(timeout_ms=200).items():
                    read[partition.partition] += [message.value for message in messages]

        produce_and_read({index: [f"{index}-a".encode(), f"{index}-b".encode()] for index in range(4)})
        assert fetch_session_partitions(broker) >= cached_before + 4, "the consumer's session holds its 4 partitions"
        produce_and_read({2: [b"2-c", b"2-d", b"2-e"]})  # incremental fetches: only partition 2 has records
        produce_and_read({0: [b"0-c"], 3: [b"3-c"]})
        assert read == {0: [b"0-a", b"0-b", b"0-c"], 1: [b"1-a", b"1-b"], 2: [b"2-a", b"2-b", b"2-c", b"2-d", b"2-e"],
                        3: [b"3-a", b"3-b", b"3-c"]}
    finally:
        consumer.close()
        producer.close(TIMEOUT_S)
