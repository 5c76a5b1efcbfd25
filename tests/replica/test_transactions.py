"""A partition's transactions: open transactions and the LSO, markers and their fencing,
read_committed reads and the aborted-transaction index, KIP-890's verification guards, and
what followers, truncation, crash recovery and snapshots keep of them."""

import random

import pytest

from kio.schema.errors import ErrorCode

from replog.replica.partition import LATEST_TIMESTAMP, Partition, PartitionConfig, ReplicaState
from replog.replica.producer_state import SNAPSHOT_SUFFIX
from replog.replica.results import READ_COMMITTED, AbortedTransaction, EpochEndOffset, ProducerStateView
from replog.storage.batch_format import TRANSACTIONAL_BIT
from replog.storage.control_batches import ControlType, Marker
from replog.storage.log import Log, LogConfig
from replog.storage.transaction_index import ENTRY_SIZE_BYTES, AbortedTxn
from tests.sim.disk import PageCache
from tests.support.log_fixtures import ManualClock
from tests.support.producer_batches import producer_batch

LEADER, FOLLOWER = 1, 2
PID, OTHER_PID = 4000, 4001
TIMEOUT_MS = 5000
POWER_LOSS_SEEDS = 10


def make_partition(directory, leader_id=LEADER, name="orders-0", clock=None, **log_settings) -> Partition:
    log = Log(directory / name, LogConfig(**log_settings), clock or ManualClock())
    return Partition(log, LEADER, 0, (LEADER,), (LEADER,), 0, PartitionConfig(min_insync_replicas=1), now_ms=0,
                     leader_id=leader_id)


def txn_batch(sequence: int, records: int = 1, pid: int = PID, epoch: int = 0) -> bytearray:
    return producer_batch(records, pid, epoch, sequence, attributes=TRANSACTIONAL_BIT)


def plain_batch(sequence: int, records: int = 1, pid: int = PID, epoch: int = 0) -> bytearray:
    return producer_batch(records, pid, epoch, sequence)


def marker(control_type: ControlType, pid: int = PID, epoch: int = 0, coordinator_epoch: int = 0) -> Marker:
    return Marker(pid, epoch, control_type, coordinator_epoch)


async def append(partition: Partition, batch: bytearray, **options) -> int:
    result = await partition.append_as_leader(batch, acks=1, timeout_ms=TIMEOUT_MS, **options)
    assert result.error_code == ErrorCode.none, result
    return result.base_offset


def committed_read(partition: Partition, fetch_offset: int = 0):
    return partition.read_for_consumer(fetch_offset, 1 << 20, isolation_level=READ_COMMITTED)


@pytest.fixture
def leader(tmp_path):
    partition = make_partition(tmp_path)
    yield partition
    if partition.state is not ReplicaState.CLOSED:
        partition.close()


async def test_an_open_transaction_holds_the_last_stable_offset_at_its_first_offset(leader):
    await append(leader, plain_batch(0, pid=OTHER_PID))
    first = await append(leader, txn_batch(0, records=2))
    await append(leader, plain_batch(1, pid=OTHER_PID))
    assert leader.high_watermark == 4
    assert leader.last_stable_offset == first == 1
    assert leader.open_transaction_count == 1
    read = committed_read(leader)
    assert sum(piece.size_bytes for piece in read.slices) == len(plain_batch(0))
    assert (read.last_stable_offset, read.aborted_transactions) == (1, ())
    assert leader.read_for_consumer(0, 1 << 20).last_stable_offset == 1, "read_uncommitted answers the LSO too"
    assert committed_read(leader, 1).slices == []
    assert leader.list_offsets(LATEST_TIMESTAMP, isolation_level=READ_COMMITTED).offset == 1
    assert leader.list_offsets(LATEST_TIMESTAMP).offset == 4


async def test_a_commit_marker_makes_the_transaction_stable(leader):
    await append(leader, txn_batch(0))
    await append(leader, txn_batch(1))
    assert await leader.write_txn_marker(marker(ControlType.COMMIT), TIMEOUT_MS) == ErrorCode.none
    assert leader.log_end_offset == 3
    assert leader.last_stable_offset == leader.high_watermark == 3
    assert leader.open_transaction_count == 0
    read = committed_read(leader)
    assert read.aborted_transactions == ()
    assert sum(piece.size_bytes for piece in read.slices) == leader.log.size_bytes
    assert leader.log.collect_aborted_transactions(0, 3) == []


async def test_an_abort_marker_is_indexed_and_answered_to_read_committed_fetches(leader):
    await append(leader, plain_batch(0, pid=OTHER_PID))
    await append(leader, txn_batch(0, records=2))  # offsets 1-2
    assert await leader.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # offset 3
    assert leader.last_stable_offset == 4
    assert leader.log.collect_aborted_transactions(0, 4) == [AbortedTxn(PID, 1, 3, 4)]
    assert committed_read(leader).aborted_transactions == (AbortedTransaction(PID, 1),)
    assert committed_read(leader, 4).aborted_transactions == ()
    assert leader.read_for_consumer(0, 1 << 20).aborted_transactions is None, "read_uncommitted has no list"


async def test_the_aborted_index_answers_only_transactions_overlapping_the_range(leader):
    for pid in (PID, OTHER_PID):  # two aborted transactions, one after the other
        await append(leader, txn_batch(0, records=2, pid=pid))
        assert await leader.write_txn_marker(marker(ControlType.ABORT, pid=pid), TIMEOUT_MS) == ErrorCode.none
    assert leader.log.collect_aborted_transactions(0, 6) == [AbortedTxn(PID, 0, 2, 3), AbortedTxn(OTHER_PID, 3, 5, 6)]
    assert leader.log.collect_aborted_transactions(3, 6) == [AbortedTxn(OTHER_PID, 3, 5, 6)]
    assert leader.log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)]


async def test_an_abort_while_another_transaction_is_open_records_that_ones_start_as_its_lso(leader):
    await append(leader, txn_batch(0, pid=PID))  # 0
    await append(leader, txn_batch(0, pid=OTHER_PID))  # 1
    assert await leader.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 2
    assert leader.log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 1)]
    assert leader.last_stable_offset == 1


async def test_a_plain_batch_from_a_producer_in_a_transaction_is_invalid_txn_state(leader):
    await append(leader, txn_batch(0))
    result = await leader.append_as_leader(plain_batch(1), acks=1, timeout_ms=TIMEOUT_MS)
    assert result.error_code == ErrorCode.invalid_txn_state
    assert leader.log_end_offset == 1


async def test_markers_are_fenced_by_producer_epoch_then_coordinator_epoch(leader):
    await append(leader, txn_batch(0, epoch=3))
    assert await leader.write_txn_marker(marker(ControlType.COMMIT, epoch=2), TIMEOUT_MS) == ErrorCode.invalid_producer_epoch
    assert await leader.write_txn_marker(marker(ControlType.COMMIT, epoch=3, coordinator_epoch=5),
                                         TIMEOUT_MS) == ErrorCode.none
    assert await leader.write_txn_marker(marker(ControlType.ABORT, epoch=3, coordinator_epoch=4),
                                         TIMEOUT_MS) == ErrorCode.transaction_coordinator_fenced
    assert leader.log_end_offset == 2, "refused markers are not written"


async def test_a_marker_for_a_producer_without_a_transaction_is_written_and_bumps_its_epoch(leader):
    assert await leader.write_txn_marker(marker(ControlType.ABORT, epoch=1), TIMEOUT_MS) == ErrorCode.none
    assert leader.log_end_offset == 1
    assert leader.log.collect_aborted_transactions(0, 1) == [], "no data, nothing for readers to drop"
    # The producer's next epoch starts at sequence 0; its older epoch is fenced.
    assert (await leader.append_as_leader(txn_batch(0, epoch=0), acks=1, timeout_ms=TIMEOUT_MS)).error_code == \
        ErrorCode.invalid_producer_epoch
    assert (await leader.append_as_leader(txn_batch(3, epoch=1), acks=1, timeout_ms=TIMEOUT_MS)).error_code == \
        ErrorCode.out_of_order_sequence_number
    await append(leader, txn_batch(0, epoch=1))


async def test_markers_go_only_to_the_leader(tmp_path):
    follower = make_partition(tmp_path, leader_id=FOLLOWER)
    try:
        assert await follower.write_txn_marker(marker(ControlType.COMMIT), TIMEOUT_MS) == ErrorCode.not_leader_or_follower
    finally:
        follower.close()


async def test_producer_states_describe_epochs_sequences_and_open_transactions(leader):
    await append(leader, plain_batch(0, records=3, pid=OTHER_PID))
    await append(leader, txn_batch(0, records=2, epoch=2))
    assert await leader.write_txn_marker(marker(ControlType.COMMIT, epoch=2, coordinator_epoch=7), TIMEOUT_MS) == \
        ErrorCode.none
    await append(leader, txn_batch(2, epoch=2))
    assert leader.producer_states() == [
        ProducerStateView(PID, 2, 2, 0, 7, 6),
        ProducerStateView(OTHER_PID, 0, 2, 0, -1, -1),
    ]


async def test_a_batch_opening_a_transaction_needs_the_producers_current_verification_guard(leader):
    assert leader.needs_verification(plain_batch(0)) is None
    assert leader.needs_verification(txn_batch(0, epoch=1)) == (PID, 1)
    stale = leader.verification_guard(PID)
    assert leader.verification_guard(PID) is stale, "requests of one transaction share the guard"
    # A marker ends what that guard was verified for: a batch still carrying it is refused.
    assert await leader.write_txn_marker(marker(ControlType.ABORT, epoch=1), TIMEOUT_MS) == ErrorCode.none
    result = await leader.append_as_leader(txn_batch(0, epoch=1), acks=1, timeout_ms=TIMEOUT_MS,
                                           verification_guard=stale)
    assert result.error_code == ErrorCode.invalid_txn_state
    guard = leader.verification_guard(PID)
    assert guard is not stale
    await append(leader, txn_batch(0, epoch=1), verification_guard=guard)
    assert leader.needs_verification(txn_batch(1, epoch=1)) is None, "its transaction is open here now"
    await append(leader, txn_batch(1, epoch=1), verification_guard=object())  # no verification needed


async def test_retention_never_passes_the_first_offset_of_an_open_transaction(tmp_path):
    clock = ManualClock()
    partition = make_partition(tmp_path, clock=clock, segment_bytes=200, retention_ms=1)
    try:
        await append(partition, plain_batch(0, pid=OTHER_PID))
        first = await append(partition, txn_batch(0))
        for sequence in range(1, 6):
            await append(partition, plain_batch(sequence, pid=OTHER_PID))
        assert len(partition.log.segments) > 3
        clock.advance(10)
        partition.delete_retained_segments()
        assert partition.log_start_offset <= first
        assert partition.last_stable_offset == first
    finally:
        partition.close()


async def test_producers_with_an_open_transaction_never_expire(leader):
    await append(leader, txn_batch(0))
    await append(leader, plain_batch(0, pid=OTHER_PID))
    assert leader.producer_state.remove_expired(now_ms=10**9, expiration_ms=1) == 1
    assert list(leader.producer_state.producers) == [PID]


async def test_followers_learn_transactions_and_aborts_from_the_batches_they_copy(tmp_path, leader):
    await append(leader, txn_batch(0, records=2))
    await append(leader, txn_batch(0, pid=OTHER_PID))
    assert await leader.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none
    follower = make_partition(tmp_path, leader_id=FOLLOWER, name="copy-0")
    try:
        copied = b"".join(piece.read() for piece in leader.log.read(0, 1 << 20))
        follower.append_as_follower(copied, leader.high_watermark, 0)
        assert follower.log.collect_aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 3, 2)]
        assert follower.producer_state.first_unstable_offset() == 2
        # Leading now, it knows the transaction still open.
        follower.become_leader(1, (LEADER,), (LEADER,), now_ms=0)
        assert follower.last_stable_offset == 2
        assert committed_read(follower).aborted_transactions == (AbortedTransaction(PID, 0),)
    finally:
        follower.close()


async def test_a_truncation_forgets_the_aborts_it_cuts(tmp_path, leader):
    await append(leader, txn_batch(0, records=2))
    assert await leader.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 2
    follower = make_partition(tmp_path, leader_id=FOLLOWER, name="copy-0")
    try:
        follower.append_as_follower(b"".join(piece.read() for piece in leader.log.read(0, 1 << 20)), 0, 0)
        follower.become_follower(FOLLOWER, 1, now_ms=0)  # the same leader at a newer epoch
        follower.truncate_for_new_leader(EpochEndOffset(ErrorCode.none, 0, 2))
        assert follower.log_end_offset == 2
        assert follower.log.collect_aborted_transactions(0, 3) == []
        assert follower.producer_state.first_unstable_offset() == 0, "the transaction is open again"
    finally:
        follower.close()


@pytest.mark.parametrize("snapshot_first", [False, True])
async def test_crash_recovery_rebuilds_open_transactions_the_lso_and_the_aborted_index(tmp_path, snapshot_first):
    partition = make_partition(tmp_path, segment_bytes=300)
    await append(partition, txn_batch(0, records=2))  # 0-1, aborted below
    await append(partition, txn_batch(0, pid=OTHER_PID))  # 2, left open by the crash
    if snapshot_first:
        partition.producer_state.take_snapshot(partition.log_end_offset)
    assert await partition.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 3
    await append(partition, plain_batch(5, pid=PID + 2))
    partition.log.close_handles()  # killed: no snapshot, no index written

    reopened = make_partition(tmp_path, segment_bytes=300)
    try:
        assert reopened.log.collect_aborted_transactions(0, 5) == [AbortedTxn(PID, 0, 3, 2)]
        assert reopened.producer_state.first_unstable_offset() == 2
        assert reopened.producer_states()[1] == ProducerStateView(OTHER_PID, 0, 0, 0, -1, 2)
        holding_marker = [segment for segment in reopened.log.segments if segment.base_offset <= 3][-1]
    finally:
        reopened.close()
    assert holding_marker.txn_index.path.stat().st_size == ENTRY_SIZE_BYTES


async def test_an_aborted_index_rebuilt_by_recovery_survives_the_next_crash(tmp_path):
    """The load that rebuilt it snapshots the producer state, and the next load replays only from
    that snapshot: the rebuilt entries must be on disk by then, as no flush rewrites them."""
    partition = make_partition(tmp_path, segment_bytes=300)
    await append(partition, txn_batch(0, records=2))  # 0-1
    assert await partition.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 2
    await append(partition, plain_batch(5, pid=PID + 2))
    partition.log.close_handles()  # killed: no snapshot, no index written
    make_partition(tmp_path, segment_bytes=300).log.close_handles()  # rebuilt, then killed again

    reopened = make_partition(tmp_path, segment_bytes=300)
    try:
        assert reopened.log.collect_aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 2, 3)]
    finally:
        reopened.close()


async def test_a_clean_restart_keeps_transactions_in_the_snapshot(tmp_path):
    partition = make_partition(tmp_path)
    await append(partition, txn_batch(0, records=2, epoch=1))
    assert await partition.write_txn_marker(marker(ControlType.ABORT, epoch=1, coordinator_epoch=3), TIMEOUT_MS) == \
        ErrorCode.none
    await append(partition, txn_batch(0, pid=OTHER_PID))
    partition.close()

    reopened = Partition(Log(tmp_path / "orders-0", LogConfig(), ManualClock(), closed_cleanly=True), LEADER, 1,
                         (LEADER,), (LEADER,), 4, PartitionConfig(), now_ms=0)
    try:
        marker_timestamp_ms = ManualClock().now_ms
        assert reopened.producer_states() == [ProducerStateView(PID, 1, 1, marker_timestamp_ms, 3, -1),
                                              ProducerStateView(OTHER_PID, 0, 0, 0, -1, 3)]
        assert reopened.last_stable_offset == 3
        assert reopened.log.collect_aborted_transactions(0, 4) == [AbortedTxn(PID, 0, 2, 3)]
        assert await reopened.write_txn_marker(marker(ControlType.ABORT, epoch=1, coordinator_epoch=2), TIMEOUT_MS) == \
            ErrorCode.transaction_coordinator_fenced
    finally:
        reopened.close()


async def test_snapshots_written_before_transactions_still_load(tmp_path):
    directory = tmp_path / "orders-0"
    partition = make_partition(tmp_path)
    await append(partition, plain_batch(0, records=2))
    partition.close()
    for path in directory.glob(f"*{SNAPSHOT_SUFFIX}"):
        path.unlink()
    # producer id, epoch, last timestamp, first and last sequence, first and last offset
    (directory / f"{2:020d}{SNAPSHOT_SUFFIX}").write_text(f"0\n1\n{PID} 0 0 0 1 0 1\n")

    reopened = Partition(Log(directory, LogConfig(), ManualClock(), closed_cleanly=True), LEADER, 1, (LEADER,),
                         (LEADER,), 2, PartitionConfig(), now_ms=0)
    try:
        assert reopened.producer_states() == [ProducerStateView(PID, 0, 1, 0, -1, -1)]
        await append(reopened, plain_batch(2))
    finally:
        reopened.close()


async def test_a_kill_during_close_never_leaves_a_snapshot_ahead_of_the_aborted_index(tmp_path, monkeypatch):
    partition = make_partition(tmp_path)
    await append(partition, txn_batch(0, records=2))
    assert await partition.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 2
    log = partition.log

    def killed() -> None:
        log.close_handles()
        raise KeyboardInterrupt("killed while closing")

    monkeypatch.setattr(log, "close", killed)
    with pytest.raises(KeyboardInterrupt):
        partition.close()
    monkeypatch.undo()

    reopened = make_partition(tmp_path)
    try:
        assert reopened.log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)]
    finally:
        reopened.close()


async def test_the_flush_that_makes_an_aborted_index_file_syncs_its_name(leader, monkeypatch):
    """The producer snapshot the background flush installs is past the abort: a crash that
    kept the snapshot but lost the index's name would lose the abort for good."""
    from replog.storage import background_io

    await append(leader, txn_batch(0))
    job = leader.log.begin_flush()
    job.run()
    leader.log.complete_flush(job)
    synced: list[object] = []
    monkeypatch.setattr(background_io, "fsync_directory", lambda directory: synced.append(directory))
    assert await leader.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none
    job = leader.log.begin_flush()
    job.run()
    assert synced == [leader.log.directory]
    assert leader.log.segments[0].txn_index.path.stat().st_size == ENTRY_SIZE_BYTES


async def test_an_abort_in_the_active_segment_survives_a_close_then_a_power_loss(tmp_path):
    """A close checkpoints the recovery point past the marker: the index entry below it, which no
    recovery rebuilds, must be durable by then, its file's name included."""
    for seed in range(POWER_LOSS_SEEDS):  # the model's random cuts: enough to lose what is not durable
        directory = tmp_path / str(seed)
        with PageCache(directory, random.Random(seed)).installed() as cache:
            partition = make_partition(directory)
            await append(partition, txn_batch(0, records=2))  # 0-1
            assert await partition.write_txn_marker(marker(ControlType.ABORT), TIMEOUT_MS) == ErrorCode.none  # 2
            partition.close()
            cache.lose_unflushed(directory)
        reopened = make_partition(directory)
        try:
            assert reopened.log.collect_aborted_transactions(0, 3) == [AbortedTxn(PID, 0, 2, 3)], seed
        finally:
            reopened.close()
