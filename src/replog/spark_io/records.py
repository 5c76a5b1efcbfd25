"""Record batches v2 on the consumer side: decoded record by record into the source's columns,
and encoded for the sink. The broker never looks inside a batch (storage/records.py reads only
headers); here every record is read, so this is the connector's hot path: the per-record loop
has a compiled twin (_fastrecords.c, built when a C compiler is there) and a pure-Python one
with the same contract; columns are plain lists handed to Arrow in one call each.

Record layout inside a batch (after the 61-byte header, possibly compressed), each field a
zigzag varint unless noted:

    length, attributes (int8), timestampDelta, offsetDelta, keyLength, key,
    valueLength, value, headerCount, then per header: keyLength, key (UTF-8), valueLength, value

Lengths of -1 are nulls. Codecs: none and gzip always; snappy, lz4 and zstd through `cramjam`
(pip install cramjam), with an error naming it if it is missing. Batches written by clients
before magic 2 are refused with a clear error.
"""

from __future__ import annotations

import gzip
import struct
import time
from collections.abc import Iterable
from typing import NamedTuple

import crc32c

from replog.storage.record_bodies import CODEC_NAMES, RecordBodyError, decompress

from .schema import CREATE_TIME, LOG_APPEND_TIME

# base offset, batch length, leader epoch, magic, crc, attributes, last offset delta,
# base timestamp, max timestamp, producer id, producer epoch, base sequence, record count
_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_BYTES = _HEADER.size
_LOG_OVERHEAD_BYTES = 12  # base offset + batch length
_CRC_START = 21
_MAGIC_V2 = 2
_CODEC_MASK = 0x07
_LOG_APPEND_TIME_FLAG = 0x08
_CONTROL_FLAG = 0x20
_NO_PRODUCER = -1
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
    while position + _HEADER_BYTES <= size:  # bounded: each step moves past one batch
        (base_offset, batch_bytes, _, magic, crc, attributes, last_delta, base_timestamp, max_timestamp,
         _, _, _, count) = _HEADER.unpack_from(buf, position)
        batch_end = position + _LOG_OVERHEAD_BYTES + batch_bytes
        if batch_end > size:
            break
        if magic != _MAGIC_V2:
            raise RecordError(f"batch at offset {base_offset} has magic {magic}: only record batches v2 (Kafka >= 0.11) are read")
        if crc32c.crc32c(memoryview(buf)[position + _CRC_START:batch_end]) != crc:
            raise RecordError(f"batch at offset {base_offset} fails its CRC32C check: corrupt")
        batch_next = base_offset + last_delta + 1
        if batch_next > start and base_offset < end and not attributes & _CONTROL_FLAG:
            try:
                records = decompress(attributes & _CODEC_MASK, buf[position + _HEADER_BYTES:batch_end], base_offset)
            except RecordBodyError as error:
                raise RecordError(str(error)) from None
            log_append_time = max_timestamp if attributes & _LOG_APPEND_TIME_FLAG else _CREATE_TIME_BATCH
            try:
                added = decode_records(records, count, base_offset, base_timestamp, log_append_time, start, end,
                                       into.keys, into.values, into.offsets, into.timestamps_ms, into.headers)
            except (ValueError, IndexError) as error:
                raise RecordError(f"batch at offset {base_offset}: {error}") from None
            into.timestamp_types.extend([CREATE_TIME if log_append_time == _CREATE_TIME_BATCH else LOG_APPEND_TIME] * added)
        next_offset = max(next_offset, batch_next)
        position = batch_end
    return next_offset


def _decode_records_py(data: bytes, count: int, base_offset: int, base_timestamp: int, log_append_time: int,
                       start: int, end: int, keys: list, values: list, offsets: list, timestamps: list,
                       headers_column: list | None) -> int:
    """Append the records of one decompressed batch with offsets in [start, end) to the column
    lists; returns how many. log_append_time is the batch's timestamp for LogAppendTime, or
    _CREATE_TIME_BATCH. The compiled `_fastrecords.decode_records` has the same contract."""
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
    """A zigzag varint at `position`: (value, position after it)."""
    raw, position = _raw_varint(data, position)
    return (raw >> 1) ^ -(raw & 1), position


def _raw_varint(data: bytes, position: int) -> tuple[int, int]:
    """An unsigned varint at `position`, before zigzag decoding: (raw, position after it)."""
    shift = raw = 0
    for _ in range(10):  # a 64-bit varint has at most 10 bytes
        byte = data[position]
        raw |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return raw, position
        shift += 7
    raise ValueError("a varint longer than 10 bytes")


# -- encoding, for the sink ------------------------------------------------------------------


class OutgoingRecord(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: Iterable[tuple[str, bytes | None]] | None


def encode_batch(records: list[OutgoingRecord], compression: str, timestamp_ms: int | None = None) -> bytes:
    """One record batch v2 holding `records`, CreateTime `timestamp_ms` (now if None), no
    producer id: the broker assigns offsets."""
    timestamp_ms = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    for offset_delta, record in enumerate(records):
        fields = bytearray(b"\x00")  # attributes
        fields += _zigzag(0)  # timestamp delta: one timestamp for the batch
        fields += _zigzag(offset_delta)
        _put_bytes(fields, record.key)
        _put_bytes(fields, record.value)
        headers = list(record.headers or ())
        fields += _zigzag(len(headers))
        for key, value in headers:
            _put_bytes(fields, key.encode("utf-8"))
            _put_bytes(fields, value)
        body += _zigzag(len(fields))
        body += fields
    codec = _CODEC_IDS[compression]
    payload = gzip.compress(bytes(body), compresslevel=6) if codec == 1 else bytes(body)
    header_after_crc = struct.pack(">hiqqqhii", codec, len(records) - 1, timestamp_ms, timestamp_ms,
                                   _NO_PRODUCER, _NO_PRODUCER, _NO_PRODUCER, len(records))
    crc = crc32c.crc32c(header_after_crc + payload)
    batch_bytes = _HEADER_BYTES - _LOG_OVERHEAD_BYTES + len(payload)
    return struct.pack(">qiibI", 0, batch_bytes, -1, _MAGIC_V2, crc) + header_after_crc + payload


def _put_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += _zigzag(-1)
    else:
        out += _zigzag(len(data))
        out += data


def _zigzag(value: int) -> bytes:
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while raw >= 0x80:  # bounded: 64-bit values take at most 10 bytes
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)
