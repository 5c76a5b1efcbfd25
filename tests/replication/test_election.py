"""leaderElection over memory, ZooKeeper and etcd: the preferred replica's head start."""

from __future__ import annotations

import asyncio

from replog.coord_backends import paths
from replog.coord_backends.paths import EpochCounter, IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replication.election import leader_election
from tests.backends.conftest import backend, connect, store, url  # noqa: F401  (fixtures)

TOPIC = "orders"
PREFERRED, OTHER = 1, 2
WAIT_S = 10
HEAD_START_S = 600  # longer than any test runs: only the preferred replica's win ends it


async def assigned_with_both_alive(store) -> None:
    await store.create(paths.replicas(TOPIC, 0), ReplicaAssignment((PREFERRED, OTHER)).encode(), make_parents=True)
    for broker_id in (PREFERRED, OTHER):  # both alive: the winner keeps the other in the ISR
        await store.create(paths.broker(broker_id), ephemeral=True, make_parents=True)


async def test_a_replica_stops_giving_the_preferred_one_its_head_start_once_it_won(store):
    """The new leader's acks=all waits for this replica to follow it: the rest of the head start
    would be a stall."""
    await assigned_with_both_alive(store)
    waiting = asyncio.ensure_future(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=HEAD_START_S))
    won = await leader_election(store, TOPIC, 0, PREFERRED)
    assert await asyncio.wait_for(waiting, WAIT_S) is None
    leader = LeaderRecord.decode((await store.get(paths.leader(TOPIC, 0)))[0])
    assert (leader.leader, leader.leader_epoch) == (PREFERRED, won.isr.leader_epoch)


async def test_a_replica_races_once_the_head_start_is_over_if_nobody_won(store):
    await assigned_with_both_alive(store)
    elected = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=0.05), WAIT_S)
    assert elected is not None
    assert LeaderRecord.decode((await store.get(paths.leader(TOPIC, 0)))[0]).leader == OTHER


async def test_liveness_comes_from_the_brokers_view_of_the_registrations(store):
    """Thousands of partitions elect at once when a topic is created: the preferred replica's
    head start and the ISR's trim ask the broker's view, not the store, who is registered."""
    await assigned_with_both_alive(store)
    elected = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=HEAD_START_S,
                                                     registered=lambda: {OTHER}), WAIT_S)
    assert elected is not None and elected.isr.isr == (OTHER,)


async def test_an_unclean_election_reads_the_registrations_from_the_store(store):
    """Giving acknowledged records up is never decided on a view that may lag."""
    await assigned_with_both_alive(store)
    await store.create(paths.isr(TOPIC, 0), IsrRecord((PREFERRED,), 0).encode())
    elected = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, unclean_allowed=True,
                                                     registered=lambda: {OTHER}), WAIT_S)
    assert elected is None


async def test_with_the_preferred_replica_gone_the_next_electable_one_gets_the_head_start(store):
    """One replica races, not all of them, when a broker that led many partitions goes."""
    third = 3
    await store.create(paths.replicas(TOPIC, 0), ReplicaAssignment((PREFERRED, OTHER, third)).encode(), make_parents=True)
    alive = {OTHER, third}
    waiting = asyncio.ensure_future(leader_election(store, TOPIC, 0, third, preferred_wait_s=HEAD_START_S,
                                                    registered=lambda: alive))
    won = await leader_election(store, TOPIC, 0, OTHER, registered=lambda: alive)
    assert won is not None and won.isr.isr == (OTHER, third)
    assert await asyncio.wait_for(waiting, WAIT_S) is None


async def test_an_epoch_is_taken_by_the_election_that_wins_with_it_and_by_no_lost_race(store):
    """The counter moves in the election's own transaction: a partition's first election writes
    epoch 0, the next one 1, and a race lost to a leader already there takes nothing."""
    await assigned_with_both_alive(store)
    first = await leader_election(store, TOPIC, 0, PREFERRED)
    assert first.isr.leader_epoch == 0
    assert EpochCounter.decode((await store.get(paths.leader_epoch(TOPIC, 0)))[0]).epoch == 0
    assert await leader_election(store, TOPIC, 0, PREFERRED) is None  # its own node is there: lost
    assert EpochCounter.decode((await store.get(paths.leader_epoch(TOPIC, 0)))[0]).epoch == 0
    await store.delete(paths.leader(TOPIC, 0))
    second = await leader_election(store, TOPIC, 0, OTHER)
    assert second.isr.leader_epoch == 1
    assert LeaderRecord.decode((await store.get(paths.leader(TOPIC, 0)))[0]) == LeaderRecord(OTHER, 1)
