"""The sparse offset index and time index of one segment.

On disk, big-endian, Kafka's entry layouts:

    <base>.index      8 bytes an entry:  int32 offset - base, int32 position in the .log
    <base>.timeindex  12 bytes an entry: int64 timestamp,     int32 offset - base

Entries are taken together, every index.interval.bytes of log, at the start of a batch:

    offset index (offset, position): the batch whose base offset is `offset` starts at `position`.
    time index (timestamp, offset): every batch of the segment before `offset` has a max timestamp
        <= `timestamp` (the running maximum, so timestamps never decrease).

The lists in memory (`keys`, `values`; the segment appends to them directly) are the truth while
the segment is open; the file is written behind them (on flush, roll and close), as Kafka's mmap'd
index is. An index is only ever derived from the .log, so a lost or damaged index file costs a
rebuild, never data: the segment checks what it loads and rebuilds what does not fit (see
segment.py).

Concurrency: owned by one segment and used from one thread; no locking.
"""

import bisect
import errno
import itertools
import os
import struct
from pathlib import Path
from typing import ClassVar


def write_behind(path: Path, position: int, encoded: bytes, fsync: bool) -> None:
    """Write the entries `encoded` at `position` of an index file written behind its segment
    (made if missing; emptied first when `position` is 0), and with fsync make it durable."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        if position == 0:
            os.ftruncate(fd, 0)
        if os.pwrite(fd, encoded, position) != len(encoded):
            # The file system filled up: the entries count as unwritten, and the next persist
            # writes them over the torn tail.
            raise OSError(errno.ENOSPC, "short write of index entries", str(path))
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


class SparseIndex:
    """Sorted (key, value) entries mirrored to a file of fixed-size records."""

    ENTRY: ClassVar[struct.Struct]

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self.keys: list[int] = []
        self.values: list[int] = []
        self._persisted_count = 0

    def __len__(self) -> int:
        return len(self.keys)

    # Which field of an entry is stored relative to the base offset: 0 the key, 1 the value.
    RELATIVE_FIELD: ClassVar[int]

    def _entries_format(self, count: int) -> struct.Struct:
        # One struct call per run of entries, not one per entry: a GiB of 16 KiB batches has 65,536.
        return struct.Struct(">" + self.ENTRY.format.lstrip(">") * count)

    def load(self) -> None:
        """Read every whole entry of the file; a missing file is an empty index."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        count = len(raw) // self.ENTRY.size
        fields = self._entries_format(count).unpack_from(raw)
        unshift = self.base_offset.__add__
        if self.RELATIVE_FIELD == 0:
            self.keys, self.values = list(map(unshift, fields[0::2])), list(fields[1::2])
        else:
            self.keys, self.values = list(fields[0::2]), list(map(unshift, fields[1::2]))
        self._persisted_count = count if count * self.ENTRY.size == len(raw) else 0

    def _encode(self, start: int) -> bytes:
        """The entries from `start` on, as the file holds them."""
        keys, values = self.keys[start:], self.values[start:]
        shift = (-self.base_offset).__add__
        if self.RELATIVE_FIELD == 0:
            keys = map(shift, keys)
        else:
            values = map(shift, values)
        return self._entries_format(len(self.keys) - start).pack(*itertools.chain.from_iterable(zip(keys, values)))

    def truncate_to_count(self, count: int) -> None:
        """Keep the first `count` entries, in memory and in the file."""
        del self.keys[count:]
        del self.values[count:]
        if self._persisted_count > count:
            self._persisted_count = count
            os.truncate(self.path, count * self.ENTRY.size)

    def persist(self, fsync: bool) -> None:
        """Write the entries the file lacks; with fsync, make the whole file durable."""
        pending = len(self.keys) - self._persisted_count
        if pending == 0 and not fsync:
            return
        write_behind(self.path, self._persisted_count * self.ENTRY.size, self._encode(self._persisted_count), fsync)
        self._persisted_count = len(self.keys)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)


class OffsetIndex(SparseIndex):
    """offset -> position of the batch starting at that offset."""

    ENTRY = struct.Struct(">ii")
    RELATIVE_FIELD = 0

    def floor(self, offset: int) -> tuple[int, int] | None:
        """The entry with the largest offset <= `offset`, if any."""
        i = bisect.bisect_right(self.keys, offset) - 1
        return (self.keys[i], self.values[i]) if i >= 0 else None


class TimeIndex(SparseIndex):
    """running max timestamp -> offset before which no batch exceeds it."""

    ENTRY = struct.Struct(">qi")
    RELATIVE_FIELD = 1

    def last_entry_older_than(self, timestamp: int) -> int:
        """Index of the last entry whose timestamp is < `timestamp` (-1 if none): every batch
        before that entry's offset is older than `timestamp`, so a search may start there."""
        return bisect.bisect_left(self.keys, timestamp) - 1
