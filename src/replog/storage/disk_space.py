"""The free space of the file system holding the data directory, and what the broker stops
writing as it runs out (`log.dir.min.free.bytes`).

Kafka has no such threshold: it writes until a write fails, then takes the whole log directory
offline. Redpanda refuses produce below `storage_min_free_bytes`; Zeebe also stops taking
replicated data, at a lower mark than client commands. Here, as free space falls:

    OK               at or above log.dir.min.free.bytes: everything is written
    PRODUCE_REFUSED  below it: leaders answer Produce with KAFKA_STORAGE_ERROR; followers and
                     the group coordinator still append, so that what leaders elsewhere took
                     is replicated and consumers keep their committed offsets
    APPENDS_REFUSED  below half of it: no records are appended at all (followers back off, an
                     OffsetCommit is answered NOT_COORDINATOR, as Kafka answers it after a
                     storage error); the last half stays for what the broker writes besides
                     records: checkpoints, producer snapshots, index files, the embedded store's
                     database, a restart's recovery and the cleaner's rewritten segments

and the broker leaves each state by itself once space returns. Entering a state is one WARNING
line, leaving it one INFO line; nothing is logged per refused request.

`watch` reads statvfs every CHECK_INTERVAL_S, in a worker thread, under the task group of its
owner (the broker). Between two readings the appends count the bytes they write against the
last one (`wrote`: a subtraction and a comparison, never a system call), so that the state
changes at the threshold, not up to an interval of appends later: a client pipelining 1 MiB
batches wrote 22 MiB in the 170 ms before a 100 ms poll noticed. The readings catch what else
was written (indexes, the store, other processes) and space coming back. Free bytes are what
an unprivileged writer may use (statvfs's f_bavail, df's "Avail"): a broker running as root
could also fill the blocks the file system reserves for root, which an operator expects to keep.

A write that fails anyway (a burst between two checks, another process filling the disk, a
quota, EIO) is the writer's to take back (segment.py) and answer; `report_write_failure` is the
line it logs, the same for every partition so that the repeated-warning filter (obs/logs.py)
holds back the copies that every partition's every retry would print.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Callable
from pathlib import Path

from replog.storage.errors import KafkaStorageError, os_error_name

logger = logging.getLogger(__name__)

# Appends count their own bytes between checks: a check catches the rest, and space returning.
# One statvfs (microseconds) and a worker-thread hop each.
CHECK_INTERVAL_S = 0.5
_UNKNOWN_BYTES = 2**63 - 1  # free space before the first check: nothing is refused
_NEVER_BYTES = -(2**63)


class DiskSpaceState(enum.Enum):
    OK = "ok"
    PRODUCE_REFUSED = "produce_refused"
    APPENDS_REFUSED = "appends_refused"


def statvfs_free_bytes(directory: Path) -> int:
    stats = os.statvfs(directory)
    return stats.f_bavail * stats.f_frsize


class DiskSpace:
    """The data directory's free space as of the last check, and the state it puts the broker in
    (see the module docstring). `refuses_produce` and `refuses_appends` are what the append
    paths read."""

    def __init__(self, directory: Path, min_free_bytes: int,
                 free_bytes_of: Callable[[Path], int] = statvfs_free_bytes):
        if min_free_bytes < 0:
            raise ValueError(f"log.dir.min.free.bytes must be >= 0, got {min_free_bytes}")
        self.directory = directory
        self.min_free_bytes = min_free_bytes
        self._free_bytes_of = free_bytes_of
        # The last reading, less what appends wrote since; plenty before the first.
        self._free_bytes = _UNKNOWN_BYTES
        self._read = False
        # Below this the state changes for the worse: the threshold of the next state down.
        self._worse_below_bytes = min_free_bytes
        self.state = DiskSpaceState.OK
        self.refuses_produce = False
        self.refuses_appends = False

    @property
    def free_bytes(self) -> int | None:
        """As of the last check, less what appends wrote since; None before the first check."""
        return self._free_bytes if self._read else None

    def wrote(self, size_bytes: int) -> None:
        """An append wrote `size_bytes` of records: counted against the last reading (the
        append path's only cost here)."""
        self._free_bytes -= size_bytes
        if self._free_bytes < self._worse_below_bytes:
            self.update(self._free_bytes)

    def check(self) -> None:
        """Read the free space now, on the calling thread: once at start-up, before serving."""
        self.update(self._free_bytes_of(self.directory))

    async def watch(self) -> None:
        """Check every CHECK_INTERVAL_S until cancelled. A check that fails (the directory gone,
        EIO) is logged and leaves the state as it was."""
        while True:  # ends when the owner cancels it
            await asyncio.sleep(CHECK_INTERVAL_S)
            estimate_before_bytes = self._free_bytes
            try:
                free_bytes = await asyncio.to_thread(self._free_bytes_of, self.directory)
            except OSError as error:
                logger.warning("free space of the log directory not read dir=%s error=%s", self.directory,
                               os_error_name(error))
                continue
            # Appends made while the reading was taken may be missing from it: taken off again
            # (at worst twice), or the reading would undo their count, and the state flap back.
            self.update(free_bytes - (estimate_before_bytes - self._free_bytes))

    def update(self, free_bytes: int) -> None:
        """Take a reading of the free space; one line if it changes the state."""
        self._free_bytes = free_bytes
        self._read = True
        half_bytes = self.min_free_bytes // 2
        if free_bytes >= self.min_free_bytes:
            state, self._worse_below_bytes = DiskSpaceState.OK, self.min_free_bytes
        elif free_bytes >= half_bytes:
            state, self._worse_below_bytes = DiskSpaceState.PRODUCE_REFUSED, half_bytes
        else:
            state, self._worse_below_bytes = DiskSpaceState.APPENDS_REFUSED, _NEVER_BYTES
        if state is self.state:
            return
        previous, self.state = self.state, state
        self.refuses_produce = state is not DiskSpaceState.OK
        self.refuses_appends = state is DiskSpaceState.APPENDS_REFUSED
        self._log_change(previous)

    def _log_change(self, previous: DiskSpaceState) -> None:
        fields = (self.directory, self.free_bytes, self.min_free_bytes)
        if self.state is DiskSpaceState.APPENDS_REFUSED:
            logger.warning("free space below half of log.dir.min.free.bytes: produce, follower appends and group "
                           "coordinator writes refused with KAFKA_STORAGE_ERROR until space returns dir=%s "
                           "free_bytes=%d min_free_bytes=%d", *fields)
        elif self.state is DiskSpaceState.PRODUCE_REFUSED and previous is DiskSpaceState.OK:
            logger.warning("free space below log.dir.min.free.bytes: produce refused with KAFKA_STORAGE_ERROR until "
                           "space returns dir=%s free_bytes=%d min_free_bytes=%d", *fields)
        elif self.state is DiskSpaceState.PRODUCE_REFUSED:
            logger.info("free space back above half of log.dir.min.free.bytes: follower appends and group coordinator "
                        "writes resumed, produce still refused dir=%s free_bytes=%d min_free_bytes=%d", *fields)
        else:
            logger.info("free space back above log.dir.min.free.bytes: produce resumed dir=%s free_bytes=%d "
                        "min_free_bytes=%d", *fields)


# The state of logs opened outside a broker (tests, tools): nothing watches it, nothing is refused.
NOT_WATCHED = DiskSpace(Path("."), 0)


def report_write_failure(directory: Path, writing: str, error: OSError | KafkaStorageError, subject: str) -> None:
    """The line for a write to the data directory that failed: WARNING naming the directory,
    what was written and the errno's name, identical for every partition (the repeated-warning
    filter keeps one per interval, with a count); the partition (`subject`) and the whole error
    at DEBUG."""
    reason = error.reason if isinstance(error, KafkaStorageError) else os_error_name(error)
    logger.warning("log directory write failed dir=%s writing=%s error=%s", directory, writing, reason)
    logger.debug("log directory write failed dir=%s writing=%s subject=%s", directory, writing, subject, exc_info=error)
