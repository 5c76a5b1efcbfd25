"""The source's readers: batch (DataSourceReader) and streaming (DataSourceStreamReader).

Both plan on the driver (which partitions, which offsets) and read on executors: each Spark
partition is one OffsetRange, read by `read_range` over its own connections (readers are
pickled; a Cluster never is), from the range's first offset to just before its end, whatever
leader serves it meanwhile. A range is read the same way every time, which is what Spark's
replay of a micro-batch after a failure needs: its ends are offsets below the high watermark
at planning time, so the records in it never change.

Streaming: offsets are `offsets.to_json` dicts. latestOffset takes the subscribed partitions
as they are now (new partitions and topics matching subscribePattern join, starting at their
earliest offset), their high watermarks, and the read limit: ReadMaxRows from
maxOffsetsPerTrigger (shared by backlog, offsets.limit_offsets) or everything available.
Trigger.AvailableNow caps every later latestOffset at the high watermarks seen when it began.
"""

from __future__ import annotations

import array
import itertools
import logging
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from .cluster import Cluster, ClusterError, TopicGone
from .offsets import EARLIEST, LATEST, OffsetRange, TopicPartition, from_json, limit_offsets, ranges_between, to_json
from .options import ReadOptions
from .positions import DataLoss, discover, offsets_at, resolve
from .records import Columns, decode_batches
from .schema import source_schema

logger = logging.getLogger(__name__)

_OFFSET_OUT_OF_RANGE = 1
_NO_DATA_LOSS_HINT = "; set failOnDataLoss=false to skip lost records and go on"


class RangePartition(InputPartition):
    """One Spark task's work: offsets [start, end) of one Kafka partition."""

    def __init__(self, offset_range: OffsetRange):
        super().__init__(offset_range)
        self.offset_range = offset_range


def read_range(options: ReadOptions, offset_range: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of `offset_range` as Arrow batches of the source schema, one per fetch."""
    arrow_schema = to_arrow_schema(source_schema(options.include_headers), timezone="UTC")
    tp, position, end = offset_range
    with Cluster(options.client) as cluster:
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while position < end:  # bounded: each fetch advances `position` or the deadline nears
            try:
                fetched = cluster.fetch(tp, position, deadline)
            except TopicGone as gone:
                _data_loss(options, f"{tp}: offsets {position}..{end - 1} cannot be read: {gone}")
                return
            if fetched.error_code == _OFFSET_OUT_OF_RANGE:
                position = _skip_lost(options, cluster, tp, position, end, fetched.log_start_offset)
                continue
            if fetched.error_code != 0:  # retriable ones were retried by the cluster
                raise ClusterError(f"{tp}: fetch at offset {position} answered {fetched.error_code.name}")
            columns = Columns(options.include_headers)
            after = decode_batches(fetched.records, position, end, columns)
            if after > position:
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
                position = after
            elif time.monotonic() > deadline:
                raise TimeoutError(f"{tp}: no records at offset {position} within kafkaConsumer.pollTimeoutMs="
                                   f"{options.poll_timeout_ms} (high watermark {fetched.high_watermark}, reading up to {end})")
            if columns:
                yield _to_arrow(columns, tp, arrow_schema)


def _skip_lost(options: ReadOptions, cluster: Cluster, tp: TopicPartition, position: int, end: int, log_start: int) -> int:
    """Where reading goes on after OFFSET_OUT_OF_RANGE at `position`: retention deleted the
    records before the log start offset."""
    earliest = offsets_at(cluster, [tp], EARLIEST).get(tp, end) if log_start < 0 else log_start
    if earliest <= position:
        raise DataLoss(f"{tp}: offset {position} is out of range, yet the log starts at {earliest}")
    _data_loss(options, f"{tp}: offsets {position}..{min(earliest, end) - 1} were deleted (retention) before they were read")
    return min(earliest, end)


def _data_loss(options: ReadOptions, what: str) -> None:
    if options.fail_on_data_loss:
        raise DataLoss(what + _NO_DATA_LOSS_HINT)
    logger.warning("skipping lost records: %s", what)


def _deleted(options: ReadOptions, tp: TopicPartition, offset: int) -> None:
    _data_loss(options, f"{tp} was deleted while the query read it (from offset {offset})")


def _to_arrow(columns: Columns, tp: TopicPartition, arrow_schema: pa.Schema) -> pa.RecordBatch:
    count = len(columns)
    arrays = [
        _binary_array(columns.keys),
        _binary_array(columns.values),
        pa.repeat(pa.scalar(tp.topic, pa.string()), count),
        pa.repeat(pa.scalar(tp.partition, pa.int32()), count),
        pa.array(columns.offsets, pa.int64()),
        pa.array(columns.timestamps_ms, pa.timestamp("ms", tz="UTC")).cast(arrow_schema.field("timestamp").type),
        pa.array(columns.timestamp_types, pa.int32()),
    ]
    if columns.headers is not None:
        arrays.append(pa.array(columns.headers, arrow_schema.field("headers").type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _binary_array(items: list[bytes | None]) -> pa.Array:
    """pa.array(items, pa.binary()), built from one joined buffer and its offsets where no item
    is null: an order of magnitude faster than converting item by item."""
    if None in items:
        return pa.array(items, pa.binary())
    ends = array.array("i", [0])
    ends.extend(itertools.accumulate(map(len, items)))
    return pa.Array.from_buffers(pa.binary(), len(items), [None, pa.py_buffer(ends), pa.py_buffer(b"".join(items))])


def _plan(options: ReadOptions, start: dict[TopicPartition, int], end: dict[TopicPartition, int]) -> list[RangePartition]:
    return [RangePartition(piece) for piece in ranges_between(start, end, options.min_partitions)]


class BatchReader(DataSourceReader):
    """spark.read: from startingOffsets (default earliest) to endingOffsets (default latest)."""

    def __init__(self, options: ReadOptions):
        self.options = options

    def partitions(self) -> list[InputPartition]:
        options = self.options
        with Cluster(options.client) as cluster:
            subscribed = discover(cluster, options.subscription)
            start = resolve(cluster, options.starting, subscribed, option="startingOffsets",
                            not_found_latest=options.timestamp_not_found_latest)
            end = resolve(cluster, options.ending, subscribed, option="endingOffsets", not_found_latest=True)
        backwards = {str(tp): (start[tp], end[tp]) for tp in end if tp in start and start[tp] > end[tp]}
        if backwards:
            raise ValueError(f"starting offsets are past the ending offsets (start, end): {backwards}")
        return _plan(options, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, RangePartition):  # Spark's stand-in when there is nothing to read
            return iter(())
        return read_range(self.options, partition.offset_range)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """spark.readStream: micro-batches between offsets (see the module's docstring)."""

    def __init__(self, options: ReadOptions):
        self.options = options
        self._available_now_target: dict[TopicPartition, int] | None = None
        self._cluster: Cluster | None = None

    def __getstate__(self) -> dict:
        return self.__dict__ | {"_cluster": None}

    @property
    def cluster(self) -> Cluster:
        if self._cluster is None:
            self._cluster = Cluster(self.options.client)
        return self._cluster

    def initialOffset(self) -> dict:
        subscribed = discover(self.cluster, self.options.subscription)
        return to_json(resolve(self.cluster, self.options.starting, subscribed, option="startingOffsets",
                               not_found_latest=self.options.timestamp_not_found_latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_offsets_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = offsets_at(self.cluster, discover(self.cluster, self.options.subscription), LATEST)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = self._with_current_partitions(from_json(start))
        available = offsets_at(self.cluster, list(begin), LATEST)
        for tp in sorted(set(begin) - set(available)):
            _deleted(self.options, tp, begin.pop(tp))
        if self._available_now_target is not None:
            target = self._available_now_target
            available = {tp: min(offset, target[tp]) for tp, offset in available.items() if tp in target}
            begin = {tp: offset for tp, offset in begin.items() if tp in target}
        for tp, offset in available.items():
            if offset < begin[tp]:
                _data_loss(self.options, f"{tp}: the high watermark went back from {begin[tp]} to {offset} (truncated or recreated)")
                available[tp] = begin[tp]
        if isinstance(limit, ReadMaxRows):
            available = limit_offsets(begin, available, limit.max_rows)
        return to_json(available)

    def _with_current_partitions(self, start: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
        """`start` for the partitions subscribed now: new ones from their earliest offset,
        vanished ones dropped (data loss: their unread records are gone)."""
        current = discover(self.cluster, self.options.subscription)
        for tp in sorted(set(start) - set(current)):
            _deleted(self.options, tp, start[tp])
        new = [tp for tp in current if tp not in start]
        fresh = offsets_at(self.cluster, new, EARLIEST) if new else {}
        if fresh:
            logger.info("reading new partitions from their earliest offsets", extra={"partitions": [str(tp) for tp in fresh]})
        return {tp: start[tp] for tp in current if tp in start} | fresh

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin, finish = from_json(start), from_json(end)
        new = [tp for tp in finish if tp not in begin]
        if new:  # partitions that appeared in this batch are read from their earliest offset
            begin |= offsets_at(self.cluster, new, EARLIEST)
        return _plan(self.options, begin, finish)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.options, partition.offset_range)

    def commit(self, end: dict) -> None:
        """Nothing to do: Spark's checkpoint holds the query's progress, as with Kafka's source."""

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
