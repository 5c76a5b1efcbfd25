"""`replog perf produce` / `consume` / `end-to-end` on small runs: the report's fields are
there, the counts are right and progress lines parse. Rates and latencies are printed, never
asserted."""

from __future__ import annotations

import re
import resource
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from replog.tools.perf import SEND_TIME, _warm_up
from tests.support.polling import wait_until
from tests.tools.conftest import CLIENT_TIMEOUT_S, TOPIC_PARTITIONS, replog

NUM_RECORDS = 20_000
NUMBER = r"[\d.]+"
RATES = rf"(?P<records>\d+) records (?P<done>sent|consumed|sent and consumed), {NUMBER} records/sec \({NUMBER} MB/sec\)"
LATENCY_REPORT = re.compile(
    rf"^{RATES}, {NUMBER} ms avg latency, (?P<max>{NUMBER}) ms max latency, (?P<p50>{NUMBER}) ms 50th, "
    rf"(?P<p95>{NUMBER}) ms 95th, (?P<p99>{NUMBER}) ms 99th, (?P<p999>{NUMBER}) ms 99\.9th\.$"
)
LATENCY_PROGRESS = re.compile(rf"^{RATES}, {NUMBER} ms avg latency, {NUMBER} ms max latency\.$")
CONSUME_REPORT = re.compile(rf"^{RATES}, (?P<megabytes>{NUMBER}) MB in {NUMBER} s")


def report_lines(done: subprocess.CompletedProcess) -> tuple[list[str], str]:
    """The progress lines and the final report of a run that succeeded."""
    assert done.returncode == 0, done.stderr
    *progress, final = done.stdout.decode().strip().splitlines()
    return progress, final


def assert_latency_report(final: str, records: int, done: str) -> None:
    report = LATENCY_REPORT.match(final)
    assert report, final
    assert (int(report["records"]), report["done"]) == (records, done)
    percentiles = [float(report[name]) for name in ("p50", "p95", "p99", "p999", "max")]
    assert percentiles == sorted(percentiles), final


def assert_progress(lines: list[str], pattern: re.Pattern, done: str, records_max: int) -> None:
    """At least one progress line, each of the form asked; together they count no more than the run."""
    assert lines, "no progress line"
    windows = [pattern.match(line) for line in lines]
    assert all(windows), lines
    assert {window["done"] for window in windows} == {done}
    assert sum(int(window["records"]) for window in windows) <= records_max


@pytest.mark.parametrize("acks", ["1", "all"])
def test_produce_then_consume_reports_every_record(broker, topic, acks):
    produced = replog(
        "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--num-records", str(NUM_RECORDS), "--record-size", "100", "--acks", acks, "--compression", "lz4",
    )
    assert_latency_report(report_lines(produced)[1], NUM_RECORDS, "sent")

    consumed = replog("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", str(NUM_RECORDS))
    report = CONSUME_REPORT.match(report_lines(consumed)[1])
    assert report, consumed.stdout
    assert int(report["records"]) == NUM_RECORDS
    assert float(report["megabytes"]) == pytest.approx(NUM_RECORDS * 100 / 2**20, abs=0.01)


def test_a_throttled_run_sends_every_record_and_reports_progress(broker, topic):
    done = replog(
        "perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
        "--num-records", "2000", "--record-size", "10", "--throughput", "2000", "--reporting-interval-ms", "200",
    )
    progress, final = report_lines(done)
    # The schedule alone makes the run last a second, so 200 ms windows close during it.
    assert_progress(progress, LATENCY_PROGRESS, "sent", 2000)
    assert_latency_report(final, 2000, "sent")


def test_a_throttled_run_sleeps_between_sends(broker, topic):
    """The wait for the next send's slot sleeps; it used to spin in poll(), whose timeouts under
    a millisecond librdkafka truncates to 0: this run took 1.75 s of CPU in 3.5 s then, 0.5 s
    (mostly start-up) once it slept. A behaviour test, not a speed test: a busy-wait burns CPU
    however fast the machine is, a sleep does not."""
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = replog("perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "6000", "--record-size", "100", "--throughput", "2000")
    elapsed_s = time.perf_counter() - started
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    assert cpu_s < 0.3 * elapsed_s, f"{cpu_s:.2f} s of CPU in {elapsed_s:.2f} s"


def test_consume_stops_at_the_idle_timeout_and_says_so(broker, topic):
    done = replog("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--num-records", "10",
                  "--timeout-ms", "500", "--reporting-interval-ms", "100")
    progress, final = report_lines(done)
    # Each wait for records lasts 100 ms (CONSUME_WAIT_S): windows of 100 ms close in a 500 ms idle timeout.
    assert_progress(progress, CONSUME_REPORT, "consumed", 0)
    assert final.startswith("0 records consumed")
    assert "idle timeout before the 10 asked for" in final


def test_end_to_end_reports_every_record_and_its_latency(broker, topic):
    done = replog("perf", "end-to-end", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "2000", "--record-size", "100", "--throughput", "2000", "--reporting-interval-ms", "200")
    progress, final = report_lines(done)
    assert_progress(progress, LATENCY_PROGRESS, "sent and consumed", 2000)
    assert_latency_report(final, 2000, "sent and consumed")
    # Before the clock started, one record went to each partition and was read back: it is in
    # the log, first, and not in the counts above.
    first_send_times = [SEND_TIME.unpack_from(first_record(broker, topic, partition))[0] for partition in range(TOPIC_PARTITIONS)]
    assert first_send_times == [0.0] * TOPIC_PARTITIONS


class LoadingCoordinatorConsumer:
    """A consumer that reads back at once what `EchoProducer` sends, whose group coordinator
    answers `refusals` first, as a fresh Kafka cluster's does to its first group while
    __consumer_offsets is loading."""

    def __init__(self, refusals: list[int]):
        self.refusals = list(refusals)
        self.committed_calls = 0
        self.in_flight: list[int] = []  # partitions of records sent and not yet read

    def committed(self, partitions, timeout):
        self.committed_calls += 1
        if self.refusals:
            raise KafkaException(KafkaError(self.refusals.pop(0)))
        return partitions

    def poll(self, timeout):
        return EchoedRecord() if self.in_flight and self.in_flight.pop(0) is not None else None


class EchoProducer:
    def __init__(self, consumer: LoadingCoordinatorConsumer):
        self.consumer = consumer

    def produce(self, topic, value, partition):
        self.consumer.in_flight.append(partition)

    def poll(self, timeout):
        return 0


class EchoedRecord:
    def error(self):
        return None


def test_end_to_end_warm_up_waits_for_a_loading_group_coordinator():
    consumer = LoadingCoordinatorConsumer([KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR,
                                           KafkaError.COORDINATOR_LOAD_IN_PROGRESS])
    _warm_up(EchoProducer(consumer), consumer, [TopicPartition("t", 0), TopicPartition("t", 1)], b"x")
    assert consumer.committed_calls == 4
    assert consumer.in_flight == []  # both warm-up records were sent and read back


def test_end_to_end_warm_up_fails_on_other_coordinator_errors():
    consumer = LoadingCoordinatorConsumer([KafkaError.GROUP_AUTHORIZATION_FAILED])
    with pytest.raises(KafkaException):
        _warm_up(EchoProducer(consumer), consumer, [TopicPartition("t", 0)], b"x")
    assert consumer.committed_calls == 1


def first_record(broker, topic: str, partition: int) -> bytes:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "first-record", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0)])
        message = wait_until(lambda: consumer.poll(0.1), f"the first record of {topic}-{partition}", CLIENT_TIMEOUT_S)
        assert message.error() is None, message.error()
        return message.value()
    finally:
        consumer.close()


def first_batch_producer_id(broker, topic: str) -> int:
    """The producer id in the header of the first record batch the topic's logs hold (-1: none)."""
    for partition in range(TOPIC_PARTITIONS):  # the sticky partitioner may have left one empty
        segment = (broker.data_dir / f"{topic}-{partition}" / f"{0:020d}.log").read_bytes()
        if segment:
            return int.from_bytes(segment[BATCH_PRODUCER_ID_AT:BATCH_PRODUCER_ID_AT + 8], "big", signed=True)
    raise AssertionError(f"no record batch in any partition of {topic}")


# baseOffset 8, batchLength 4, partitionLeaderEpoch 4, magic 1, crc 4, attributes 2,
# lastOffsetDelta 4, baseTimestamp 8, maxTimestamp 8: then producerId.
BATCH_PRODUCER_ID_AT = 43


@pytest.mark.parametrize("choice, idempotent", [((), True), (("--idempotence",), True), (("--no-idempotence",), False)])
def test_acks_all_is_idempotent_unless_asked_not_to_be(broker, topic, choice, idempotent):
    done = replog("perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "200", "--record-size", "10", "--acks", "all", *choice)
    assert done.returncode == 0, done.stderr
    assert (first_batch_producer_id(broker, topic) >= 0) == idempotent


def test_idempotence_with_acks_1_is_a_usage_error(broker, topic):
    done = replog("perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "10", "--acks", "1", "--idempotence")
    assert done.returncode == 2
    assert b"idempotence needs --acks all" in done.stderr


def test_records_over_the_producers_limit_are_one_line_naming_the_option(broker, topic):
    """One line naming the option, not a Python traceback (KafkaException: MSG_SIZE_TOO_LARGE)
    after a report."""
    done = replog("perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "2", "--record-size", "2000000")
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        "replog: a record of 2000000 bytes is over the producer's limit, librdkafka's message.max.bytes (1000000): "
        "give a smaller --record-size"
    ]


def test_a_setting_librdkafka_refuses_is_one_line_with_status_2(broker, topic):
    done = replog("perf", "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--num-records", "2", "--fetch-size", "2000000000")
    assert done.returncode == 2
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and "perf consume: librdkafka refused a setting" in lines[0], done.stderr
