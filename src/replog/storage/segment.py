"""One segment of a partition's log: a `.log` file of whole v2 batches and its indexes.

Files, named by the segment's base offset in 20 digits (the offset of its first possible batch):

    00000000000000000000.log        record batches back to back, offsets increasing, no gaps
                                    between batches in the file (offset gaps are allowed: a
                                    compacted leader may leave them and followers copy them)
    00000000000000000000.index      sparse offset index (index.py)
    00000000000000000000.timeindex  sparse time index (index.py)
    00000000000000000000.txnindex   aborted transactions whose markers it holds
                                    (transaction_index.py), only once there is one

Appends go to the end with one os.pwrite of the caller's buffer; nothing else is written on that
path, the indexes grow in memory and are written behind (roll, flush, close). A write that fails
part-way (a full disk) is taken back: the file never keeps a torn batch at its end. A segment also
decides when it is full (Kafka's LogSegment.shouldRoll): its limits are kept as plain thresholds
that an append compares with, so that the produce path does no arithmetic for them. Everything a segment
knows about itself (next offset, max timestamp, index tail) is either kept up to date by append or
re-derived from the `.log` by a scan that validates each batch (`load`, `recover`, truncation),
and a scan cuts the file at the first batch that is torn, corrupt or out of order.

Concurrency: one thread (the partition's event loop) owns a segment. A FileSlice handed out by
`slice` stays valid until the next truncation, deletion or close of this segment; a HeldSlice
made of it (Log.hold) outlives those.
"""

import bisect
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from replog.storage.errors import RecordListTooLargeError
from replog.storage.index import OffsetIndex, TimeIndex
from replog.storage.transaction_index import TXN_INDEX_SUFFIX, TransactionIndex
from replog.storage.records import (
    HEADER_SIZE_BYTES,
    MAX_RELATIVE_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    parse_header,
    scan_segment,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
_NO_LIMIT = 2**63 - 1  # above every int64 timestamp and millisecond clock reading
_LOOKUP_CHUNK_BYTES = 16 << 10  # a lookup reads headers for about one index interval at once
# The page cache kept behind the end of the active segment, and how much more it may grow
# before the rest is dropped. Writing into a fresh page-cache page costs ~8 us here, against
# ~1 us for a recycled one: on these virtual machines the host backs a page the guest has not
# used lately only when it is first touched (measured: 2.1-2.7 ms of CPU per MiB written once
# a file outgrew the recently freed memory, 0.26-0.36 ms with this tail dropped behind it).
# Dropping the pages far behind the end lets the next appends reuse them. Reads within the
# tail (followers, consumers keeping up) stay in memory; older ones go to the disk, as they
# would once the page cache of a busy broker filled up.
PAGE_CACHE_TAIL_BYTES = 64 << 20
PAGE_CACHE_EVICTION_STEP_BYTES = 16 << 20


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def segment_paths(directory: Path, base_offset: int) -> tuple[Path, Path, Path]:
    """The `.log`, `.index` and `.timeindex` of the segment at `base_offset`."""
    return tuple(directory / segment_file_name(base_offset, suffix)  # type: ignore[return-value]
                 for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX))


class FileSlice(NamedTuple):
    """`size_bytes` bytes of an open file from `position`: what a fetch sends with sendfile."""

    fd: int
    position: int
    size_bytes: int

    def read(self) -> bytes:
        """Copy the bytes out, for callers that cannot send from a file descriptor."""
        return os.pread(self.fd, self.size_bytes, self.position)


class HeldSlice:
    """A FileSlice held for a send that may come after other work has run (a response queued
    behind others on its connection): a descriptor of its own keeps the bytes readable if the
    segment is closed, deleted or replaced by the cleaner meanwhile, and `current()` says
    whether the range still holds the bytes that were read (a truncation rewrites it in place).
    Whoever holds one closes it."""

    __slots__ = ("fd", "position", "size_bytes", "current")

    def __init__(self, piece: FileSlice, current: Callable[[], bool]):
        self.fd = os.dup(piece.fd)
        self.position = piece.position
        self.size_bytes = piece.size_bytes
        self.current = current

    def __len__(self) -> int:
        return self.size_bytes

    def read_from(self, skipped_bytes: int, size_bytes_max: int | None = None) -> bytes:
        """The bytes after the first `skipped_bytes`, at most `size_bytes_max` of them (None: all);
        OSError if the file no longer has them."""
        wanted = self.size_bytes - skipped_bytes
        if size_bytes_max is not None:
            wanted = min(wanted, size_bytes_max)
        data = os.pread(self.fd, wanted, self.position + skipped_bytes)
        if len(data) != wanted:
            raise OSError(f"log file shrank under a held slice: {len(data)} of {wanted} bytes")
        return data

    def pieces_from(self, skipped_bytes: int, piece_bytes: int) -> Iterator[bytes]:
        """The bytes after the first `skipped_bytes`, `piece_bytes` at a time. The kernel is told
        to read them all ahead first: behind the page cache's tail they come from the disk, and
        one piece's read at a time would wait for each."""
        os.posix_fadvise(self.fd, self.position + skipped_bytes, self.size_bytes - skipped_bytes, os.POSIX_FADV_WILLNEED)
        for skipped in range(skipped_bytes, self.size_bytes, piece_bytes):  # bounded by the slice
            yield self.read_from(skipped, piece_bytes)

    def close(self) -> None:
        os.close(self.fd)


class SegmentLimits(NamedTuple):
    """The log's settings that a segment enforces (LogConfig's names)."""

    segment_bytes: int
    segment_ms: int
    index_interval_bytes: int


class SegmentCut(NamedTuple):
    """What a scan removed: the bytes from `position` on, where the batch at `offset` was bad."""

    position: int
    offset: int
    bytes_cut: int
    reason: str


class SegmentOpened(NamedTuple):
    """What opening a segment (load, recover, recover_after) found: the cut it made, if any, and
    the producer runs (records.SegmentScan) of the batches it checked at or after the offset the
    caller asked about."""

    cut: SegmentCut | None
    producer_runs: list


class _HeaderReader:
    """Reads batch headers forward through chunks of a file, so that walking the headers of many
    small batches costs one syscall per chunk."""

    def __init__(self, fd: int, end_position: int, chunk_bytes: int):
        self._fd = fd
        self._end_position = end_position
        self._chunk_bytes = chunk_bytes
        self._chunk = b""
        self._chunk_position = 0

    def header_at(self, position: int) -> BatchHeader:
        """The header at `position`; its `position` field is relative to an internal chunk."""
        if position < self._chunk_position or position + HEADER_SIZE_BYTES > self._chunk_position + len(self._chunk):
            self._chunk = os.pread(self._fd, min(self._chunk_bytes, self._end_position - position), position)
            self._chunk_position = position
        return parse_header(self._chunk, position - self._chunk_position, self._chunk_position)


class PageCacheEviction:
    """Drops a segment file's cached pages below a position, through a duplicate of its
    descriptor (the segment may be closed or deleted meanwhile). Dirty pages are not dropped,
    only sent to the disk: the eviction from 0 that follows drops them, clean by then. Blocks on
    the disk's queue: run it off the event loop."""

    def __init__(self, fd: int, below: int):
        self._fd = fd
        self._below = below

    def run(self) -> None:
        try:
            os.posix_fadvise(self._fd, 0, self._below, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(self._fd)


class Segment:
    """A `.log` file plus its offset and time index; see the module docstring for the layout."""

    def __init__(self, directory: Path, base_offset: int, limits: SegmentLimits, created_ms: int):
        self.base_offset = base_offset
        self.log_path, index_path, time_index_path = segment_paths(directory, base_offset)
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        self.offset_index = OffsetIndex(index_path, base_offset)
        self.time_index = TimeIndex(time_index_path, base_offset)
        # Loaded by whoever opens an existing segment (Log): its owner, the producer state's
        # replay, keeps it in step with the log.
        self.txn_index = TransactionIndex(directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX))
        self.created_ms = created_ms
        self.size_bytes = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self._segment_bytes = limits.segment_bytes
        self._segment_ms = limits.segment_ms
        # An append past this offset must start a new segment: index entries could not hold it.
        self._last_offset_max = base_offset + MAX_RELATIVE_OFFSET
        self._set_first_batch_timestamp(NO_TIMESTAMP)
        self._index_interval_bytes = limits.index_interval_bytes
        # A batch starting past this file position takes the next index entry: the last entry's
        # position plus index.interval.bytes, so that the append path compares, never sums.
        self._index_due_position = limits.index_interval_bytes
        # The file position below which the page cache was last asked to drop this file's pages.
        self._evicted_below = 0

    def _set_first_batch_timestamp(self, timestamp: int) -> None:
        """Set the max timestamp of the first batch, from which segment.ms counts (as in Kafka,
        so that the roll schedule survives restarts), and the roll thresholds it implies: a
        batch newer than it by more than segment.ms, or if it carries no timestamp, a clock
        reading past the segment's creation by more than segment.ms."""
        self.first_batch_timestamp = timestamp
        if timestamp >= 0:
            self._roll_max_timestamp = timestamp + self._segment_ms
            self._roll_now_ms = _NO_LIMIT
        else:
            self._roll_max_timestamp = _NO_LIMIT
            self._roll_now_ms = self.created_ms + self._segment_ms

    def apply_roll_limits(self, limits: SegmentLimits) -> None:
        """The topic's segment.bytes or segment.ms changed: this segment rolls by the new ones,
        as Kafka's shouldRoll reads the current config. index.interval.bytes applies from the
        next segment on."""
        self._segment_bytes = limits.segment_bytes
        self._segment_ms = limits.segment_ms
        self._set_first_batch_timestamp(self.first_batch_timestamp)

    # -- append path -------------------------------------------------------------------------

    def append(self, buf, last_offset: int, max_timestamp: int, now_ms: int,
               headers: list[BatchHeader] | None) -> bool:
        """Write validated batches at the end of the file in one syscall, unless they must start
        a new segment: then write nothing and return False. An empty segment takes any append
        of at most segment.bytes.

        `last_offset` and `max_timestamp` are of all of `buf`. `headers` are its batches
        (positions relative to `buf`), or None when `buf` is one batch whose base offset is this
        segment's next offset: a leader's usual produce, whose facts are then the run's and for
        which no header object is built.
        """
        position = self.size_bytes
        size_bytes = len(buf)
        if (position + size_bytes > self._segment_bytes or last_offset > self._last_offset_max
                or max_timestamp > self._roll_max_timestamp or now_ms > self._roll_now_ms):
            if size_bytes > self._segment_bytes:
                raise RecordListTooLargeError(f"append of {size_bytes} bytes exceeds segment.bytes {self._segment_bytes}")
            if position:
                return False
        written = os.pwrite(self.fd, buf, position)
        if written != size_bytes:
            self._write_rest(buf, position, written)
        self.size_bytes = position + size_bytes
        if headers is None:
            self._track_batch(position, self.next_offset, last_offset + 1, max_timestamp)
        else:
            for header in headers:  # bounded by the batches of one append
                self._track_batch(position + header.position, header.base_offset, header.next_offset,
                                  header.max_timestamp)
        return True

    def _write_rest(self, buf, position: int, written: int) -> None:
        """After a short write (the file system filled up part-way, or a quota was reached):
        write the rest, which either completes or fails with the reason (ENOSPC, EDQUOT, EFBIG).
        On failure the partial batches are taken back, so that the file still ends on a batch
        boundary; the size the segment knows is unchanged either way until its caller moves it."""
        view = memoryview(buf)
        try:
            while written < len(view):  # bounded: each turn writes at least a byte or raises
                step = os.pwrite(self.fd, view[written:], position + written)
                if step == 0:
                    raise OSError(errno.ENOSPC, f"short write: {written} of {len(view)} bytes", str(self.log_path))
                written += step
        except OSError:
            os.ftruncate(self.fd, position)
            raise

    def take_page_cache_eviction(self) -> "PageCacheEviction | None":
        """The eviction of this file's pages more than PAGE_CACHE_TAIL_BYTES behind its end, once
        that is PAGE_CACHE_EVICTION_STEP_BYTES past the last one; for another thread to run."""
        below = self.size_bytes - PAGE_CACHE_TAIL_BYTES
        if below - self._evicted_below < PAGE_CACHE_EVICTION_STEP_BYTES:
            return None
        self._evicted_below = below
        return PageCacheEviction(os.dup(self.fd), below)

    def _track_batch(self, position: int, base_offset: int, next_offset: int, max_timestamp: int) -> None:
        """Take the index entry (if due) and the segment's state from a batch now in the file."""
        if position > self._index_due_position:
            # The time entry holds the max timestamp of everything before this batch. Appended
            # to the index lists directly: with 16 KiB produces every append takes an entry.
            self.offset_index.keys.append(base_offset)
            self.offset_index.values.append(position)
            self.time_index.keys.append(self.max_timestamp)
            self.time_index.values.append(base_offset)
            self._index_due_position = position + self._index_interval_bytes
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
        if position == 0:
            self._set_first_batch_timestamp(max_timestamp)
        self.next_offset = next_offset

    def retention_timestamp_ms(self) -> int:
        """The max timestamp of the batches; if none carries one, the file's modification time,
        as Kafka does."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return os.fstat(self.fd).st_mtime_ns // 1_000_000

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0

    # -- opening and recovery ------------------------------------------------------------------

    def load(self) -> SegmentOpened:
        """Open a segment whose bytes are trusted (flushed, or cleanly shut down).

        Loads the index files, drops them if they contradict themselves or the file, and rescans
        only the tail after the last index entry (at most about one index interval), which both
        re-derives the segment's state and extends a short index.
        """
        self.offset_index.load()
        self.time_index.load()
        if not self._indexes_consistent():
            self._drop_indexes()
        return self._rescan_tail(self.base_offset, _NO_LIMIT)

    def recover(self, min_offset: int, producers_from_offset: int) -> SegmentOpened:
        """Re-validate every batch (CRC, lengths, offsets >= `min_offset` and increasing) and
        rebuild both indexes from the file; cut the first bad batch and everything after it."""
        self._drop_indexes()
        return self._rescan_tail(min_offset, producers_from_offset)

    def recover_after(self, flushed_offset: int, min_offset: int) -> SegmentOpened:
        """`recover`, trusting what lies below `flushed_offset` (the log's recovery point: the file
        and the index entries into it were durable up to there, so a crash left them whole):
        re-validate from the last index entry at or below it on, rebuilding the rest. Producer
        runs start at `flushed_offset`."""
        self.offset_index.load()
        self.time_index.load()
        kept = bisect.bisect_right(self.offset_index.keys, flushed_offset)
        self.offset_index.truncate_to_count(kept)
        self.time_index.truncate_to_count(kept)
        if not self._indexes_consistent():
            self._drop_indexes()
        return self._rescan_tail(min_offset, flushed_offset)

    def _indexes_consistent(self) -> bool:
        offsets = self.offset_index.keys
        positions = self.offset_index.values
        timestamps = self.time_index.keys
        return (
            self.time_index.values == offsets
            and all(a < b for a, b in zip(offsets, offsets[1:]))
            and all(a < b for a, b in zip(positions, positions[1:]))
            and all(a <= b for a, b in zip(timestamps, timestamps[1:]))
            and (not offsets or (offsets[0] >= self.base_offset and 0 < positions[0] and positions[-1] < self.size_bytes))
        )

    def _drop_indexes(self) -> None:
        self.offset_index.truncate_to_count(0)
        self.time_index.truncate_to_count(0)

    def _rescan_tail(self, min_offset: int, producers_from_offset: int) -> SegmentOpened:
        """Re-derive state from the last index entry on (or from the start), validating."""
        count = len(self.offset_index)
        if count and self._base_offset_at(self.offset_index.values[-1]) != self.offset_index.keys[-1]:
            self._drop_indexes()
            count = 0
        if count:
            # Drop the last entry and scan from its batch, which re-creates the entry; the time
            # entry holds the max timestamp of everything before that batch.
            offset = self.offset_index.keys[-1]
            position = self.offset_index.values[-1]
            self.max_timestamp = self.time_index.keys[-1]
            self.offset_index.truncate_to_count(count - 1)
            self.time_index.truncate_to_count(count - 1)
            self._index_due_position = position - 1  # re-creates the dropped entry
            self.next_offset = offset
        else:
            position = 0
            self.max_timestamp = NO_TIMESTAMP
            self._index_due_position = self._index_interval_bytes
            self.next_offset = max(self.base_offset, min_offset)
        opened = self._scan(position, producers_from_offset)
        self._set_first_batch_timestamp(self._header_at(0).max_timestamp if self.size_bytes else NO_TIMESTAMP)
        return opened

    def _scan(self, position: int, producers_from_offset: int) -> SegmentOpened:
        """Check every batch from `position` on (records.scan_segment), take their index entries
        and the segment's state from them, and cut the file at the first bad one."""
        scan = scan_segment(self.fd, position, self.size_bytes, self.next_offset, self.base_offset,
                            self._index_due_position, self._index_interval_bytes, self.max_timestamp,
                            producers_from_offset)
        self.offset_index.keys += scan.index_offsets
        self.offset_index.values += scan.index_positions
        self.time_index.keys += scan.index_timestamps
        self.time_index.values += scan.index_offsets
        self.next_offset = scan.next_offset
        self.max_timestamp = scan.max_timestamp
        self._index_due_position = scan.index_due_position
        cut = None if scan.refusal is None else self._cut(scan.end_position, scan.refusal)
        return SegmentOpened(cut, scan.producer_runs)

    def _cut(self, position: int, reason: str) -> SegmentCut:
        bytes_cut = self.size_bytes - position
        os.ftruncate(self.fd, position)
        # The cut must be on disk before new batches are written over the same range.
        os.fsync(self.fd)
        self.size_bytes = position
        return SegmentCut(position, self.next_offset, bytes_cut, reason)

    def _header_at(self, position: int) -> BatchHeader:
        return parse_header(os.pread(self.fd, HEADER_SIZE_BYTES, position), 0)

    def _base_offset_at(self, position: int) -> int:
        return int.from_bytes(os.pread(self.fd, 8, position), "big", signed=True)

    # -- reads ---------------------------------------------------------------------------------

    def _headers_from(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from `position` to the end; no CRC (appended data
        was validated on the way in)."""
        reader = _HeaderReader(self.fd, self.size_bytes, _LOOKUP_CHUNK_BYTES)
        while position < self.size_bytes:  # bounded: each pass advances >= 61 bytes
            header = reader.header_at(position)
            yield position, header
            position += header.size_bytes

    def find_position(self, offset: int) -> int | None:
        """Position of the first batch whose last offset is >= `offset`, if any."""
        entry = self.offset_index.floor(offset)
        for position, header in self._headers_from(entry[1] if entry else 0):
            if header.last_offset >= offset:
                return position
        return None

    def find_timestamp(self, timestamp: int) -> BatchHeader | None:
        """The first batch whose max timestamp is >= `timestamp`, if any."""
        i = self.time_index.last_entry_older_than(timestamp)
        start = self.offset_index.values[i] if i >= 0 else 0
        for _, header in self._headers_from(start):
            if header.max_timestamp >= timestamp:
                return header
        return None

    def batch_size_at(self, position: int) -> int:
        return self._header_at(position).size_bytes

    # -- truncation and lifecycle --------------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; return the bytes removed."""
        position = self.find_position(offset)
        if position is None:
            return 0
        kept_entries = bisect.bisect_left(self.offset_index.values, position)
        self.offset_index.truncate_to_count(kept_entries)
        self.time_index.truncate_to_count(kept_entries)
        self.txn_index.truncate_from(offset)
        bytes_removed = self.size_bytes - position
        os.ftruncate(self.fd, position)
        os.fsync(self.fd)
        self.size_bytes = position
        cut = self._rescan_tail(self.base_offset, _NO_LIMIT).cut
        assert cut is None, f"data before a truncation point failed validation: {cut}"
        return bytes_removed

    @property
    def index_paths(self) -> tuple[Path, Path, Path]:
        """The index files a flush makes durable after the `.log` (the transaction index's may be absent)."""
        return self.offset_index.path, self.time_index.path, self.txn_index.path

    def persist_indexes(self) -> bool:
        """Write index entries not yet in their files (no fsync): done when a segment rolls.
        Whether it made the transaction index's file (the others are rebuilt by any recovery;
        that one only from the producer snapshot on, so its name must be made durable)."""
        self.offset_index.persist(fsync=False)
        self.time_index.persist(fsync=False)
        return self.txn_index.persist(fsync=False)

    def flush(self, with_indexes: bool) -> None:
        """Make the `.log` durable, then (if asked) its indexes, so that an index never runs
        ahead of its log. Without them the indexes stay in memory: that is for the active
        segment under flush.messages, whose every flush should cost one fsync; recovery rebuilds
        the entries after the last ones a background flush wrote (Log.begin_flush)."""
        os.fsync(self.fd)
        if with_indexes:
            self.offset_index.persist(fsync=True)
            self.time_index.persist(fsync=True)
            self.txn_index.persist(fsync=True)

    def close(self) -> None:
        self.persist_indexes()
        os.close(self.fd)

    def close_handle(self) -> None:
        """Release the file descriptor and write nothing, as a killed process would."""
        os.close(self.fd)

    def delete(self) -> None:
        os.close(self.fd)
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
