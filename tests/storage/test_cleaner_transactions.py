"""The log cleaner (storage/cleaner.py) on logs that hold transactions: aborted records go,
committed ones stay, markers stay while their transaction has a batch and then for
delete.retention.ms, what a producer's state is rebuilt from stays, and nothing at or past the
first unstable offset is touched."""

import struct

import pytest

from replog.replica.producer_state import ProducerStateManager
from replog.storage.batch_format import (
    CONTROL_BATCH_BIT,
    LEADER_EPOCH_POSITION,
    TRANSACTIONAL_BIT,
    NewRecord,
    encode_batch,
)
from replog.storage.control_batches import ControlType, Marker, encode_marker
from replog.storage.records import batch_headers
from replog.storage.transaction_index import AbortedTxn, TransactionIndex

from tests.storage.test_cleaner import batch, clean, committed, contents
from tests.support.log_fixtures import ManualClock, open_log, read_all

DAY_MS = 24 * 3600 * 1000
COMPACTED = dict(compact=True, min_cleanable_dirty_ratio=0, delete_retention_ms=DAY_MS)


class Transactions:
    """Writes transactions into a log, indexing the aborted ones as a partition's producer
    state does."""

    def __init__(self, log, clock):
        self.log = log
        self.clock = clock
        self.open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self.sequences: dict[int, int] = {}

    def write(self, producer_id: int, *records: tuple[bytes, bytes | None]) -> int:
        sequence = self.sequences.get(producer_id, 0)
        self.sequences[producer_id] = sequence + len(records)
        first = self._append(encode_batch([NewRecord(key, value) for key, value in records], self.clock(),
                                          producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                                          attributes=TRANSACTIONAL_BIT))
        self.open.setdefault(producer_id, first)
        return first

    def end(self, producer_id: int, control_type: ControlType, epoch: int = 0) -> int:
        offset = self._append(encode_marker(Marker(producer_id, epoch, control_type, 0), self.clock()))
        first = self.open.pop(producer_id, None)
        if control_type is ControlType.ABORT and first is not None:
            self.log.add_aborted(AbortedTxn(producer_id, first, offset, offset + 1))
        return offset

    def plain(self, *records: tuple[bytes, bytes | None]) -> int:
        return self._append(batch(*records, timestamp_ms=self.clock()))

    def _append(self, encoded: bytearray) -> int:
        struct.pack_into(">q", encoded, 0, self.log.log_end_offset)  # outside the CRC, as a leader assigns it
        struct.pack_into(">i", encoded, LEADER_EPOCH_POSITION, 0)
        first, _ = self.log.append_as_follower(encoded)
        return first

    def roll_and_commit(self) -> None:
        """Close the active segment behind a new batch, and flush: the head a pass may take."""
        self.log.roll()
        self.plain((b"tail", b"%d" % self.log.log_end_offset))
        committed(self.log)


def markers(log) -> list[int]:
    return [header.base_offset for header in batch_headers(read_all(log, 0)) if header.attributes & CONTROL_BATCH_BIT]


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def txns(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, **COMPACTED)
    log.take_recovered_producers()  # the empty log's, which its partition's producer state takes at open
    return Transactions(log, clock)


def test_aborted_records_go_and_never_supersede_committed_ones(txns):
    txns.plain((b"a", b"committed"))  # 0
    txns.write(1, (b"a", b"aborted"), (b"b", b"aborted"))  # 1-2
    abort = txns.end(1, ControlType.ABORT)  # 3
    txns.write(2, (b"c", b"committed"))  # 4
    commit = txns.end(2, ControlType.COMMIT)  # 5
    txns.write(1, (b"d", b"committed"))  # 6: producer 1's last batch
    txns.end(1, ControlType.COMMIT)  # 7
    txns.roll_and_commit()
    assert clean(txns.log)
    assert [(offset, key, value) for offset, key, value in contents(txns.log) if key != b"tail"] == [
        (0, b"a", b"committed"), (4, b"c", b"committed"), (6, b"d", b"committed")]
    # The abort marker stays, as the entry of its transaction in the new segment's index: this
    # pass removed the transaction's batch, and a reader may have fetched it just before.
    assert markers(txns.log) == [abort, commit, 7]
    cleaned = txns.log.segments[0]
    assert cleaned.txn_index.entries == [AbortedTxn(1, 1, abort, abort + 1)]
    reread = TransactionIndex(cleaned.txn_index.path)
    reread.load()
    assert reread.entries == cleaned.txn_index.entries


def test_a_marker_stays_while_its_transaction_has_a_batch_then_for_delete_retention(txns, clock):
    txns.plain((b"first", b"x"))  # 0: the first batch of the leader epoch, kept whatever comes
    txns.write(1, (b"k", b"1"))  # 1
    first_commit = txns.end(1, ControlType.COMMIT)  # 2
    txns.write(1, (b"k", b"2"))  # 3
    second_commit = txns.end(1, ControlType.COMMIT)  # 4
    txns.write(2, (b"k", b"aborted"))  # 5: producer 2's last batch, kept empty
    producer_2_abort = txns.end(2, ControlType.ABORT)  # 6
    txns.write(3, (b"k", b"aborted"))  # 7
    producer_3_abort = txns.end(3, ControlType.ABORT)  # 8
    txns.write(3, (b"k", b"3"))  # 9
    txns.end(3, ControlType.COMMIT)  # 10
    txns.roll_and_commit()
    markers_before = markers(txns.log)
    assert clean(txns.log)
    # Offsets 1 and 7 held superseded or aborted records and went this pass: their markers stay.
    assert [(header.base_offset, header.record_count) for header in batch_headers(read_all(txns.log, 0))
            if header.base_offset <= 10] == [(0, 1), (2, 1), (3, 0), (4, 1), (5, 0), (6, 1), (8, 1), (9, 1), (10, 1)]
    txns.roll_and_commit()
    assert clean(txns.log)
    assert markers(txns.log) == markers_before, "markers stay for delete.retention.ms after their batches went"
    clock.advance(DAY_MS + 1)
    txns.roll_and_commit()
    assert clean(txns.log)
    # Producer 1's first transaction and producer 3's aborted one have no batch left; the rest
    # do (producer 2's aborted batch is kept empty: it is the producer's last).
    assert markers(txns.log) == [second_commit, producer_2_abort, 10]
    assert first_commit not in markers(txns.log) and producer_3_abort not in markers(txns.log)
    assert [(offset, key, value) for offset, key, value in contents(txns.log) if key != b"tail"] == [
        (0, b"first", b"x"), (9, b"k", b"3")]


def test_nothing_at_or_past_the_first_unstable_offset_is_cleaned(txns):
    for round_ in range(3):
        txns.plain((b"k", b"%d" % round_))
        txns.log.roll()
    unstable = txns.write(1, (b"k", b"open"))
    txns.log.roll()
    for round_ in range(3, 6):
        txns.plain((b"k", b"%d" % round_))
        txns.log.roll()
    txns.roll_and_commit()
    before = contents(txns.log)
    assert clean(txns.log, first_unstable_offset=unstable)
    after = contents(txns.log)
    assert [record for record in after if record[0] >= unstable] == [r for r in before if r[0] >= unstable]
    assert [record for record in after if record[0] < unstable] == [(2, b"k", b"2")]
    assert not clean(txns.log, first_unstable_offset=unstable), "the head below the open transaction is clean"


def test_a_producer_state_rebuilt_from_a_cleaned_log_is_the_one_rebuilt_before(tmp_path, txns, clock):
    txns.plain((b"first", b"x"))
    txns.write(1, (b"k", b"1"))
    txns.end(1, ControlType.COMMIT)
    txns.write(1, (b"k", b"2"))
    txns.end(1, ControlType.COMMIT)
    txns.write(2, (b"k", b"aborted"))
    txns.end(2, ControlType.ABORT)
    txns.write(3, (b"k", b"3"))
    txns.end(3, ControlType.COMMIT)
    # A coordinator that timed producer 3 out bumps its epoch with an abort marker for a
    # transaction this partition never saw: that marker alone holds the epoch.
    txns.end(3, ControlType.ABORT, epoch=1)
    txns.write(4, (b"k", b"4"))  # superseded below, its marker's data gone
    txns.end(4, ControlType.COMMIT)
    txns.plain((b"k", b"5"))
    txns.roll_and_commit()

    def rebuilt(name: str) -> dict:
        (tmp_path / name).mkdir()  # a directory without snapshots: the state comes from the log alone
        state = ProducerStateManager(tmp_path / name, txns.log.topic, txns.log.partition)
        state.load(txns.log)
        state.on_high_watermark(txns.log.log_end_offset)
        assert state.first_unstable_offset() is None, "every transaction has ended"
        return {producer_id: (entry.epoch, entry.last_sequence, entry.last_offset, entry.last_timestamp_ms,
                              entry.coordinator_epoch, entry.current_txn_first_offset)
                for producer_id, entry in state.producers.items()}

    before = rebuilt("before")
    assert before.keys() == {1, 2, 3, 4}
    assert clean(txns.log)
    clock.advance(DAY_MS + 1)
    txns.roll_and_commit()
    assert clean(txns.log)
    assert not [record for record in contents(txns.log) if record[1] == b"k" and record[2] != b"5"]
    assert rebuilt("after") == before
