"""Compacted topics with real clients against a real broker process: a topic made with
cleanup.policy=compact keeps the latest record of every key at its offset, which confluent-kafka
and kafka-python read across the gaps; __consumer_offsets stays small however often a group
commits, and the committed offsets survive a restart that reloads them from the cleaned log."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaPythonPartition

from tests.support.broker_process import BrokerProcess
from tests.support.compaction import (
    CLEANER_SETTINGS,
    COMPACT_TOPIC_CONFIG,
    SEGMENT_BYTES,
    WAIT_S,
    last_per_key,
    log_bytes,
    overwrite,
    read_from_start,
)
from tests.support.polling import wait_until

from .conftest import create_topic

KEYS = 50
ROUNDS = 20


@pytest.fixture
def cleaning_broker(tmp_path):
    process = BrokerProcess(tmp_path / "data", extra_args=(*CLEANER_SETTINGS, "--set", "offsets.topic.num.partitions=1"))
    process.start()
    yield process
    process.stop()


def test_a_compacted_topic_keeps_the_latest_record_of_every_key_for_every_client(cleaning_broker):
    bootstrap = cleaning_broker.bootstrap
    topic = create_topic(bootstrap, f"t-{uuid.uuid4().hex[:10]}", COMPACT_TOPIC_CONFIG)
    latest = {}
    produced = overwrite(bootstrap, topic, KEYS, range(ROUNDS), latest)
    tombstone = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    tombstone.produce(topic, key=b"k0", value=None, partition=0,
                      on_delivery=lambda error, message: latest.update({message.key(): (message.offset(), None)}))
    assert tombstone.flush(WAIT_S) == 0
    refusals = []
    keyless = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    keyless.produce(topic, value=b"no key", partition=0, on_delivery=lambda error, message: refusals.append(error))
    assert keyless.flush(WAIT_S) == 0
    assert [error.code() for error in refusals] == [KafkaError.INVALID_RECORD], "the cleaner would lose a keyless record"

    wait_until(lambda: len(read_from_start(bootstrap, topic)) < produced / 3, "the cleaner to compact the topic",
               WAIT_S)
    read = read_from_start(bootstrap, topic)
    offsets = [offset for offset, _, _ in read]
    assert offsets == sorted(set(offsets)), "offsets still increase, with gaps where records went"
    last_read = last_per_key(read)
    assert last_read == latest, "every key's latest record is there, at the offset it was written at"
    assert last_read[b"k0"][1] is None, "a tombstone stays for delete.retention.ms"

    kafka_python = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, consumer_timeout_ms=10_000,
                                 api_version=(2, 5))
    try:
        partition = KafkaPythonPartition(topic, 0)
        kafka_python.assign([partition])
        kafka_python.seek_to_beginning(partition)
        seen = []
        for message in kafka_python:  # ends after 10 s without records
            seen.append((message.offset, message.key, message.value))
            if message.offset >= offsets[-1]:
                break
    finally:
        kafka_python.close()
    assert seen == read


def test_the_offsets_topic_stays_small_and_keeps_a_groups_offsets_across_a_restart(cleaning_broker):
    bootstrap = cleaning_broker.bootstrap
    topic = create_topic(bootstrap, f"t-{uuid.uuid4().hex[:10]}")
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    commits = 2_000
    try:
        for offset in range(1, commits + 1):
            consumer.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
    finally:
        consumer.close()
    offsets_log = cleaning_broker.data_dir / "__consumer_offsets-0"
    # Each commit is a record of about 100 bytes (the segment bases count them): uncleaned, they
    # would fill a dozen segments.
    assert max(int(path.stem) for path in offsets_log.glob("*.log")) > commits * 0.9
    wait_until(lambda: log_bytes(offsets_log) < 3 * SEGMENT_BYTES, "the cleaner to compact __consumer_offsets", WAIT_S)

    cleaning_broker.stop()
    cleaning_broker.restart()
    resumed = Consumer({"bootstrap.servers": cleaning_broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        assert resumed.committed([TopicPartition(topic, 0)], timeout=30)[0].offset == commits
    finally:
        resumed.close()
