"""The aborted-transaction index of one segment: `<base offset, 20 digits>.txnindex`.

Kafka's TransactionIndex, byte for byte: version-0 entries of 34 bytes, big-endian, one per
transaction aborted by a marker in this segment, in the order the markers were written:

    int16 version (0) | int64 producer id | int64 first offset | int64 last offset
    | int64 last stable offset

`first offset` is the transaction's first offset in the partition (it may lie in an earlier
segment), `last offset` its abort marker's, and `last stable offset` the partition's LSO once
the marker was written: a reader collecting the aborted transactions below some offset can stop
at the first entry whose LSO reaches it, since no later entry can begin below.

Like the offset indexes, it is derived from the log: the producer state rebuilds the entries of
the markers it replays (replica/producer_state.py), so a lost or torn file costs a rebuild. A
segment without aborted transactions has no file.

Concurrency: owned by one segment and used from one thread; no locking.
"""

import os
import struct
from pathlib import Path
from typing import NamedTuple

from replog.storage.index import write_behind

TXN_INDEX_SUFFIX = ".txnindex"
_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE_BYTES = _ENTRY.size
assert ENTRY_SIZE_BYTES == 34


class AbortedTxn(NamedTuple):
    """One aborted transaction of a producer in the partition: its data from `first_offset` and
    its abort marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """The aborted transactions whose markers lie in one segment, oldest first. As the offset
    indexes (index.py), the list in memory is the truth while the segment is open and the file
    is written behind it (`persist`: on flush, roll and close)."""

    def __init__(self, path: Path):
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._persisted_count = 0

    def load(self) -> None:
        """Read every whole version-0 entry; a missing file is an empty index. Entries from a
        torn or unknown one on are cut: the producer state's replay adds them again."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            raw = b""
        entries = []
        for position in range(0, len(raw) - ENTRY_SIZE_BYTES + 1, ENTRY_SIZE_BYTES):  # bounded by the file
            version, *fields = _ENTRY.unpack_from(raw, position)
            if version != _VERSION:
                break
            entries.append(AbortedTxn(*fields))
        self.entries = entries
        self._persisted_count = len(entries)
        if len(raw) != len(entries) * ENTRY_SIZE_BYTES:
            self._cut_file(len(entries))

    def append(self, aborted: AbortedTxn) -> None:
        """Add the transaction the next abort marker of this segment ends."""
        if self.entries and aborted.last_offset <= self.entries[-1].last_offset:
            raise ValueError(f"aborted transaction ending at {aborted.last_offset} is not after the index's last, "
                             f"{self.entries[-1].last_offset}")
        self.entries.append(aborted)

    def truncate_from(self, offset: int) -> None:
        """Drop the transactions whose markers are at or after `offset` (the log was cut there)."""
        kept = [entry for entry in self.entries if entry.last_offset < offset]
        if len(kept) == len(self.entries):
            return
        self.entries = kept
        if len(kept) < self._persisted_count:
            self._cut_file(len(kept))
            self._persisted_count = len(kept)

    def _cut_file(self, count: int) -> None:
        if count:
            os.truncate(self.path, count * ENTRY_SIZE_BYTES)
        else:
            self.path.unlink(missing_ok=True)

    def collect(self, start_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """The entries overlapping [start_offset, upper_bound_offset), and whether the search is
        complete: an entry whose LSO reaches the bound was met, so no later segment can hold one
        that begins below it (Kafka's TransactionIndex.collectAbortedTxns)."""
        overlapping = []
        for entry in self.entries:  # bounded by the segment's aborted transactions
            if entry.last_offset >= start_offset and entry.first_offset < upper_bound_offset:
                overlapping.append(entry)
            if entry.last_stable_offset >= upper_bound_offset:
                return overlapping, True
        return overlapping, False

    def persist(self, fsync: bool) -> bool:
        """Write the entries the file lacks (the file is made on the first), fsync'd if asked;
        whether that made the file, whose name the caller must then make durable before anything
        relies on the entries (a producer snapshot past them)."""
        if self._persisted_count == len(self.entries) and not (fsync and self.entries):
            return False
        made = self._persisted_count == 0
        pending = self.entries[self._persisted_count:]
        write_behind(self.path, self._persisted_count * ENTRY_SIZE_BYTES,
                     b"".join(_ENTRY.pack(_VERSION, *entry) for entry in pending), fsync)
        self._persisted_count = len(self.entries)
        return made

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self.entries = []
        self._persisted_count = 0
