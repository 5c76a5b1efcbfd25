"""Replication across broker processes: followers copy the leader, acks=all survives the
leader's death, and every acknowledged record is read back exactly once."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import SESSION_TIMEOUT_MS
from tests.support.harness import client_config
from tests.support.polling import wait_until

WAIT_S = 60


def partition_meta(admin: AdminClient, topic: str):
    return admin.list_topics(topic, timeout=30).topics[topic].partitions[0]


def produce_numbered(bootstrap: str, topic: str, start: int, count: int, partition: int = 0) -> list[int]:
    acknowledged: list[int] = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000, "linger.ms": 2})
    for number in range(start, start + count):
        producer.produce(topic, value=str(number).encode(), partition=partition,
                         on_delivery=lambda error, message: acknowledged.append(int(message.value())) if error is None else None)
        producer.poll(0)
    producer.flush(WAIT_S)
    return acknowledged


def read_all(bootstrap: str, topic: str, expected: int, partition: int = 0) -> list[int]:
    consumer = Consumer({**client_config(bootstrap), "group.id": "check", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, partition, 0)])
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
    wait_until(lambda: sorted(partition_meta(admin, "replicated").isrs) == [0, 1, 2], "all three replicas in the ISR", WAIT_S)

    old_leader = partition_meta(admin, "replicated").leader
    cluster.brokers[old_leader].kill()
    survivors = ",".join(broker.bootstrap for broker_id, broker in cluster.brokers.items() if broker_id != old_leader)
    survivor_admin = AdminClient({"bootstrap.servers": survivors})
    wait_until(lambda: partition_meta(survivor_admin, "replicated").leader not in (-1, old_leader), "a new leader", WAIT_S)

    second = produce_numbered(survivors, "replicated", 500, 500)
    assert sorted(second) == list(range(500, 1000))
    values = read_all(survivors, "replicated", 1000)
    assert sorted(values) == list(range(1000)), "every acknowledged record, exactly once"


def test_controlled_shutdown_hands_leadership_to_an_in_sync_replica(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("handover", 1, 3, config={"min.insync.replicas": "2"})])["handover"].result(timeout=60)
    assert sorted(produce_numbered(cluster.bootstrap, "handover", 0, 200)) == list(range(200))
    wait_until(lambda: sorted(partition_meta(admin, "handover").isrs) == [0, 1, 2], "all three replicas in the ISR", WAIT_S)
    old_leader = partition_meta(admin, "handover").leader
    assert cluster.brokers[old_leader].stop() == 0
    survivors = ",".join(broker.bootstrap for broker_id, broker in cluster.brokers.items() if broker_id != old_leader)
    survivor_admin = AdminClient({"bootstrap.servers": survivors})
    # Well within the session timeout: the leader released the partition, it did not just vanish.
    wait_until(lambda: partition_meta(survivor_admin, "handover").leader not in (-1, old_leader),
               "leadership handed over (not left to the session's expiry)", SESSION_TIMEOUT_MS / 1000)
    assert old_leader not in partition_meta(survivor_admin, "handover").isrs
    assert sorted(produce_numbered(survivors, "handover", 200, 100)) == list(range(200, 300))
    assert sorted(read_all(survivors, "handover", 300)) == list(range(300))


def test_a_restarted_follower_catches_up_and_rejoins_the_isr(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("rejoin", 1, 3, config={"min.insync.replicas": "2"})])["rejoin"].result(timeout=60)
    replicas = partition_meta(admin, "rejoin").replicas
    follower = replicas[2]
    assert sorted(produce_numbered(cluster.bootstrap, "rejoin", 0, 200)) == list(range(200))
    cluster.brokers[follower].stop()
    wait_until(lambda: follower not in partition_meta(admin, "rejoin").isrs, "the stopped follower to leave the ISR", WAIT_S)
    assert sorted(produce_numbered(cluster.bootstrap, "rejoin", 200, 300)) == list(range(200, 500))
    cluster.brokers[follower].restart()
    wait_until(lambda: follower in partition_meta(admin, "rejoin").isrs, "the restarted follower to rejoin the ISR", WAIT_S)
    # It holds everything: stop the other two, and it alone (now leader) serves all 500.
    for other in replicas[:2]:
        cluster.brokers[other].stop()
    only = cluster.brokers[follower].bootstrap
    wait_until(lambda: partition_meta(AdminClient({"bootstrap.servers": only}), "rejoin").leader == follower, "the follower to lead", WAIT_S)
    assert sorted(read_all(only, "rejoin", 500)) == list(range(500))
