"""Helpers for tests of compacted topics with real clients: settings that let the cleaner reach
what a test writes, writing keys over and over, and reading a partition whole."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.polling import wait_until

SEGMENT_BYTES = 16 << 10
# Cleaning reaches only what is flushed (the recovery point) and closed (not the active segment):
# small segments and a frequent background flush let it reach the records a test writes.
CLEANER_SETTINGS = (
    "--set", "log.cleaner.backoff.ms=100",
    "--set", "log.flush.offset.checkpoint.interval.ms=100",
    "--set", f"offsets.topic.segment.bytes={SEGMENT_BYTES}",
    "--set", f"internal.segment.bytes.min={SEGMENT_BYTES}",  # below Kafka's 1 MiB floor
)
COMPACT_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": str(SEGMENT_BYTES),
                        "min.cleanable.dirty.ratio": "0.01"}
WAIT_S = 60

Latest = dict[bytes, tuple[int, bytes | None]]  # by key: the offset and value of its last record


def overwrite(bootstrap: str, topic: str, keys: int, rounds: range, latest: Latest) -> int:
    """Write every key once per round (acks=all, idempotent), noting each key's last record in
    `latest`; returns how many records were written."""
    # Batches must fit the small segments.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "batch.size": SEGMENT_BYTES // 2})

    def delivered(error, message):
        assert error is None, error
        latest[message.key()] = max(latest.get(message.key(), (-1, None)), (message.offset(), message.value()))

    for round_ in rounds:
        for key in range(keys):
            producer.produce(topic, key=b"k%d" % key, value=b"%d:%d:" % (key, round_) + b"x" * 100,
                             partition=0, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    return keys * len(rounds)


def read_from_start(bootstrap: str, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    """Every record of partition 0 up to its high watermark, with confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False})
    try:
        end = wait_until(lambda: _high_watermark(consumer, topic), "the partition's high watermark", WAIT_S)[0]
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = []
        while not read or read[-1][0] < end - 1:  # bounded: each turn reads a record or fails
            message = consumer.poll(10)
            assert message is not None, f"no record within 10 s after offset {read[-1][0] if read else None}"
            if message.error() is None:
                read.append((message.offset(), message.key(), message.value()))
        return read
    finally:
        consumer.close()


def _high_watermark(consumer: Consumer, topic: str) -> tuple[int] | None:
    """(HW,) of partition 0 (a tuple: 0 is an answer too), or None while it has no leader or
    one that does not know its HW yet (OFFSET_NOT_AVAILABLE after an election, KIP-207)."""
    try:
        return (consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1],)
    except KafkaException:
        return None


def last_per_key(read: list[tuple[int, bytes, bytes | None]]) -> Latest:
    return {key: (offset, value) for offset, key, value in read}


def log_bytes(directory: Path) -> int:
    """A segment the cleaner deletes between the listing and its size counts for nothing."""
    total = 0
    for segment in directory.glob("*.log"):  # bounded by the partition's segments
        with contextlib.suppress(FileNotFoundError):
            total += segment.stat().st_size
    return total
