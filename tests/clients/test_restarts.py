"""A broker stopped (SIGTERM) or killed (SIGKILL) and restarted on the same port and data keeps
what it acknowledged, read back with real clients. Each test runs a broker process of its own."""

from __future__ import annotations

import functools
import pathlib
import random
import re
import signal
import struct
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from .conftest import create_topic
from .records import Record, assert_same, now_ms, records
from .test_confluent import Confluent
from .test_kafka_python import KafkaPython

TIMEOUT_S = 30
# Several segments per partition, so that recovery has more than the active segment to check.
SMALL_SEGMENTS = {"segment.bytes": "131072"}
SMALL_BATCHES = {"batch.size": 32768}  # below segment.bytes: a larger batch would be refused
# Log levels are upper case; "error=6" in a refusal's WARNING line is a client told to retry.
TROUBLE = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b|(?i:corrupt)")


def trouble_in(output: list[str]) -> list[str]:
    return [line for line in output if TROUBLE.search(line)]


def log_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "replog-tests"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=TIMEOUT_S)[1]
    finally:
        consumer.close()


def test_sigterm_and_restart_keeps_every_acks_all_record(own_broker, topic_name):
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, topic_name, SMALL_SEGMENTS)
    plain, zstd = records(300, seed=1), records(200, seed=2)
    assert Confluent().produce(bootstrap, topic_name, plain, acks="all", idempotent=True, **SMALL_BATCHES) == list(range(300))
    assert KafkaPython().produce(bootstrap, topic_name, zstd, acks="all", compression="zstd") == list(range(300, 500))

    assert own_broker.stop() == 0
    own_broker.restart()

    assert_same(plain + zstd, Confluent().read(bootstrap, topic_name, 500))
    # the log goes on where it stopped, and the old producer state does not refuse a new producer
    more = records(20, seed=3)
    assert Confluent().produce(bootstrap, topic_name, more, acks="all", idempotent=True, **SMALL_BATCHES) == list(range(500, 520))
    assert_same(plain + zstd + more, KafkaPython().read(bootstrap, topic_name, 520))
    assert trouble_in(own_broker.output) == []


class StreamingProducer:
    """An idempotent acks=all producer sending `batch` in order from a thread, one record after
    another, until stopped; `acknowledged` counts the deliveries confirmed so far, which are a
    prefix of `batch` because an idempotent producer keeps order."""

    def __init__(self, bootstrap: str, topic: str, batch):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 1, "message.timeout.ms": 60_000, **SMALL_BATCHES})
        self.topic, self.batch = topic, batch
        self.acknowledged = 0
        self.errors: list = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, index, error, message):
        if error is not None:
            self.errors.append((index, error))
        elif index == self.acknowledged:
            self.acknowledged += 1
        else:
            self.errors.append((index, "acknowledged out of order"))

    def _run(self):
        for i, r in enumerate(self.batch):
            if self.stopping.is_set():
                break
            self.producer.produce(self.topic, value=r.value, key=r.key, partition=0, headers=list(r.headers),
                                  timestamp=r.timestamp_ms, on_delivery=functools.partial(self._delivered, i))
            self.producer.poll(0.001)  # the pace of the stream, and where delivery reports are served

    def wait_for(self, count: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while self.acknowledged < count:
            assert time.monotonic() < deadline, f"only {self.acknowledged} of {count} records acknowledged"
            assert self.thread.is_alive() and not self.errors, f"producer failed: {self.errors[:3]}"
            time.sleep(0.02)  # the poll interval of a bounded wait

    def stop(self) -> int:
        """Stop sending, drop what is unacknowledged (so nothing reaches a restarted broker), and
        return how many records were acknowledged."""
        self.stopping.set()
        self.thread.join(TIMEOUT_S)
        self.producer.purge()
        self.producer.flush(TIMEOUT_S)
        return self.acknowledged


def test_sigkill_mid_stream_and_restart_keeps_every_flushed_record_uncorrupted(own_broker, topic_name):
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, topic_name, {"flush.messages": "1", **SMALL_SEGMENTS})  # acknowledged == flushed
    sent = records(20_000, seed=4)
    stream = StreamingProducer(bootstrap, topic_name, sent)
    stream.thread.start()
    stream.wait_for(400)
    own_broker.kill()  # while records are still being sent
    acknowledged = stream.stop()
    output_before = len(own_broker.output)
    own_broker.restart()

    # every acknowledged record, byte for byte, at its offset; past them at most records that were
    # written but not yet acknowledged when the broker died, still in order and uncorrupted
    end = log_end(bootstrap, topic_name)
    assert end >= acknowledged
    assert_same(sent[:end], KafkaPython().read(bootstrap, topic_name, end))
    assert trouble_in(own_broker.output[output_before:]) == []


# After a crash the broker rescans the active segment; it once misread every batch that
# straddled the scan's 1 MiB read window. It takes what the small-batch tests above avoid: client
# batches near librdkafka's default batch.size (1,000,000 bytes) and megabytes of them in one
# segment (default segment.bytes is 1 GiB).
FULL_SIZE_BYTES = 21 << 20  # across the topic's partitions
VALUE_BYTES = 1000
LARGE_BATCH_BYTES = 512 << 10
BATCH_PREFIX = struct.Struct(">qi")  # a batch's base offset and its length after these 12 bytes


def incompressible_records(count: int, seed: int) -> list[Record]:
    """`count` records of random `VALUE_BYTES` values under unique keys, timestamps an hour back."""
    rng = random.Random(seed)
    base_ms = now_ms() - 3_600_000
    return [Record(b"key-%08d" % i, rng.randbytes(VALUE_BYTES), (), base_ms + i) for i in range(count)]


def batch_sizes(segment_file: pathlib.Path) -> list[int]:
    """The size in bytes of each record batch in a segment file, read from the batch prefixes."""
    data = segment_file.read_bytes()
    sizes, position = [], 0
    while position + BATCH_PREFIX.size <= len(data):  # bounded: each pass advances by a whole batch
        _, length = BATCH_PREFIX.unpack_from(data, position)
        sizes.append(BATCH_PREFIX.size + length)
        position += BATCH_PREFIX.size + length
    assert position == len(data), f"{segment_file} does not end on a batch boundary"
    return sizes


def assert_mostly_large_batches(segment_file: pathlib.Path) -> None:
    """Most of the bytes sit in batches of `LARGE_BATCH_BYTES` or more: librdkafka's default
    batching, not small batches, is what the broker wrote."""
    sizes = batch_sizes(segment_file)
    large = sum(size for size in sizes if size >= LARGE_BATCH_BYTES)
    assert large * 2 >= sum(sizes), f"{segment_file.name}: mostly small batches {sorted(sizes)}"


@pytest.mark.parametrize("stop, partitions", [("SIGKILL", 1), ("SIGTERM", 1), ("SIGKILL", 3)])
def test_restart_serves_every_acknowledged_record_of_full_size_batches(own_broker, topic_name, stop, partitions):
    """21 MiB of acks=all records in librdkafka's default batches, then a SIGKILL (or, for
    comparison, a clean SIGTERM) and a restart: every acknowledged record is served, record by
    record, and recovery cuts nothing."""
    bootstrap = own_broker.bootstrap
    create_topic(bootstrap, topic_name, partitions=partitions)  # default settings: one segment each
    count = FULL_SIZE_BYTES // VALUE_BYTES // partitions
    sent = [incompressible_records(count, seed=10 + p) for p in range(partitions)]
    for p in range(partitions):  # librdkafka's default batch.size and linger.ms
        assert Confluent().produce(bootstrap, topic_name, sent[p], acks="all", partition=p) == list(range(count))
        [segment_file] = (own_broker.data_dir / f"{topic_name}-{p}").glob("*.log")
        assert_mostly_large_batches(segment_file)

    if stop == "SIGKILL":
        assert own_broker.kill() == -signal.SIGKILL
    else:
        assert own_broker.stop() == 0
    output_before = len(own_broker.output)
    own_broker.restart()

    cuts = [line for line in own_broker.output[output_before:] if "truncated invalid log tail" in line]
    for p in range(partitions):
        end = log_end(bootstrap, topic_name, p)
        assert end == count, f"partition {p}: the restarted broker serves {end} of {count} acknowledged records; {cuts}"
        assert_same(sent[p], Confluent().read(bootstrap, topic_name, count, partition=p))
    assert cuts == []
    assert trouble_in(own_broker.output) == []
