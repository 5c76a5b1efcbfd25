"""Log compaction (cleanup.policy=compact): Kafka's log cleaner, for one log at a time.

A compacted log keeps at least the latest record of every key. The cleaner works on the log's
"cleanable" head: the whole segments below the high watermark (so that nothing it removes can
be needed again after a truncation: a record is only superseded by a committed one), the
recovery point (so that crash recovery never rescans what it rewrote, whose producer state a
snapshot holds) and the first unstable offset (so that every transaction in it has ended, and
its outcome is known). The head splits at the cleaner checkpoint `first_dirty`: below it lies
what an earlier pass cleaned, above it what arrived since ("dirty").

One pass (CleanJob.run, in a worker thread, on descriptors of its own):

1. Map the dirty part: the offset of the last record of every key (the "offset map"). The map is
   bounded by `map_max_bytes`; if it fills, the pass stops at the last whole segment mapped.
2. Rewrite every segment of the head, oldest first, keeping a record unless a later record of
   its key is in the map, it has no key (a compacted topic cannot use those, as in Kafka), or it
   is a tombstone (null value) older than delete.retention.ms. A batch keeps its base offset,
   last offset delta, timestamps and producer fields, so offsets never move and followers and
   consumers see gaps, as with Kafka; one left with no record is dropped, but for the last batch
   and the last data batch of each producer, kept empty so that its epoch and sequence survive
   (a marker, kept whole), and the first batch of each
   leader epoch (the log's leader-epoch cache names them), kept empty too: a follower copying
   the log learns where each epoch starts from those batches, and one that learnt a later start
   would answer OffsetForLeaderEpoch with it, so that a replica behind with a divergent tail
   below it would keep that tail (KIP-101's truncation, docs/design.md §6.2; found by the
   simulator's compacted schedules).
   Transactions (docs/design.md §16.4), as Kafka's cleaner: an aborted transaction's batches go
   (the log's aborted-transaction index names them, and the offset map skips them, so that an
   aborted record never supersedes a committed one). A marker stays while any batch of its
   transaction does (even one kept empty: a producer state rebuilt from the log would otherwise
   see that transaction open forever), then until delete.retention.ms after it was written, as
   a tombstone. A marker that must stay is kept whole, never emptied, so that a marker is
   always a marker to whoever reads it. An aborted transaction whose marker stays because this
   pass removed its batches keeps its entry in the new segment's index.
3. Write the survivors of consecutive segments into one new segment while their sizes before
   cleaning add up to at most segment.bytes, so that the segment count shrinks too. Each new
   segment is written and fsynced, indexes included (its `.txnindex` only if it keeps an aborted
   transaction), as `<base>.log.cleaned` beside the log.

Then the log's owner swaps them in on its own thread (Log.complete_clean): for each new segment,
the old first segment's index files go, the new `.log` is renamed over it, its new indexes are
renamed in, and the rest of the group is deleted. A crash leaves, at worst, a merged segment
that already holds the segments after it: opening a log deletes those (Log._open), and stray
`.cleaned` files. The pass is refused if the log was truncated, closed or changed at its head
meanwhile.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from replog.storage.batch_format import (
    BATCH_LENGTH_POSITION,
    CODEC_MASK,
    CODEC_NONE,
    CONTROL_BATCH_BIT,
    HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    PRODUCER_ID_POSITION,
    TRANSACTIONAL_BIT,
    Scratch,
    body_of,
    compress,
    parse_header,
    records_of,
    with_payload,
)
from replog.storage.control_batches import ControlType, decode_marker
from replog.storage.errors import CorruptRecordError, InvalidRecordError
from replog.storage.index import OffsetIndex, TimeIndex
from replog.storage.records import MAX_RELATIVE_OFFSET
from replog.storage.segment import segment_file_name, segment_paths
from replog.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex

logger = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_READ_CHUNK_BYTES = 8 << 20
# What one offset-map entry costs in memory beyond its key: a dict slot, the key's bytes object
# and its int (measured with sys.getsizeof on CPython 3.11, rounded up).
_MAP_ENTRY_OVERHEAD_BYTES = 120
_INT32 = struct.Struct(">i")
_PRODUCER_ID = struct.Struct(">q")


class SegmentFile(NamedTuple):
    """A segment of the cleanable head as the job sees it: its own descriptor of the `.log`."""

    base_offset: int
    fd: int
    size_bytes: int


class CleanedSegment(NamedTuple):
    """A new segment replacing `replaced` (indexes into the job's segments, consecutive)."""

    base_offset: int
    replaced: range
    size_bytes: int


class Cleaned(NamedTuple):
    """What a pass swapped in did to its log."""

    bytes_removed: int
    records_removed: int


class CleanResult(NamedTuple):
    cleaned: list[CleanedSegment]
    first_dirty: int  # the new cleaner checkpoint: where the offset map ended
    records_removed: int


class CleanJob:
    """One cleaning pass over a log's cleanable head; see the module docstring."""

    def __init__(self, directory: Path, segments: list[SegmentFile], end_offset: int, first_dirty: int, now_ms: int,
                 delete_retention_ms: int, segment_bytes: int, index_interval_bytes: int, map_max_bytes: int,
                 epoch_starts: frozenset[int], identity: object, uncompressed_bytes_max: int,
                 aborted: Iterable[AbortedTxn]):
        self.directory = directory
        self.segments = segments
        self._end_offset = end_offset  # the base of the first segment after the head
        self._first_dirty = first_dirty
        self._tombstone_horizon_ms = now_ms - delete_retention_ms
        self._segment_bytes = segment_bytes
        self._index_interval_bytes = index_interval_bytes
        self._map_max_bytes = map_max_bytes
        self._epoch_starts = epoch_starts  # base offsets of each leader epoch's first batch
        self.identity = identity  # what the log checks before swapping the result in
        # Where compressed batches are decompressed, bounded as on the append path: a batch the
        # log took before the bound existed fails the pass rather than exhaust memory.
        self._uncompressed_bytes_max = uncompressed_bytes_max
        # The aborted transactions overlapping the head, by first offset.
        self._aborted = sorted(aborted, key=lambda txn: txn.first_offset)
        self._scratch: Scratch | None = None

    def run(self) -> CleanResult:
        """Map, rewrite and write the new segments; closes the job's descriptors."""
        self._scratch = Scratch(self._uncompressed_bytes_max)
        try:
            offset_map, cleaned_count = self._map_dirty_part()
            map_end = self.segments[cleaned_count].base_offset if cleaned_count < len(self.segments) else self._end_offset
            kept_empty = self._last_batches_of_producers(cleaned_count) | self._epoch_starts
            transactions = _Transactions(self._aborted)
            cleaned, records_removed = self._rewrite(cleaned_count, offset_map, kept_empty, transactions)
            return CleanResult(cleaned, map_end, records_removed)
        finally:
            self.close()

    def close(self) -> None:
        for segment in self.segments:
            os.close(segment.fd)
        self.segments = [segment._replace(fd=-1) for segment in self.segments]
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None

    def _records(self, header, batch: memoryview):
        """The batch's records, decompressed into the job's scratch (valid until the next batch's)."""
        return records_of(body_of(batch, self._scratch), header.record_count)

    # -- 1. the offset map ---------------------------------------------------------------------

    def _map_dirty_part(self) -> tuple[dict[bytes, int], int]:
        """The last offset of each key of the dirty segments, and how many leading segments of
        the head it covers (all but the tail of dirty segments past a full map)."""
        offset_map: dict[bytes, int] = {}
        map_bytes = 0
        transactions = None
        for index, segment in enumerate(self.segments):  # bounded by the head's segments
            next_base = self.segments[index + 1].base_offset if index + 1 < len(self.segments) else self._end_offset
            if next_base <= self._first_dirty:
                continue
            if map_bytes > self._map_max_bytes:
                return offset_map, index
            if transactions is None:  # an aborted transaction ended before the map starts has no batch in it
                transactions = _Transactions(txn for txn in self._aborted if txn.last_offset >= segment.base_offset)
            for header, batch in _batches(segment):  # bounded by the segment's batches
                if header.attributes & CONTROL_BATCH_BIT:
                    transactions.marker_discardable(header, batch)
                    continue
                if transactions.aborted(header, batch):
                    continue
                for record in self._records(header, batch):  # bounded by the batch's records
                    if record.key is not None:
                        if record.key not in offset_map:
                            map_bytes += len(record.key) + _MAP_ENTRY_OVERHEAD_BYTES
                        offset_map[record.key] = header.base_offset + record.offset_delta
            if map_bytes > self._map_max_bytes and index == 0:
                logger.warning("offset map of the log cleaner holds %d bytes after one segment (over the %d of "
                               "log.cleaner.dedupe.buffer.size): cleaning it anyway dir=%s segment=%d",
                               map_bytes, self._map_max_bytes, self.directory, segment.base_offset)
        return offset_map, len(self.segments)

    def _last_batches_of_producers(self, count: int) -> set[int]:
        """Base offsets of the last batch and of the last data batch of each producer id in the
        first `count` segments: the one holds its epoch (a marker may have bumped it), the other
        its last sequence."""
        last: dict[int, int] = {}
        last_data: dict[int, int] = {}
        for segment in self.segments[:count]:  # bounded by the head's segments
            for header, batch in _batches(segment):  # bounded by the segment's batches
                (producer_id,) = _PRODUCER_ID.unpack_from(batch, PRODUCER_ID_POSITION)
                if producer_id != NO_PRODUCER_ID:
                    last[producer_id] = header.base_offset
                    if not header.attributes & CONTROL_BATCH_BIT:
                        last_data[producer_id] = header.base_offset
        return set(last.values()) | set(last_data.values())

    # -- 2 and 3. rewriting ---------------------------------------------------------------------

    def _rewrite(self, count: int, offset_map: dict[bytes, int], kept_empty: set[int],
                 transactions: _Transactions) -> tuple[list[CleanedSegment], int]:
        cleaned = []
        records_removed = 0
        start = 0
        while start < count:  # each turn consumes at least one segment
            end = start + 1
            group_bytes = self.segments[start].size_bytes
            while (end < count and group_bytes + self.segments[end].size_bytes <= self._segment_bytes
                   and _next_base(self.segments, end + 1, self._end_offset) - 1 - self.segments[start].base_offset
                   <= MAX_RELATIVE_OFFSET):
                group_bytes += self.segments[end].size_bytes
                end += 1
            writer = _SegmentWriter(self.directory, self.segments[start].base_offset, self._index_interval_bytes)
            try:
                changed = end - start > 1
                for segment in self.segments[start:end]:  # bounded by the group
                    for header, batch in _batches(segment):  # bounded by the segment's batches
                        kept, removed = self._clean_batch(header, batch, offset_map, kept_empty, transactions)
                        records_removed += removed
                        changed = changed or kept is not batch
                        if kept is not None:
                            writer.append(kept)
                aborted = transactions.take_kept_aborted()
                if changed:
                    cleaned.append(CleanedSegment(self.segments[start].base_offset, range(start, end),
                                                  writer.finish(aborted)))
                else:
                    writer.discard()
            except BaseException:
                writer.discard()
                raise
            start = end
        return cleaned, records_removed

    def _clean_batch(self, header, batch: memoryview, offset_map: dict[bytes, int], kept_empty: set[int],
                     transactions: _Transactions) -> tuple[memoryview | bytes | None, int]:
        """The batch as it stays (itself if whole, rebuilt if some records go, None if it goes
        entirely) and how many records it lost."""
        expired = 0 <= header.max_timestamp < self._tombstone_horizon_ms
        if header.attributes & CONTROL_BATCH_BIT:
            if transactions.marker_discardable(header, batch) and expired and header.base_offset not in kept_empty:
                return None, header.record_count
            return batch, 0
        kept_spans = []
        if not transactions.aborted(header, batch):
            body = body_of(batch, self._scratch)
            for record in records_of(body, header.record_count):  # bounded by the batch's records
                offset = header.base_offset + record.offset_delta
                superseded = record.key is None or offset_map.get(record.key, offset) > offset
                if not superseded and not (record.value is None and expired):
                    kept_spans.append((record.start, record.end))
        removed = header.record_count - len(kept_spans)
        if removed == 0:
            return batch, 0
        if not kept_spans and header.base_offset not in kept_empty:
            return None, removed
        if not kept_spans:  # an empty batch is stored uncompressed
            return with_payload(batch, b"", CODEC_NONE, 0), removed
        codec = header.attributes & CODEC_MASK
        records = b"".join(body[start:end] for start, end in kept_spans)
        return with_payload(batch, compress(codec, records), codec, len(kept_spans)), removed


class _Transactions:
    """Which transactions a walk over the head, oldest batch first, is inside of: Kafka's
    CleanedTransactionMetadata. Says of each data batch whether it belongs to an aborted
    transaction, and of each marker whether its transaction has no batch left, so that it may
    go (once old enough)."""

    def __init__(self, aborted: Iterable[AbortedTxn]):
        self._not_started = deque(aborted)  # by first offset
        self._ongoing_committed: set[int] = set()  # producer ids with a batch seen and no marker yet
        # Per producer id: its aborted transaction the walk is inside of, and whether a batch of it was seen.
        self._ongoing_aborted: dict[int, list] = {}
        self._kept_aborted: list[AbortedTxn] = []

    def _start_up_to(self, offset: int) -> None:
        while self._not_started and self._not_started[0].first_offset <= offset:  # bounded by the index
            txn = self._not_started.popleft()
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def aborted(self, header, batch) -> bool:
        """Whether this data batch belongs to an aborted transaction."""
        self._start_up_to(header.last_offset)
        if not header.attributes & TRANSACTIONAL_BIT:
            return False
        (producer_id,) = _PRODUCER_ID.unpack_from(batch, PRODUCER_ID_POSITION)
        ongoing = self._ongoing_aborted.get(producer_id)
        if ongoing is None:
            self._ongoing_committed.add(producer_id)
            return False
        ongoing[1] = True
        return True

    def marker_discardable(self, header, batch) -> bool:
        """Whether the walk saw no batch of the transaction this marker ends."""
        self._start_up_to(header.last_offset)
        if header.record_count == 0:  # a marker Kafka's cleaner emptied: its transaction was gone already
            return True
        try:
            marker = decode_marker(batch)
        except InvalidRecordError:  # a control batch of a kind this broker does not know stays, as with Kafka
            return False
        if marker.control_type is ControlType.ABORT:
            ongoing = self._ongoing_aborted.pop(marker.producer_id, None)
            if ongoing is not None and ongoing[1]:
                self._kept_aborted.append(ongoing[0])
                return False
            return True
        if marker.producer_id in self._ongoing_committed:
            self._ongoing_committed.remove(marker.producer_id)
            return False
        return True

    def take_kept_aborted(self) -> tuple[AbortedTxn, ...]:
        """The aborted transactions whose markers stay because the walk removed their batches,
        since the last call: what the new segment's aborted-transaction index holds."""
        kept, self._kept_aborted = tuple(self._kept_aborted), []
        return kept


def _next_base(segments: list[SegmentFile], index: int, end_offset: int) -> int:
    return segments[index].base_offset if index < len(segments) else end_offset


def _batches(segment: SegmentFile):
    """(header, batch bytes) of every batch of a segment, read in chunks; the log validated them
    on the way in, so only their framing is read here."""
    position = 0
    chunk = memoryview(b"")
    chunk_position = 0
    while position < segment.size_bytes:  # bounded: each turn moves past one batch
        at = position - chunk_position
        header = parse_header(chunk, at, chunk_position) if at + HEADER_SIZE_BYTES <= len(chunk) else None
        if header is None or at + header.size_bytes > len(chunk):
            length = max(_READ_CHUNK_BYTES, _batch_size_at(segment.fd, position))
            chunk = memoryview(os.pread(segment.fd, min(length, segment.size_bytes - position), position))
            chunk_position, at = position, 0
            header = parse_header(chunk, at, chunk_position)
        if at + header.size_bytes > len(chunk):
            raise CorruptRecordError(f"segment {segment.base_offset} ends inside the batch at position {position}")
        yield header, chunk[at:at + header.size_bytes]
        position += header.size_bytes


def _batch_size_at(fd: int, position: int) -> int:
    (length,) = _INT32.unpack(os.pread(fd, 4, position + BATCH_LENGTH_POSITION))
    return length + LOG_OVERHEAD_BYTES


class _SegmentWriter:
    """A new segment's `.log.cleaned` and index files, written and fsynced in the job's thread;
    index entries taken as Segment takes them on append."""

    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int):
        self.log_path, index_path, time_index_path = (cleaned_path(path) for path in segment_paths(directory, base_offset))
        self._txn_index_path = cleaned_path(txn_index_path(directory, base_offset))
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._offset_index = OffsetIndex(index_path, base_offset)
        self._time_index = TimeIndex(time_index_path, base_offset)
        self._index_interval_bytes = index_interval_bytes
        self._index_due_position = index_interval_bytes
        self._position = 0
        self._max_timestamp = NO_TIMESTAMP
        self._pending: list = []
        self._pending_bytes = 0

    def append(self, batch) -> None:
        header = parse_header(batch, 0)
        if self._position > self._index_due_position:
            self._offset_index.keys.append(header.base_offset)
            self._offset_index.values.append(self._position)
            self._time_index.keys.append(self._max_timestamp)
            self._time_index.values.append(header.base_offset)
            self._index_due_position = self._position + self._index_interval_bytes
        self._max_timestamp = max(self._max_timestamp, header.max_timestamp)
        self._pending.append(batch)
        self._pending_bytes += len(batch)
        self._position += len(batch)
        if self._pending_bytes >= _READ_CHUNK_BYTES:
            self._write_pending()

    def _write_pending(self) -> None:
        data = memoryview(b"".join(self._pending))
        while data:  # each turn writes at least one byte or raises
            data = data[os.write(self._fd, data):]
        self._pending = []
        self._pending_bytes = 0

    def finish(self, aborted: tuple[AbortedTxn, ...]) -> int:
        """Write and fsync everything, with `aborted` as the segment's aborted-transaction index;
        the new segment's size."""
        self._write_pending()
        os.fsync(self._fd)
        os.close(self._fd)
        self._fd = -1
        self._offset_index.persist(fsync=True)
        self._time_index.persist(fsync=True)
        txn_index = TransactionIndex(self._txn_index_path)
        for txn in aborted:  # bounded by the aborted transactions of the head
            txn_index.append(txn)
        txn_index.persist(fsync=True)
        return self._position

    def discard(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for path in (self.log_path, self._offset_index.path, self._time_index.path, self._txn_index_path):
            path.unlink(missing_ok=True)


def cleaned_path(path: Path) -> Path:
    return path.with_name(path.name + CLEANED_SUFFIX)


def txn_index_path(directory: Path, base_offset: int) -> Path:
    return directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX)
