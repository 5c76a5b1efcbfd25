"""A compacted partition's cleaning passes and its transactions (storage/cleaner.py through
Partition.clean): nothing at or past an open transaction's first offset is cleaned, and once
the transaction is aborted its records go, for read_uncommitted readers too."""

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition, PartitionConfig
from replog.replica.results import READ_COMMITTED
from replog.storage.batch_format import TRANSACTIONAL_BIT, NewRecord, encode_batch
from replog.storage.control_batches import ControlType, Marker
from replog.storage.log import Log, LogConfig
from replog.storage.records import batch_headers
from replog.storage.transaction_index import AbortedTxn

from tests.storage.test_cleaner import contents
from tests.support.log_fixtures import ManualClock, read_all

PID = 4000
TIMEOUT_MS = 5000
MAP_BYTES = 64 << 20


async def append(partition: Partition, log: Log, batch: bytearray) -> int:
    """Append as leader, alone in its segment, so that every batch before it is cleanable."""
    result = await partition.append_as_leader(batch, acks=1, timeout_ms=TIMEOUT_MS)
    assert result.error_code == ErrorCode.none, result
    log.roll()
    return result.base_offset


def keyed(value: bytes) -> bytearray:
    return encode_batch([NewRecord(b"k", value)], 1_000_000)


def transactional(value: bytes) -> bytearray:
    return encode_batch([NewRecord(b"k", value)], 1_000_000, producer_id=PID, producer_epoch=0, base_sequence=0,
                        attributes=TRANSACTIONAL_BIT)


async def test_cleaning_stops_at_an_open_transaction_and_then_removes_it_aborted(tmp_path):
    log = Log(tmp_path / "t-0", LogConfig(compact=True, min_cleanable_dirty_ratio=0), ManualClock())
    partition = Partition(log, 1, 0, (1,), (1,), 0, PartitionConfig(min_insync_replicas=1), now_ms=0, leader_id=1)
    try:
        for value in (b"0", b"1", b"2"):
            await append(partition, log, keyed(value))
        first = await append(partition, log, transactional(b"aborted"))
        for value in (b"4", b"5"):
            await append(partition, log, keyed(value))
        log.flush()
        assert partition.last_stable_offset == first
        before = contents(log)
        assert await partition.clean(MAP_BYTES)
        after = contents(log)
        assert [record for record in after if record[0] >= first] == [record for record in before if record[0] >= first]
        assert [record for record in after if record[0] < first] == [(2, b"k", b"2")]

        assert await partition.write_txn_marker(Marker(PID, 0, ControlType.ABORT, 0), TIMEOUT_MS) == ErrorCode.none
        log.roll()
        await append(partition, log, keyed(b"6"))
        log.flush()
        assert partition.last_stable_offset == log.log_end_offset
        assert await partition.clean(MAP_BYTES)
        assert contents(log) == [(7, b"k", b"6")]
        # The aborted batch stays, empty (its producer's last), and so do its marker and entry.
        assert [(header.base_offset, header.record_count) for header in batch_headers(read_all(log, first))][:2] == [
            (first, 0), (6, 1)]
        assert log.collect_aborted_transactions(0, log.log_end_offset) == [AbortedTxn(PID, first, 6, 7)]
        read = partition.read_for_consumer(0, 1 << 20, isolation_level=READ_COMMITTED)
        assert read.aborted_transactions[0].producer_id == PID
    finally:
        partition.close()


async def test_read_committed_finds_an_aborted_transaction_past_segments_the_cleaner_emptied(tmp_path):
    """A read skips empty segments: the aborted transactions it answers must still reach as far
    as its slices do."""
    # Segments of one batch each, that a pass cannot merge.
    log = Log(tmp_path / "t-0", LogConfig(compact=True, min_cleanable_dirty_ratio=0, segment_bytes=100), ManualClock())
    partition = Partition(log, 1, 0, (1,), (1,), 0, PartitionConfig(min_insync_replicas=1), now_ms=0, leader_id=1)
    try:
        await append(partition, log, keyed(b"first"))  # the first batch of the epoch: stays, empty
        for value in (b"0", b"1", b"2", b"3"):
            await append(partition, log, keyed(value))
        log.flush()
        assert await partition.clean(MAP_BYTES)
        assert [segment.size_bytes for segment in log.segments][1:4] == [0, 0, 0], "a pass left empty segments"
        first = await append(partition, log, transactional(b"aborted"))
        assert await partition.write_txn_marker(Marker(PID, 0, ControlType.ABORT, 0), TIMEOUT_MS) == ErrorCode.none
        log.roll()
        await append(partition, log, keyed(b"after"))
        read = partition.read_for_consumer(0, 1 << 20, isolation_level=READ_COMMITTED)
        assert [(aborted.producer_id, aborted.first_offset) for aborted in read.aborted_transactions] == [(PID, first)]
    finally:
        partition.close()
