"""A broker whose data directory fills up: a confluent-kafka producer (1 KiB records, acks=all)
is refused with KAFKA_STORAGE_ERROR once free space falls below log.dir.min.free.bytes, the
broker says so in one WARNING line (not one per request, no traceback, no connection closed)
and in its metrics, takes produce again by itself once space returns, and every record it
acknowledged is read back.

The data directory is a 64 MiB tmpfs the test mounts (it runs as root here). Where mounting is
impossible, or with REPLOG_DISK_TEST_SIMULATED=1, the broker runs on a simulated one instead
(small_disk/sitecustomize.py: statvfs and every write of replog's storage see 64 MiB), and the
test says so in its output.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.errors import KafkaStorageError, NotLeaderForPartitionError
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until

from .conftest import create_topic

DISK_BYTES = 64 << 20
MIN_FREE_BYTES = 16 << 20
# Free space above the threshold that the filler file leaves: what the producer fills before it
# is refused, a few thousand records.
HEADROOM_BYTES = 6 << 20
RECORD_BYTES = 1024
RECORDS_MAX = DISK_BYTES // RECORD_BYTES  # more than the disk holds: the loop ends by a refusal
RETRIED_RECORDS = 100
WAIT_S = 60
SCRAPE_TIMEOUT_S = 5
SMALL_DISK_PATH = pathlib.Path(__file__).parent / "small_disk"


class SmallDisk:
    """A file system of DISK_BYTES at `path`: a tmpfs, or the simulation."""

    def __init__(self, path: pathlib.Path, simulated: bool):
        self.path = path
        self.simulated = simulated

    def free_bytes(self) -> int:
        if self.simulated:
            used = sum(file.lstat().st_size for file in self.path.rglob("*") if file.is_file())
            return DISK_BYTES - used
        stats = os.statvfs(self.path)
        return stats.f_bavail * stats.f_frsize


def _mounted(path: pathlib.Path) -> bool:
    if os.environ.get("REPLOG_DISK_TEST_SIMULATED") == "1" or os.geteuid() != 0:
        return False
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(path)],
                           capture_output=True, text=True)
    return mount.returncode == 0


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    path = tmp_path / "disk"
    path.mkdir()
    mounted = _mounted(path)
    if not mounted:
        print("no tmpfs could be mounted: the broker runs on a simulated 64 MiB file system (small_disk/)")
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(SMALL_DISK_PATH), os.environ.get("PYTHONPATH")])))
        monkeypatch.setenv("REPLOG_TEST_DISK_DIR", str(path.resolve()))
        monkeypatch.setenv("REPLOG_TEST_DISK_BYTES", str(DISK_BYTES))
    try:
        yield SmallDisk(path, simulated=not mounted)
    finally:
        if mounted:
            subprocess.run(["umount", str(path)], check=True)


def scrape(broker: BrokerProcess) -> dict[tuple[str, tuple], float]:
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=SCRAPE_TIMEOUT_S) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def disk_state(broker: BrokerProcess) -> str:
    states = [dict(labels)["state"] for (name, labels), value in scrape(broker).items()
              if name == "replog_log_dir_space_state" and value == 1]
    return states[0]


def free_bytes_seen(broker: BrokerProcess) -> float:
    return scrape(broker)[("replog_log_dir_free_bytes", ())]


def storage_errors_answered(broker: BrokerProcess) -> float:
    key = ("replog_request_errors_total", (("api", "produce"), ("error", "kafka_storage_error")))
    return scrape(broker).get(key, 0.0)


def value(number: int) -> bytes:
    return f"{number:08d}".encode().ljust(RECORD_BYTES, b".")


def produce_until_refused(bootstrap: str, topic: str) -> tuple[set[bytes], list[int]]:
    """1 KiB records, acks=all and no retries, until a delivery fails: (values acknowledged,
    error codes of the deliveries that failed)."""
    acknowledged: set[bytes] = set()
    errors: list[int] = []

    def delivered(error, message) -> None:
        if error is None:
            acknowledged.add(message.value())
        else:
            errors.append(error.code())

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "enable.idempotence": False,
                         "linger.ms": 5})
    for number in range(RECORDS_MAX):  # bounded: the disk holds fewer
        if errors:
            break
        while True:  # bounded by the delivery of what the local queue holds
            try:
                producer.produce(topic, value=value(number), partition=0, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    return acknowledged, errors


def read_back(bootstrap: str, topic: str, end_offset: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "disk-full-check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        def at_end() -> bool:
            for message in consumer.consume(1000, 1.0):
                assert message.error() is None, message.error()
                values.append(message.value())
            return len(values) >= end_offset

        wait_until(at_end, "every record to be read back", WAIT_S)
    finally:
        consumer.close()
    return values


def started_on(small_disk: SmallDisk, min_free_bytes: int) -> BrokerProcess:
    broker = BrokerProcess(small_disk.path / "data", extra_args=("--set", f"log.dir.min.free.bytes={min_free_bytes}"))
    broker.start()
    return broker


def fill(small_disk: SmallDisk, leaving_bytes: int) -> pathlib.Path:
    """A file that leaves `leaving_bytes` free; deleting it is space returning."""
    filler = small_disk.path / "filler"
    filler.write_bytes(b"\0" * (small_disk.free_bytes() - leaving_bytes))
    return filler


def assert_no_failure_noise(lines: list[str]) -> None:
    """What the probe saw for every refused request: a traceback, 'internal error', the
    connection closed (and librdkafka reconnecting)."""
    noise = [line for line in lines if "Traceback" in line or "internal error" in line or "closing connection" in line]
    assert not noise, noise[:5]


def test_a_full_disk_refuses_produce_with_a_storage_error_and_takes_it_again_once_space_returns(small_disk):
    broker = started_on(small_disk, MIN_FREE_BYTES)
    try:
        topic = create_topic(broker.bootstrap, "filling")
        filler = fill(small_disk, MIN_FREE_BYTES + HEADROOM_BYTES)
        wait_until(lambda: free_bytes_seen(broker) <= MIN_FREE_BYTES + HEADROOM_BYTES, "the broker to see the filler")
        assert disk_state(broker) == "ok"

        acknowledged, errors = produce_until_refused(broker.bootstrap, topic)
        assert errors and set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors[:5]
        assert len(acknowledged) >= HEADROOM_BYTES // (2 * RECORD_BYTES), "produce went on until the threshold"
        metrics = scrape(broker)
        assert metrics[("replog_log_dir_space_state", (("state", "produce_refused"),))] == 1
        assert metrics[("replog_log_dir_free_bytes", ())] < MIN_FREE_BYTES

        # A producer that retries is refused again and again while the disk is full, and its
        # records go in by themselves once space returns.
        refused_before = storage_errors_answered(broker)
        retried: set[bytes] = set()
        retrying = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "message.timeout.ms": WAIT_S * 1000,
                             "retry.backoff.ms": 100, "retry.backoff.max.ms": 500})
        for number in range(RECORDS_MAX, RECORDS_MAX + RETRIED_RECORDS):
            retrying.produce(topic, value=value(number), partition=0,
                             on_delivery=lambda error, message: error is None and retried.add(message.value()))

        def refused_again() -> bool:
            retrying.poll(0.1)
            return storage_errors_answered(broker) >= refused_before + 3

        wait_until(refused_again, "the retrying producer to be refused again")
        assert not retried

        filler.unlink()
        assert retrying.flush(WAIT_S) == 0
        assert len(retried) == RETRIED_RECORDS, "every retried record went in once space returned"
        assert disk_state(broker) == "ok"

        end_offset = len(acknowledged) + len(retried)
        read = read_back(broker.bootstrap, topic, end_offset)
        assert (acknowledged | retried) <= set(read), "every acknowledged record is read back"
    finally:
        broker.stop()
    lines = broker.output
    warnings = [line for line in lines if " WARNING " in line]
    assert len([line for line in warnings if "log.dir.min.free.bytes" in line]) == 1, warnings
    assert len([line for line in lines if "produce resumed" in line]) == 1
    assert not [line for line in warnings if "log directory write failed" in line], "refused before any write failed"
    assert_no_failure_noise(lines)


@pytest.mark.parametrize("api_version, refusal", [((0, 11), NotLeaderForPartitionError), ((2, 5), KafkaStorageError)])
def test_a_produce_v3_client_is_told_not_leader_or_follower_as_kafka_tells_it(tmp_path, api_version, refusal):
    """Kafka answers KAFKA_STORAGE_ERROR from Produce v4 on, which says clients must be ready for
    it; v3 (kafka-python's for a 0.11 broker) gets NOT_LEADER_OR_FOLLOWER, which it retries."""
    broker = BrokerProcess(tmp_path / "data", extra_args=("--set", f"log.dir.min.free.bytes={2**62}"))
    broker.start()
    try:
        topic = create_topic(broker.bootstrap, "refused")
        producer = KafkaProducer(bootstrap_servers=broker.bootstrap, api_version=api_version, acks="all", retries=0)
        try:
            with pytest.raises(refusal):
                producer.send(topic, b"refused", partition=0).get(timeout=WAIT_S)
        finally:
            producer.close()
    finally:
        broker.stop()
    assert_no_failure_noise(broker.output)


def test_with_no_threshold_a_write_the_full_disk_fails_is_a_storage_error_in_one_line(small_disk):
    """The probe's case: log.dir.min.free.bytes=0, so the disk fills for real. The write cut
    short is taken back and answered KAFKA_STORAGE_ERROR, in one line for all the requests
    refused; once space returns the partition takes writes again, and nothing acknowledged is
    lost."""
    broker = started_on(small_disk, 0)
    try:
        topic = create_topic(broker.bootstrap, "filling")
        filler = fill(small_disk, HEADROOM_BYTES)
        acknowledged, errors = produce_until_refused(broker.bootstrap, topic)
        assert errors and set(errors) == {KafkaError.KAFKA_STORAGE_ERROR}, errors[:5]
        assert storage_errors_answered(broker) >= 1

        filler.unlink()
        after: set[bytes] = set()
        producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
        for number in range(RECORDS_MAX, RECORDS_MAX + RETRIED_RECORDS):
            producer.produce(topic, value=value(number), partition=0,
                             on_delivery=lambda error, message: error is None and after.add(message.value()))
        assert producer.flush(WAIT_S) == 0
        assert len(after) == RETRIED_RECORDS, "the partition takes writes once space returns"

        read = read_back(broker.bootstrap, topic, len(acknowledged) + len(after))
        assert (acknowledged | after) <= set(read), "every acknowledged record is read back"
        assert len(read) == len(set(read)), "nothing refused was appended"
    finally:
        broker.stop()
    failures = [line.split(": ", 1)[1] for line in broker.output if "log directory write failed" in line]
    assert failures and all(" WARNING " in line for line in broker.output if "log directory write failed" in line)
    produce_failures = {line.split(" repeated=")[0] for line in failures if "writing=produce" in line}
    assert len(produce_failures) == 1 and len(failures) <= 3, failures
    assert_no_failure_noise(broker.output)
