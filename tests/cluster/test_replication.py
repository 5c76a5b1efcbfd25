"""Replication across broker processes: followers copy the leader, acks=all survives the
leader's death, and every acknowledged record is read back exactly once."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WAIT_S = 60


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)  # a bounded poll of a remote condition, not synchronisation


def partition_meta(admin: AdminClient, topic: str):
    return admin.list_topics(topic, timeout=30).topics[topic].partitions[0]


def produce_numbered(bootstrap: str, topic: str, start: int, count: int) -> list[int]:
    acknowledged: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000, "linger.ms": 2})
    for number in range(start, start + count):
        producer.produce(topic, value=str(number).encode(), partition=0,
                         on_delivery=lambda error, message: acknowledged.append(int(message.value())) if error is None else None)
        producer.poll(0)
    producer.flush(WAIT_S)
    return acknowledged


def read_all(bootstrap: str, topic: str, expected: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[int] = []
    deadline = time.monotonic() + WAIT_S
    while len(values) < expected and time.monotonic() < deadline:
        for message in consumer.consume(1000, 0.5):
            if message.error() is None:
                values.append(int(message.value()))
    consumer.close()
    return values


def test_followers_replicate_and_acks_all_survives_killing_the_leader(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "2"})])["replicated"].result(timeout=60)
    first = produce_numbered(cluster.bootstrap, "replicated", 0, 500)
    assert sorted(first) == list(range(500))
    wait_until(lambda: sorted(partition_meta(admin, "replicated").isrs) == [0, 1, 2], "all three replicas in the ISR")

    old_leader = partition_meta(admin, "replicated").leader
    cluster.brokers[old_leader].kill()
    survivors = ",".join(broker.bootstrap for broker_id, broker in cluster.brokers.items() if broker_id != old_leader)
    survivor_admin = AdminClient({"bootstrap.servers": survivors})
    wait_until(lambda: partition_meta(survivor_admin, "replicated").leader not in (-1, old_leader), "a new leader")

    second = produce_numbered(survivors, "replicated", 500, 500)
    assert sorted(second) == list(range(500, 1000))
    values = read_all(survivors, "replicated", 1000)
    assert sorted(values) == list(range(1000)), "every acknowledged record, exactly once"
