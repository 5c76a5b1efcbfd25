"""The coordinator over a real partition log on disk: commits and generations written with
acks=-1, groups dropped when the partition is led elsewhere (NOT_COORDINATOR) and read back
from the log when it is led here again (immigration), tombstones included."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from replog.groups import CoordinatorConfig, GroupCoordinator, GroupLimits, GroupState, JoinRequest, OffsetCommit
from replog.replica.partition import Partition, PartitionConfig
from replog.storage.disk_space import NOT_WATCHED, DiskSpace
from replog.storage.log import Log, LogConfig
from tests.support.polling import eventually
from tests.support.log_fixtures import ManualClock

HERE, OTHER = 1, 2
WAIT_S = 5


@pytest.fixture
def disk_space() -> DiskSpace:
    return NOT_WATCHED


@pytest.fixture
async def led(tmp_path, disk_space):
    """Partition 0 of a one-partition __consumer_offsets led here, and a running coordinator."""
    log = Log(tmp_path / "__consumer_offsets-0", LogConfig(), ManualClock(1_700_000_000_000))
    partition = Partition(log, HERE, 0, (HERE, OTHER), (HERE,), 0, PartitionConfig(), now_ms=0, disk_space=disk_space)
    coordinator = GroupCoordinator(HERE, CoordinatorConfig(GroupLimits(initial_rebalance_delay_ms=0)),
                                   lambda topic, index: partition, lambda: 1, lambda: 0, lambda: 1_700_000_000_000)
    running = asyncio.create_task(coordinator.run())
    coordinator.partition_changed(partition)
    await owned(coordinator)
    yield coordinator, partition
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    partition.close()


async def owned(coordinator: GroupCoordinator) -> None:
    async def loaded() -> bool:
        return coordinator.owns("g") is None

    await eventually(loaded, WAIT_S, "the partition's groups to load")


def join_request(member_id: str = "") -> JoinRequest:
    return JoinRequest(member_id, None, "client", "/127.0.0.1", 10_000, 10_000, "consumer", (("range", b"sub"),),
                       require_known_member_id=False)


async def test_offsets_and_generations_move_with_the_partitions_leadership(led):
    coordinator, partition = led
    joined = await coordinator.join("g", join_request())
    assert (joined.error, joined.generation) == (ErrorCode.none, 1)
    synced = await coordinator.sync("g", joined.member_id, None, 1, None, None, {joined.member_id: b"assignment"})
    assert synced.assignment == b"assignment"
    commits = [OffsetCommit("t", 0, 10, 3, "first"), OffsetCommit("t", 1, 20, -1, None)]
    assert await coordinator.commit("g", joined.member_id, None, 1, commits) == [ErrorCode.none] * 2
    assert await coordinator.commit("simple", "", None, -1, [OffsetCommit("t", 0, 5, -1, "")]) == [ErrorCode.none]
    assert await coordinator.delete_offsets("simple", [("t", 0)]) == (ErrorCode.none, [ErrorCode.none])
    assert partition.high_watermark == partition.log_end_offset  # every write committed (acks=-1)

    partition.become_follower(OTHER, 1, now_ms=0)  # emigration
    coordinator.partition_changed(partition)
    assert coordinator.owns("g") == ErrorCode.not_coordinator
    assert coordinator.fetch("g", None) == (ErrorCode.not_coordinator, {})
    assert coordinator.heartbeat("g", joined.member_id, None, 1) == ErrorCode.not_coordinator

    partition.become_leader(2, (HERE, OTHER), (HERE,), now_ms=0)  # immigration, from the log
    coordinator.partition_changed(partition)
    assert coordinator.owns("g") == ErrorCode.coordinator_load_in_progress
    await owned(coordinator)
    error, offsets = coordinator.fetch("g", [("t", 0), ("t", 1), ("t", 2)])
    assert error == ErrorCode.none
    assert {key: (value.offset, value.leader_epoch, value.metadata) if value else None for key, value in offsets.items()} == {
        ("t", 0): (10, 3, "first"), ("t", 1): (20, -1, ""), ("t", 2): None}
    assert coordinator.fetch("simple", None) == (ErrorCode.none, {})  # the tombstone holds
    _, group = coordinator.describe("g")
    assert (group.state, group.generation, list(group.members)) == (GroupState.STABLE, 1, [joined.member_id])
    assert coordinator.heartbeat("g", joined.member_id, None, 1) == ErrorCode.none


@pytest.mark.parametrize("disk_space", [DiskSpace(Path("unread"), 1000)])
async def test_commits_go_on_while_produce_is_refused_and_are_answered_as_kafka_does_below_half(led, disk_space):
    """Free space below log.dir.min.free.bytes refuses producers, not the coordinator's records;
    below half of it those too, answered NOT_COORDINATOR (Kafka's answer to a storage error)."""
    coordinator, partition = led
    disk_space.update(800)
    assert await coordinator.commit("simple", "", None, -1, [OffsetCommit("t", 0, 5, -1, "")]) == [ErrorCode.none]
    disk_space.update(100)
    assert await coordinator.commit("simple", "", None, -1, [OffsetCommit("t", 0, 6, -1, "")]) == [ErrorCode.not_coordinator]
    error, offsets = coordinator.fetch("simple", [("t", 0)])
    assert (error, offsets[("t", 0)].offset) == (ErrorCode.none, 5)
    disk_space.update(5000)
    assert await coordinator.commit("simple", "", None, -1, [OffsetCommit("t", 0, 7, -1, "")]) == [ErrorCode.none]


async def test_a_waiting_join_is_answered_not_coordinator_when_leadership_moves(led):
    coordinator, partition = led
    coordinator.config = CoordinatorConfig(GroupLimits(initial_rebalance_delay_ms=60_000))
    waiting = asyncio.create_task(coordinator.join("g2", join_request()))

    async def joined() -> bool:
        _, group = coordinator.describe("g2")
        return group is not None and group.state is GroupState.PREPARING_REBALANCE

    await eventually(joined, WAIT_S, "the join to wait out the initial delay")
    partition.become_follower(OTHER, 1, now_ms=0)
    coordinator.partition_changed(partition)
    assert (await asyncio.wait_for(waiting, WAIT_S)).error == ErrorCode.not_coordinator


async def test_offsets_expire_after_the_retention_and_empty_groups_go(tmp_path):
    clock = {"now_ms": 0, "wall_ms": 1_700_000_000_000}
    log = Log(tmp_path / "__consumer_offsets-0", LogConfig(), lambda: clock["wall_ms"])
    partition = Partition(log, HERE, 0, (HERE,), (HERE,), 0, PartitionConfig(), now_ms=0)
    config = CoordinatorConfig(GroupLimits(initial_rebalance_delay_ms=0), offsets_retention_ms=1000,
                               offsets_retention_check_interval_ms=100)
    coordinator = GroupCoordinator(HERE, config, lambda topic, index: partition, lambda: 1,
                                   lambda: clock["now_ms"], lambda: clock["wall_ms"])
    running = asyncio.create_task(coordinator.run())
    try:
        coordinator.partition_changed(partition)
        await owned(coordinator)
        joined = await coordinator.join("g", join_request())
        await coordinator.sync("g", joined.member_id, None, 1, None, None, {})
        assert await coordinator.commit("g", joined.member_id, None, 1, [OffsetCommit("t", 0, 1, -1, "")]) == [ErrorCode.none]
        assert await coordinator.commit("simple", "", None, -1, [OffsetCommit("t", 0, 7, -1, "")]) == [ErrorCode.none]
        clock["now_ms"] += 5000
        clock["wall_ms"] += 500  # the simple consumer's commit is not old enough yet
        coordinator.timers.fire_due(clock["now_ms"])  # decides at once: nothing to expire, no write started
        assert coordinator.fetch("g", None)[1] != {}  # a group with members keeps its offsets
        assert coordinator.fetch("simple", None)[1] != {}

        assert coordinator.leave("g", [(joined.member_id, None)]) == (ErrorCode.none, [ErrorCode.none])
        error, listed = coordinator.list_groups()
        assert sorted((group.group_id, group.protocol_type, group.state) for group in listed) == [
            ("g", "consumer", "Empty"), ("simple", "", "Empty")]
        clock["now_ms"] += 5000
        clock["wall_ms"] += 5000
        coordinator.timers.fire_due(clock["now_ms"])

        async def expired() -> bool:
            return coordinator.fetch("g", None)[1] == {} and coordinator.fetch("simple", None)[1] == {}

        await eventually(expired, WAIT_S, "the offsets to expire")
        assert coordinator.describe("g") == (ErrorCode.none, None) and coordinator.describe("simple") == (ErrorCode.none, None)
        assert partition.high_watermark == partition.log_end_offset  # the tombstones are committed
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        partition.close()
