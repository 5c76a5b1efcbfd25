"""leaderElection over memory, ZooKeeper and etcd: the preferred replica's head start, epochs, and
elections that start from the partition as the broker's watches saw it."""

from __future__ import annotations

import asyncio

import pytest

from replog.coord_backends import NoNode, paths
from replog.coord_backends.joined import JoinedStore
from replog.coord_backends.observed import ObservedStore
from replog.coord_backends.paths import EpochCounter, IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replication.election import SeenPartition, leader_election
from tests.backends.conftest import backend, connect, security, store, url  # noqa: F401  (fixtures)

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


async def test_a_new_partition_gives_its_live_preferred_replica_the_longer_head_start(store):
    """Brokers start a new topic's thousands of partitions each at its own pace: with half a
    second's head start the brokers first to reach them won most of the others' partitions."""
    await assigned_with_both_alive(store)
    waiting = asyncio.ensure_future(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=0.05,
                                                    new_partition_wait_s=HEAD_START_S))
    await asyncio.sleep(0.2)  # past the short head start: the test is that it does not race yet
    assert not waiting.done()
    won = await leader_election(store, TOPIC, 0, PREFERRED)
    assert won is not None and await asyncio.wait_for(waiting, WAIT_S) is None
    # Once led, the partition has an ISR: the next election's head start is the short one.
    await store.delete(paths.leader(TOPIC, 0))
    elected = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=0.05,
                                                     new_partition_wait_s=HEAD_START_S), WAIT_S)
    assert elected is not None and elected.isr.leader_epoch == won.isr.leader_epoch + 1


async def test_a_new_partition_of_a_dead_preferred_replica_is_elected_without_the_wait(store):
    await assigned_with_both_alive(store)
    elected = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=HEAD_START_S,
                                                     new_partition_wait_s=HEAD_START_S, registered=lambda: {OTHER}), WAIT_S)
    assert elected is not None


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


def counting_operations(store) -> tuple[ObservedStore, list[str]]:
    """`store`, and the kinds of the operations made through it, in order."""
    made: list[str] = []
    return ObservedStore(store, lambda operation, duration_s, error: made.append(operation)), made


async def seen_now(store) -> SeenPartition:
    assigned, assigned_version = await store.get(paths.replicas(TOPIC, 0))
    try:
        isr, isr_version = await store.get(paths.isr(TOPIC, 0))
    except NoNode:
        return SeenPartition(ReplicaAssignment.decode(assigned).replicas, assigned_version, (), None)
    return SeenPartition(ReplicaAssignment.decode(assigned).replicas, assigned_version, IsrRecord.decode(isr).isr, isr_version)


async def test_an_election_reads_neither_the_assignment_nor_an_isr_seen_absent(store):
    """Thousands of partitions elect at once when a topic is created or a broker leaves: the
    assignment the broker's watches saw, and the ISR of a partition never led, spare each a read."""
    await assigned_with_both_alive(store)
    view = await seen_now(store)
    counted, made = counting_operations(store)
    won = await leader_election(counted, TOPIC, 0, PREFERRED, registered=lambda: {PREFERRED, OTHER}, seen=lambda: view)
    assert won is not None and won.isr.isr == (PREFERRED, OTHER)
    assert made == ["get", "transaction"]  # the epoch counter's read, then the election's commit
    # An ISR that exists is read: it may lag a hand-over's write (the next test).
    await store.delete(paths.leader(TOPIC, 0))
    view, made[:] = await seen_now(store), []
    again = await leader_election(counted, TOPIC, 0, OTHER, registered=lambda: {OTHER}, seen=lambda: view)
    assert again is not None and again.isr.leader_epoch == won.isr.leader_epoch + 1
    assert made == ["get", "get", "transaction"]  # the ISR's, the epoch's, the commit


async def test_an_election_from_a_stale_view_decides_on_the_store(store):
    """A reassignment that moved the partition off this broker since the view was seen: the
    commit fails on the assignment's version, and the store's answer is that it may not lead."""
    await assigned_with_both_alive(store)
    stale = await seen_now(store)
    await store.set(paths.replicas(TOPIC, 0), ReplicaAssignment((OTHER,)).encode())
    assert await leader_election(store, TOPIC, 0, PREFERRED, seen=lambda: stale) is None
    with pytest.raises(NoNode):
        await store.get(paths.leader(TOPIC, 0))
    # An ISR seen absent that an election created since, then left (its leader node gone).
    await store.set(paths.replicas(TOPIC, 0), ReplicaAssignment((PREFERRED, OTHER)).encode())
    absent = await seen_now(store)
    first = await leader_election(store, TOPIC, 0, OTHER)
    await store.delete(paths.leader(TOPIC, 0))
    won = await leader_election(store, TOPIC, 0, PREFERRED, seen=lambda: absent)
    assert won is not None and won.isr.leader_epoch == first.isr.leader_epoch + 1


async def test_a_view_that_says_this_broker_may_not_lead_is_checked_against_the_store(store):
    """Left to the others on a view that lags, a partition could stay without a leader."""
    await assigned_with_both_alive(store)
    lagging = SeenPartition((OTHER,), (await store.get(paths.replicas(TOPIC, 0)))[1], (), None)
    won = await leader_election(store, TOPIC, 0, PREFERRED, seen=lambda: lagging)
    assert won is not None and LeaderRecord.decode((await store.get(paths.leader(TOPIC, 0)))[0]).leader == PREFERRED


async def test_an_election_reads_an_isr_that_exists_rather_than_trust_the_view(store):
    """A controlled shutdown writes the ISR without its leader and deletes the leader node in one
    transaction; the deletion can reach a broker before the new ISR: on that view the head start
    went to the leader that left, and the partition waited it out."""
    await assigned_with_both_alive(store)
    await leader_election(store, TOPIC, 0, PREFERRED, registered=lambda: {PREFERRED, OTHER})
    before_the_hand_over = await seen_now(store)
    isr_version = (await store.get(paths.isr(TOPIC, 0)))[1]
    await (store.transaction().set(paths.isr(TOPIC, 0), IsrRecord((OTHER,), 0).encode(), isr_version)
           .delete(paths.leader(TOPIC, 0)).commit())
    won = await asyncio.wait_for(leader_election(store, TOPIC, 0, OTHER, preferred_wait_s=HEAD_START_S,
                                                 registered=lambda: {PREFERRED, OTHER}, seen=lambda: before_the_hand_over),
                                 WAIT_S)
    assert won is not None and won.isr.isr == (OTHER,)


ELECTIONS = 48


async def test_elections_at_once_read_and_commit_joined_and_a_lost_one_fails_alone(store):
    """A topic's creation or a broker's departure starts thousands of elections: through one
    JoinedStore they share reads and transactions, and a race lost by one loses no other's."""
    for partition in range(ELECTIONS):
        await store.create(paths.replicas(TOPIC, partition), ReplicaAssignment((PREFERRED, OTHER)).encode(), make_parents=True)
    lost = range(0, ELECTIONS, 8)
    for partition in lost:  # led already, with PREFERRED in the ISR: it races, and loses
        assert await leader_election(store, TOPIC, partition, OTHER, registered=lambda: {PREFERRED, OTHER}) is not None
    counted, made = counting_operations(store)
    joined = JoinedStore(counted)
    try:
        won = await asyncio.gather(*(leader_election(joined, TOPIC, partition, PREFERRED, registered=lambda: {PREFERRED, OTHER})
                                     for partition in range(ELECTIONS)))
    finally:
        await joined.close()
    assert [partition for partition, election in enumerate(won) if election is None] == list(lost)
    for partition in range(ELECTIONS):
        leader = LeaderRecord.decode((await store.get(paths.leader(TOPIC, partition)))[0])
        assert leader == (LeaderRecord(OTHER, 0) if partition in lost else LeaderRecord(PREFERRED, 0))
    # Alone, each election made 3 reads (assignment, ISR, epoch) and a transaction: 192 requests.
    if store.reads_many_at_once:  # else reads are not joined: they would only wait for each other
        assert "get" not in made and made.count("get_many") <= 6
    assert made.count("transaction") <= 2 * len(lost) + 8
