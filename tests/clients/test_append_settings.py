"""Topic settings that change what a leader appends, as confluent-kafka (librdkafka) sees them:
message.timestamp.type=LogAppendTime (the broker's time on every record, and the timestamp type
with it) and compression.type (the codec batches are stored and fetched in, whatever the
producer sent). What Apache Kafka 4.4 answers for the same produces is the reference."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from replog.net.client import BrokerConnection
from replog.storage.batch_format import CODEC_NONE, CODEC_ZSTD
from replog.storage.records import batch_headers
from tests.support.polling import wait_until

from .records import now_ms

TIMEOUT_S = 30
CREATED_MS = 1_000_000  # a CreateTime long past: what LogAppendTime replaces


def produce(bootstrap: str, topic: str, values: list[bytes], compression: str = "none") -> list[tuple[int, int]]:
    """Each value in a batch of its own, with CreateTime CREATED_MS: the (timestamp type,
    timestamp) of each delivery report."""
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": compression, "linger.ms": 0})
    reports = []
    for value in values:
        producer.produce(topic, value=value, partition=0, timestamp=CREATED_MS,
                         on_delivery=lambda error, message: reports.append(error or message.timestamp()))
        assert producer.flush(TIMEOUT_S) == 0
    assert all(isinstance(report, tuple) for report in reports), reports
    return reports


def consume(bootstrap: str, topic: str, count: int) -> list[tuple[bytes, tuple[int, int]]]:
    """The first `count` records' (value, (timestamp type, timestamp))."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "append-settings", "enable.auto.commit": False})
    got = []
    with contextlib.closing(consumer):
        consumer.assign([TopicPartition(topic, 0, 0)])

        def all_read() -> bool:
            for message in consumer.consume(count - len(got), timeout=0.5):
                assert message.error() is None, message.error()
                got.append((message.value(), message.timestamp()))
            return len(got) == count

        wait_until(all_read, f"{count} records of {topic}", TIMEOUT_S)
    return got


def set_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    admin = AdminClient({"bootstrap.servers": bootstrap})  # alive until the result is in: it fails its futures
    [future] = admin.incremental_alter_configs([resource]).values()
    future.result(TIMEOUT_S)


def stored_codecs(port: int, topic: str) -> list[int]:
    """The codec of every batch a consumer's Fetch gets, read from the batches themselves."""

    async def fetch() -> bytes:
        async with await BrokerConnection.open("127.0.0.1", port) as connection:
            return (await connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=0)).records

    return [header.compression_codec for header in batch_headers(asyncio.run(fetch()))]


def test_a_log_append_time_topic_stamps_every_record_with_the_brokers_time(broker, make_topic):
    topic = make_topic({"message.timestamp.type": "LogAppendTime"})
    before = now_ms()
    reports = produce(broker.bootstrap, topic, [b"a", b"b"]) + produce(broker.bootstrap, topic, [b"c"], "zstd")
    after = now_ms()
    assert all(kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after for kind, stamp in reports), reports
    got = consume(broker.bootstrap, topic, 3)
    assert got == [(value, report) for value, report in zip([b"a", b"b", b"c"], reports)]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "append-settings"})
    with contextlib.closing(consumer):
        [found] = consumer.offsets_for_times([TopicPartition(topic, 0, reports[2][1])], timeout=TIMEOUT_S)
    assert found.offset == next(i for i, (_, stamp) in enumerate(reports) if stamp == reports[2][1])


def test_altering_message_timestamp_type_applies_to_the_running_partition(broker, make_topic):
    topic = make_topic()
    assert produce(broker.bootstrap, topic, [b"created"]) == [(TIMESTAMP_CREATE_TIME, CREATED_MS)]
    set_config(broker.bootstrap, topic, "message.timestamp.type", "LogAppendTime")
    appended = []
    wait_until(lambda: (appended.append(produce(broker.bootstrap, topic, [b"appended"])[0])
                        or appended[-1][0] == TIMESTAMP_LOG_APPEND_TIME),
               "a produce stamped with the log append time", TIMEOUT_S)
    got = consume(broker.bootstrap, topic, 1 + len(appended))
    assert got[0] == (b"created", (TIMESTAMP_CREATE_TIME, CREATED_MS))
    assert got[-1] == (b"appended", appended[-1])


@pytest.mark.parametrize("compression_type, produced_with, stored", [
    ("zstd", ["lz4", "none", "zstd"], CODEC_ZSTD),
    ("uncompressed", ["zstd", "gzip"], CODEC_NONE),
])
def test_batches_are_fetched_in_the_topics_compression_type(broker, make_topic, compression_type, produced_with,
                                                            stored):
    topic = make_topic({"compression.type": compression_type})
    values = [f"{codec} ".encode() * 50 for codec in produced_with]
    for value, codec in zip(values, produced_with):
        produce(broker.bootstrap, topic, [value], codec)
    assert stored_codecs(broker.port, topic) == [stored] * len(values)
    assert [value for value, _ in consume(broker.bootstrap, topic, len(values))] == values
