"""Failover at the broker's default settings, end to end: three brokers over ZooKeeper
or etcd with nothing lowered, a topic of 3 partitions, RF=3, min.insync.replicas=2, and an
idempotent acks=all producer of numbered records over every partition. A broker is killed
with SIGKILL; writes must go on on every partition, and everything acknowledged must be read
back. How long they stopped is printed (run with -s), never asserted: it is the session
timeout's business and the machine's, which bench/replication.py measures."""

from __future__ import annotations

import signal

from tests.support.failover import (
    FOLLOWED_ONLY_BY_2,
    PARTITIONS,
    create_topic,
    follower_only,
    missing_after_read_back,
    restart_stopped,
    signal_under_writes,
    wait_until_in_sync,
)
from tests.support.polling import wait_until

WAIT_S = 30


def kill_under_writes(cluster, topic: str, victim: int) -> dict[int, float]:
    """SIGKILL of `victim` while every partition of `topic` takes writes, which must go on
    (signal_under_writes waits for that) and lose nothing acknowledged; the seconds from the
    kill to the first acknowledgement of a record sent after it, by partition."""
    failover = signal_under_writes(cluster, topic, victim, signal.SIGKILL)
    missing = missing_after_read_back(cluster.bootstrap, topic, failover.acknowledged)
    assert not any(missing.values()), f"acknowledged but not read back, by partition: {missing}"
    return failover.first_acknowledged_s


def test_writes_go_on_after_sigkill_of_a_leader_and_lose_nothing(default_cluster):
    cluster = default_cluster
    restart_stopped(cluster)
    create_topic(cluster.bootstrap, "leader-killed", PARTITIONS)
    leaders = {index: meta.leader for index, meta in wait_until_in_sync(cluster.bootstrap, "leader-killed").items()}
    victim = leaders[0]
    first = kill_under_writes(cluster, "leader-killed", victim)
    survivors = [broker for broker_id, broker in cluster.brokers.items() if broker_id != victim]
    logged = lambda text: [line for broker in survivors for line in list(broker.output) if text in line]  # noqa: E731
    # What an operator reads at the default log level: the election and the ISR changes, one
    # line each, and none of each replica's steps.
    wait_until(lambda: logged("became leader topic=leader-killed partition=0 "), "the election logged", WAIT_S)
    wait_until(lambda: logged("ISR shrunk topic=leader-killed "), "the ISR shrinks logged", WAIT_S)
    assert not logged("started replica topic=leader-killed") and not logged("fetcher "), "per-replica steps are DEBUG"
    store = cluster.coord_url.split(":")[0]
    for partition, seconds in sorted(first.items()):
        role = "led" if leaders[partition] == victim else "followed"
        print(f"[{store}] SIGKILL of broker {victim} (leader of partition 0), default settings: partition {partition} "
              f"({role} by it): first acknowledgement of a record sent after the kill {seconds:.2f} s after it")


def test_acks_all_writes_go_on_after_sigkill_of_a_follower_and_lose_nothing(default_cluster):
    cluster = default_cluster
    restart_stopped(cluster)
    create_topic(cluster.bootstrap, "follower-killed", PARTITIONS, FOLLOWED_ONLY_BY_2)
    victim = follower_only(wait_until_in_sync(cluster.bootstrap, "follower-killed"))
    first = kill_under_writes(cluster, "follower-killed", victim)
    store = cluster.coord_url.split(":")[0]
    for partition, seconds in sorted(first.items()):
        print(f"[{store}] SIGKILL of broker {victim} (a follower of every partition), default settings: partition "
              f"{partition}: first acks=all acknowledgement of a record sent after the kill {seconds:.2f} s after it")
