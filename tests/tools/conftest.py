"""The tools run as an operator runs them: `python -m replog ...` processes against one real
broker process per test module; each test gets topics of its own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess
from tests.clients.conftest import topic_name  # noqa: F401  (a fixture)

TOPIC_PARTITIONS = 2
CLIENT_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker") / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def topic(broker, topic_name) -> str:  # noqa: F811
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic_name, TOPIC_PARTITIONS, 1)])[topic_name].result(CLIENT_TIMEOUT_S)
    return topic_name


def replog(*args: str, stdin: bytes = b"", timeout_s: float = 120) -> subprocess.CompletedProcess:
    """Run `replog ARGS` to completion; stdout and stderr are bytes."""
    return subprocess.run([sys.executable, "-m", "replog", *args], input=stdin, capture_output=True, timeout=timeout_s)


def produce_records(bootstrap: str, topic: str, records: list[dict]) -> None:
    """Each dict holds Producer.produce keyword arguments (value, key, partition, timestamp...)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for record in records:
        producer.produce(topic, **record)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0


def read_partition(bootstrap: str, topic: str, partition: int, count: int) -> list:
    """The first `count` records of one partition, read independently of the tools."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "tests", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
    try:
        messages = consumer.consume(count, timeout=CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    assert len(messages) == count and all(message.error() is None for message in messages)
    return messages
