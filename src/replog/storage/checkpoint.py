"""Checkpoint files: small text files replaced atomically, in Kafka's format.

    line 1   version (0)
    line 2   number of entries
    then     one entry a line, fields separated by one space

Files written here:
    replication-offset-checkpoint      `topic partition offset`: high watermark per partition
    recovery-point-offset-checkpoint   `topic partition offset`: offset below which a log is
                                       known flushed (one per partition directory here)
    leader-epoch-checkpoint            `epoch start_offset`: the leader-epoch cache (KIP-101)

A write goes to `<name>.tmp`, is fsynced, renamed over the file, and the directory is fsynced, so
a reader sees the old file or the new one, never a mix. Reading is tolerant: a missing file is
empty; a file with another version, a wrong count or a malformed line is logged and treated as
empty (every caller has a safe answer for "nothing known": recover from the start, learn the high
watermark again from the leader).

Concurrency: one writer per file (the owning partition or the replica manager); not thread-safe.
"""

import bisect
import errno
import logging
import os
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import NamedTuple

logger = logging.getLogger(__name__)

CHECKPOINT_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
TMP_SUFFIX = ".tmp"
READ_CHUNK_BYTES = 1 << 20


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_if_present(path: Path) -> None:
    """fsync the file at `path`, unless it is gone (deleted with its log or segment meanwhile)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_checkpoint(path: Path, entries: list[str]) -> None:
    """Replace `path` atomically and durably with the version, count and entry lines."""
    os.replace(write_checkpoint_aside(path, entries), path)
    fsync_directory(path.parent)


def write_checkpoint_aside(path: Path, entries: list[str]) -> Path:
    """Write what `path` should hold, durably, to `<name>.tmp` beside it and return that path:
    the first half of write_checkpoint, for a writer that renames it into place later."""
    content = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(f"{line}\n" for line in entries)
    encoded = content.encode()
    tmp_path = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        if os.write(fd, encoded) != len(encoded):
            # A full file system: a torn checkpoint renamed into place would read as empty.
            raise OSError(errno.ENOSPC, "short write of a checkpoint", str(tmp_path))
        os.fsync(fd)
    finally:
        os.close(fd)
    return tmp_path


def read_file(path: Path | str) -> bytes:
    """The file's bytes, read with os calls: Path.read_text's text layer cost more than the read
    itself for the small files every log's load reads (each log's, at a broker's restart)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, READ_CHUNK_BYTES):  # bounded by the file's size
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_checkpoint(path: Path, fields_per_entry: int | tuple[int, ...]) -> list[list[str]]:
    """The entries of a checkpoint file as split lines; [] if missing or unreadable. A tuple of
    field counts: a format that grew, whose every entry has one of them (all the same)."""
    try:
        lines = read_file(path).decode().splitlines()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        logger.warning("unreadable checkpoint path=%s error=%s", path, error)
        return []
    lines = [line for line in lines if line.strip()]
    try:
        version = int(lines[0])
        count = int(lines[1])
    except (IndexError, ValueError):
        logger.warning("malformed checkpoint header path=%s", path)
        return []
    entries = [line.split() for line in lines[2:]]
    counts = fields_per_entry if isinstance(fields_per_entry, tuple) else (fields_per_entry,)
    if (version != CHECKPOINT_VERSION or count != len(entries) or any(len(e) not in counts for e in entries)
            or len({len(e) for e in entries}) > 1):
        logger.warning("malformed checkpoint path=%s version=%s count=%s lines=%d", path, version, count, len(entries))
        return []
    return entries


class OffsetCheckpoint:
    """A file of `topic partition offset` lines: high watermarks or recovery points."""

    def __init__(self, path: Path):
        self.path = path
        # A write in a worker thread may still be running when the owner writes a later one
        # (at shutdown): snapshots are numbered, and an older one never overwrites a newer.
        self._writing = threading.Lock()
        self._snapshots_taken = 0
        self._snapshot_written = 0

    def write(self, offsets: Mapping[tuple[str, int], int]) -> None:
        self.snapshot(offsets)()

    def snapshot(self, offsets: Mapping[tuple[str, int], int]) -> Callable[[], None]:
        """Take `offsets` now; the call returned writes them, in any thread, unless a later
        snapshot was written first."""
        lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
        with self._writing:
            self._snapshots_taken += 1
            number = self._snapshots_taken

        def write() -> None:
            with self._writing:
                if number > self._snapshot_written:
                    write_checkpoint(self.path, lines)
                    self._snapshot_written = number

        return write

    def read(self) -> dict[tuple[str, int], int]:
        try:
            return {(topic, int(partition)): int(offset) for topic, partition, offset in read_checkpoint(self.path, 3)}
        except ValueError:
            logger.warning("malformed offset in checkpoint path=%s", self.path)
            return {}


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Leader epoch -> first offset written in it (KIP-101), persisted on every change.

    Epochs and start offsets both strictly increase along the list. Followers ask the leader for
    `end_offset_for(epoch)` of their latest epoch and truncate there instead of at their high
    watermark, which is what keeps a new leader from diverging from its followers.
    """

    def __init__(self, path: Path):
        self._checkpoint_path = path
        self.unsaved = False  # the entries differ from the file (trim_at_open)
        try:
            self.entries = [EpochEntry(int(e), int(o)) for e, o in read_checkpoint(path, 2)]
        except ValueError:
            logger.warning("malformed leader epoch checkpoint path=%s", path)
            self.entries = []
        self._refresh_latest_epoch()

    def _refresh_latest_epoch(self) -> None:
        # An attribute kept beside the entries, not a property, because every leader append
        # compares with it.
        self.latest_epoch: int = self.entries[-1].epoch if self.entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset`; entries that contradict it (an epoch
        >= it, or a start offset >= it) are dropped, as in Kafka's LeaderEpochFileCache."""
        if self._assigned(epoch, start_offset):
            self._changed()
        else:
            self._write_if(False)

    def _assigned(self, epoch: int, start_offset: int) -> bool:
        """`assign`'s change of the entries in memory; False if they already said so."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must be >= 0")
        if self.entries and self.entries[-1].epoch == epoch and start_offset >= self.entries[-1].start_offset:
            return False
        kept = len(self.entries)
        while kept and (self.entries[kept - 1].epoch >= epoch or self.entries[kept - 1].start_offset >= start_offset):
            kept -= 1  # bounded by the number of entries
        self.entries[kept:] = [EpochEntry(epoch, start_offset)]
        return True

    def begin_at_log_end(self, epoch: int, log_end_offset: int) -> None:
        """`assign` for a new leader's epoch, which starts at the log end (Kafka's makeLeader),
        without writing the file yet: no record is in the epoch, so an entry lost with the
        machine names nothing the log holds, and the epoch's first append writes it before its
        bytes (save_if_unsaved). Written at once, the file cost each election a write aside,
        two fsyncs and a rename on the event loop, which made a broker taking over thousands of
        leaderships wait on the disk for each."""
        if self.entries and self.entries[-1].epoch >= epoch:
            self.assign(epoch, log_end_offset)  # contradicts an epoch that may hold records: written now
        elif self._assigned(epoch, log_end_offset):
            self._refresh_latest_epoch()
            self.unsaved = True

    def epoch_at(self, offset: int) -> int:
        """The leader epoch in force at `offset` (the latest epoch for the log end)."""
        holding = bisect.bisect_right([entry.start_offset for entry in self.entries], offset) - 1
        return self.entries[holding].epoch if holding >= 0 else UNDEFINED_EPOCH

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for an OffsetForLeaderEpoch request.

        The end offset of `epoch` is the start offset of the first higher epoch (or the log end
        offset for the latest epoch); the epoch answered is the largest known one <= `epoch`.
        Unknown or undefined epochs answer (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET).
        """
        if epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self.entries[-1].epoch:
            return epoch, log_end_offset
        epochs = [entry.epoch for entry in self.entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self.entries[0].start_offset
        return self.entries[higher - 1].epoch, self.entries[higher].start_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs starting at or after `end_offset` (the log was truncated there)."""
        self._write_if(self._truncated_from_end(end_offset))

    def truncate_from_start(self, start_offset: int) -> None:
        """Forget epochs wholly before `start_offset`; the epoch in force there now starts there."""
        self._write_if(self._truncated_from_start(start_offset))

    def trim_at_open(self, log_start_offset: int, log_end_offset: int) -> None:
        """Both truncations, for a log just opened, without writing the file: an idle partition's
        only entry starts at its log end and goes at every open, and rewriting the file for it
        (a write aside, two fsyncs and a rename) was a large share of reopening many logs. Until the
        next call that may change the entries writes them, the file holds what this open read,
        and an open after a crash trims it again. Appends, which call nothing for an epoch already
        known, call save_if_unsaved."""
        if self._truncated_from_end(log_end_offset) | self._truncated_from_start(log_start_offset):
            self._refresh_latest_epoch()
            self.unsaved = True

    def _truncated_from_end(self, end_offset: int) -> bool:
        kept = bisect.bisect_left([entry.start_offset for entry in self.entries], end_offset)
        if kept == len(self.entries):
            return False
        del self.entries[kept:]
        return True

    def _truncated_from_start(self, start_offset: int) -> bool:
        in_force = bisect.bisect_right([entry.start_offset for entry in self.entries], start_offset) - 1
        if in_force < 0 or self.entries[in_force].start_offset == start_offset and in_force == 0:
            return False
        self.entries[: in_force + 1] = [EpochEntry(self.entries[in_force].epoch, start_offset)]
        return True

    def clear(self) -> None:
        had_entries = bool(self.entries)
        self.entries = []
        self._write_if(had_entries)

    def save_if_unsaved(self) -> None:
        """Write what no call has written yet (trim_at_open, begin_at_log_end)."""
        self._write_if(False)

    def _write_if(self, changed: bool) -> None:
        """For a call that may leave the entries as they were: written if they changed, or if a
        trim at open left them unwritten."""
        if changed or self.unsaved:
            self._changed()

    def _changed(self) -> None:
        """Every write of the entries ends here. Unsaved until the write succeeds: after one that
        failed (a full disk), the next append's save_if_unsaved writes them before its bytes."""
        self._refresh_latest_epoch()
        self.unsaved = True
        write_checkpoint(self._checkpoint_path, [f"{entry.epoch} {entry.start_offset}" for entry in self.entries])
        self.unsaved = False
