"""The compaction half of a partition's log (cleanup.policy=compact): which of its segments a
cleaning pass may take (begin_clean), and swapping the cleaned segments in (complete_clean). The
pass itself, CleanJob, runs in another thread (cleaner.py).

Log (log.py) is a LogCleaning: these methods read and replace its segments (and log a cut,
`_log_cut`, where a cleaned segment reads short), under the same single-owner rule as the rest
of the log.
"""

from __future__ import annotations

import bisect
import logging
import os
from collections.abc import Callable
from pathlib import Path

from replog.storage.checkpoint import LeaderEpochCache, OffsetCheckpoint, fsync_directory
from replog.storage.cleaner import CleanJob, Cleaned, CleanResult, SegmentFile, cleaned_path, txn_index_path
from replog.storage.log_config import LogConfig
from replog.storage.records import AppendRules
from replog.storage.segment import Segment, SegmentLimits, segment_paths
from replog.storage.transaction_index import AbortedTxn

logger = logging.getLogger(__name__)


class LogCleaning:
    """Cleaning a compacted log's head; the attributes and `_log_cut`, `_bases_of` are the log's (log.Log)."""

    directory: Path
    topic: str
    partition: int
    config: LogConfig
    append_rules: AppendRules
    leader_epoch_cache: LeaderEpochCache
    recovery_point: int
    size_bytes: int
    log_start_offset: int
    log_end_offset: int
    _clock: Callable[[], int]
    _closed: bool
    _segments: list[Segment]
    _segment_bases: list[int]
    _segment_limits: SegmentLimits
    _truncations: int
    _cleaner_checkpoint: OffsetCheckpoint
    _cleaned_up_to: int | None
    collect_aborted_transactions: Callable[[int, int], list[AbortedTxn]]

    def begin_clean(self, high_watermark: int, map_max_bytes: int,
                    first_unstable_offset: int | None) -> CleanJob | None:
        """A cleaning pass over the whole segments below `high_watermark`, the recovery point
        and `first_unstable_offset` (the first offset of a transaction not yet ended, None if
        there is none: docs/design.md §16.4), and older than min.compaction.lag.ms (cleaner.py
        says why those), or None if the log is not compacted or too little of that head is dirty
        (min.cleanable.dirty.ratio) and none of it has waited past max.compaction.lag.ms. Run the
        job in another thread, then hand its result to complete_clean."""
        if not self.config.compact or self._closed:
            return None
        limit = min(high_watermark, self.recovery_point, self.log_end_offset)
        if first_unstable_offset is not None:
            limit = min(limit, first_unstable_offset)
        count = bisect.bisect_right(self._segment_bases, limit) - 1  # segments wholly below the limit
        if count <= 0:
            return None
        if self._cleaned_up_to is None:
            self._cleaned_up_to = self._cleaner_checkpoint.read().get((self.topic, self.partition), 0)
        first_dirty = min(max(self._cleaned_up_to, self.log_start_offset), self._segment_bases[count])
        first_dirty_index = bisect.bisect_right(self._segment_bases, first_dirty) - 1
        now_ms = self._clock()
        count = self._below_compaction_lag(first_dirty_index, count, now_ms)
        if count <= 0:
            return None
        end_offset = self._segment_bases[count]
        first_dirty = min(first_dirty, end_offset)
        head = self._segments[:count]
        total_bytes = sum(segment.size_bytes for segment in head)
        dirty_bytes = sum(segment.size_bytes for i, segment in enumerate(head) if self._segment_bases[i + 1] > first_dirty)
        if not dirty_bytes:
            return None
        if (dirty_bytes < self.config.min_cleanable_dirty_ratio * total_bytes
                and not self._past_max_compaction_lag(head[first_dirty_index:], now_ms)):
            return None
        return CleanJob(self.directory, [SegmentFile(segment.base_offset, os.dup(segment.fd), segment.size_bytes)
                                         for segment in head],
                        end_offset, first_dirty, now_ms, self.config.delete_retention_ms,
                        self.config.segment_bytes, self.config.index_interval_bytes, map_max_bytes,
                        frozenset(entry.start_offset for entry in self.leader_epoch_cache.entries),
                        (self._truncations, tuple(head)), self.append_rules.uncompressed_bytes_max,
                        self.collect_aborted_transactions(head[0].base_offset, end_offset))

    def _below_compaction_lag(self, first_dirty_index: int, count: int, now_ms: int) -> int:
        """How many of the first `count` segments the cleaner may take: up to the first dirty one
        holding a record newer than min.compaction.lag.ms (Kafka's firstUncleanableDirtyOffset)."""
        lag_ms = self.config.min_compaction_lag_ms
        if lag_ms <= 0:
            return count
        for index in range(first_dirty_index, count):  # bounded by the log's segments
            if self._segments[index].max_timestamp > now_ms - lag_ms:
                return index
        return count

    def _past_max_compaction_lag(self, dirty: list[Segment], now_ms: int) -> bool:
        """Whether a dirty segment's first batch is older than max.compaction.lag.ms: then the
        log is cleaned whatever its dirty ratio, as Kafka's cleaner does (its maxCompactionDelay);
        batches without a timestamp never count."""
        timestamps = [segment.first_batch_timestamp for segment in dirty if segment.first_batch_timestamp > 0]
        return bool(timestamps) and min(timestamps) < now_ms - self.config.max_compaction_lag_ms

    def complete_clean(self, job: CleanJob, result: CleanResult) -> Cleaned | None:
        """Swap the job's new segments in for the ones they replace, unless the log was closed,
        truncated or changed at its head since the job began (then drop them and return None)."""
        head = self._segments[:len(job.segments)]
        if self._closed or (self._truncations, tuple(head)) != job.identity:
            for cleaned in result.cleaned:
                for path in _cleaned_files(self.directory, cleaned.base_offset):
                    cleaned_path(path).unlink(missing_ok=True)
            return None
        size_before = self.size_bytes
        now_ms = self._clock()
        for cleaned in result.cleaned:  # bounded by the head's segments
            log_path, *index_paths = _cleaned_files(self.directory, cleaned.base_offset)
            for path in index_paths:  # the old indexes must never describe the new file
                path.unlink(missing_ok=True)
            os.replace(cleaned_path(log_path), log_path)
            for path in index_paths:
                if cleaned_path(path).exists():  # an aborted-transaction index only if it has an entry
                    os.replace(cleaned_path(path), path)
            head[cleaned.replaced[0]].close_handle()
        # The merged segments' names are durable before the segments they hold are deleted.
        fsync_directory(self.directory)
        for cleaned in result.cleaned:  # bounded by the head's segments
            for i in cleaned.replaced[1:]:
                head[i].delete()
            replacement = Segment(self.directory, cleaned.base_offset, self._segment_limits, now_ms)
            opened = replacement.load()
            replacement.txn_index.load()
            if opened.cut is not None:
                self._log_cut(replacement, opened.cut)
            for i in cleaned.replaced:
                self._segments[i] = replacement
        fsync_directory(self.directory)
        self._segments = list(dict.fromkeys(self._segments))  # each merged group once, in order
        self._segment_bases = self._bases_of(self._segments)
        self._cleaner_checkpoint.write({(self.topic, self.partition): result.first_dirty})
        self._cleaned_up_to = result.first_dirty
        cleaned = Cleaned(size_before - self.size_bytes, result.records_removed)
        logger.debug("cleaned log topic=%s partition=%d segments=%d segments_now=%d bytes_removed=%d records_removed=%d",
                     self.topic, self.partition, len(job.segments), len(self._segments), *cleaned)
        return cleaned


def _cleaned_files(directory: Path, base_offset: int) -> tuple[Path, ...]:
    """The `.log` a pass writes for the segment at `base_offset`, then the indexes beside it."""
    return (*segment_paths(directory, base_offset), txn_index_path(directory, base_offset))
