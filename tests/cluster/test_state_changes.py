"""State-change queues across broker processes: topics are created and deleted through
start-replica and close-replica requests, a broker that was down acts on what it missed, a stale
start-replica is ignored, and a timed-out creation is cleaned up by the next one."""

from __future__ import annotations

import asyncio
import os
import signal

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from replog import admin as topics
from replog.coord_backends import open_store, paths
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replication.state_changes import START_REPLICA, send_state_change, wait_till_state_change_requests_consumed
from tests.cluster.test_replication import WAIT_S as REPLICATION_WAIT_S, produce_numbered, read_all
from tests.support.polling import wait_until

WAIT_S = 30
RECREATIONS = 5


def logged(broker, line: str) -> bool:
    return any(line in output for output in list(broker.output))


def wait_for_line(broker, line: str) -> None:
    wait_until(lambda: logged(broker, line), f"{line!r} in the broker's output", REPLICATION_WAIT_S)


def test_create_waits_for_every_start_replica_and_delete_reaches_a_broker_that_was_down(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("lifecycle", 2, 3)])["lifecycle"].result(timeout=60)

    # Every replica had consumed its request when the create returned, so its log exists.
    for broker_id, broker in cluster.brokers.items():
        assert (broker.data_dir / "lifecycle-0").is_dir() and (broker.data_dir / "lifecycle-1").is_dir()
        # At the default level, each request's completion (requested and received are DEBUG).
        wait_for_line(broker, f"completed start-replica topic=lifecycle partition=1 from=admin to={broker_id} epoch=-1")

    away = cluster.brokers[2]
    away.stop()
    remaining = AdminClient({"bootstrap.servers": cluster.bootstrap})
    remaining.delete_topics(["lifecycle"])["lifecycle"].result(timeout=60)
    assert (away.data_dir / "lifecycle-0").is_dir()  # down: its close-replica waits in its queue

    away.restart()  # drains its queue before it starts serving
    assert not (away.data_dir / "lifecycle-0").exists() and not (away.data_dir / "lifecycle-1").exists()
    wait_for_line(away, "completed close-replica topic=lifecycle partition=0 from=admin to=2 epoch=-1")


async def test_a_stale_start_replica_is_ignored_and_a_current_one_acted_on(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("moving", num_partitions=1, replica_assignment=[[0, 1]])])["moving"].result(timeout=60)
    wait_until(lambda: admin.list_topics("moving", timeout=30).topics["moving"].partitions[0].leader >= 0, "a leader", REPLICATION_WAIT_S)
    newcomer = cluster.brokers[2]
    store = open_store(cluster.coord_url)
    await store.start()
    try:
        leader = LeaderRecord.decode((await store.get(paths.leader("moving", 0)))[0]).leader
        isr = IsrRecord.decode((await store.get(paths.isr("moving", 0)))[0])
        # A reassignment onto broker 2 is under way: the leader asks it to start a replica.
        await store.create(paths.reassigned_partition("moving", 0), ReplicaAssignment((0, 1, 2)).encode(), make_parents=True)

        async def request(epoch: int) -> str:
            sent = await send_state_change(store, START_REPLICA, 2, "moving", [0], epoch, leader, queue_max_requests=100)
            assert await wait_till_state_change_requests_consumed(store, {2: [sent]}, WAIT_S) == []
            return sent

        stale = await request(isr.leader_epoch - 1)  # queued by an earlier leader
        wait_for_line(newcomer, f"ignored start-replica topic=moving partition=0 from={leader} to=2 epoch={isr.leader_epoch - 1}"
                                f" seq={stale} reason=stale: the partition's latest epoch is {isr.leader_epoch}")
        assert not (newcomer.data_dir / "moving-0").exists()

        await request(isr.leader_epoch)
        wait_for_line(newcomer, f"completed start-replica topic=moving partition=0 from={leader} to=2 epoch={isr.leader_epoch}")
        assert (newcomer.data_dir / "moving-0").is_dir()
    finally:
        await store.close()


def test_a_creation_that_timed_out_is_cleaned_up_by_the_next_create(cluster):
    paused = cluster.brokers[2]
    admin = AdminClient({"bootstrap.servers": f"{cluster.brokers[0].bootstrap},{cluster.brokers[1].bootstrap}"})
    os.kill(paused.process.pid, signal.SIGSTOP)  # registered, but consuming nothing
    try:
        try:
            admin.create_topics([NewTopic("retried", 1, 3)], operation_timeout=1)["retried"].result(timeout=60)
            raise AssertionError("the creation should have timed out")
        except KafkaException as failure:
            error = failure.args[0]
            assert error.code() == KafkaError.REQUEST_TIMED_OUT and "brokers [2]" in error.str()
    finally:
        os.kill(paused.process.pid, signal.SIGCONT)
    assert "retried" not in admin.list_topics(timeout=30).topics

    admin.create_topics([NewTopic("retried", 1, 3)])["retried"].result(timeout=60)

    wait_for_line(paused, "completed close-replica topic=retried partition=0 from=admin to=2 epoch=-1")
    partition = admin.list_topics("retried", timeout=30).topics["retried"].partitions[0]
    assert sorted(partition.replicas) == [0, 1, 2]
    assert (paused.data_dir / "retried-0").is_dir()


def serves_every_partition(bootstrap: str, topic: str, partitions: int) -> None:
    """Every partition gets a leader, takes acks=all writes and reads back exactly those."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def led() -> bool:
        found = admin.list_topics(topic, timeout=30).topics[topic]
        return found.error is None and len(found.partitions) == partitions and all(
            partition.leader >= 0 for partition in found.partitions.values())

    wait_until(led, f"a leader for every partition of {topic}", REPLICATION_WAIT_S)
    for partition in range(partitions):
        assert sorted(produce_numbered(bootstrap, topic, 0, 20, partition)) == list(range(20))
        assert sorted(read_all(bootstrap, topic, 20, partition)) == list(range(20))


async def test_a_topic_deleted_and_recreated_in_quick_succession_is_led_and_served_each_time(cluster):
    # Each incarnation's close-replica and start-replica reach the brokers while their metadata
    # watches may still be catching up with the previous one (a delete and a create of the same
    # name can coalesce into "no change"): leadership must follow the store all the same.
    store = open_store(cluster.coord_url)
    await store.start()
    try:
        await topics.create_topic(store, "reborn", 2, 3, {"min.insync.replicas": "2"})
        for _ in range(RECREATIONS):
            await topics.delete_topic(store, "reborn")
            await topics.create_topic(store, "reborn", 2, 3, {"min.insync.replicas": "2"})
        await asyncio.to_thread(serves_every_partition, cluster.bootstrap, "reborn", 2)
    finally:
        await store.close()
