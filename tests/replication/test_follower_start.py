"""A follower starts on the assignment the broker's watches saw: a topic's creation and a
broker's restart start thousands of followers at once, and each read the assignment again.

One broker runs in this process over the embedded store (one_broker.py); a second client of
the store plays the other replica, which leads."""

from __future__ import annotations

from replog.coord_backends import paths
from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.replica.partition import ReplicaState
from tests.replication.one_broker import LEADER, OTHER, TOPIC, WAIT_S
from tests.support.polling import eventually


async def test_a_follower_opens_its_replica_without_reading_the_assignment_again(cluster):
    store = cluster.broker.store
    read: list[str] = []
    get, get_many = store.get, store.get_many

    async def get_noted(path, *args, **kwargs):
        read.append(path)
        return await get(path, *args, **kwargs)

    async def get_many_noted(paths_read):
        read.extend(paths_read)
        return await get_many(paths_read)

    store.get, store.get_many = get_noted, get_many_noted
    await cluster.peer.create(paths.leader(TOPIC, 0), LeaderRecord(OTHER, 0).encode(), ephemeral=True, make_parents=True)
    await cluster.peer.create(paths.isr(TOPIC, 0), IsrRecord((OTHER, LEADER), 0).encode())
    await cluster.create_partition()

    async def following() -> bool:
        hosted = cluster.broker.replicas.hosted(TOPIC, 0)
        return hosted is not None and hosted.state is ReplicaState.FOLLOWER and hosted.leader_id == OTHER

    await eventually(following, WAIT_S, "the broker following the other replica")
    assert read.count(paths.replicas(TOPIC, 0)) == 1  # the replica's start, which the assignment's change began
