"""One replica's local log and the state that changes with it, as Kafka's UnifiedLog owns its
ProducerStateManager: the producer state (and the aborted-transaction index its markers fill),
the data directory's free space, the background flush and page-cache eviction, and the lock that
keeps a flush's thread and a deletion apart.

Partition (partition.py) decides what to append, cut or delete and when; ReplicaLog does it
to the files and keeps the producer state in step. Writes the data directory cannot take raise
KafkaStorageError and leave the log as it was: a leader refuses produce while free space is
below log.dir.min.free.bytes, and followers and the group coordinator append until it is below
half (storage/disk_space.py); a write that fails anyway is taken back by the log and reported
in one line, the same for every partition.

Concurrency: owned by the partition's event loop; `close` and `delete` run in any thread once
the partition stopped serving.
"""

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

from replog.replica.producer_state import ProducerCheck, ProducerStateManager
from replog.storage.background_io import PageCacheEvictor, flush_in_background
from replog.storage.batch_format import NO_TIMESTAMP
from replog.storage.cleaner import Cleaned
from replog.storage.control_batches import Marker, encode_marker
from replog.storage.disk_space import DiskSpace, report_write_failure
from replog.storage.errors import KafkaStorageError
from replog.storage.log import Log
from replog.storage.records import BatchRun

logger = logging.getLogger(__name__)


class LocalAppend(NamedTuple):
    """What a leader's local append did: the offsets of its batch (or of the original, for a
    duplicate), the records it added and its log append time (-1 on a CreateTime topic)."""

    first_offset: int
    last_offset: int
    record_count: int
    log_append_time_ms: int


class ReplicaLog:
    def __init__(self, log: Log, disk_space: DiskSpace, broker_id: int, appended: Callable[[], None]):
        """`appended`: called once a leader's append put records into the log (its owner wakes
        and commits what they allow)."""
        self.log = log
        self._appended = appended
        self.disk_space = disk_space
        self._name = f"{log.topic}-{log.partition}"
        self.producer_state = ProducerStateManager(log.directory, log.topic, log.partition)
        # Held by a background flush's thread while it writes into the log directory, and by
        # delete around removing it, so that neither leaves the other a half-gone directory.
        self._directory_lock = threading.Lock()
        self.page_cache = PageCacheEvictor(log, broker_id)
        self.producer_state.load(log)

    def append_as_leader(self, batches: bytearray, leader_epoch: int, records_max_timestamp: int | None,
                         internal: bool, verification_guard: object | None = None) -> LocalAppend:
        """Validate and assign the batch, judge it by the producer state (and the guard its
        transaction was verified with), write it; in that order, as Kafka's UnifiedLog.append.
        ReplicaError if refused; KafkaStorageError, reported, if the write failed (with
        `appended` set if its records are in, only the flush after them failed)."""
        try:
            run = self.log.assign_as_leader(batches, leader_epoch, records_max_timestamp)
            check = self.producer_state.check(batches, verification_guard)
            if check.duplicate is not None:
                self.log.settle_owed_flush()
                return LocalAppend(check.duplicate.first_offset, check.duplicate.last_offset, 0, NO_TIMESTAMP)
            try:
                self.log.write_assigned(batches, run, leader_epoch)
            except KafkaStorageError as failure:
                if failure.appended is not None:  # written, then the flush after the bytes failed
                    self._after_appended(batches, check, failure.appended[0])
                raise
        except KafkaStorageError as failure:
            raise self.storage_failed(failure, "group coordinator records" if internal else "produce")
        first_offset = run.last_offset - run.record_count + 1
        self._after_appended(batches, check, first_offset)
        log_append_time_ms = run.max_timestamp if self.log.append_rules.log_append_time else NO_TIMESTAMP
        return LocalAppend(first_offset, run.last_offset, run.record_count, log_append_time_ms)

    def _after_appended(self, batches: bytearray, check: ProducerCheck, first_offset: int) -> None:
        self.disk_space.wrote(len(batches))
        self.producer_state.record_append(check, first_offset)
        self.page_cache.evict_behind()
        self._appended()

    def append_marker(self, marker: Marker, leader_epoch: int) -> LocalAppend:
        """Write a transaction marker as leader, once the producer state took it (check_marker),
        and end the producer's transaction here; an abort goes into the segment's index.
        ReplicaError if refused; KafkaStorageError, reported, if the write failed."""
        self.producer_state.check_marker(marker)
        batch = encode_marker(marker, self.log.now_ms())
        run = self.log.assign_control(batch, leader_epoch)
        try:
            self.log.write_assigned(batch, run, leader_epoch)
        except KafkaStorageError as failure:
            if failure.appended is not None:
                self._after_marker(batch, marker, run)
            raise self.storage_failed(failure, "transaction marker")
        self._after_marker(batch, marker, run)
        return LocalAppend(run.last_offset, run.last_offset, run.record_count, NO_TIMESTAMP)

    def _after_marker(self, batch: bytearray, marker: Marker, run: BatchRun) -> None:
        self.disk_space.wrote(len(batch))
        aborted = self.producer_state.record_marker(marker, run.last_offset, run.max_timestamp)
        if aborted is not None:
            self.log.add_aborted(aborted)
        self._appended()

    def append_as_follower(self, batches: bytes | bytearray) -> None:
        """Append the leader's batches verbatim, the producer state taking them too."""
        self.refuse_appends_if_low()
        try:
            self.log.append_as_follower(batches)
        except KafkaStorageError as failure:
            # Whole runs of the fetch may be in the log: the producer state takes those.
            self._record_replicated(batches, self.log.log_end_offset)
            raise self.storage_failed(failure, "follower append")
        self.disk_space.wrote(len(batches))
        self._record_replicated(batches, None)
        self.page_cache.evict_behind()

    def _record_replicated(self, batches: bytes | bytearray, end_offset: int | None) -> None:
        for aborted in self.producer_state.record_replicated(batches, end_offset):  # bounded by the markers
            self.log.add_aborted(aborted)

    def refuse_appends_if_low(self) -> None:
        """KafkaStorageError while the data directory is too low on space for replicated records
        (disk_space.py; its state change was logged): a fetcher checks before fetching what it
        could not append."""
        if self.disk_space.refuses_appends:
            raise KafkaStorageError(f"free space of {self.log.directory.parent} is below half of "
                                    "log.dir.min.free.bytes", "below log.dir.min.free.bytes")

    def storage_failed(self, failure: OSError | KafkaStorageError, writing: str) -> KafkaStorageError:
        """The failed write reported (one line whatever the partition), as the error to raise."""
        report_write_failure(self.log.directory.parent, writing, failure, self._name)
        return failure if isinstance(failure, KafkaStorageError) else KafkaStorageError.of(failure, self.log.directory)

    def truncate_to(self, offset: int) -> None:
        """Cut the log at `offset` (whole batches), and the epochs starting at or after it."""
        try:
            if offset < self.log.log_end_offset:
                self.log.truncate_to(offset)  # also forgets the epochs starting at or after it
                self.producer_state.load(self.log)
            # Also when nothing is cut (as later Kafka's Log.truncateTo does): a replica that led without
            # appending holds an epoch starting at its LEO, which the leader may not know; kept, it
            # would be asked about again and again instead of the older epoch below it.
            self.log.leader_epoch_cache.truncate_from_end(offset)
        except OSError as error:
            raise self.storage_failed(error, "truncation") from error

    def truncate_fully_and_start_at(self, offset: int) -> None:
        try:
            self.log.truncate_fully_and_start_at(offset)
        except OSError as error:
            raise self.storage_failed(error, "truncation") from error
        self.producer_state.load(self.log)

    def delete_segments_below(self, offset: int) -> None:
        """Drop the segments wholly below `offset` (the leader's log start moved past them)."""
        try:
            deleted = self.log.delete_segments_below(offset)
        except OSError as error:
            raise self.storage_failed(error, "follower retention") from error
        if deleted:
            self.producer_state.truncate_head(self.log.log_start_offset)

    def delete_retained_segments(self, high_watermark: int) -> int:
        """Apply retention below `high_watermark` and the first open transaction (Kafka never
        deletes a transaction's start, which read_committed readers still need), and forget
        producers whose batches it removed."""
        first_unstable = self.producer_state.first_unstable_offset()
        bound = high_watermark if first_unstable is None else min(high_watermark, first_unstable)
        deleted = self.log.delete_retained_segments(high_watermark=bound)
        if deleted:
            self.producer_state.truncate_head(self.log.log_start_offset)
        return deleted

    async def clean(self, high_watermark: int, map_max_bytes: int) -> Cleaned | None:
        """One cleaning pass of a compacted log (storage/cleaner.py) below the first unstable
        offset, its disk work in another thread; what it removed, or None if there was nothing to
        clean or the log changed meanwhile."""
        job = self.log.begin_clean(high_watermark, map_max_bytes, self.producer_state.first_unstable_offset())
        if job is None:
            return None
        result = await asyncio.to_thread(job.run)
        return self.log.complete_clean(job, result)

    async def flush_in_background(self, closed: Callable[[], bool]) -> bool:
        """The log made durable up to its end, with the producer state's snapshot there, off the
        event loop (storage/background_io.py); whether it flushed anything."""
        return await flush_in_background(self.log, self.producer_state.prepare_snapshot, self._directory_lock, closed)

    def close(self) -> None:
        """Close the log cleanly, then write the producer snapshot, from any thread: in that order,
        so that a snapshot at the log end never exists without the aborted-transaction index
        entries the log's close writes (a load replays nothing after such a snapshot)."""
        with self._directory_lock:  # a background flush's fsyncs may still run in a worker thread
            self.log.close()
            self.producer_state.take_snapshot(self.log.log_end_offset)

    def delete(self) -> None:
        """Remove the log and its directory, from any thread."""
        with self._directory_lock:
            self.log.delete()
