"""Record batches v2 on the consumer side: decoded record by record into the source's columns,
and encoded for the sink. Every record is read here, so this is the connector's hot path: the
per-record loop has a compiled twin (_fastrecords.c, built when a C compiler is there) and a
pure-Python one with the same contract; columns are plain lists handed to Arrow in one call each.

The format (header, record layout, varints, codecs, bounded decompression) is
storage/batch_format.py's. A batch's records are decompressed into a scratch buffer of at most
batch_format's ceiling, so that a batch that inflates past anything a broker accepts fails the
read rather than the executor's memory. Batches written by clients before magic 2 are refused
with a clear error.
"""

from __future__ import annotations

import time

import crc32c

from replog.storage.batch_format import (
    CODEC_MASK,
    CODEC_NAMES,
    CODEC_NONE,
    CONTROL_BATCH_BIT,
    CRC_START,
    HEADER,
    HEADER_SIZE_BYTES,
    LOG_APPEND_TIME_BIT,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    UNCOMPRESSED_BYTES_CEILING,
    NewRecord,
    Scratch,
    encode_batch as encode_record_batch,
    read_varint,
)
from replog.storage.errors import ReplicaError

from .schema import CREATE_TIME, LOG_APPEND_TIME

OutgoingRecord = NewRecord  # the sink's name for a record to write
_CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}
_CREATE_TIME_BATCH = -1  # decode_records' log_append_time for CreateTime batches


class RecordError(Exception):
    """A fetched batch cannot be read: corrupt, an unknown codec, or an old format."""


class Columns:
    """Decoded records of one partition, column by column, ready for Arrow."""

    __slots__ = ("keys", "values", "offsets", "timestamps_ms", "timestamp_types", "headers")

    def __init__(self, with_headers: bool):
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_ms: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]] | None] | None = [] if with_headers else None

    def __len__(self) -> int:
        return len(self.offsets)


def decode_batches(buf: bytes, start: int, end: int, into: Columns) -> int:
    """Append the records of `buf` (whole batches back to back, as a Fetch returns them; a cut
    last batch is ignored) with offsets in [start, end) to `into`. Returns the offset after the
    last whole batch, where the next fetch goes on: batches of control records and of records
    below `start` count, so a fetch never repeats itself."""
    position = 0
    next_offset = start
    size = len(buf)
    scratch: Scratch | None = None
    try:
        while position + HEADER_SIZE_BYTES <= size:  # bounded: each step moves past one batch
            (base_offset, batch_bytes, _, magic, crc, attributes, last_delta, base_timestamp, max_timestamp,
             _, _, _, count) = HEADER.unpack_from(buf, position)
            batch_end = position + LOG_OVERHEAD_BYTES + batch_bytes
            if batch_end > size:
                break
            if magic != MAGIC_V2:
                raise RecordError(f"batch at offset {base_offset} has magic {magic}: only record batches v2 (Kafka >= 0.11) are read")
            if crc32c.crc32c(memoryview(buf)[position + CRC_START:batch_end]) != crc:
                raise RecordError(f"batch at offset {base_offset} fails its CRC32C check: corrupt")
            batch_next = base_offset + last_delta + 1
            if batch_next > start and base_offset < end and not attributes & CONTROL_BATCH_BIT:
                payload = memoryview(buf)[position + HEADER_SIZE_BYTES:batch_end]
                codec = attributes & CODEC_MASK
                try:
                    if codec != CODEC_NONE:
                        scratch = scratch or Scratch(UNCOMPRESSED_BYTES_CEILING)
                        payload = scratch.decompress(codec, payload)
                    log_append_time = max_timestamp if attributes & LOG_APPEND_TIME_BIT else _CREATE_TIME_BATCH
                    added = decode_records(payload, count, base_offset, base_timestamp, log_append_time, start, end,
                                           into.keys, into.values, into.offsets, into.timestamps_ms, into.headers)
                except (ValueError, IndexError, ReplicaError) as error:
                    raise RecordError(f"batch at offset {base_offset}: {error}") from None
                into.timestamp_types.extend([CREATE_TIME if log_append_time == _CREATE_TIME_BATCH else LOG_APPEND_TIME] * added)
            next_offset = max(next_offset, batch_next)
            position = batch_end
    finally:
        if scratch is not None:
            scratch.close()
    return next_offset


def _decode_records_py(data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int,
                       start: int, end: int, keys: list, values: list, offsets: list, timestamps: list,
                       headers_column: list | None) -> int:
    """Append the records of one decompressed batch with offsets in [start, end) to the column
    lists; returns how many. log_append_time is the batch's timestamp for LogAppendTime, or
    _CREATE_TIME_BATCH. The compiled `_fastrecords.decode_records` has the same contract."""
    data = bytes(data)  # keys and values are bytes, not views of a scratch buffer the next batch reuses
    added = 0
    position = 0
    for _ in range(count):  # bounded by the batch's record count
        length, position = _varint(data, position)
        record_end = position + length
        timestamp_delta, position = _varint(data, position + 1)  # + 1: the attributes byte, unused in v2
        offset_delta, position = _varint(data, position)
        offset = base_offset + offset_delta
        if not start <= offset < end:
            position = record_end
            continue
        key, position = _nullable_bytes(data, position)
        value, position = _nullable_bytes(data, position)
        keys.append(key)
        values.append(value)
        if headers_column is not None:
            headers_column.append(_headers(data, position))
        offsets.append(offset)
        timestamps.append(base_timestamp + timestamp_delta if log_append_time == _CREATE_TIME_BATCH else log_append_time)
        added += 1
        position = record_end
    if position > len(data):
        raise ValueError("records run past the batch's end")
    return added


def _load_compiled():
    try:
        from ._fastrecords import decode_records as compiled
    except ImportError:
        return None
    return compiled


COMPILED = _load_compiled()
decode_records = COMPILED or _decode_records_py


def _headers(data: bytes, position: int) -> list[tuple[str, bytes | None]] | None:
    """A record's headers; None (not an empty list) when it has none, as Spark's Kafka source."""
    count, position = _varint(data, position)
    if count <= 0:
        return None
    headers = []
    for _ in range(count):  # bounded by the record's header count
        key_length, position = _varint(data, position)
        key = data[position:position + key_length].decode("utf-8")
        position += key_length
        value, position = _nullable_bytes(data, position)
        headers.append((key, value))
    return headers


def _nullable_bytes(data: bytes, position: int) -> tuple[bytes | None, int]:
    """A length-prefixed byte string (None for length -1) and the position after it."""
    length, position = _varint(data, position)
    if length < 0:
        return None, position
    return data[position:position + length], position + length


def _varint(data: bytes, position: int) -> tuple[int, int]:
    return read_varint(data, position, len(data))


# -- encoding, for the sink ------------------------------------------------------------------


def encode_batch(records: list[OutgoingRecord], compression: str, timestamp_ms: int | None = None) -> bytes:
    """One record batch v2 holding `records`, CreateTime `timestamp_ms` (now if None), no
    producer id: the broker assigns offsets."""
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    return bytes(encode_record_batch(records, timestamp_ms, _CODEC_IDS[compression]))
