"""Kafka's Java clients against a replog broker process: the client suite with KafkaProducer,
KafkaConsumer and Admin, an idempotent producer with five requests in flight, a group of three
consumers, the Admin calls an operator's tools make, and kafka-producer-perf-test.

The clients run in one JVM per module (java/ClientDriver.java, compiled here with javac against
the jars `bench/peers/kafka/kafka classpath` resolves): the tests send it JSON commands and read
back JSON answers, errors as Kafka's error codes."""

from __future__ import annotations

import base64
import json
import pathlib
import shutil
import subprocess
import sys
import threading
import uuid

import pytest

from tests.support.polling import wait_until

from .conftest import create_topic
from tests.support.group_clients import HEARTBEAT_INTERVAL_MS, SESSION_TIMEOUT_MS
from .records import UNKNOWN_TOPIC_OR_PARTITION, Record, records
from .suite import Adapter, ClientSuite, ProduceFailed

pytestmark = pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed (scripts/install-test-deps.sh)")

ROOT = pathlib.Path(__file__).resolve().parents[2]
KAFKA = ROOT / "bench" / "peers" / "kafka" / "kafka"
DRIVER_SOURCE = pathlib.Path(__file__).resolve().parent / "java" / "ClientDriver.java"
TIMEOUT_S = 30
WAIT_S = 60
# KafkaProducer waits max.block.ms for a topic the broker calls unknown, then says so in a
# TimeoutException; the wait also covers a cold JVM's first connection on a busy machine.
METADATA_WAIT_MS = 8000
NOT_IN_METADATA = "not present in metadata"


class JavaFailed(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(f"error {code}: {message}")
        self.code = code


class JavaDriver:
    """The JVM running ClientDriver: `call(op, **arguments)` answers the command's result or raises
    JavaFailed with Kafka's error code (-1 for a failure that has none)."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self._lock = threading.Lock()

    def call(self, op: str, **arguments):
        with self._lock:
            self.process.stdin.write(json.dumps({"op": op, **arguments}) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        assert line, f"the Java driver exited with {self.process.poll()}"
        answer = json.loads(line)
        if "error" in answer:
            raise JavaFailed(answer["error"], answer["message"])
        return answer["ok"]

    def code(self, op: str, **arguments) -> int:
        """Kafka's error code for the command, 0 when it succeeds."""
        try:
            self.call(op, **arguments)
        except JavaFailed as failed:
            return failed.code
        return 0


@pytest.fixture(scope="module")
def java(tmp_path_factory):
    classes = tmp_path_factory.mktemp("java-driver")
    resolved = subprocess.run([sys.executable, str(KAFKA), "classpath"], check=True, capture_output=True, text=True)
    jars = resolved.stdout.strip()
    subprocess.run(["javac", "-d", str(classes), "-cp", jars, str(DRIVER_SOURCE)], check=True)
    with (classes / "stderr.log").open("w") as log:
        process = subprocess.Popen(["java", "-cp", f"{classes}:{jars}", "ClientDriver"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        yield JavaDriver(process)
    finally:
        process.stdin.close()  # the driver closes its clients and exits at the end of its input
        try:
            process.wait(TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def encoded(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def decoded(data: str | None) -> bytes | None:
    return None if data is None else base64.b64decode(data)


def as_record(answer: dict) -> Record:
    headers = tuple((name, decoded(value)) for name, value in answer["headers"])
    return Record(decoded(answer["key"]), decoded(answer["value"]), headers, answer["timestamp"], answer["offset"])


def produce(java: JavaDriver, bootstrap: str, topic: str, batch: list[Record], partitions: list[int],
            **settings: str) -> list[int]:
    """KafkaProducer sends `batch[i]` to `partitions[i]` and waits for every acknowledgement."""
    sent = [{"key": encoded(r.key), "value": encoded(r.value), "headers": [[name, encoded(value)] for name, value in r.headers],
             "timestamp": r.timestamp_ms, "partition": partition} for r, partition in zip(batch, partitions)]
    return java.call("produce", bootstrap=bootstrap, topic=topic, records=sent,
                     settings={"linger.ms": "5", "max.block.ms": str(METADATA_WAIT_MS), **settings})


def end_offset(java: JavaDriver, bootstrap: str, topic: str, partition: int) -> int:
    return java.call("list_offsets", bootstrap=bootstrap, topic=topic, partition=partition, spec="latest")["offset"]


class Java(Adapter):
    def __init__(self, java: JavaDriver):
        self.java = java

    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False):
        try:
            offsets = produce(self.java, bootstrap, topic, batch, [0] * len(batch), acks=str(acks),
                              **{"compression.type": compression or "none", "enable.idempotence": str(idempotent).lower()})
        except JavaFailed as failed:
            unknown = NOT_IN_METADATA in str(failed)
            raise ProduceFailed(UNKNOWN_TOPIC_OR_PARTITION if unknown else failed.code, str(failed)) from failed
        return [offset if offset >= 0 else None for offset in offsets]

    def read(self, bootstrap, topic, count, start=0):
        got = self.java.call("read", bootstrap=bootstrap, topic=topic, partition=0, start=start, count=count,
                             timeout_ms=TIMEOUT_S * 1000)
        return [as_record(answer) for answer in got]

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        return self.java.call("offset_for_time", bootstrap=bootstrap, topic=topic, partition=0, timestamp=timestamp_ms)

    def create_topic(self, bootstrap, name, *, replication_factor=1, config=None):
        return self.java.code("create_topic", bootstrap=bootstrap, topic=name, partitions=1,
                              replication_factor=replication_factor, config=config or {})

    def delete_topic(self, bootstrap, name):
        return self.java.code("delete_topic", bootstrap=bootstrap, topic=name)

    def describe_config(self, bootstrap, name):
        return self.java.call("describe_config", bootstrap=bootstrap, topic=name)

    def set_config(self, bootstrap, name, key, value):
        self.java.call("set_config", bootstrap=bootstrap, topic=name, key=key, value=value)


class TestJava(ClientSuite):
    @pytest.fixture(autouse=True)
    def _client(self, java):
        self.client = Java(java)


def test_idempotent_producer_with_five_in_flight_appends_each_record_once_in_order(java, broker):
    """Small batches and no linger keep five produce requests in flight per partition: each record
    is acknowledged at its place in its partition, and the log holds each once, in order."""
    partitions, per_partition = 3, 3000
    topic = create_topic(broker.bootstrap, f"t-{uuid.uuid4().hex[:10]}", partitions=partitions)
    sent = records(partitions * per_partition, text=True)
    targets = [i % partitions for i in range(len(sent))]
    offsets = produce(java, broker.bootstrap, topic, sent, targets, acks="all", **{
        "enable.idempotence": "true", "max.in.flight.requests.per.connection": "5", "linger.ms": "0",
        "batch.size": "2048"})
    for partition in range(partitions):
        assert [offsets[i] for i in range(partition, len(sent), partitions)] == list(range(per_partition))
        got = java.call("read", bootstrap=broker.bootstrap, topic=topic, partition=partition, start=0,
                        count=per_partition, timeout_ms=TIMEOUT_S * 1000)
        assert end_offset(java, broker.bootstrap, topic, partition) == per_partition
        assert [(r.offset, r.value) for r in map(as_record, got)] == \
            [(offset, r.value) for offset, r in enumerate(sent[partition::partitions])]


def test_group_of_three_consumers_shares_the_partitions_and_takes_over_when_one_leaves(java, group_broker):
    """Three KafkaConsumers in one group (classic protocol) split six partitions, read every record
    once and commit what they read; Admin lists and describes the group and its offsets. When one
    leaves, the other two take its partitions over and read on from its committed offsets."""
    bootstrap, group, partitions = group_broker.bootstrap, f"g-{uuid.uuid4().hex[:8]}", 6
    topic = create_topic(bootstrap, f"t-{uuid.uuid4().hex[:10]}", partitions=partitions)
    values = [f"a{i}".encode() for i in range(600)]

    left_records: list[dict] = []  # what the consumer that leaves read

    def produce_values(batch: list[bytes]) -> None:
        produce(java, bootstrap, topic, [Record(None, value) for value in batch], [i % partitions for i in range(len(batch))])

    def states(names: list[str]) -> list[dict]:
        return [java.call("consumer_state", name=name) for name in names]

    def shared(names: list[str], count: int) -> bool:
        """Every partition held by exactly one of `names`, each holding some, and `count` records read."""
        current = states(names)
        held = sorted(p for state in current for p in state["assignment"])
        read = sum(len(state["records"]) for state in current) + len(left_records)
        return all(state["assignment"] for state in current) and held == list(range(partitions)) and read == count

    produce_values(values)
    names = [f"consumer-{i}" for i in range(3)]
    for name in names:
        java.call("consumer_start", name=name, bootstrap=bootstrap, group=group, topic=topic, settings={
            "session.timeout.ms": str(SESSION_TIMEOUT_MS), "heartbeat.interval.ms": str(HEARTBEAT_INTERVAL_MS),
            "metadata.max.age.ms": "1000"})
    try:
        wait_until(lambda: shared(names, len(values)), "three consumers sharing the partitions and reading all", WAIT_S)
        assert java.call("list_groups", bootstrap=bootstrap)[group] == "Stable"
        described = java.call("describe_group", bootstrap=bootstrap, group=group)
        assert described["state"] == "Stable"
        assert sorted(described["members"]) == sorted(state["assignment"] for state in states(names))
        assert java.call("group_offsets", bootstrap=bootstrap, group=group) == {str(p): 100 for p in range(partitions)}

        leaving = names.pop()
        left_records = java.call("consumer_stop", name=leaving)["records"]
        more = [f"b{i}".encode() for i in range(600)]
        produce_values(more)
        wait_until(lambda: shared(names, len(values) + len(more)), "two consumers taking over and reading on", WAIT_S)
        read = [decoded(r["value"]) for state in states(names) for r in state["records"]] + \
               [decoded(r["value"]) for r in left_records]
        assert sorted(read) == sorted(values + more), "every record read once"
        assert java.call("group_offsets", bootstrap=bootstrap, group=group) == {str(p): 200 for p in range(partitions)}
        assert len(java.call("describe_group", bootstrap=bootstrap, group=group)["members"]) == 2
    finally:
        for name in names:
            java.call("consumer_stop", name=name)


def test_admin_topics_cluster_and_offsets(java, broker, topic_name):
    bootstrap = broker.bootstrap
    cluster = java.call("describe_cluster", bootstrap=bootstrap)
    assert [(node["host"], node["port"]) for node in cluster["nodes"]] == [("127.0.0.1", broker.port)]
    assert cluster["controller"] == cluster["nodes"][0]["id"] and cluster["cluster_id"]

    assert java.code("create_topic", bootstrap=bootstrap, topic=topic_name, partitions=3, replication_factor=1) == 0
    assert topic_name in java.call("list_topics", bootstrap=bootstrap)
    described = java.call("describe_topic", bootstrap=bootstrap, topic=topic_name)
    broker_id = cluster["nodes"][0]["id"]
    assert described["partitions"] == [{"partition": p, "leader": broker_id, "replicas": [broker_id], "isr": [broker_id]}
                                       for p in range(3)]

    sent = records(5)
    produce(java, bootstrap, topic_name, sent, [1] * len(sent))

    def offset(spec) -> int:
        return java.call("list_offsets", bootstrap=bootstrap, topic=topic_name, partition=1, spec=spec)["offset"]

    assert (offset("earliest"), offset("latest"), offset(sent[2].timestamp_ms), offset(sent[2].timestamp_ms + 1)) == (0, 5, 2, 3)
    assert java.call("list_offsets", bootstrap=bootstrap, topic=topic_name, partition=1, spec="max_timestamp") == \
        {"offset": 4, "timestamp": sent[4].timestamp_ms}
    assert end_offset(java, bootstrap, topic_name, 0) == 0

    assert java.code("delete_topic", bootstrap=bootstrap, topic=topic_name) == 0
    assert java.code("describe_topic", bootstrap=bootstrap, topic=topic_name) == UNKNOWN_TOPIC_OR_PARTITION
    assert topic_name not in java.call("list_topics", bootstrap=bootstrap)


def test_producer_perf_test_finishes_and_its_records_are_in_the_log(java, broker, make_topic):
    topic, count, size = make_topic(), 10_000, 100
    done = subprocess.run([sys.executable, str(KAFKA), "producer-perf-test", "--topic", topic, "--num-records", str(count),
                           "--record-size", str(size), "--throughput", "-1",
                           "--producer-props", f"bootstrap.servers={broker.bootstrap}", "acks=all"],
                          capture_output=True, text=True, timeout=WAIT_S * 2)
    assert done.returncode == 0, done.stderr
    assert f"{count} records sent" in done.stdout, done.stdout
    assert end_offset(java, broker.bootstrap, topic, 0) == count
    got = java.call("read", bootstrap=broker.bootstrap, topic=topic, partition=0, start=0, count=count, timeout_ms=TIMEOUT_S * 1000)
    assert [(r["offset"], len(decoded(r["value"]))) for r in got] == [(offset, size) for offset in range(count)]
