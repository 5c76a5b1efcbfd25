"""Spark tests: one real local SparkSession per test run, a real 3-broker replog cluster over
ZooKeeper (one per module), and confluent-kafka to produce and to read back.

Each test uses topics of its own; a test that stops a broker starts it again before it ends.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from typing import NamedTuple

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need the spark extra: pip install -e '.[spark]'")

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import Cluster
from tests.support.polling import wait_until
from tests.support.servers import unique_root

TIMEOUT_S = 60


@pytest.fixture(scope="session")
def spark():
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import replog.spark_io

    session = (SparkSession.builder.master("local[2]").appName("replog-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.pollingDelay", "10ms")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    replog.spark_io.register(session)
    yield session
    session.stop()


@pytest.fixture(scope="module")
def replog_cluster(zookeeper_server, tmp_path_factory):
    # Retention checked every 100 ms rather than Kafka's 5 minutes, and segments allowed below
    # Kafka's 1 MiB, so that a test can see a topic with a small retention.bytes lose its oldest
    # segments soon; other topics keep everything.
    running = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", tmp_path_factory.mktemp("spark-cluster"), 3,
                      ("--set", "log.retention.check.interval.ms=100", "--set", "internal.segment.bytes.min=1024"))
    running.start()
    yield running
    running.stop()


def new_topic(bootstrap: str, partitions: int = 1, replication_factor: int = 3, prefix: str = "spark",
              config: dict[str, str] | None = None) -> str:
    """A fresh topic whose every partition has a leader; `config`: topic settings besides min.insync.replicas=2."""
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic_config = {"min.insync.replicas": "2", **(config or {})}
    admin.create_topics([NewTopic(name, partitions, replication_factor, config=topic_config)])[name].result(TIMEOUT_S)
    wait_for_leaders(admin, name, partitions)
    return name


def wait_for_leaders(admin: AdminClient, name: str, partitions: int) -> None:
    def led() -> bool:
        topic = admin.list_topics(name, timeout=10).topics.get(name)
        return topic is not None and len(topic.partitions) == partitions and all(p.leader >= 0 for p in topic.partitions.values())

    wait_until(led, f"leaders for the {partitions} partitions of {name}", TIMEOUT_S)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until its answer is in
    admin.delete_topics([name])[name].result(TIMEOUT_S)


def produce(bootstrap: str, topic: str, values: list[bytes], *, keys: list[bytes] | None = None,
            partition: int | None = None, headers: list | None = None, **settings) -> None:
    """Append `values` exactly once with acks=all; fails if any is not acknowledged. Idempotent, as
    Kafka's producers are by default: a test cluster's ISR may shrink below min.insync.replicas
    while a request waits (followers of a new topic slow to fetch on a loaded machine), and the
    NOT_ENOUGH_REPLICAS_AFTER_APPEND that follows makes the producer send appended records again."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 30_000, **settings})
    failures = []
    for index, value in enumerate(values):
        extra = {} if partition is None else {"partition": partition}
        producer.produce(topic, value=value, key=keys[index] if keys else None, headers=headers[index] if headers else None,
                         on_delivery=lambda error, _: error and failures.append(error), **extra)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0, "deliveries still outstanding"
    assert not failures, failures


class Consumed(NamedTuple):
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list | None
    timestamp_ms: int


def _high_watermark(consumer: Consumer, topic: str, partition: int) -> int:
    """Asked again while the client does not know the partition's leader yet: right after a
    broker's restart, librdkafka answered "Local: Unknown partition" once (CI, not reproduced)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
        except KafkaException as error:
            if error.args[0].code() not in (KafkaError._UNKNOWN_PARTITION, KafkaError.LEADER_NOT_AVAILABLE) \
                    or time.monotonic() > deadline:
                raise
        time.sleep(0.2)  # the client's metadata refresh, not ours to wait on otherwise


def consume_all(bootstrap: str, topic: str, **settings: str) -> list[Consumed]:
    """Every committed record of `topic`, read with confluent-kafka (with `settings`) up to each
    partition's high watermark, by partition and offset."""
    with contextlib.closing(Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests", "enable.auto.commit": False,
                                      **settings})) as consumer:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {index: _high_watermark(consumer, topic, index) for index in partitions}
        consumer.assign([TopicPartition(topic, index, 0) for index in partitions])
        records = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(records) < sum(ends.values()):
            assert time.monotonic() < deadline, f"read {len(records)} of {sum(ends.values())} records of {topic}"
            for message in consumer.consume(1000, timeout=0.5):
                if message.error():
                    raise KafkaException(message.error())
                records.append(Consumed(message.partition(), message.offset(), message.key(), message.value(),
                                        message.headers(), message.timestamp()[1]))
    return sorted(records)


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    """(log start offset, high watermark) of one partition, as its leader answers now."""
    with contextlib.closing(Consumer({"bootstrap.servers": bootstrap, "group.id": "spark-tests"})) as consumer:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)


def numbered(start: int, count: int) -> list[bytes]:
    return [f"record-{index:06d}".encode() for index in range(start, start + count)]
