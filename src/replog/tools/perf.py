"""`replog perf produce`, `replog perf consume` and `replog perf end-to-end`, like Kafka's
producer and consumer perf tests and its EndToEndLatency tool: drive confluent-kafka as fast
as it goes (or at a target rate), print a progress line per reporting interval, and report
throughput and, for produce and end-to-end, per-record latency. MB are MiB, as in Kafka's
tools; lines follow kafka-producer-perf-test's format."""

from __future__ import annotations

import array
import random
import string
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from replog.tools.consume import OFFSET_BEGINNING
from replog.tools.kafka_client import (CONNECT_TIMEOUT_S, LIBRDKAFKA_MESSAGE_MAX_BYTES, BadArguments, RecordTooLarge, ToolError,
                                       client_config, delivery_failure, kafka, new_client, producer_settings, send,
                                       topic_partition_count)

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
# How long to wait for the last deliveries: flush() in steps, so progress lines keep coming.
FLUSH_TIMEOUT_S = 60
FLUSH_STEP_S = 0.1
# Kafka's perf test reports these, nearest rank.
PERCENTILES = ((0.5, "50th"), (0.95, "95th"), (0.99, "99th"), (0.999, "99.9th"))
# An end-to-end record's value opens with its send time, perf_counter() seconds: producer and
# consumer share the process, hence the clock.
SEND_TIME = struct.Struct(">d")
# How long end-to-end waits, after its last send, for records still to be consumed.
END_TO_END_DRAIN_S = 30
# What a group's coordinator answers while it is being found or is loading the group's partition
# of __consumer_offsets, as for the first group of a fresh Kafka cluster: Kafka's own clients
# retry these, librdkafka's committed() raises them.
COORDINATOR_NOT_READY = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
COORDINATOR_RETRY_S = 0.1


@dataclass(frozen=True)
class LatencyReport:
    """A run's rate and per-record latency: from produce() to the acknowledgement (perf
    produce) or to the consumer (perf end-to-end)."""

    records: int
    record_size_bytes: int
    elapsed_s: float
    latencies_ms: list[float]  # sorted; one per delivered record
    failed: int
    first_error: str | None
    done: str = "sent"  # what the records went through: "sent", "sent and consumed"

    def summary(self) -> str:
        latencies = self.latencies_ms or [0.0]
        average_ms = sum(latencies) / len(latencies)
        percentiles = ", ".join(f"{_percentile(latencies, fraction):.2f} ms {name}" for fraction, name in PERCENTILES)
        return (
            f"{_rates(self.records, self.done, self.elapsed_s, self.records * self.record_size_bytes)}, "
            f"{average_ms:.2f} ms avg latency, {latencies[-1]:.2f} ms max latency, {percentiles}"
            + (f", {self.failed} failed" if self.failed else "") + "."
        )


@dataclass(frozen=True)
class ConsumeReport:
    records: int
    size_bytes: int
    elapsed_s: float
    expected_records: int

    def summary(self) -> str:
        line = _consumed(self.records, self.size_bytes, self.elapsed_s)
        if self.records < self.expected_records:
            line += f" (idle timeout before the {self.expected_records} asked for)"
        return line


@dataclass(frozen=True)
class ProduceRun:
    """What perf produce and perf end-to-end send, where and how, and how often they print
    progress: the options the two share."""

    bootstrap: str
    security: Mapping[str, object]  # --command-config, in librdkafka's names
    topic: str
    num_records: int
    record_size_bytes: int
    acks: str
    idempotence: bool | None
    compression: str
    throughput_records_per_s: float
    reporting_interval_ms: int


def _rates(records: int, done: str, elapsed_s: float, size_bytes: int) -> str:
    elapsed_s = max(elapsed_s, 1e-9)
    return f"{records} records {done}, {records / elapsed_s:.1f} records/sec ({size_bytes / BYTES_PER_MB / elapsed_s:.2f} MB/sec)"


def _consumed(records: int, size_bytes: int, elapsed_s: float) -> str:
    return f"{_rates(records, 'consumed', elapsed_s, size_bytes)}, {size_bytes / BYTES_PER_MB:.2f} MB in {elapsed_s:.3f} s"


def _percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile, as Kafka's perf test computes it."""
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * fraction))]


class ReportingWindow:
    """Kafka's perf tools print a line per reporting interval about what happened in it; this
    says when the current window is over. Time is perf_counter() seconds, given by the caller."""

    def __init__(self, interval_s: float, now: float):
        self.interval_s = interval_s
        self.started = now

    def ended(self, now: float) -> float | None:
        """The window's length if it is over at `now` (the next one starts then), else None."""
        length_s = now - self.started
        if length_s < self.interval_s:
            return None
        self.started = now
        return length_s


class LatencyProgress:
    """Progress lines of a run that appends one latency per record to `latencies_s`: each
    covers the records whose latencies arrived in its window, as kafka-producer-perf-test's do."""

    def __init__(self, latencies_s: array.array, done: str, run: ProduceRun, emit: Callable[[str], None], now: float):
        self.latencies_s = latencies_s
        self.done = done
        self.record_size_bytes = run.record_size_bytes
        self.window = ReportingWindow(run.reporting_interval_ms / 1000, now)
        self.emit = emit
        self.first = 0  # the window's first latency in `latencies_s`

    def check(self, now: float) -> None:
        if (length_s := self.window.ended(now)) is None:
            return
        latencies_s = self.latencies_s[self.first:]
        self.first += len(latencies_s)
        count = len(latencies_s)
        average_ms = sum(latencies_s) / count * 1000 if count else 0.0
        self.emit(f"{_rates(count, self.done, length_s, count * self.record_size_bytes)}, {average_ms:.1f} ms avg latency, "
                  f"{max(latencies_s, default=0.0) * 1000:.1f} ms max latency.")


def _letters(size_bytes: int) -> bytes:
    """Random letters, as Kafka's tool sends: compressible like text, so --compression is meaningful."""
    return "".join(random.choices(string.ascii_uppercase, k=size_bytes)).encode()


def _producer(run: ProduceRun, on_delivery, settings: dict):
    return new_client(
        kafka().Producer,
        client_config(run.bootstrap, run.security)
        | producer_settings(run.acks, run.idempotence)
        | {"compression.type": run.compression, "queue.buffering.max.kbytes": PRODUCER_BUFFER_KBYTES, "on_delivery": on_delivery}
        | settings,
    )


def _consumer(bootstrap: str, security: Mapping[str, object], settings: dict):
    return new_client(kafka().Consumer, client_config(bootstrap, security) | {"group.id": PERF_GROUP_ID, "enable.auto.commit": False} | settings)


def _send(producer, topic: str, value: bytes) -> None:
    try:
        send(producer, topic, value)
    except RecordTooLarge as error:
        raise ToolError(f"{error} ({LIBRDKAFKA_MESSAGE_MAX_BYTES}): give a smaller --record-size") from None


def _wait_for_schedule(wait: Callable[[float], object], sent: int, records_per_s: float, started: float,
                       progress: LatencyProgress) -> None:
    """Hold the next send until its slot in an even schedule, sleeping in `wait(timeout_s)` (a
    poll() that serves the clients meanwhile). A run that fell behind sends at once until it
    caught up, as Kafka's ThroughputThrottler does."""
    while (ahead_s := sent / records_per_s - (time.perf_counter() - started)) > 0:
        wait(max(ahead_s, POLL_RESOLUTION_S))
        progress.check(time.perf_counter())


def _flush(producer, progress: LatencyProgress) -> int:
    """producer.flush(FLUSH_TIMEOUT_S), printing progress meanwhile; how many records are left."""
    deadline = time.perf_counter() + FLUSH_TIMEOUT_S
    while (pending := producer.flush(FLUSH_STEP_S)) and time.perf_counter() < deadline:
        progress.check(time.perf_counter())
    return pending


def perf_produce(run: ProduceRun, *, batch_size_bytes: int, linger_ms: float, progress: Callable[[str], None]) -> LatencyReport:
    """Send `run.num_records` records of `run.record_size_bytes` random letters, at most
    `run.throughput_records_per_s` of them a second unless it is <= 0, and wait for every
    delivery; `progress` gets a line every `run.reporting_interval_ms`."""
    topic_partition_count(run.bootstrap, run.security, run.topic)
    # librdkafka times each record from produce() to its acknowledgement (Message.latency());
    # one array append per report is all the bookkeeping the tool adds.
    latencies_s = array.array("d")
    failures: list = []

    def on_delivery(error, message) -> None:
        if error is None:
            latencies_s.append(message.latency())
        else:
            failures.append(error)

    producer = _producer(run, on_delivery, {"batch.size": batch_size_bytes, "linger.ms": linger_ms})
    payload = _letters(run.record_size_bytes)
    throttled = run.throughput_records_per_s > 0
    started = time.perf_counter()
    window = LatencyProgress(latencies_s, "sent", run, progress, started)
    for sent in range(run.num_records):
        if throttled:
            _wait_for_schedule(producer.poll, sent, run.throughput_records_per_s, started, window)
        _send(producer, run.topic, payload)
        if sent % POLL_EVERY_RECORDS == 0:
            producer.poll(0)
            window.check(time.perf_counter())
    pending = _flush(producer, window)
    elapsed_s = time.perf_counter() - started
    if pending:
        raise ToolError(f"{pending} of {run.num_records} records still undelivered to {run.topic!r} after {FLUSH_TIMEOUT_S} s")
    return LatencyReport(
        records=run.num_records,
        record_size_bytes=run.record_size_bytes,
        elapsed_s=elapsed_s,
        latencies_ms=sorted(latency_s * 1000 for latency_s in latencies_s),
        failed=len(failures),
        first_error=delivery_failure(failures[0]) if failures else None,
    )


def perf_consume(*, bootstrap: str, security: Mapping[str, object], topic: str, num_records: int, idle_timeout_ms: int, fetch_size_bytes: int,
                 reporting_interval_ms: int, progress: Callable[[str], None]) -> ConsumeReport:
    """Read every partition of `topic` from the beginning until `num_records` records arrived
    or none arrived for `idle_timeout_ms`; time runs from assignment to the last record.
    `progress` gets a line every `reporting_interval_ms` about the records read in it."""
    confluent_kafka = kafka()
    count = topic_partition_count(bootstrap, security, topic)
    consumer = _consumer(bootstrap, security, {"max.partition.fetch.bytes": fetch_size_bytes})
    records = size_bytes = 0
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, number, OFFSET_BEGINNING) for number in range(count)])
        started = last_record_at = time.perf_counter()
        window = ReportingWindow(reporting_interval_ms / 1000, started)
        window_records = window_bytes = 0  # the totals when the current window started
        while records < num_records and time.perf_counter() - last_record_at < idle_timeout_ms / 1000:
            batch = consumer.consume(min(CONSUME_BATCH_RECORDS, num_records - records), timeout=CONSUME_WAIT_S)
            if batch:
                last_record_at = time.perf_counter()
            for message in batch:
                _check_record(topic, message)
                size_bytes += len(message.value() or b"") + len(message.key() or b"")
            records += len(batch)
            if (length_s := window.ended(time.perf_counter())) is not None:
                progress(_consumed(records - window_records, size_bytes - window_bytes, length_s))
                window_records, window_bytes = records, size_bytes
    finally:
        consumer.close()
    return ConsumeReport(records, size_bytes, last_record_at - started, num_records)


def perf_end_to_end(run: ProduceRun, *, progress: Callable[[str], None]) -> LatencyReport:
    """Send `run.num_records` records at `run.throughput_records_per_s` while a consumer of
    every partition of `run.topic`, from its end, reads them; each record's latency runs from
    just before produce() to the consumer's poll() returning it. Like Kafka's EndToEndLatency,
    the producer does not linger; unlike it, records do not wait for each other. One untimed
    record per partition goes first (_warm_up). The topic should have no other producer: every
    record read counts as one of the run's."""
    if run.record_size_bytes < SEND_TIME.size:
        raise BadArguments(f"records carry their send time in their first {SEND_TIME.size} bytes: "
                           f"--record-size must be at least {SEND_TIME.size}, not {run.record_size_bytes}")
    confluent_kafka = kafka()
    topic = run.topic
    count = topic_partition_count(run.bootstrap, run.security, topic)
    failures: list = []

    def on_delivery(error, _message) -> None:
        if error is not None:
            failures.append(error)

    producer = _producer(run, on_delivery, {"linger.ms": 0})
    consumer = _consumer(run.bootstrap, run.security, {})
    latencies_s = array.array("d")

    def receive(timeout_s: float) -> None:
        """Wait up to `timeout_s` for one record, and time it; serve the producer's reports."""
        message = consumer.poll(timeout_s)
        producer.poll(0)
        if message is None:
            return
        _check_record(topic, message)
        latencies_s.append(time.perf_counter() - SEND_TIME.unpack_from(message.value())[0])

    filler = _letters(run.record_size_bytes - SEND_TIME.size)
    try:
        partitions = [confluent_kafka.TopicPartition(topic, number, _end_offset(consumer, topic, number)) for number in range(count)]
        consumer.assign(partitions)
        _warm_up(producer, consumer, partitions, SEND_TIME.pack(0.0) + filler)
        started = time.perf_counter()
        window = LatencyProgress(latencies_s, "sent and consumed", run, progress, started)
        for sent in range(run.num_records):
            _wait_for_schedule(receive, sent, run.throughput_records_per_s, started, window)
            _send(producer, topic, SEND_TIME.pack(time.perf_counter()) + filler)
            # A run behind its schedule never waits: reading here too keeps the consumer up with it.
            receive(0)
            window.check(time.perf_counter())
        drain_deadline = time.perf_counter() + END_TO_END_DRAIN_S
        while len(latencies_s) + len(failures) < run.num_records:
            if time.perf_counter() > drain_deadline:
                raise ToolError(f"{run.num_records - len(latencies_s)} of {run.num_records} records sent to {topic!r} "
                                f"were not consumed within {END_TO_END_DRAIN_S} s of the last send")
            receive(CONSUME_WAIT_S)
            window.check(time.perf_counter())
        elapsed_s = time.perf_counter() - started
    finally:
        consumer.close()
    producer.flush(FLUSH_TIMEOUT_S)
    return LatencyReport(
        records=len(latencies_s),
        record_size_bytes=run.record_size_bytes,
        elapsed_s=elapsed_s,
        latencies_ms=sorted(latency_s * 1000 for latency_s in latencies_s),
        failed=len(failures),
        first_error=delivery_failure(failures[0]) if failures else None,
        done="sent and consumed",
    )


def _warm_up(producer, consumer, partitions: list, value: bytes) -> None:
    """Send one record to each partition and read them all back, untimed, so that the run
    measures records flowing rather than set-up: the producer's id and its connections, the
    consumer's first fetches, and the group coordinator, which librdkafka looks up for any
    consumer with a group.id (the first lookup in a cluster creates __consumer_offsets)."""
    deadline = time.perf_counter() + END_TO_END_DRAIN_S
    _await_coordinator(consumer, partitions, deadline)
    for partition in partitions:
        send(producer, partition.topic, value, partition=partition.partition)
    read = 0
    while read < len(partitions):  # bounded by the deadline
        if time.perf_counter() > deadline:
            raise ToolError(f"{len(partitions) - read} of the {len(partitions)} warm-up records sent to "
                            f"{partitions[0].topic!r} were not consumed within {END_TO_END_DRAIN_S} s")
        message = consumer.poll(CONSUME_WAIT_S)
        producer.poll(0)
        if message is not None:
            _check_record(partitions[0].topic, message)
            read += 1


def _await_coordinator(consumer, partitions: list, deadline: float) -> None:
    """consumer.committed(partitions), again while the group's coordinator is not ready, until
    `deadline` (perf_counter() seconds)."""
    while True:  # bounded by the deadline
        try:
            consumer.committed(partitions, timeout=CONNECT_TIMEOUT_S)
            return
        except kafka().KafkaException as error:
            if error.args[0].name() not in COORDINATOR_NOT_READY or time.perf_counter() > deadline:
                raise
        time.sleep(COORDINATOR_RETRY_S)


def _check_record(topic: str, message) -> None:
    if message.error() is not None:
        raise ToolError(f"topic {topic!r} partition {message.partition()}: {message.error().str()}")


def _end_offset(consumer, topic: str, partition: int) -> int:
    """The partition's high watermark: the run's records land at or after it, so the consumer
    starts there (an OFFSET_END assignment resolves later, perhaps after the first sends)."""
    try:
        return consumer.get_watermark_offsets(kafka().TopicPartition(topic, partition), timeout=CONNECT_TIMEOUT_S)[1]
    except kafka().KafkaException as error:
        raise ToolError(f"topic {topic!r} partition {partition}: no end offset: {error.args[0].str()}") from None
