"""The sink: batch (df.write) and streaming (df.writeStream) writers, as Spark's Kafka sink.

Columns: `value` (required), `key`, `headers`, `topic`, `partition`; key and value may be
string or binary. The target topic is the `topic` option, else each row's `topic` column; the
partition is the row's `partition` column, else Kafka's default partitioner: murmur2 of the key,
and for null keys one partition per record batch, moving on after each (sticky, as Java's
producer). Other columns are ignored.

Each task groups its rows into record batches per partition (up to `kafka.batch.size` bytes)
and appends each with acks=all before the task ends, so a task that succeeds has every record
committed. Errors fail the task with the broker's error. Delivery is at-least-once, exactly as
with Spark's Kafka sink: a task or micro-batch that Spark runs again (after a failure) writes its
records again, and a produce retried after a lost answer may have been appended already.
Nothing is lost: Spark commits a micro-batch only after every task has returned.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from .cluster import Cluster, ClusterError
from .offsets import TopicPartition
from .options import OptionError, WriteOptions
from .records import OutgoingRecord, encode_batch
from .schema import HEADERS_TYPE

logger = logging.getLogger(__name__)

_RECORD_OVERHEAD_BYTES = 16  # a record's varints and attributes, for sizing batches
_KEY_VALUE_TYPES = (StringType(), BinaryType())


class WriteError(Exception):
    """The cluster refused records; the message names the partition and the broker's error."""


def validate_input(schema: StructType, options: WriteOptions) -> None:
    """The checks Spark's Kafka sink makes before writing, with its meanings."""
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise OptionError("required attribute 'value' not found in the data to write")
    for name in ("key", "value"):
        if name in fields and fields[name] not in _KEY_VALUE_TYPES:
            raise OptionError(f"{name} attribute type must be a string or binary, got {fields[name].simpleString()}")
    if options.topic is None and "topic" not in fields:
        raise OptionError("topic option required when no 'topic' attribute is present in the data to write")
    if options.topic is None and fields["topic"] != StringType():
        raise OptionError(f"topic attribute type must be a string, got {fields['topic'].simpleString()}")
    if "partition" in fields and fields["partition"] != IntegerType():
        raise OptionError(f"partition attribute type must be an int, got {fields['partition'].simpleString()}")
    if "headers" in fields and not _headers_type_ok(fields["headers"]):
        raise OptionError(f"headers attribute type must be {HEADERS_TYPE.simpleString()}, got {fields['headers'].simpleString()}")


def _headers_type_ok(data_type) -> bool:
    return isinstance(data_type, ArrayType) and [(f.name, f.dataType) for f in data_type.elementType.fields] == [
        ("key", StringType()), ("value", BinaryType())]


@dataclass
class Written(WriterCommitMessage):
    records: int


def write_batches(options: WriteOptions, batches: Iterator[pa.RecordBatch]) -> Written:
    """One task's rows, appended with acks=all; returns how many."""
    with Cluster(options.client) as cluster:
        producer = _TaskProducer(cluster, options)
        for batch in batches:
            producer.add(batch)
        producer.flush_all()
        return Written(producer.records_written)


class _TaskProducer:
    """Pending records per partition, flushed as record batches of about `batch_bytes`."""

    def __init__(self, cluster: Cluster, options: WriteOptions):
        self.cluster = cluster
        self.options = options
        self.records_written = 0
        self._pending: dict[TopicPartition, list[OutgoingRecord]] = {}
        self._pending_bytes: dict[TopicPartition, int] = {}
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, int] = {}

    def add(self, batch: pa.RecordBatch) -> None:
        columns = {name: batch.column(name).to_pylist() for name in ("key", "value", "headers", "topic", "partition")
                   if name in batch.schema.names}
        count = batch.num_rows
        keys = [_as_bytes(key) for key in columns.get("key", [None] * count)]
        values = [_as_bytes(value) for value in columns["value"]]
        headers = columns.get("headers", [None] * count)
        topics = [self.options.topic] * count if self.options.topic is not None else columns["topic"]
        partitions = columns.get("partition", [None] * count)
        for key, value, record_headers, topic, partition in zip(keys, values, headers, topics, partitions):
            if topic is None:
                raise WriteError("a row has a null topic and no 'topic' option is set")
            record = OutgoingRecord(key, value, [(header["key"], header["value"]) for header in record_headers or ()])
            self._append(TopicPartition(topic, self._partition_for(topic, key, partition)), record)

    def _append(self, tp: TopicPartition, record: OutgoingRecord) -> None:
        self._pending.setdefault(tp, []).append(record)
        size = _RECORD_OVERHEAD_BYTES + len(record.key or b"") + len(record.value or b"")
        self._pending_bytes[tp] = self._pending_bytes.get(tp, 0) + size
        if self._pending_bytes[tp] >= self.options.batch_bytes:
            self._flush(tp)

    def _partition_for(self, topic: str, key: bytes | None, partition: int | None) -> int:
        count = self._partition_count(topic)
        if partition is not None:
            if not 0 <= partition < count:
                raise WriteError(f"partition {partition} of topic '{topic}' does not exist (it has {count})")
            return partition
        if key is not None:
            return (murmur2(key) & 0x7FFFFFFF) % count
        return self._sticky.setdefault(topic, random.randrange(count))

    def _partition_count(self, topic: str) -> int:
        if topic not in self._partition_counts:
            counts = self.cluster.partition_counts([topic])
            if topic not in counts:
                raise WriteError(f"topic '{topic}' does not exist (topics are created through the admin API)")
            self._partition_counts[topic] = counts[topic]
        return self._partition_counts[topic]

    def _flush(self, tp: TopicPartition) -> None:
        records = self._pending.pop(tp)
        self._pending_bytes.pop(tp)
        if self._sticky.get(tp.topic) == tp.partition:  # null keys move on, as with Kafka's sticky partitioner
            self._sticky[tp.topic] = (tp.partition + 1) % self._partition_counts[tp.topic]
        deadline = time.monotonic() + self.options.client.request_timeout_ms / 1000
        try:
            result = self.cluster.produce(tp, encode_batch(records, self.options.compression), deadline)
        except ClusterError as error:
            raise WriteError(f"writing {len(records)} records to {tp} failed: {error}") from None
        if result.error_code != 0:
            raise WriteError(f"writing {len(records)} records to {tp} failed: the broker answered {result.error_code.name}")
        self.records_written += len(records)

    def flush_all(self) -> None:
        for tp in sorted(self._pending):
            self._flush(tp)


def _as_bytes(value: str | bytes | None) -> bytes | None:
    return value.encode("utf-8") if isinstance(value, str) else value


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Utils.murmur2), as an unsigned 32-bit value: the hash behind Java's
    default partitioner, so that keys land where Kafka's producers put them."""
    m, mask = 0x5BD1E995, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for index in range(0, whole, 4):
        k = int.from_bytes(data[index:index + 4], "little")
        k = (k * m) & mask
        k ^= k >> 24
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriteOptions):
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[Written | None]) -> None:
        logger.info("batch write committed", extra={"records": sum(message.records for message in messages if message)})

    def abort(self, messages: list[Written | None]) -> None:
        # Appended records cannot be taken back: what succeeded stays (at-least-once).
        logger.warning("batch write aborted; records of tasks that succeeded stay in the log",
                       extra={"records": sum(message.records for message in messages if message)})


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriteOptions):
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[Written | None], batchId: int) -> None:
        logger.info("micro-batch written", extra={"batch_id": batchId, "records": sum(message.records for message in messages if message)})

    def abort(self, messages: list[Written | None], batchId: int) -> None:
        # Spark runs the micro-batch again: its records are written again (at-least-once).
        logger.warning("micro-batch write aborted; it will be written again", extra={"batch_id": batchId})
