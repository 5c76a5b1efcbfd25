"""A partition's log: an ordered list of segments in one directory, plus its checkpoints.

Directory `<topic>-<partition>/`:

    <20-digit base offset>.log / .index / .timeindex   segments (segment.py, index.py)
    <20-digit base offset>.txnindex                    aborted transactions (transaction_index.py)
    recovery-point-offset-checkpoint                   offset below which data is flushed
    cleaner-offset-checkpoint                          compacted logs: where cleaning stopped
    leader-epoch-checkpoint                            leader-epoch cache (checkpoint.py)

Only the last ("active") segment is appended to; a new one is rolled when the next append would
pass segment.bytes, when the timestamps of the batches span segment.ms, or when an offset would
no longer fit the indexes' 32-bit relative offsets. Retention deletes whole segments from the
front, never the active one, nor (its owner's bound) past an open transaction. A compacted log (cleanup.policy=compact) is cleaned instead: its
owner runs a CleanJob (begin_clean, job.run in another thread, complete_clean; log_cleaning.py,
cleaner.py).

Durability: as in Kafka, the default leaves writing back to the OS (replication is the
durability); flush.messages / flush.ms force fsyncs on the append path. The recovery point is the
offset up to which the log is known flushed. The owner also flushes in the background
(begin_flush, a FlushJob run in another thread, complete_flush; background_io.py), so that the recovery point
follows the log end at that interval whatever the flush settings. Opening a log its owner says
was closed cleanly (`closed_cleanly`: the data directory's record, clean_shutdown.py) trusts the
files and only rescans each segment's index tail; any other open trusts what lies below the
recovery point and re-validates every batch from the last index entry at or below it on,
cutting the first torn, corrupt or out-of-order batch and all after it. An append the directory
does not take (ENOSPC, EDQUOT, EIO) raises KafkaStorageError and leaves the log as it was, the
segment taking a partial batch back; if only the flush flush.messages or flush.ms asked for
failed after the bytes, the error says which records are in (`appended`), and that flush is made
before the next append's bytes.

Concurrency: a Log is owned by one thread (the partition's event loop); it does not lock, and
only a FlushJob runs elsewhere, on descriptors of its own. File slices returned by `read` stay
valid until the next truncation, retention, close or delete.
Time comes from the injected `clock` (milliseconds), never from a global clock.
"""

import bisect
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from replog.storage.checkpoint import TMP_SUFFIX, LeaderEpochCache, OffsetCheckpoint, fsync_directory
from replog.storage.cleaner import CLEANED_SUFFIX, CLEANER_CHECKPOINT_FILE
from replog.storage.errors import InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError, RecordListTooLargeError
from replog.storage.background_io import FlushJob, sync_names
from replog.storage.log_cleaning import LogCleaning
from replog.storage.log_config import NEVER, LogConfig
from replog.storage.partition_metadata import tag_topic_id, tagged_topic_id
from replog.storage.batch_format import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_ZSTD,
    NO_TIMESTAMP,
    TOPIC_CODECS,
    BatchHeader,
    Scratch,
    first_record_at_or_after,
    uncompressed_bytes_max,
)
from replog.storage.records import (
    AppendRules,
    BatchRun,
    CheckedBatch,
    assign_batches,
    assign_control_batch,
    check_and_convert,
    checked_first,
    run_of,
    validate_batches,
)
from replog.storage.transaction_index import TXN_INDEX_SUFFIX, AbortedTxn
from replog.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    FileSlice,
    HeldSlice,
    PageCacheEviction,
    Segment,
    SegmentCut,
    SegmentLimits,
)

logger = logging.getLogger(__name__)

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
_SEGMENT_NAME_DIGITS = 20


def _parse_log_directory_name(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    if not topic or not partition.isdigit():
        raise ValueError(f"log directory {name!r} is not named <topic>-<partition>")
    return topic, int(partition)


def make_log_directories(directories: Iterable[Path]) -> None:
    """Make those of `directories` that do not exist, their names durable before anything in
    them is (a flush syncs a log directory's entries, not its own in the data directory): one
    fsync of each data directory for all of them, where one per log made loading thousands of
    new logs wait on as many fsyncs of the same directory."""
    made = [directory for directory in directories if not directory.is_dir()]
    for directory in made:  # bounded by the caller's directories
        directory.mkdir(parents=True, exist_ok=True)
    for data_directory in {directory.parent for directory in made}:
        fsync_directory(data_directory)


class Log(LogCleaning):
    """The segmented log of one partition replica. See the module docstring."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], int],
                 flushed: Callable[[float], None] = lambda duration_s: None, *, closed_cleanly: bool = False):
        """`flushed` hears how long each flush on the caller's thread (flush.messages, flush.ms,
        close) took, in seconds; the owner times the background ones (begin_flush) itself.
        `closed_cleanly`: the log's last close() completed, and nothing wrote to it since."""
        self.directory = Path(directory)
        self._flushed = flushed
        self.topic, self.partition = _parse_log_directory_name(self.directory.name)
        self.config = config
        self._segment_limits = self._limits_of(config)
        self.append_rules = self._rules_of(config)
        self._clock = clock
        make_log_directories([self.directory])
        # The id of the topic the log belongs to (KIP-516), None if untagged: a leader answers
        # only the fetches that name it, so that no replica of a deleted topic of the same name
        # is taken for one of this topic's.
        self.topic_id = tagged_topic_id(self.directory)
        self._recovery_checkpoint = OffsetCheckpoint(self.directory / RECOVERY_POINT_FILE)
        self._cleaner_checkpoint = OffsetCheckpoint(self.directory / CLEANER_CHECKPOINT_FILE)
        self._cleaned_up_to: int | None = None  # the checkpoint's offset, once read (this log alone writes it)
        self._closed = False
        self.leader_epoch_cache = LeaderEpochCache(self.directory / LEADER_EPOCH_FILE)
        self._segments: list[Segment] = []
        self._segment_bases: list[int] = []
        self.recovery_point = 0
        self._checkpointed_recovery_point: int | None = None
        self._recovered_producers: RecoveredProducers | None = None
        # The log end at the last background flush: what it covers, indexes and producer snapshot
        # included (the append path's flushes move the recovery point, not this).
        self._background_flushed_offset = 0
        # Counts truncations, so that a background flush started before one does not move the
        # recovery point over bytes that are no longer the log's.
        self._truncations = 0
        # Names made in the directory so far (segments rolled, the topic id's tag), and how many
        # of them a directory fsync has made durable: each leaves its directory fsync to the next
        # flush, off the event loop when that is the background one.
        self._names_made = 0
        self._names_synced = 0
        self._tag_name = 0  # which of the names made is the tag's, written since it was opened; 0: none
        self._unflushed_records = 0
        self._flush_owed = False  # an append's flush (flush.messages, flush.ms) failed: retried before the next bytes
        # flush.ms is due once the clock reaches this: the last flush plus flush.ms.
        self._flush_due_ms = clock() + config.flush_ms
        self._open(closed_cleanly)

    # -- opening -------------------------------------------------------------------------------

    def _open(self, clean: bool) -> None:
        # One os.listdir for both: two Path listings (glob's matching above all) and a stat per
        # index file cost a sixth of a clean log's open, 10,000 of them at a broker's restart.
        names = self._remove_stray_files(os.listdir(self.directory))
        recovery_point = self._recovery_checkpoint.read().get((self.topic, self.partition), 0)
        bases = sorted(int(stem) for name in names
                       if name.endswith(LOG_SUFFIX) and _is_segment_stem(stem := name[:-len(LOG_SUFFIX)]))
        now_ms = self._clock()
        segments = [Segment(self.directory, base, self._segment_limits, now_ms) for base in bases]
        present = set(names)
        for segment in segments:  # bounded by the segments
            if segment.txn_index.path.name in present:
                segment.txn_index.load()
        if not segments:
            segments = [Segment(self.directory, 0, self._segment_limits, now_ms)]
            self._names_made += 1  # made durable by the first flush, as a roll's
        # After a crash, every segment from the one holding the recovery point on is suspect.
        rescan_from = NEVER
        if not clean:
            holding = bisect.bisect_right(self._bases_of(segments), recovery_point) - 1
            rescan_from = segments[max(holding, 0)].base_offset
        min_offset = segments[0].base_offset
        producer_runs = []
        for i, segment in enumerate(segments):
            if segment.base_offset < min_offset and self._segments:
                # A cleaning pass merged it into the segment before and crashed before deleting it.
                logger.info("deleted segment a merged one holds topic=%s partition=%d segment=%d",
                            self.topic, self.partition, segment.base_offset)
                segment.delete()
                continue
            if segment.base_offset < rescan_from:
                opened = segment.load()
            elif segment.base_offset == rescan_from:
                opened = segment.recover_after(recovery_point, min_offset)
            else:
                opened = segment.recover(min_offset, recovery_point)
            self._segments.append(segment)
            self._segment_bases.append(segment.base_offset)
            producer_runs.append(opened.producer_runs)
            if opened.cut is not None:
                self._log_cut(segment, opened.cut)
                self._delete_after_cut(segments[i + 1:])
                break
            min_offset = segment.next_offset
        self.leader_epoch_cache.trim_at_open(self.log_start_offset, self.log_end_offset)
        if not clean:
            self._recovered_producers = RecoveredProducers(min(recovery_point, self.log_end_offset), producer_runs)
            # What was rescanned may still sit only in the page cache, and the indexes rebuilt
            # from it only in memory: make both durable before calling them recovered, so that
            # another crash starts from here.
            for segment in self._segments_holding(min(recovery_point, self.log_end_offset), self.log_end_offset):
                segment.flush(with_indexes=True)
        self.recovery_point = self.log_end_offset
        if self.recovery_point == recovery_point:
            # The checkpoint, absent or not, already says so (an empty log, a new one above all,
            # or one closed cleanly at its end): a write costs a new log most of its open, and
            # 10,000 idle logs' writes at close kept a broker from exiting for seconds.
            self._checkpointed_recovery_point = recovery_point
        elif not clean:
            self._write_recovery_point()
        self._background_flushed_offset = self.log_end_offset
        logger.debug("opened log topic=%s partition=%d clean=%s log_start_offset=%d log_end_offset=%d segments=%d",
                    self.topic, self.partition, clean, self.log_start_offset, self.log_end_offset,
                    len(self._segments))

    def take_recovered_producers(self) -> "RecoveredProducers | None":
        """What crash recovery found of producer state (once: a truncation makes it stale)."""
        recovered, self._recovered_producers = self._recovered_producers, None
        return recovered

    @staticmethod
    def _bases_of(segments: list[Segment]) -> list[int]:
        return [segment.base_offset for segment in segments]

    def _remove_stray_files(self, names: list[str]) -> list[str]:
        """Delete checkpoint temp files, a crashed cleaning's new segments and index files whose
        `.log` is gone, of the directory's `names`; the names left."""
        kept, present = [], set(names)
        for name in names:  # bounded by the directory's files
            stem, suffix = os.path.splitext(name)
            orphan_index = suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX) and stem + LOG_SUFFIX not in present
            if orphan_index or name.endswith((TMP_SUFFIX, CLEANED_SUFFIX)):
                (self.directory / name).unlink()
            else:
                kept.append(name)
        return kept

    def _log_cut(self, segment: Segment, cut: SegmentCut) -> None:
        logger.warning(
            "truncated invalid log tail topic=%s partition=%d segment=%d offset=%d position=%d bytes_cut=%d reason=%r",
            self.topic, self.partition, segment.base_offset, cut.offset, cut.position, cut.bytes_cut, cut.reason,
        )

    def _delete_after_cut(self, segments: list[Segment]) -> None:
        for segment in segments:
            logger.warning("deleted segment after invalid batch topic=%s partition=%d segment=%d bytes=%d",
                           self.topic, self.partition, segment.base_offset, segment.size_bytes)
            segment.delete()

    # -- offsets -------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self._segments)

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp of the log; NO_TIMESTAMP if none carries one."""
        return max((segment.max_timestamp for segment in self._segments), default=NO_TIMESTAMP)

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(self._segments)

    # -- appends -------------------------------------------------------------------------------

    def update_config(self, config: LogConfig) -> None:
        """Take the topic's new settings while open (IncrementalAlterConfigs): the next append,
        roll, flush check and retention check use them; the active segment rolls by the new
        segment.bytes and segment.ms."""
        previous_flush_ms = self.config.flush_ms
        self.config = config
        self._segment_limits = self._limits_of(config)
        self.append_rules = self._rules_of(config)
        if self._segments:
            self._segments[-1].apply_roll_limits(self._segment_limits)
        if config.flush_ms != previous_flush_ms:
            self._flush_due_ms = self._clock() + config.flush_ms

    @staticmethod
    def _limits_of(config: LogConfig) -> SegmentLimits:
        # Only whole segments are cleaned: a compacted log's active segment rolls by
        # max.compaction.lag.ms too, or its records could wait out the lag there (Kafka's maxSegmentMs).
        segment_ms = min(config.segment_ms, config.max_compaction_lag_ms) if config.compact else config.segment_ms
        return SegmentLimits(config.segment_bytes, segment_ms, config.index_interval_bytes)

    @staticmethod
    def _rules_of(config: LogConfig) -> AppendRules:
        return AppendRules(config.max_message_bytes, config.message_timestamp_before_max_ms,
                           config.message_timestamp_after_max_ms, config.compact,
                           uncompressed_bytes_max(config.max_message_bytes),
                           config.message_timestamp_type == "LogAppendTime", TOPIC_CODECS[config.compression_type],
                           Log._codec_level(config))

    @staticmethod
    def _codec_level(config: LogConfig) -> int | None:
        """The level of compression.type's codec, as compression.<codec>.level says."""
        codec = TOPIC_CODECS[config.compression_type]
        if codec == CODEC_GZIP:
            return None if config.compression_gzip_level == -1 else config.compression_gzip_level
        return {CODEC_LZ4: config.compression_lz4_level, CODEC_ZSTD: config.compression_zstd_level}.get(codec)

    def now_ms(self) -> int:
        """The log's clock: what a compressed batch's records are checked against elsewhere."""
        return self._clock()

    def append(self, batches: bytearray | memoryview, leader_epoch: int) -> tuple[int, int]:
        """Append a producer's batch as leader: check_first where it needs it, assign_as_leader,
        then write. Returns (first, last) offset."""
        checked = CheckedBatch(batches, None)
        if checked_first(batches, self.append_rules):
            checked = self.check_first(batches)
        run = self.assign_as_leader(checked.batch, leader_epoch, checked.records_max_timestamp)
        self.write_assigned(checked.batch, run, leader_epoch)
        return run.last_offset - run.record_count + 1, run.last_offset

    def check_first(self, batches: bytearray | memoryview) -> CheckedBatch:
        """records.check_and_convert of a producer's batch, here and now: what a batch that
        records.checked_first names needs before assign_as_leader (the partition has it done off
        the event loop, compressed_checks)."""
        scratch = Scratch(self.append_rules.uncompressed_bytes_max)
        try:
            return check_and_convert(batches, self.append_rules, self._clock(), scratch)
        finally:
            scratch.close()

    def assign_as_leader(self, batches: bytearray | memoryview, leader_epoch: int,
                         records_max_timestamp: int | None = None) -> BatchRun:
        """Validate a producer's batch as Kafka's LogValidator does (records.assign_batches) and
        assign it the next offsets and `leader_epoch` (and, for LogAppendTime, the time) in place
        in `batches` (writable), without writing it: write_assigned must follow, with nothing
        appended in between. A batch that records.checked_first names must be what
        check_and_convert made of it, with the `records_max_timestamp` it found."""
        return assign_batches(batches, self.append_rules, self.log_end_offset, leader_epoch, self._clock(),
                              records_max_timestamp)

    def assign_control(self, batch: bytearray, leader_epoch: int) -> BatchRun:
        """assign_as_leader for the broker's own control batch (records.assign_control_batch)."""
        return assign_control_batch(batch, self.log_end_offset, leader_epoch)

    def write_assigned(self, batches: bytearray | memoryview, run: BatchRun, leader_epoch: int) -> None:
        """Write a batch assign_as_leader (or assign_control) just assigned `run` to.

        KafkaStorageError if the directory does not take it: a write that failed is taken back;
        records the error says `appended` are the log's, and what failed after them was the flush
        flush.messages or flush.ms asked for (made before the next append's bytes)."""
        active = self._segments[-1]
        first_offset = run.last_offset - run.record_count + 1
        assert first_offset == active.next_offset, "the log moved between assigning and writing a batch"
        now_ms = self._clock()
        # A producer's append holds one batch: its facts are the run's, so no header objects are built.
        try:
            self._before_the_bytes()
            if not active.append(batches, run.last_offset, run.max_timestamp, now_ms, None):
                self._roll_and_append(batches, first_offset, run.last_offset, run.max_timestamp, now_ms, None)
            self._count_unflushed(run.record_count, now_ms)
            if leader_epoch != self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first_offset)
        except OSError as error:
            appended = (first_offset, run.last_offset) if self.log_end_offset > first_offset else None
            raise KafkaStorageError.of(error, self.directory, appended) from error

    def append_as_follower(self, batches: bytes | bytearray | memoryview) -> tuple[int, int]:
        """Append batches copied from the leader, keeping their offsets and epochs.

        Offsets must increase from the log end offset on (gaps allowed, as compaction leaves
        them). A fetch larger than segment.bytes (a topic whose segments were made smaller than
        the follower's fetch size) is appended as runs of whole batches that each fit a segment.
        Returns (first, last) offset.
        """
        headers = validate_batches(batches, NEVER)
        expected = self.log_end_offset
        for header in headers:
            if header.base_offset < expected:
                raise InvalidRecordError(f"batch offset {header.base_offset} is below expected offset {expected}")
            expected = header.next_offset
        now_ms = self._clock()
        try:
            self._before_the_bytes()
            for run, run_headers in _runs_within(batches, headers, self.config.segment_bytes):
                _, last_offset, max_timestamp, record_count = run_of(run_headers)
                if not self._segments[-1].append(run, last_offset, max_timestamp, now_ms, run_headers):
                    self._roll_and_append(run, run_headers[0].base_offset, last_offset, max_timestamp, now_ms, run_headers)
                self._count_unflushed(record_count, now_ms)
                # Per run: if a later run fails, the epochs of what is written are known.
                for header in run_headers:
                    if header.partition_leader_epoch > self.leader_epoch_cache.latest_epoch:
                        self.leader_epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
        except OSError as error:
            # Whole runs may be in the log already: the log end says how far it got.
            raise KafkaStorageError.of(error, self.directory) from error
        return headers[0].base_offset, last_offset

    def _before_the_bytes(self) -> None:
        """What an append writes before its records: the epochs no call has written yet
        (records past the file's entries would let the next open keep a stale one), and the
        flush the previous append could not make (appending on after a failed fsync would
        leave ever more records unflushed that flush.messages or flush.ms promised durable)."""
        self.leader_epoch_cache.save_if_unsaved()
        if self._flush_owed:
            self.flush()

    def settle_owed_flush(self) -> None:
        """Make the flush an append could not make, if one is owed: before a retry of that
        append, answered as a duplicate without an append, acknowledges its records."""
        if self._flush_owed:
            try:
                self.flush()
            except OSError as error:
                raise KafkaStorageError.of(error, self.directory) from error

    def take_page_cache_eviction(self) -> PageCacheEviction | None:
        """What of the active segment's page cache is due to be dropped (Segment.take_page_cache_eviction)."""
        return self._segments[-1].take_page_cache_eviction()

    def _roll_and_append(self, batches, base_offset: int, last_offset: int, max_timestamp: int, now_ms: int,
                         headers: list[BatchHeader] | None) -> None:
        """Append what the active segment refused, as the first batches of a new one."""
        self._roll(base_offset, now_ms)
        appended = self._segments[-1].append(batches, last_offset, max_timestamp, now_ms, headers)
        assert appended, "an empty segment refused an append"

    def _count_unflushed(self, record_count: int, now_ms: int) -> None:
        """Apply flush.messages and flush.ms after an append of `record_count` records."""
        self._unflushed_records += record_count
        if self._unflushed_records >= self.config.flush_messages or now_ms >= self._flush_due_ms:
            self._flush_owed = True
            self.flush()

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op if the active one is empty)."""
        if not self._segments[-1].is_empty:
            self._roll(self.log_end_offset, self._clock())

    def _roll(self, base_offset: int, now_ms: int) -> None:
        self._segments[-1].persist_indexes()
        segment = Segment(self.directory, base_offset, self._segment_limits, now_ms)
        self._segments.append(segment)
        self._segment_bases.append(base_offset)
        self._names_made += 1
        logger.debug("rolled segment topic=%s partition=%d segment=%d", self.topic, self.partition, base_offset)

    # -- reads ---------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None, *,
             min_one_message: bool = True) -> list[FileSlice]:
        """File slices holding the log from the batch containing `offset` on.

        Kafka semantics: the first slice starts at a batch boundary; at most `max_bytes` are
        returned, and the last batch may be cut (clients drop a partial trailing batch), but
        never the first: if it is larger than `max_bytes`, with `min_one_message` it is returned
        whole (KIP-74: the first batch of a fetch answer, so that an oversized one cannot stall
        its reader), else nothing is. Nothing from the batch containing `max_offset` on is
        returned (the high watermark for consumers). Empty at the log end.
        """
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}"
            )
        start = self._locate(offset)
        end = self._locate(max_offset) if max_offset is not None and max_offset < self.log_end_offset else None
        if start is None or (end is not None and end <= start):
            return []
        first_segment, position = start
        first_batch_bytes = self._segments[first_segment].batch_size_at(position)
        if first_batch_bytes > max_bytes and not min_one_message:
            return []
        remaining_bytes = max(max_bytes, first_batch_bytes)
        slices = []
        for i in range(first_segment, len(self._segments)):  # bounded by the number of segments
            segment = self._segments[i]
            is_last = end is not None and i == end[0]
            end_position = end[1] if is_last else segment.size_bytes
            size_bytes = min(remaining_bytes, end_position - position)
            if size_bytes > 0:
                slices.append(FileSlice(segment.fd, position, size_bytes))
                remaining_bytes -= size_bytes
            if remaining_bytes <= 0 or is_last:
                break
            position = 0
        return slices

    def hold(self, slices: list[FileSlice]) -> list[HeldSlice]:
        """`slices` (from `read`) held past the next change of the log, for a send that comes
        later: each knows whether a truncation has since rewritten its range."""
        truncations = self._truncations
        return [HeldSlice(piece, lambda: self._truncations == truncations) for piece in slices]

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(segment index, position) of the first batch whose last offset is >= `offset`."""
        first = max(bisect.bisect_right(self._segment_bases, offset) - 1, 0)
        for i in range(first, len(self._segments)):  # bounded by the number of segments
            position = self._segments[i].find_position(offset)
            if position is not None:
                return i, position
        return None

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp is >= `timestamp`.

        Batch granularity: records are never decoded, so the answer is the batch holding the
        first such record, not the record itself; a consumer seeking there sees that record.
        """
        for segment in self._segments:  # bounded by the number of segments
            if segment.max_timestamp >= timestamp:
                header = segment.find_timestamp(timestamp)
                if header is not None:
                    return header.base_offset, header.max_timestamp
        return None

    def record_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= `timestamp`, which
        ListOffsets answers with, as Kafka does (batch_format.first_record_at_or_after); that of
        its batch (offset_for_timestamp) where the records do not decode."""
        found = self.offset_for_timestamp(timestamp)
        if found is None:
            return None
        batch = self.read(found[0], 1)
        return (batch and first_record_at_or_after(batch[0].read(), timestamp)) or found

    # -- durability ----------------------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """fsync every segment holding data below `offset` (default: the log end offset) and
        advance the recovery point to it (in memory; see checkpoint_recovery_point)."""
        started_s = time.perf_counter()  # for the flush's duration only; logic reads self._clock
        offset = self.log_end_offset if offset is None else min(offset, self.log_end_offset)
        synced = self._names_made != self._names_synced or offset > self.recovery_point
        if self._names_made != self._names_synced:
            sync_names(self.directory, self._tag_unsynced())  # before anything counts as flushed
            self._names_synced = self._names_made
        if offset > self.recovery_point:
            active = self._segments[-1]
            for segment in self._segments_holding(self.recovery_point, offset):
                # flush.messages may ask for this on every append: the active segment's indexes
                # are left to the background flush, and recovery rescans from its last entry.
                segment.flush(with_indexes=segment is not active)
        self._flush_due_ms = self._clock() + self.config.flush_ms
        self._unflushed_records = 0
        self._flush_owed = False
        self.recovery_point = max(self.recovery_point, offset)
        if synced:
            self._flushed(time.perf_counter() - started_s)

    # -- aborted transactions ------------------------------------------------------------------

    def add_aborted(self, aborted: AbortedTxn) -> None:
        """Index a transaction aborted by the marker at `aborted.last_offset`, which the log holds,
        in that marker's segment."""
        holding = bisect.bisect_right(self._segment_bases, aborted.last_offset) - 1
        self._segments[max(holding, 0)].txn_index.append(aborted)

    def truncate_aborted_from(self, offset: int) -> None:
        """Forget the aborted transactions whose markers are at or after `offset`: the producer
        state replays the markers from there and indexes them again."""
        for segment in self._segments_holding(offset, self.log_end_offset + 1):  # bounded by the segments
            segment.txn_index.truncate_from(offset)

    def persist_aborted_from(self, offset: int) -> None:
        """Write, fsync'd, the aborted-transaction indexes of the segments holding `offset` on: a
        load that rebuilt them snapshots the producer state, and the next load replays only
        from that snapshot, while segments below the recovery point are never flushed again."""
        for segment in self._segments_holding(offset, self.log_end_offset + 1):  # bounded by the segments
            segment.txn_index.persist(fsync=True)

    def collect_aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Every aborted transaction overlapping [start_offset, upper_bound_offset), oldest first
        (Kafka's collectAbortedTransactions): from the segment holding `start_offset` on, since a
        transaction's entry lies in its marker's segment, until an entry whose LSO reaches the
        bound says no later one can begin below it."""
        collected: list[AbortedTxn] = []
        holding = max(bisect.bisect_right(self._segment_bases, start_offset) - 1, 0)
        for segment in self._segments[holding:]:  # bounded by the segments
            if not segment.txn_index.entries:
                continue
            overlapping, complete = segment.txn_index.collect(start_offset, upper_bound_offset)
            collected.extend(overlapping)
            if complete:
                break
        return collected

    def end_of_segments_from(self, offset: int, segment_count: int) -> int:
        """Where a `read` from `offset` that answered `segment_count` slices can have reached: the
        base offset of the segment after the last slice's, or the log end (the upper bound of the
        aborted transactions its reader needs). As the read, it skips the segments with nothing
        at or after `offset`, which the cleaner can leave, so they are not counted."""
        located = self._locate(offset)
        if located is None or segment_count <= 0:
            return offset
        index, taken = located[0], 1
        while taken < segment_count and index + 1 < len(self._segments):  # bounded by the segments
            index += 1
            if self._segments[index].size_bytes:
                taken += 1
        return self._segment_bases[index + 1] if index + 1 < len(self._segments) else self.log_end_offset

    def _segments_holding(self, start_offset: int, end_offset: int) -> list[Segment]:
        """The segments holding data between `start_offset` and `end_offset`."""
        return [segment for i, segment in enumerate(self._segments)
                if (i + 1 == len(self._segments) or self._segment_bases[i + 1] > start_offset)
                and segment.base_offset < end_offset]

    def begin_flush(self) -> FlushJob | None:
        """Start a flush of the log up to its end whose fsyncs run in another thread (the owner's
        background flush, so that a restart after a crash rescans only what came after it).

        Writes here the index entries the files lack, the active segment's included, so that
        recovery can start from them; returns None if nothing was appended since the last one.
        Once the job has run, complete_flush moves the recovery point."""
        offset = self.log_end_offset
        if offset <= self._background_flushed_offset:
            return None
        segments = self._segments_holding(self._background_flushed_offset, offset)
        for segment in segments:  # bounded by the segments
            if segment.persist_indexes():
                # The flush syncs the directory then, before the producer snapshot past the
                # aborted transactions in that file is installed.
                self._names_made += 1
        return FlushJob(offset, self._truncations, [os.dup(segment.fd) for segment in segments],
                        [path for segment in segments for path in segment.index_paths],
                        self.directory if self._names_made != self._names_synced else None, self._names_made,
                        self._tag_unsynced())

    def _tag_unsynced(self) -> bool:
        return self._tag_name > self._names_synced

    def complete_flush(self, job: FlushJob) -> bool:
        """Take the recovery point to what `job` made durable, unless the log was truncated
        since it began (the bytes it flushed may no longer be the log's); says which."""
        if job.truncations != self._truncations:
            return False
        self._names_synced = max(self._names_synced, job.names_made)
        self.recovery_point = max(self.recovery_point, job.offset)
        self._background_flushed_offset = job.offset
        return True

    def flush_if_due(self) -> None:
        """Flush if flush.ms has passed since the last flush: called periodically by the owner."""
        if self._clock() >= self._flush_due_ms:
            self.flush()

    def checkpoint_recovery_point(self) -> None:
        """Persist the recovery point if it moved. As Kafka (log.flush.offset.checkpoint.interval.ms),
        not on every flush but on a schedule of the owner's, at close and at truncation: a stale
        checkpoint only makes recovery rescan more, it never skips unflushed data."""
        if self.recovery_point != self._checkpointed_recovery_point:
            self._write_recovery_point()

    def _write_recovery_point(self) -> None:
        self._recovery_checkpoint.write({(self.topic, self.partition): self.recovery_point})
        self._checkpointed_recovery_point = self.recovery_point

    # -- truncation and retention --------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset is >= `offset` (a follower diverged there)."""
        if offset >= self.log_end_offset:
            return
        if offset <= self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:  # bounded
            self._segment_bases.pop()
            self._segments.pop().delete()
        # Active again, it rolls by the settings of now, not of when it was active before.
        self._segments[-1].apply_roll_limits(self._segment_limits)
        bytes_removed = self._segments[-1].truncate_to(offset)
        self._after_truncation()
        logger.info("truncated log topic=%s partition=%d offset=%d log_end_offset=%d bytes_removed=%d",
                    self.topic, self.partition, offset, self.log_end_offset, bytes_removed)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and start an empty log at `offset` (a follower far behind)."""
        for segment in self._segments:
            segment.delete()
        self._segments = [Segment(self.directory, offset, self._segment_limits, self._clock())]
        self._segment_bases = [offset]
        self.leader_epoch_cache.clear()
        self._after_truncation()
        logger.info("truncated log fully topic=%s partition=%d log_start_offset=%d",
                    self.topic, self.partition, offset)

    def _after_truncation(self) -> None:
        self._truncations += 1
        self._background_flushed_offset = min(self._background_flushed_offset, self.log_end_offset)
        fsync_directory(self.directory)
        self.leader_epoch_cache.truncate_from_end(self.log_end_offset)
        # The checkpoint must never claim flushed data past the end: recovery would skip
        # whatever is written there next.
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._write_recovery_point()

    def delete_retained_segments(self, high_watermark: int | None = None) -> int:
        """Delete whole segments from the front that retention.ms or retention.bytes expire.

        Never the active segment, and never one holding data at or above `high_watermark`
        (replicas may still need it). Returns the number of segments deleted.
        """
        upper_offset = self.log_end_offset if high_watermark is None else min(high_watermark, self.log_end_offset)
        now_ms = self._clock()
        excess_bytes = self.size_bytes - self.config.retention_bytes
        deleted = 0
        while len(self._segments) > 1 and self._segment_bases[1] <= upper_offset:  # bounded
            segment = self._segments[0]
            expired_by_time = (
                self.config.retention_ms >= 0 and now_ms - segment.retention_timestamp_ms() > self.config.retention_ms
            )
            expired_by_size = self.config.retention_bytes >= 0 and excess_bytes >= segment.size_bytes
            if not (expired_by_time or expired_by_size):
                break
            excess_bytes -= segment.size_bytes
            self._delete_first_segment(f"retention by_time={expired_by_time}")
            deleted += 1
        self._after_front_deletion(deleted)
        return deleted

    def delete_segments_below(self, offset: int) -> int:
        """Delete whole segments from the front that lie wholly below `offset`, never the active
        one: a follower following its leader's log start offset after the leader's retention
        (the log start stays a segment base, so it may remain below `offset`). Returns how many."""
        deleted = 0
        while len(self._segments) > 1 and self._segment_bases[1] <= offset:  # bounded by the segments
            self._delete_first_segment(f"below leader log start {offset}")
            deleted += 1
        self._after_front_deletion(deleted)
        return deleted

    def _delete_first_segment(self, reason: str) -> None:
        segment = self._segments.pop(0)
        self._segment_bases.pop(0)
        segment.delete()
        logger.debug("deleted segment topic=%s partition=%d segment=%d bytes=%d reason=%s",
                    self.topic, self.partition, segment.base_offset, segment.size_bytes, reason)

    def _after_front_deletion(self, deleted: int) -> None:
        if deleted:
            fsync_directory(self.directory)
            self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # -- lifecycle -----------------------------------------------------------------------------

    def tag_topic_id(self, topic_id: str) -> None:
        """Tag the log with its topic's id (partition_metadata.py). The tag, contents and name,
        is made durable by the next flush, as a rolled segment's name is, before anything counts
        as flushed: only untagged logs are tagged, and one whose tag a crash took or tore is
        tagged again at its next load, as a log is the first time. Two fsyncs of its own per new
        log held back loading 10,000 new logs, and with them their elections (bench/scale.py)."""
        tag_topic_id(self.directory, topic_id)
        self._names_made += 1
        self._tag_name = self._names_made
        self.topic_id = topic_id

    def close(self) -> None:
        """Flush everything, persist the recovery point and release files: on return, the next
        open may be told the log was closed cleanly."""
        self._closed = True
        self.flush()
        # The flush leaves the active segment's indexes to the background flush, and recovery
        # rebuilds the offset indexes from the log, but not the aborted transactions below the
        # recovery point: those are made durable before the recovery point covers them.
        if self._segments[-1].txn_index.persist(fsync=True):
            fsync_directory(self.directory)
        self.checkpoint_recovery_point()
        for segment in self._segments:
            segment.close()

    def close_handles(self) -> None:
        """Release file descriptors without flushing: used when the log directory has failed,
        and by tests to simulate a killed process."""
        self._closed = True
        for segment in self._segments:
            segment.close_handle()

    def delete(self) -> None:
        """Remove the log and its directory."""
        self._closed = True
        for segment in self._segments:
            segment.close_handle()
        shutil.rmtree(self.directory)


class RecoveredProducers(NamedTuple):
    """What the batches crash recovery checked from `from_offset` to the log end leave of each
    producer's state: the producer runs of each segment (records.SegmentScan), in log order, so
    that the producer state need not read those headers again (None for a segment whose runs
    could not sum it up: it holds transactions)."""

    from_offset: int
    segment_runs: list[list]


def _is_segment_stem(stem: str) -> bool:
    return len(stem) == _SEGMENT_NAME_DIGITS and stem.isdigit()


def _runs_within(batches, headers: list[BatchHeader], limit_bytes: int):
    """`batches` as (buffer, headers) runs of whole batches of at most `limit_bytes` each,
    headers' positions relative to their run; one run, the buffer itself, when it fits. A batch
    larger than the limit is refused, as on the leader, before anything is appended."""
    if len(batches) <= limit_bytes:
        yield batches, headers
        return
    for header in headers:  # bounded by the batches of one fetch
        if header.size_bytes > limit_bytes:
            raise RecordListTooLargeError(f"batch of {header.size_bytes} bytes at offset {header.base_offset} exceeds segment.bytes {limit_bytes}")
    view = memoryview(batches)
    start_index = 0
    for index in range(1, len(headers) + 1):  # bounded by the batches of one fetch
        start = headers[start_index].position
        if index == len(headers) or headers[index].position + headers[index].size_bytes - start > limit_bytes:
            end = headers[index - 1].position + headers[index - 1].size_bytes
            yield view[start:end], [header._replace(position=header.position - start) for header in headers[start_index:index]]
            start_index = index
