"""`replog perf produce` and `replog perf consume`, like Kafka's producer and consumer perf
tests: drive confluent-kafka as fast as it goes (or at a target rate) and report throughput
and, for produce, per-record latency. MB are MiB, as in Kafka's tools."""

from __future__ import annotations

import array
import random
import string
import time
from dataclasses import dataclass

from replog.tools.consume import OFFSET_BEGINNING
from replog.tools.kafka_client import (LIBRDKAFKA_MESSAGE_MAX_BYTES, RecordTooLarge, ToolError, client_config, delivery_failure,
                                       kafka, new_client, producer_settings, send, topic_partition_count)

BYTES_PER_MB = 1024 * 1024
PERF_GROUP_ID = "replog-perf-consumer"
# The producer serves delivery reports every this many sends: often enough that the report
# queue stays short, rarely enough that poll() costs nothing per record.
POLL_EVERY_RECORDS = 1000
# Kafka's buffer.memory default: produce() blocks once this much is queued, so latency measures
# the broker rather than the wait behind a gigabyte of queued records.
PRODUCER_BUFFER_KBYTES = 32 * 1024
CONSUME_BATCH_RECORDS = 10_000
# One consume() call's wait; the idle timeout is counted across calls.
CONSUME_WAIT_S = 0.1
# librdkafka's poll() counts whole milliseconds and truncates: a shorter wait is poll(0), which
# returns at once, so a throttled run waiting in it would spin instead of sleeping.
POLL_RESOLUTION_S = 0.001


@dataclass(frozen=True)
class ProduceReport:
    records: int
    record_size_bytes: int
    elapsed_s: float
    latencies_ms: list[float]  # sorted; one per delivered record
    failed: int
    first_error: str | None

    def summary(self) -> str:
        rate = self.records / self.elapsed_s
        mb_per_s = rate * self.record_size_bytes / BYTES_PER_MB
        latencies = self.latencies_ms or [0.0]
        average_ms = sum(latencies) / len(latencies)
        percentiles = ", ".join(f"{_percentile(latencies, p):.2f} ms p{p}" for p in (50, 95, 99))
        return (
            f"{self.records} records sent, {rate:.1f} records/sec ({mb_per_s:.2f} MB/sec), "
            f"{average_ms:.2f} ms avg latency, {percentiles}, {latencies[-1]:.2f} ms max latency"
            + (f", {self.failed} failed" if self.failed else "")
        )


@dataclass(frozen=True)
class ConsumeReport:
    records: int
    size_bytes: int
    elapsed_s: float
    expected_records: int

    def summary(self) -> str:
        elapsed_s = max(self.elapsed_s, 1e-9)
        megabytes = self.size_bytes / BYTES_PER_MB
        line = (
            f"{self.records} records consumed, {self.records / elapsed_s:.1f} records/sec "
            f"({megabytes / elapsed_s:.2f} MB/sec), {megabytes:.2f} MB in {self.elapsed_s:.3f} s"
        )
        if self.records < self.expected_records:
            line += f" (idle timeout before the {self.expected_records} asked for)"
        return line


def _percentile(sorted_values: list[float], percent: int) -> float:
    """Nearest-rank percentile, as Kafka's perf test computes it."""
    return sorted_values[min(len(sorted_values) - 1, len(sorted_values) * percent // 100)]


def perf_produce(
    *,
    bootstrap: str,
    topic: str,
    num_records: int,
    record_size_bytes: int,
    acks: str,
    idempotence: bool | None,
    batch_size_bytes: int,
    linger_ms: float,
    compression: str,
    throughput_records_per_s: float,
) -> ProduceReport:
    """Send `num_records` records of `record_size_bytes` random letters, at most
    `throughput_records_per_s` of them a second unless it is <= 0, and wait for every delivery."""
    confluent_kafka = kafka()
    topic_partition_count(bootstrap, topic)
    # librdkafka times each record from produce() to its acknowledgement (Message.latency());
    # one array append per report is all the bookkeeping the tool adds.
    latencies_s = array.array("d")
    failures: list = []

    def on_delivery(error, message) -> None:
        if error is None:
            latencies_s.append(message.latency())
        else:
            failures.append(error)

    producer = new_client(
        confluent_kafka.Producer,
        client_config(bootstrap)
        | producer_settings(acks, idempotence)
        | {
            "batch.size": batch_size_bytes,
            "linger.ms": linger_ms,
            "compression.type": compression,
            "queue.buffering.max.kbytes": PRODUCER_BUFFER_KBYTES,
            "on_delivery": on_delivery,
        }
    )
    # Letters, as Kafka's tool sends: compressible like text, so --compression is meaningful.
    payload = "".join(random.choices(string.ascii_uppercase, k=record_size_bytes)).encode()
    throttled = throughput_records_per_s > 0
    started = time.perf_counter()
    for sent in range(num_records):
        if throttled:
            _wait_for_schedule(producer, sent, throughput_records_per_s, started)
        try:
            send(producer, topic, payload)
        except RecordTooLarge as error:
            raise ToolError(f"{error} ({LIBRDKAFKA_MESSAGE_MAX_BYTES}): give a smaller --record-size") from None
        if sent % POLL_EVERY_RECORDS == 0:
            producer.poll(0)
    pending = producer.flush(60)
    elapsed_s = time.perf_counter() - started
    if pending:
        raise ToolError(f"{pending} of {num_records} records still undelivered to {topic!r} after 60 s")
    return ProduceReport(
        records=num_records,
        record_size_bytes=record_size_bytes,
        elapsed_s=elapsed_s,
        latencies_ms=sorted(latency_s * 1000 for latency_s in latencies_s),
        failed=len(failures),
        first_error=delivery_failure(failures[0]) if failures else None,
    )


def _wait_for_schedule(producer, sent: int, records_per_s: float, started: float) -> None:
    """Hold the next send until its slot in an even schedule, sleeping in poll(), which serves
    deliveries meanwhile. A run that fell behind sends at once until it caught up, as Kafka's
    ThroughputThrottler does."""
    while (ahead_s := sent / records_per_s - (time.perf_counter() - started)) > 0:
        producer.poll(max(ahead_s, POLL_RESOLUTION_S))


def perf_consume(*, bootstrap: str, topic: str, num_records: int, idle_timeout_ms: int, fetch_size_bytes: int) -> ConsumeReport:
    """Read every partition of `topic` from the beginning until `num_records` records arrived
    or none arrived for `idle_timeout_ms`; time runs from assignment to the last record."""
    confluent_kafka = kafka()
    count = topic_partition_count(bootstrap, topic)
    consumer = new_client(
        confluent_kafka.Consumer,
        client_config(bootstrap)
        | {"group.id": PERF_GROUP_ID, "enable.auto.commit": False, "max.partition.fetch.bytes": fetch_size_bytes},
    )
    records = size_bytes = 0
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, number, OFFSET_BEGINNING) for number in range(count)])
        started = last_record_at = time.perf_counter()
        while records < num_records and time.perf_counter() - last_record_at < idle_timeout_ms / 1000:
            batch = consumer.consume(min(CONSUME_BATCH_RECORDS, num_records - records), timeout=CONSUME_WAIT_S)
            if not batch:
                continue
            last_record_at = time.perf_counter()
            for message in batch:
                if message.error() is not None:
                    raise ToolError(f"topic {topic!r} partition {message.partition()}: {message.error().str()}")
                size_bytes += len(message.value() or b"") + len(message.key() or b"")
            records += len(batch)
    finally:
        consumer.close()
    return ConsumeReport(records, size_bytes, last_record_at - started, num_records)
