"""Partition reassignment (docs/design.md §10), run by each partition's leader, on four broker processes
over ZooKeeper and etcd, asked through kafka-python's admin client (AlterPartitionReassignments,
ListPartitionReassignments), with an acks=all idempotent producer of numbered records running
throughout and a read-back at the end: nothing acknowledged is lost."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from kafka import KafkaAdminClient, TopicPartition

from replog import admin
from replog.coord_backends import open_store
from tests.support.harness import WAIT_S
from tests.cluster.conftest import SHARED_SERVERS
from tests.support.cluster import Cluster
from tests.support.failover import (
    FAILOVER_WAIT_S,
    PARTITIONS,
    TimedProducer,
    create_topic,
    missing_after_read_back,
    quiet_admin,
    restart_stopped,
)
from tests.support.servers import unique_root
from tests.support.polling import wait_until

BROKERS = 4
ON_FIRST_THREE = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]


@pytest.fixture(scope="module", params=["zk", "etcd"])
def four_brokers(request, tmp_path_factory):
    server = request.getfixturevalue(SHARED_SERVERS[request.param])
    cluster = Cluster(f"{request.param}://{server.address}{unique_root()}",
                      tmp_path_factory.mktemp(f"reassign-{request.param}"), BROKERS)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster(four_brokers):
    restart_stopped(four_brokers)
    yield four_brokers


def kafka_admin(cluster) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","), request_timeout_ms=30_000)


def reassign(cluster, targets: dict[tuple[str, int], list[int] | None]) -> None:
    admin = kafka_admin(cluster)
    try:
        refused = admin.alter_partition_reassignments(
            {TopicPartition(topic, partition): target for (topic, partition), target in targets.items()})
    finally:
        admin.close()
    assert all(error is None for error in refused.values()), refused


def in_flight(cluster) -> dict[tuple[str, int], dict]:
    admin = kafka_admin(cluster)
    try:
        return {(tp.topic, tp.partition): status for tp, status in admin.list_partition_reassignments().items()}
    finally:
        admin.close()


def replicas_and_isr(cluster, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    described = quiet_admin(cluster.bootstrap).list_topics(topic, timeout=30).topics[topic].partitions
    return {index: (list(meta.replicas), sorted(meta.isrs)) for index, meta in described.items() if meta.leader >= 0}


def settled_on(cluster, topic: str, targets: dict[int, list[int]]) -> bool:
    now = replicas_and_isr(cluster, topic)
    return not in_flight(cluster) and all(now.get(index) == (target, sorted(target)) for index, target in targets.items())


def log_dirs(cluster, broker: int, topic: str) -> list[str]:
    data_dir = cluster.brokers[broker].data_dir
    return sorted(entry.name for entry in data_dir.iterdir() if entry.name.startswith(f"{topic}-")) if data_dir.exists() else []


def test_moved_partitions_end_on_their_targets_with_nothing_lost_and_the_old_replicas_deleted(cluster):
    """Each move takes broker 0 off its partition, which some of them it leads: those leaders
    move themselves off and resign to the new replicas."""
    topic = "moved"
    create_topic(cluster.bootstrap, topic, PARTITIONS, ON_FIRST_THREE)
    targets = {0: [3, 1, 2], 1: [1, 2, 3], 2: [2, 3, 1]}
    with TimedProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        reassign(cluster, {(topic, index): target for index, target in targets.items()})
        wait_until(lambda: settled_on(cluster, topic, targets), "every partition on its target replicas, all in sync",
                   FAILOVER_WAIT_S)
        settled_at = time.monotonic()
        wait_until(lambda: producer.first_acknowledged_after(settled_at), "acknowledgements on the new replicas",
                   FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert missing_after_read_back(cluster.bootstrap, topic, acknowledged) == {0: [], 1: [], 2: []}
    wait_until(lambda: not log_dirs(cluster, 0, topic), "broker 0's replicas of the moved partitions deleted", WAIT_S)
    assert log_dirs(cluster, 3, topic) == [f"{topic}-{index}" for index in range(PARTITIONS)]


@contextlib.contextmanager
def producing_with_broker_3_down(cluster, topic: str):
    """`topic` on brokers 0-2, broker 3 stopped (a move to it cannot finish), and a
    TimedProducer that has had an acknowledgement on every partition."""
    create_topic(cluster.bootstrap, topic, PARTITIONS, ON_FIRST_THREE)
    cluster.brokers[3].stop()
    with TimedProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        yield producer


def test_a_cancelled_reassignment_goes_back_to_the_old_replicas_and_deletes_the_added_one(cluster):
    """Broker 3 is down, so the move to it cannot finish; cancelled, the partition is on its old
    replicas again, and broker 3 deletes what it was sent once it is back."""
    topic = "cancelled"
    with producing_with_broker_3_down(cluster, topic) as producer:
        reassign(cluster, {(topic, 0): [0, 1, 3]})
        wait_until(lambda: in_flight(cluster).get((topic, 0), {}).get("adding_replicas") == [3]
                   and 3 in replicas_and_isr(cluster, topic)[0][0], "broker 3 added to the replicas of partition 0", WAIT_S)
        reassign(cluster, {(topic, 0): None})
        wait_until(lambda: settled_on(cluster, topic, {0: [0, 1, 2]}), "partition 0 back on brokers 0, 1, 2", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert missing_after_read_back(cluster.bootstrap, topic, acknowledged) == {0: [], 1: [], 2: []}
    cluster.brokers[3].restart()
    wait_until(lambda: not log_dirs(cluster, 3, topic), "broker 3 without a replica of the cancelled move", WAIT_S)


def test_a_move_survives_its_leaders_death(cluster):
    """The move waits for broker 3, which is down, when the leader is killed; the next leader
    finds the move in the store and finishes it once broker 3 is back."""
    topic = "orphaned"
    with producing_with_broker_3_down(cluster, topic) as producer:
        reassign(cluster, {(topic, 1): [1, 2, 3]})
        wait_until(lambda: 3 in replicas_and_isr(cluster, topic)[1][0], "broker 3 added to the replicas of partition 1", WAIT_S)
        leader = quiet_admin(cluster.bootstrap).list_topics(topic, timeout=30).topics[topic].partitions[1].leader
        cluster.brokers[leader].kill()
        cluster.brokers[3].restart()
        cluster.brokers[leader].restart()
        wait_until(lambda: settled_on(cluster, topic, {1: [1, 2, 3]}), "partition 1 on brokers 1, 2, 3", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert missing_after_read_back(cluster.bootstrap, topic, acknowledged) == {0: [], 1: [], 2: []}
    wait_until(lambda: f"{topic}-1" not in log_dirs(cluster, 0, topic), "broker 0's replica of partition 1 deleted", WAIT_S)


async def reassign_throttled(coord_url: str, targets: dict[tuple[str, int], list[int]], throttle_bytes_per_s: int) -> None:
    """Through the store, as `replog reassign execute --coord ... --throttle` does: Kafka's API has
    no throttle of its own."""
    store = open_store(coord_url)
    await store.start()
    try:
        refused = await admin.alter_partition_reassignments(store, targets, throttle_bytes_per_s=throttle_bytes_per_s)
    finally:
        await store.close()
    assert all(error is None for error in refused.values()), refused


def test_a_throttled_move_completes_with_nothing_lost(cluster):
    """Above the rate the producer writes at, so the added replica catches up: the throttle
    paces the copy, and the replica joins the ISR, where nothing throttles it."""
    topic = "throttled"
    create_topic(cluster.bootstrap, topic, PARTITIONS, ON_FIRST_THREE)
    with TimedProducer(cluster.bootstrap, topic, PARTITIONS) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        asyncio.run(reassign_throttled(cluster.coord_url, {(topic, 2): [2, 3, 1]}, throttle_bytes_per_s=50_000))
        wait_until(lambda: settled_on(cluster, topic, {2: [2, 3, 1]}), "partition 2 on brokers 2, 3, 1", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert missing_after_read_back(cluster.bootstrap, topic, acknowledged) == {0: [], 1: [], 2: []}
