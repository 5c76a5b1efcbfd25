"""IsrMaintainer over memory, ZooKeeper and etcd: every ISR write of a leader is fenced on the
leader node it created when elected, so a leader whose node is gone or replaced cannot change
the ISR, even while the ISR node's version is still the one it last saw."""

from __future__ import annotations

import asyncio

import pytest

from replog.coord_backends import BadVersion, NoNode, commit_ops, paths
from replog.coord_backends.joined import JoinedCommits
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replication.commit import IsrMaintainer
from replog.replication.election import leader_election
from replog.storage.log import Log, LogConfig
from replog.replica.partition import Partition, PartitionConfig, ReplicaState
from tests.backends.conftest import backend, connect, counting_transactions, security, store, url  # noqa: F401  (fixtures)
from tests.support.polling import eventually
from tests.support.log_fixtures import ManualClock

TOPIC = "orders"
LEADER, FOLLOWER = 1, 2
LAG_MS = 100  # the maintainer checks every LAG_MS / 2
WAIT_S = 10


class Elected:
    """LEADER elected over the store with FOLLOWER in its ISR, and an IsrMaintainer for it under
    a clock that makes FOLLOWER out of sync, so that its first check shrinks the ISR."""

    def __init__(self, store, partition: Partition, maintainer: IsrMaintainer):
        self.store, self.partition, self.maintainer = store, partition, maintainer
        self.fenced = asyncio.Event()

    async def isr_node(self) -> tuple[bytes, int]:
        return await self.store.get(paths.isr(TOPIC, 0))


@pytest.fixture
async def elected(store, tmp_path):
    await store.create(paths.replicas(TOPIC, 0), ReplicaAssignment((LEADER, FOLLOWER)).encode(), make_parents=True)
    await store.create(paths.broker(FOLLOWER), ephemeral=True, make_parents=True)  # alive: stays in the ISR
    isr, _, leader_version, isr_version = await leader_election(store, TOPIC, 0, LEADER)
    assert isr == IsrRecord((LEADER, FOLLOWER), isr.leader_epoch)
    clock = ManualClock(now_ms=0)
    partition = Partition(Log(tmp_path / "orders-0", LogConfig(), clock), LEADER, isr.leader_epoch, (LEADER, FOLLOWER),
                          isr.isr, 0, PartitionConfig(), now_ms=clock())
    clock.advance(10 * LAG_MS)  # FOLLOWER never fetched: out of sync
    holder: list[Elected] = []

    async def on_fenced() -> None:
        holder[0].fenced.set()

    maintainer = IsrMaintainer(store, partition, leader_version, isr_version,
                               replica_lag_time_max_ms=LAG_MS, clock_ms=clock, on_fenced=on_fenced)
    holder.append(Elected(store, partition, maintainer))
    yield holder[0]
    await maintainer.stop()
    if partition.state is ReplicaState.LEADER:
        partition.close()


async def shrink_is_fenced(elected: Elected) -> None:
    before = await elected.isr_node()
    elected.maintainer.start()
    await asyncio.wait_for(elected.fenced.wait(), WAIT_S)
    assert await elected.isr_node() == before
    assert elected.partition.isr == {LEADER, FOLLOWER}


async def test_a_leader_whose_node_stands_shrinks_the_isr(elected):
    elected.maintainer.start()

    async def shrunk() -> bool:
        return IsrRecord.decode((await elected.isr_node())[0]).isr == (LEADER,)

    await eventually(shrunk, WAIT_S, "the ISR shrunk to the leader")
    assert elected.partition.isr == {LEADER} and not elected.fenced.is_set()


async def test_a_leader_whose_node_is_gone_cannot_shrink_the_isr(elected, connect):
    # The leader's session expired on the server: its node is gone, nobody has been elected
    # yet, and the ISR node still has the version the leader last saw.
    other = await connect()
    await other.delete(paths.leader(TOPIC, 0))
    await shrink_is_fenced(elected)


async def test_a_leader_whose_node_was_replaced_cannot_shrink_the_isr(elected, connect, backend):
    if backend != "etcd":
        # A recreated node starts at version 0 again on ZooKeeper and the embedded store; there
        # an election recreates it only together with an ISR write, which fences on its own.
        pytest.skip("only etcd versions tell a recreated node from the original")
    other = await connect()
    await other.delete(paths.leader(TOPIC, 0))
    await other.create(paths.leader(TOPIC, 0), LeaderRecord(FOLLOWER, elected.partition.leader_epoch + 1).encode(), ephemeral=True)
    await shrink_is_fenced(elected)


async def test_a_leader_whose_node_is_gone_cannot_hand_over(elected, connect):
    other = await connect()
    await other.delete(paths.leader(TOPIC, 0))
    before = await elected.isr_node()
    with pytest.raises(NoNode):
        await commit_ops(elected.store, elected.maintainer.hand_over_ops())
    assert await elected.isr_node() == before


async def test_a_leader_whose_isr_changed_cannot_hand_over(elected, connect):
    """A recreated leader node may carry the version this leader saw; the ISR written by the
    election that recreated it fences the hand-over."""
    other = await connect()
    data, version = await elected.isr_node()
    await other.set(paths.isr(TOPIC, 0), data, version)
    with pytest.raises(BadVersion):
        await commit_ops(elected.store, elected.maintainer.hand_over_ops())
    assert await other.exists(paths.leader(TOPIC, 0)) is not None


async def test_a_leader_whose_node_stands_hands_over_in_one_transaction(elected):
    await commit_ops(elected.store, elected.maintainer.hand_over_ops())
    assert IsrRecord.decode((await elected.isr_node())[0]).isr == (FOLLOWER,)
    assert await elected.store.exists(paths.leader(TOPIC, 0)) is None


async def test_a_leader_hands_back_to_the_preferred_replica_only_once_it_follows_this_leadership(store, tmp_path):
    """A killed broker stays registered, and so in the ISR an election writes, until its session
    times out: a leader that resigned to it on that alone was elected again, and resigned
    again, at every balance check until then."""
    preferred = FOLLOWER
    await store.create(paths.replicas(TOPIC, 0), ReplicaAssignment((preferred, LEADER)).encode(), make_parents=True)
    await store.create(paths.broker(preferred), ephemeral=True, make_parents=True)
    isr, _, leader_version, isr_version = await leader_election(store, TOPIC, 0, LEADER)
    assert set(isr.isr) == {LEADER, preferred}
    clock = ManualClock(now_ms=0)
    partition = Partition(Log(tmp_path / "orders-0", LogConfig(), clock), LEADER, isr.leader_epoch, (preferred, LEADER),
                          isr.isr, 0, PartitionConfig(), now_ms=clock())

    async def resign() -> None:
        pass

    maintainer = IsrMaintainer(store, partition, leader_version, isr_version, replica_lag_time_max_ms=LAG_MS,
                               clock_ms=clock, on_fenced=resign, on_preferred_ready=resign, balance_check_interval_ms=0)
    try:
        assert not await maintainer.preferred_replica_ready(), "handed back to a replica that never fetched from it"
        partition.record_follower_fetch(preferred, 0, clock(), partition.leader_epoch)
        assert await maintainer.preferred_replica_ready()
        clock.advance(2 * LAG_MS)
        assert not await maintainer.preferred_replica_ready(), "handed back to a replica that stopped fetching"
    finally:
        partition.close()


async def test_leaders_that_shrink_at_once_write_their_isrs_in_joined_transactions(store, tmp_path):
    """A broker's death shrinks the ISR of every partition it followed: thousands of writes,
    which one transaction each held the leaders' store round trips for tens of seconds."""
    partitions = 20
    clock = ManualClock(now_ms=0)
    await store.create(paths.broker(FOLLOWER), ephemeral=True, make_parents=True)  # alive: elected into the ISR
    joined = JoinedCommits(store)
    led: list[tuple[Partition, IsrMaintainer]] = []
    for partition_id in range(partitions):
        await store.create(paths.replicas(TOPIC, partition_id), ReplicaAssignment((LEADER, FOLLOWER)).encode(), make_parents=True)
        isr, _, leader_version, isr_version = await leader_election(store, TOPIC, partition_id, LEADER)
        partition = Partition(Log(tmp_path / f"orders-{partition_id}", LogConfig(), clock), LEADER, isr.leader_epoch,
                              (LEADER, FOLLOWER), isr.isr, 0, PartitionConfig(), now_ms=clock())

        async def never_fenced() -> None:
            raise AssertionError("fenced")

        led.append((partition, IsrMaintainer(store, partition, leader_version, isr_version, replica_lag_time_max_ms=LAG_MS,
                                             clock_ms=clock, on_fenced=never_fenced, commit=joined.commit)))
    clock.advance(10 * LAG_MS)  # FOLLOWER never fetched: out of sync everywhere
    committed = counting_transactions(store)
    try:
        for _, maintainer in led:
            maintainer.start()

        async def all_shrunk() -> bool:
            return all(partition.isr == {LEADER} for partition, _ in led)

        await eventually(all_shrunk, WAIT_S, "every ISR shrunk to the leader")
    finally:
        for partition, maintainer in led:
            await maintainer.stop()
            partition.close()
        await joined.close()
    for partition_id in range(partitions):
        assert IsrRecord.decode((await store.get(paths.isr(TOPIC, partition_id)))[0]).isr == (LEADER,)
    assert sum(committed) == 2 * partitions and len(committed) < partitions
