"""A log's disk work off the event loop: the background flush (Log.begin_flush, a FlushJob run
in another thread, Log.complete_flush) and dropping the page cache far behind the log's end.

Each runs on duplicates of the log's descriptors, so that the log may roll, truncate, close or
delete segments meanwhile; the event loop only starts the work and takes its result.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from replog.storage.checkpoint import fsync_directory, fsync_if_present
from replog.storage.partition_metadata import sync_tag

if TYPE_CHECKING:
    from replog.storage.log import Log

logger = logging.getLogger(__name__)


class FlushJob:
    """The fsyncs of a background flush (Log.begin_flush), for another thread to run: the segment
    files through duplicates of their descriptors, then their index files, then the directory if
    names were made in it since it was last synced (a rolled segment's must be durable before
    the recovery point passes its data), the topic id's tag first if it is one of them."""

    def __init__(self, offset: int, truncations: int, log_fds: list[int], index_paths: list[Path],
                 directory: Path | None, names_made: int, tag_unsynced: bool):
        self.offset = offset
        self.truncations = truncations
        self.names_made = names_made
        self._log_fds = log_fds
        self._index_paths = index_paths
        self._directory = directory
        self._tag_unsynced = tag_unsynced

    def run(self) -> None:
        """fsync the segments, then their indexes (an index must never run ahead of its log);
        an index file gone meanwhile went with its segment."""
        try:
            for fd in self._log_fds:  # bounded by the segments flushed
                os.fsync(fd)
            for path in self._index_paths:  # bounded by the segments flushed
                fsync_if_present(path)
            if self._directory is not None:
                sync_names(self._directory, self._tag_unsynced)
        finally:
            for fd in self._log_fds:
                os.close(fd)


def sync_names(directory: Path, tag_unsynced: bool) -> None:
    """Make the names made in a log's directory durable, and the topic id's tag among them with
    its contents first (Log.tag_topic_id): the foreground flush's and the background one's."""
    if tag_unsynced:
        sync_tag(directory)
    fsync_directory(directory)


class Snapshot(Protocol):
    """A snapshot of state kept beside the log (the producer state's), describing it up to the
    flushed offset: written in the flush's thread, then installed or discarded."""

    def write(self) -> None: ...

    def install(self) -> None: ...

    def discard(self) -> None: ...


async def flush_in_background(log: Log, snapshot_at: Callable[[int], Snapshot], directory_lock: threading.Lock,
                              closed: Callable[[], bool]) -> bool:
    """Make `log` durable up to its end and write the snapshot `snapshot_at` takes there, the
    fsyncs in another thread, then checkpoint the recovery point: a restart after a crash then
    checks only what was written after, whatever the flush settings (Kafka flushes a segment
    when it rolls; this covers the active segment too). `directory_lock`: held while writing
    into the log's directory, so that deleting it (under the lock too) leaves no half-gone
    directory; `closed`: whether the log's owner closed or deleted it. Whether it flushed anything."""
    if closed():
        return False  # closed or deleted after the caller listed it: closing flushed it
    job = log.begin_flush()
    if job is None:
        return False
    snapshot = snapshot_at(job.offset)
    try:
        await asyncio.to_thread(_run_flush, job, snapshot, directory_lock)
    except OSError:
        snapshot.discard()
        if closed():
            return False  # deleted meanwhile, its directory with it
        raise
    if not closed() and log.complete_flush(job):
        snapshot.install()
        log.checkpoint_recovery_point()
    else:  # closing made its own; a truncation below its offset made it wrong
        snapshot.discard()
    return True


def _run_flush(job: FlushJob, snapshot: Snapshot, directory_lock: threading.Lock) -> None:
    """The thread's half of flush_in_background: the log first, as the snapshot describes it up
    to the flushed offset. A directory deleted meanwhile fails the write."""
    job.run()
    with directory_lock:
        snapshot.write()


class PageCacheEvictor:
    """Drops a log's pages far behind its end in another thread, when due (segment.py's
    PAGE_CACHE_TAIL_BYTES says why), one eviction at a time."""

    def __init__(self, log: Log, broker_id: int):
        self._log = log
        self._broker_id = broker_id
        self.running: asyncio.Future | None = None

    def evict_behind(self) -> None:
        if self.running is not None and not self.running.done():
            return
        eviction = self._log.take_page_cache_eviction()
        if eviction is not None:
            self.running = asyncio.get_running_loop().run_in_executor(None, eviction.run)
            self.running.add_done_callback(self._evicted)

    def _evicted(self, eviction: asyncio.Future) -> None:
        if not eviction.cancelled() and eviction.exception() is not None:
            logger.warning("page cache eviction failed topic=%s partition=%d broker=%d error=%r",
                           self._log.topic, self._log.partition, self._broker_id, eviction.exception())
