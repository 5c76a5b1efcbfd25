"""librdkafka reads on when its response limit (fetch.max.bytes) is far below its partition limit
(max.partition.fetch.bytes): the broker bounds each answer by the former (KIP-74), which
librdkafka's receive buffer is sized by. An answer of one partition's 20 MB was refused by the
client ("Invalid response size") and the consumer read nothing, ever again."""

from __future__ import annotations

import contextlib
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from .conftest import create_topic

PARTITIONS = 3
MESSAGES_PER_PARTITION = 40
VALUE_BYTES = 100_000
FETCH_MAX_BYTES = 1_000_000
TIMEOUT_S = 60


def test_a_consumer_with_a_small_response_limit_reads_every_partition(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for partition in range(PARTITIONS):
        for index in range(MESSAGES_PER_PARTITION):
            producer.produce(topic_name, value=bytes([index]) * VALUE_BYTES, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0, "deliveries still outstanding"

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "fetch-limits", "enable.auto.commit": False,
                         "fetch.max.bytes": FETCH_MAX_BYTES, "max.partition.fetch.bytes": 20_000_000,
                         "receive.message.max.bytes": FETCH_MAX_BYTES + 512})
    read = {partition: 0 for partition in range(PARTITIONS)}
    with contextlib.closing(consumer):
        consumer.assign([TopicPartition(topic_name, partition, 0) for partition in range(PARTITIONS)])
        deadline = time.monotonic() + TIMEOUT_S
        while sum(read.values()) < PARTITIONS * MESSAGES_PER_PARTITION:
            assert time.monotonic() < deadline, f"the consumer stalled after reading {read}"
            for message in consumer.consume(100, timeout=0.5):
                assert message.error() is None, message.error()
                assert message.offset() == read[message.partition()], "read in order, nothing skipped"
                read[message.partition()] += 1
    assert read == {partition: MESSAGES_PER_PARTITION for partition in range(PARTITIONS)}
