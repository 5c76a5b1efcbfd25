"""Offsets committed in transactions (TxnOffsetCommit) over a real partition log: held pending
until the producer's marker, applied on commit and dropped on abort, rebuilt by a new leader's
load from the transactional batches and markers in its log, and answered UNSTABLE while pending;
KIP-447's fencing of commits from a generation the group has left."""

from __future__ import annotations

import asyncio
import struct

import pytest
from kio.schema.errors import ErrorCode

from replog.groups import CoordinatorConfig, GroupCoordinator, GroupLimits, JoinRequest, OffsetCommit
from replog.groups.records import OffsetKey, OffsetValue, encode_batch, encode_key, encode_offset_value, \
    encode_transactional_batch
from replog.replica.partition import Partition, PartitionConfig
from replog.storage.control_batches import ControlType, Marker, encode_marker
from replog.storage.log import Log, LogConfig
from tests.storage.test_cleaner import contents
from tests.support.log_fixtures import ManualClock
from tests.support.polling import eventually

HERE, OTHER = 1, 2
WAIT_S = 5
NOW_MS = 1_700_000_000_000


@pytest.fixture
def log_config() -> LogConfig:
    return LogConfig()


@pytest.fixture
async def coordinated(tmp_path, log_config):
    """A one-partition __consumer_offsets whose replica here follows OTHER (tests write the
    leader's batches into it), and a running coordinator."""
    log = Log(tmp_path / "__consumer_offsets-0", log_config, ManualClock(NOW_MS))
    partition = Partition(log, HERE, 0, (HERE, OTHER), (HERE,), 0, PartitionConfig(), now_ms=0)
    partition.become_follower(OTHER, 1, now_ms=0)
    coordinator = GroupCoordinator(HERE, CoordinatorConfig(GroupLimits(initial_rebalance_delay_ms=0)),
                                   lambda topic, index: partition, lambda: 1, lambda: 0, lambda: NOW_MS)
    running = asyncio.create_task(coordinator.run())
    yield coordinator, partition
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    partition.close()


class LeaderLog:
    """The batches another broker's coordinator wrote, copied into the follower as replication does."""

    def __init__(self, partition: Partition):
        self.partition = partition

    def _copy(self, batch: bytearray) -> None:
        struct.pack_into(">q", batch, 0, self.partition.log_end_offset)  # the base offset, outside the CRC
        self.partition.append_as_follower(bytes(batch), self.partition.log_end_offset + 1_000, 0)

    def commit(self, offsets: dict[tuple[str, int], int], producer_id: int | None = None) -> None:
        records = [(encode_key(OffsetKey("g", topic, index)), encode_offset_value(OffsetValue(offset, -1, "", NOW_MS)))
                   for (topic, index), offset in offsets.items()]
        self._copy(encode_batch(records, NOW_MS) if producer_id is None
                   else encode_transactional_batch(records, NOW_MS, producer_id, 0, 0))

    def marker(self, producer_id: int, control_type: ControlType) -> None:
        self._copy(encode_marker(Marker(producer_id, 0, control_type, 0), NOW_MS))


async def lead(coordinator: GroupCoordinator, partition: Partition, epoch: int) -> None:
    partition.become_leader(epoch, (HERE, OTHER), (HERE,), now_ms=0)
    coordinator.partition_changed(partition)
    await loaded(coordinator)


async def loaded(coordinator: GroupCoordinator) -> None:
    async def owned() -> bool:
        return coordinator.owns("g") is None

    await eventually(owned, WAIT_S, "the partition's groups to load")


def committed(coordinator: GroupCoordinator, *partitions: int) -> dict[int, int | None]:
    error, offsets = coordinator.fetch("g", [("t", index) for index in partitions])
    assert error == ErrorCode.none
    return {index: None if value is None else value.offset for (_, index), value in offsets.items()}


def two_open_transactions(partition: Partition) -> LeaderLog:
    """t-0 committed at 5; producer 7's transaction commits t-0 at 10 and t-1 at 11, producer
    8's t-2 at 20."""
    written = LeaderLog(partition)
    written.commit({("t", 0): 5})
    written.commit({("t", 0): 10, ("t", 1): 11}, producer_id=7)
    written.commit({("t", 2): 20}, producer_id=8)
    return written


async def test_a_load_applies_committed_transactions_drops_aborted_ones_and_keeps_open_ones_pending(coordinated):
    coordinator, partition = coordinated
    written = two_open_transactions(partition)
    written.commit({("t", 1): 30})  # a plain commit after the transaction's: later in the log, it wins
    written.marker(7, ControlType.COMMIT)
    written.commit({("t", 3): 40}, producer_id=9)
    written.marker(9, ControlType.ABORT)

    await lead(coordinator, partition, 2)
    assert committed(coordinator, 0, 1, 2, 3) == {0: 10, 1: 30, 2: None, 3: None}
    assert coordinator.unstable_offsets("g") == {("t", 2)}  # producer 8's transaction is still open

    coordinator.complete_transaction(8, 0, committed=True)  # its marker, written by this leader
    assert committed(coordinator, 2) == {2: 20}
    assert coordinator.unstable_offsets("g") == set()


async def test_an_aborted_transaction_leaves_the_offsets_as_they_were_and_a_tombstone_outdates_pending_ones(coordinated):
    coordinator, partition = coordinated
    written = two_open_transactions(partition)
    await lead(coordinator, partition, 2)
    assert coordinator.unstable_offsets("g") == {("t", 0), ("t", 1), ("t", 2)}

    coordinator.complete_transaction(7, 0, committed=False)
    assert committed(coordinator, 0, 1) == {0: 5, 1: None}
    assert await coordinator.delete_offsets("g", [("t", 2)]) == (ErrorCode.none, [ErrorCode.none])
    assert coordinator.unstable_offsets("g") == set()
    coordinator.complete_transaction(8, 0, committed=True)  # deleted meanwhile: nothing comes back
    assert committed(coordinator, 2) == {2: None}

    partition.become_follower(OTHER, 3, now_ms=0)  # the same, read back from the log with its markers
    coordinator.partition_changed(partition)
    written.marker(7, ControlType.ABORT)
    written.marker(8, ControlType.COMMIT)
    await lead(coordinator, partition, 4)
    assert committed(coordinator, 0, 1, 2) == {0: 5, 1: None, 2: None}
    assert coordinator.unstable_offsets("g") == set()


async def test_pending_offsets_leave_with_the_partition_and_markers_are_ignored_elsewhere(coordinated):
    coordinator, partition = coordinated
    LeaderLog(partition).commit({("t", 0): 10}, producer_id=7)
    await lead(coordinator, partition, 2)
    partition.become_follower(OTHER, 3, now_ms=0)
    coordinator.partition_changed(partition)
    coordinator.complete_transaction(7, 0, committed=True)  # not coordinated here any more
    assert coordinator.unstable_offsets("g") == set()
    assert coordinator.fetch("g", None) == (ErrorCode.not_coordinator, {})


def join_request(member_id: str = "", instance: str | None = None) -> JoinRequest:
    return JoinRequest(member_id, instance, "client", "/127.0.0.1", 10_000, 10_000, "consumer", (("range", b"sub"),),
                       require_known_member_id=False)


async def test_a_commit_from_a_generation_the_group_has_left_is_fenced(coordinated):
    """KIP-447: the producer of a consumer that lost its partitions in a rebalance cannot commit
    offsets for them in its transaction."""
    coordinator, partition = coordinated
    await lead(coordinator, partition, 2)
    joined = await coordinator.join("g", join_request(instance="instance-1"))
    assert joined.error == ErrorCode.none
    commit = [OffsetCommit("t", 0, 10, -1, None)]

    async def refusal(member_id: str, instance: str | None, generation: int) -> list[int]:
        return await coordinator.commit_transactional("g", 7, 0, member_id, instance, generation, commit)

    assert await refusal(joined.member_id, "instance-1", joined.generation + 1) == [ErrorCode.illegal_generation]
    assert await refusal("someone-else", None, joined.generation) == [ErrorCode.unknown_member_id]
    assert await refusal("a-replaced-member", "instance-1", joined.generation) == [ErrorCode.fenced_instance_id]
    assert await coordinator.commit_transactional("other", 7, 0, "m", None, 3, commit) == [ErrorCode.illegal_generation]
    too_large = [OffsetCommit("t", 0, 10, -1, "x" * 5000)]
    assert await coordinator.commit_transactional("g", 7, 0, joined.member_id, "instance-1", joined.generation,
                                                  too_large) == [ErrorCode.offset_metadata_too_large]
    assert coordinator.unstable_offsets("g") == set()


@pytest.fixture
async def led(coordinated):
    coordinator, partition = coordinated
    await lead(coordinator, partition, 2)
    return coordinator, partition


async def end(coordinator: GroupCoordinator, partition: Partition, producer_id: int, epoch: int, committed: bool) -> None:
    """The transaction's marker, as WriteTxnMarkers writes it, then tells the coordinator."""
    control_type = ControlType.COMMIT if committed else ControlType.ABORT
    assert await partition.write_txn_marker(Marker(producer_id, epoch, control_type, 0), 5000) == ErrorCode.none
    coordinator.complete_transaction(producer_id, 0, committed)


async def test_offsets_committed_in_a_transaction_apply_only_once_it_commits_here_and_after_failover(led):
    coordinator, partition = led
    ok = [ErrorCode.none]
    assert await coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, 10, -1, "")]) == ok
    assert await coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 1, 11, -1, "")]) == ok
    assert await coordinator.commit_transactional("g", 8, 0, "", None, -1, [OffsetCommit("t", 2, 20, -1, "")]) == ok
    assert await coordinator.commit_transactional("g", 9, 0, "", None, -1, [OffsetCommit("t", 3, 30, -1, "")]) == ok
    assert committed(coordinator, 0, 1, 2, 3) == {0: None, 1: None, 2: None, 3: None}
    assert coordinator.unstable_offsets("g") == {("t", 0), ("t", 1), ("t", 2), ("t", 3)}
    assert partition.last_stable_offset == 0  # the partition holds the transactions open too

    await end(coordinator, partition, 7, 0, committed=True)
    await end(coordinator, partition, 8, 0, committed=False)
    assert committed(coordinator, 0, 1, 2, 3) == {0: 10, 1: 11, 2: None, 3: None}
    assert coordinator.unstable_offsets("g") == {("t", 3)}

    partition.become_follower(OTHER, 3, now_ms=0)  # a failover: producer 9's transaction is still open
    coordinator.partition_changed(partition)
    await lead(coordinator, partition, 4)
    assert committed(coordinator, 0, 1, 2, 3) == {0: 10, 1: 11, 2: None, 3: None}
    assert coordinator.unstable_offsets("g") == {("t", 3)}
    await end(coordinator, partition, 9, 0, committed=True)  # its marker, from the new leader
    assert committed(coordinator, 3) == {3: 30}
    assert coordinator.unstable_offsets("g") == set()


async def test_a_plain_commit_written_after_the_transactional_one_wins(led):
    coordinator, partition = led
    assert await coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, 10, -1, "")]) \
        == [ErrorCode.none]
    assert await coordinator.commit("g", "", None, -1, [OffsetCommit("t", 0, 30, -1, "")]) == [ErrorCode.none]
    await end(coordinator, partition, 7, 0, committed=True)
    assert committed(coordinator, 0) == {0: 30}
    partition.become_follower(OTHER, 3, now_ms=0)
    coordinator.partition_changed(partition)
    await lead(coordinator, partition, 4)
    assert committed(coordinator, 0) == {0: 30}


async def test_one_producers_commits_take_its_next_sequences_even_when_sent_together(led):
    coordinator, partition = led

    async def verify() -> int:  # the transaction coordinator's answer comes later
        await asyncio.sleep(0)
        return ErrorCode.none

    commits = [coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", index, index, -1, "")],
                                                verify)
               for index in range(4)]
    assert await asyncio.gather(*commits) == [[ErrorCode.none]] * 4
    await end(coordinator, partition, 7, 0, committed=True)
    assert await coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, 100, -1, "")]) \
        == [ErrorCode.none]  # the next transaction, after the marker
    await end(coordinator, partition, 7, 0, committed=True)
    partition.become_follower(OTHER, 3, now_ms=0)  # read back: each batch was written, none taken for a retry
    coordinator.partition_changed(partition)
    await lead(coordinator, partition, 4)
    assert committed(coordinator, 0, 1, 2, 3) == {0: 100, 1: 1, 2: 2, 3: 3}


async def test_a_producers_first_commit_to_the_partition_is_verified_and_a_refusal_writes_nothing(led):
    coordinator, partition = led
    asked: list[int] = []
    answers = iter([ErrorCode.invalid_txn_state, ErrorCode.network_exception, ErrorCode.none])

    async def verify() -> int:
        asked.append(partition.log_end_offset)
        return next(answers)

    def commit(offset: int):
        return coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, offset, -1, "")], verify)

    assert await commit(10) == [ErrorCode.invalid_txn_state]
    assert await commit(11) == [ErrorCode.coordinator_load_in_progress]  # retried by the client, as Kafka maps it
    assert coordinator.unstable_offsets("g") == set() and partition.log_end_offset == 0
    assert await commit(12) == [ErrorCode.none]
    assert await commit(13) == [ErrorCode.none]  # its transaction is open here now: not asked again
    assert len(asked) == 3
    await end(coordinator, partition, 7, 0, committed=True)
    assert committed(coordinator, 0) == {0: 13}


async def test_a_fenced_producer_commits_nothing(led):
    coordinator, partition = led
    assert await coordinator.commit_transactional("g", 7, 1, "", None, -1, [OffsetCommit("t", 0, 10, -1, "")]) \
        == [ErrorCode.none]
    await end(coordinator, partition, 7, 2, committed=False)  # aborted with an epoch bump: epoch 1 is a zombie's
    zombie = await coordinator.commit_transactional("g", 7, 1, "", None, -1, [OffsetCommit("t", 0, 11, -1, "")])
    assert zombie == [ErrorCode.invalid_producer_epoch]  # as Kafka's log answers an older epoch
    assert coordinator.unstable_offsets("g") == set()
    assert committed(coordinator, 0) == {0: None}


async def test_a_marker_written_while_the_partition_loads_is_read_by_the_load(led):
    """WriteTxnMarkers may write to a partition whose groups are still loading: the coordinator
    ignores that completion, and the load, which reads until it has caught up with the log,
    reads the marker itself."""
    coordinator, partition = led
    assert await coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, 10, -1, "")]) \
        == [ErrorCode.none]
    partition.become_follower(OTHER, 3, now_ms=0)
    coordinator.partition_changed(partition)
    partition.become_leader(4, (HERE, OTHER), (HERE,), now_ms=0)
    coordinator.partition_changed(partition)  # the load runs first, and reads the log without the marker

    async def marker_during_the_load() -> int:
        await end(coordinator, partition, 7, 0, committed=True)
        return coordinator.owns("g")

    assert await asyncio.create_task(marker_during_the_load()) == ErrorCode.coordinator_load_in_progress
    await loaded(coordinator)
    assert committed(coordinator, 0) == {0: 10}
    assert coordinator.unstable_offsets("g") == set()


@pytest.mark.parametrize("log_config", [LogConfig(compact=True, min_cleanable_dirty_ratio=0)])
async def test_a_cleaned_partition_loads_the_offsets_it_held_before(led):
    """__consumer_offsets is compacted: the cleaner removes an aborted transaction's offsets and
    keeps an open one's, so that a load after cleaning finds what one before would."""
    coordinator, partition = led

    async def written(answer) -> None:
        assert set(await answer) == {ErrorCode.none}
        partition.log.roll()  # each write alone in its segment: all but the last cleanable

    await written(coordinator.commit("g", "", None, -1, [OffsetCommit("t", 0, 1, -1, "")]))
    await written(coordinator.commit_transactional("g", 7, 0, "", None, -1, [OffsetCommit("t", 0, 10, -1, ""),
                                                                             OffsetCommit("t", 1, 11, -1, "")]))
    await end(coordinator, partition, 7, 0, committed=True)
    await written(coordinator.commit_transactional("g", 8, 0, "", None, -1, [OffsetCommit("t", 0, 20, -1, "")]))
    await end(coordinator, partition, 8, 0, committed=False)
    await written(coordinator.commit("g", "", None, -1, [OffsetCommit("t", 1, 30, -1, "")]))
    await written(coordinator.commit_transactional("g", 9, 0, "", None, -1, [OffsetCommit("t", 2, 40, -1, "")]))
    await written(coordinator.commit("g", "", None, -1, [OffsetCommit("t", 3, 50, -1, "")]))
    expected = {0: 10, 1: 30, 2: None, 3: 50}
    assert committed(coordinator, 0, 1, 2, 3) == expected

    partition.log.flush()
    assert await partition.clean(64 << 20)
    # Left: t-0's committed 10 (the aborted 20 gone, the first 1 outdated), t-1's 30 (the
    # transaction's 11 outdated), the open transaction's t-2, and t-3's 50 (the active segment).
    assert sorted(offset for offset, _, _ in contents(partition.log)) == [1, 6, 7, 8]
    partition.become_follower(OTHER, 3, now_ms=0)
    coordinator.partition_changed(partition)
    await lead(coordinator, partition, 4)
    assert committed(coordinator, 0, 1, 2, 3) == expected
    assert coordinator.unstable_offsets("g") == {("t", 2)}
    await end(coordinator, partition, 9, 0, committed=True)
    assert committed(coordinator, 2) == {2: 40}
