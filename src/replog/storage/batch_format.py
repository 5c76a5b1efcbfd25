"""Record batch format v2 (magic 2): the one module that knows its bytes.

Header of one batch, big-endian, as the Kafka protocol defines it (byte offsets within the batch):

    0   int64   base offset                  } outside the CRC: the broker rewrites these two
    8   int32   batch length (bytes after this field)
    12  int32   partition leader epoch       }
    16  int8    magic (2)
    17  uint32  CRC32C of bytes 21 .. end of batch
    21  int16   attributes: bits 0-2 compression codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                4 zstd), bit 3 timestamp type (LogAppendTime), bit 4 transactional, bit 5 control
    23  int32   last offset delta
    27  int64   base timestamp
    35  int64   max timestamp
    43  int64   producer id
    51  int16   producer epoch
    53  int32   base sequence
    57  int32   record count
    61  ...     records, compressed as a whole by the codec

Record layout (Kafka's DefaultRecord): every field a zigzag varint (32-bit, at most 5 bytes)
unless noted; lengths of -1 are nulls:

    length (of what follows), attributes (int8, unused), timestampDelta (64-bit varint, at most
    10 bytes), offsetDelta, keyLength, key, valueLength, value, headerCount, then per header:
    keyLength (never null), key, valueLength, value

Codecs: none and gzip, snappy, lz4 (frame format) and zstd through `cramjam`. Snappy is read in
both framings (xerial's chunks, which Java clients write, and one raw block, which librdkafka
writes) and written as one raw block, which both read. Decompression is bounded: it writes into a
buffer of at most `uncompressed_bytes_max(max.message.bytes)` bytes and refuses a batch that
needs more (Scratch), so no client's batch can make the broker allocate beyond that.

The append path's scans of whole buffers of batches (validation, offset assignment, recovery)
are in records.py; this module holds the layout, one header's decoding, records' encoding and
decoding, and the codecs, for every other reader and writer of batches (the log cleaner, the
group coordinator's log, the ListOffsets lookup, the Spark connector, tests and benches).

Concurrency: pure functions, except Scratch, which one thread uses at a time.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

import cramjam
import crc32c

from replog.storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, ReplicaError

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE_BYTES = HEADER.size  # 61
LOG_OVERHEAD_BYTES = 12  # base offset + batch length: the part not counted by batch length
BATCH_LENGTH_POSITION = 8
LEADER_EPOCH_POSITION = 12
MAGIC_POSITION = 16
CRC_POSITION = 17
CRC_START = 21
ATTRIBUTES_POSITION = 21
MAX_TIMESTAMP_POSITION = 35
PRODUCER_ID_POSITION = 43
RECORD_COUNT_POSITION = 57
MAGIC_V2 = 2
LEGACY_MAGICS = (0, 1)

CODEC_MASK = 0x07
LOG_APPEND_TIME_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BATCH_BIT = 0x20  # a transaction marker, not a producer's records
CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}
MAX_CODEC = CODEC_ZSTD
# compression.type: the codec a topic's log stores batches in, by Kafka's names (BrokerCompressionType);
# "producer" keeps each batch's own.
CODEC_PRODUCER = -1
TOPIC_CODECS = {"producer": CODEC_PRODUCER, "uncompressed": CODEC_NONE, "gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY,
                "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}

NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

# Limits. A batch's records may inflate to at most UNCOMPRESSED_BYTES_FACTOR times the topic's
# max.message.bytes (64 MiB at Kafka's default of 1 MiB): a producer compresses what it batched,
# and librdkafka batches at most batch.size (1,000,000 bytes by default) and the Java producer
# batch.size (16 KiB) or one record of up to max.request.size (1 MiB), so a producer would need
# batches configured 64 times its defaults to meet the limit; a batch past it is refused with
# MESSAGE_TOO_LARGE. The ceiling bounds the memory one decompression may take whatever a topic's
# max.message.bytes (up to 2 GiB) says.
UNCOMPRESSED_BYTES_FACTOR = 64
UNCOMPRESSED_BYTES_CEILING = 256 << 20
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_BYTES = 16  # magic, version, compatible version
_XERIAL_CHUNK = struct.Struct(">i")
# What cramjam says when the output buffer is full: the one decompression error that means "too
# large" rather than "not this codec's bytes" (tests pin it for every codec).
_BUFFER_FULL_MESSAGES = ("failed to write whole buffer", "is smaller than required")


def uncompressed_bytes_max(max_message_bytes: int) -> int:
    """How far a batch's records may inflate on a topic with this max.message.bytes."""
    return min(UNCOMPRESSED_BYTES_FACTOR * max_message_bytes, UNCOMPRESSED_BYTES_CEILING)


# -- the header ------------------------------------------------------------------------------


class BatchHeader(NamedTuple):
    """The header fields the log needs, plus where the batch sits in the buffer it came from."""

    position: int
    size_bytes: int
    base_offset: int
    partition_leader_epoch: int
    attributes: int
    last_offset_delta: int
    max_timestamp: int
    record_count: int
    crc: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression_codec(self) -> int:
        return self.attributes & CODEC_MASK


_PREFIX = struct.Struct(">qi")


def parse_header(buf, position: int, origin: int = 0) -> BatchHeader:
    """Read and sanity-check the header at `position`; says nothing yet about the bytes after it.

    Raises InvalidRecordError for message format v0/v1 and CorruptRecordError for anything that
    cannot be a v2 header (too short, wrong magic, impossible length or counts). Messages name
    the batch's position plus `origin`: where `buf` starts in the file it was read from.
    """
    available = len(buf) - position
    reported = origin + position
    if available < LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"{available} bytes at position {reported} cannot hold a batch")
    _, batch_length = _PREFIX.unpack_from(buf, position)
    # v0/v1 messages also keep their magic at byte 16, so they are recognised before the v2
    # length rule would call them merely corrupt.
    if batch_length >= MAGIC_POSITION - LOG_OVERHEAD_BYTES + 1 and available > MAGIC_POSITION:
        magic = buf[position + MAGIC_POSITION]
        if magic in LEGACY_MAGICS:
            raise InvalidRecordError(f"magic {magic} at position {reported}: only v2 batches are accepted")
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"magic {magic} at position {reported} is not a record batch")
    if batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"batch length {batch_length} at position {reported} is shorter than a header")
    if available < HEADER_SIZE_BYTES:
        raise CorruptRecordError(f"header at position {reported} is cut after {available} bytes")
    (base_offset, _, epoch, _, crc, attributes, last_offset_delta, _, max_timestamp,
     _, _, _, record_count) = HEADER.unpack_from(buf, position)
    if last_offset_delta < 0 or record_count < 0:
        raise CorruptRecordError(
            f"batch at position {reported} has last offset delta {last_offset_delta}, count {record_count}"
        )
    if attributes & CODEC_MASK > MAX_CODEC:
        raise InvalidRecordError(f"batch at position {reported} has unknown codec {attributes & CODEC_MASK}")
    return BatchHeader(position, batch_length + LOG_OVERHEAD_BYTES, base_offset, epoch, attributes,
                       last_offset_delta, max_timestamp, record_count, crc)


def short_batch(position: int, size_bytes: int, remaining_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {position} needs {size_bytes} bytes, {remaining_bytes} remain")


def crc_mismatch(position: int, computed_crc: int, stored_crc: int) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {position}: CRC32C {computed_crc:#010x} != stored {stored_crc:#010x}")


def verify_batch(buf, header: BatchHeader) -> None:
    """Check that the whole batch described by `header` is in `buf` and its CRC32C matches."""
    end = header.position + header.size_bytes
    if end > len(buf):
        raise short_batch(header.position, header.size_bytes, len(buf) - header.position)
    with memoryview(buf) as view:
        computed_crc = crc32c.crc32c(view[header.position + CRC_START:end])
    if computed_crc != header.crc:
        raise crc_mismatch(header.position, computed_crc, header.crc)


class ProducerFields(NamedTuple):
    producer_id: int
    producer_epoch: int
    base_sequence: int
    base_timestamp: int


_PRODUCER_FIELDS = struct.Struct(">q8xqhi")  # base timestamp, [max timestamp], producer id, epoch, sequence
_BASE_TIMESTAMP_POSITION = 27


def producer_fields(buf, position: int = 0) -> ProducerFields:
    """The header fields past the log's: producer id, epoch and base sequence, base timestamp."""
    base_timestamp, producer_id, epoch, sequence = _PRODUCER_FIELDS.unpack_from(buf, position + _BASE_TIMESTAMP_POSITION)
    return ProducerFields(producer_id, epoch, sequence, base_timestamp)


# -- varints ---------------------------------------------------------------------------------


class VarintError(ValueError):
    """A varint cut short by the end of what holds it (`cut`), or not valid: longer than its type
    allows, or too large for it."""

    def __init__(self, *, cut: bool):
        super().__init__("varint is cut short" if cut else "varint is not valid")
        self.cut = cut


def read_varint(data, position: int, end: int, bits: int = 64) -> tuple[int, int]:
    """The zigzag varint of at most `bits` (32 or 64) bits at `position`, read no further than
    `end`: (value, position after it). 32-bit ones take at most 5 bytes, 64-bit ones 10, and the
    value must fit, as Kafka's ByteUtils.readVarint and readVarlong require; VarintError if not."""
    shift = raw = 0
    for _ in range(10 if bits == 64 else 5):  # bounded by the type's longest varint
        if position >= end:
            raise VarintError(cut=True)
        byte = data[position]
        raw |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            if raw >> bits:
                break
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
    raise VarintError(cut=False)


def encode_varint(value: int) -> bytes:
    """`value` (a signed 64-bit integer) as a zigzag varint."""
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFF_FFFF_FFFF_FFFF
    out = bytearray()
    while raw >= 0x80:  # at most 10 bytes for a 64-bit value
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


# -- records ---------------------------------------------------------------------------------


class Record(NamedTuple):
    """One record of a decompressed batch body: its fields and where its bytes lie in the body."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[bytes, bytes | None], ...]
    start: int
    end: int


def records_of(body, count: int) -> Iterator[Record]:
    """The `count` records of a decompressed batch body, in order; InvalidRecordError where the
    bytes are not such records (the append path's own checks, records.py, are stricter)."""
    position = 0
    end = len(body)
    for index in range(count):  # bounded by the batch's record count
        try:
            start = position
            length, position = read_varint(body, position, end, 32)
            if not 0 <= length <= end - position:
                raise InvalidRecordError(f"record {index}: length {length} but {end - position} bytes remain", index)
            record_end = position + length
            timestamp_delta, position = read_varint(body, position + 1, record_end)  # + 1: the attributes byte
            offset_delta, position = read_varint(body, position, record_end, 32)
            key, position = _nullable(body, position, record_end)
            value, position = _nullable(body, position, record_end)
            header_count, position = read_varint(body, position, record_end, 32)
            headers = []
            for _ in range(max(header_count, 0)):  # bounded: each header takes >= 2 bytes of the record
                header_key, position = _nullable(body, position, record_end)
                header_value, position = _nullable(body, position, record_end)
                headers.append((header_key or b"", header_value))
        except VarintError as error:
            raise InvalidRecordError(f"record {index}: {error}", index) from None
        yield Record(offset_delta, timestamp_delta, key, value, tuple(headers), start, record_end)
        position = record_end


# A ListOffsets lookup decodes one batch on the event loop: at most this much of it, about the
# largest batch librdkafka sends (batch.size, 1,000,000 bytes); one that inflates further is
# answered at batch granularity, with its base offset.
LOOKUP_UNCOMPRESSED_BYTES_MAX = 1 << 20


def first_record_at_or_after(batch, timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record of `batch` (a whole batch, as the log holds it)
    with a timestamp >= `timestamp`: ListOffsets answers with records, as Kafka does, not with
    the batch holding them. Only this one cold lookup decodes records, and it trusts nothing in
    them (a log may hold batches older than the leader's validation). None where the records do
    not decode or inflate past LOOKUP_UNCOMPRESSED_BYTES_MAX: the caller keeps the batch's base."""
    header = parse_header(batch, 0)
    if header.attributes & LOG_APPEND_TIME_BIT:  # its records all read the batch's time
        return header.base_offset, header.max_timestamp
    base_timestamp = producer_fields(batch).base_timestamp
    try:
        body = decompress(header.compression_codec, memoryview(batch)[HEADER_SIZE_BYTES:header.size_bytes],
                          LOOKUP_UNCOMPRESSED_BYTES_MAX)
        for record in records_of(body, header.record_count):  # bounded by the batch's record count
            if not 0 <= record.offset_delta <= header.last_offset_delta:
                return None
            if base_timestamp + record.timestamp_delta >= timestamp:
                return header.base_offset + record.offset_delta, base_timestamp + record.timestamp_delta
    except ReplicaError:  # records that do not decode, or inflate past the lookup's bound
        return None
    return None


def _nullable(data, position: int, end: int) -> tuple[bytes | None, int]:
    length, position = read_varint(data, position, end, 32)
    if length < 0:
        return None, position
    if length > end - position:
        raise VarintError(cut=True)
    return bytes(data[position:position + length]), position + length


class NewRecord(NamedTuple):
    """A record to encode; `timestamp_ms` None takes the batch's."""

    key: bytes | None
    value: bytes | None
    headers: Iterable[tuple[str | bytes, bytes | None]] | None = None
    timestamp_ms: int | None = None


def encode_records(records: Iterable[NewRecord], base_timestamp: int) -> bytearray:
    """The uncompressed body of a batch holding `records`, offset deltas from 0."""
    body = bytearray()
    for offset_delta, record in enumerate(records):
        timestamp = base_timestamp if record.timestamp_ms is None else record.timestamp_ms
        fields = bytearray(b"\x00")  # attributes
        fields += encode_varint(timestamp - base_timestamp)
        fields += encode_varint(offset_delta)
        _put_nullable(fields, record.key)
        _put_nullable(fields, record.value)
        headers = list(record.headers or ())
        fields += encode_varint(len(headers))
        for key, value in headers:
            _put_nullable(fields, key.encode("utf-8") if isinstance(key, str) else key)
            _put_nullable(fields, value)
        body += encode_varint(len(fields))
        body += fields
    return body


def _put_nullable(out: bytearray, data: bytes | None) -> None:
    if data is None:
        out += encode_varint(-1)
    else:
        out += encode_varint(len(data))
        out += data


def encode_batch(records: list[NewRecord], timestamp_ms: int, codec: int = CODEC_NONE, *,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE, attributes: int = 0) -> bytearray:
    """One batch of `records` (at least one), CreateTime: `timestamp_ms` is the base timestamp and
    that of records with none of their own; base offset 0 and no leader epoch, which the leader
    assigns. `attributes` adds bits besides the codec's."""
    body = encode_records(records, timestamp_ms)
    max_timestamp = max(timestamp_ms if record.timestamp_ms is None else record.timestamp_ms for record in records)
    return build_batch(compress(codec, body), len(records), timestamp_ms, max_timestamp, attributes | codec,
                       producer_id, producer_epoch, base_sequence)


def build_batch(payload, record_count: int, base_timestamp: int, max_timestamp: int, attributes: int,
                producer_id: int = NO_PRODUCER_ID, producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, last_offset_delta: int | None = None) -> bytearray:
    """A batch around `payload` (its records, compressed as `attributes` says), with its CRC."""
    last_offset_delta = record_count - 1 if last_offset_delta is None else last_offset_delta
    batch = bytearray(HEADER_SIZE_BYTES)
    HEADER.pack_into(batch, 0, 0, HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES + len(payload), -1, MAGIC_V2, 0, attributes,
                     last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
                     record_count)
    batch += payload
    set_crc(batch)
    return batch


_CRC = struct.Struct(">I")
_INT32 = struct.Struct(">i")


def with_payload(batch, payload, codec: int, record_count: int | None = None) -> bytearray:
    """A new batch of `batch`'s header (its first HEADER_SIZE_BYTES at least) around `payload`:
    records in `codec`, `record_count` of them (default: the header's count); its length, codec
    bits and CRC made to match."""
    rebuilt = bytearray(batch[:HEADER_SIZE_BYTES])
    rebuilt[ATTRIBUTES_POSITION + 1] = rebuilt[ATTRIBUTES_POSITION + 1] & ~CODEC_MASK & 0xFF | codec
    rebuilt += payload
    _INT32.pack_into(rebuilt, BATCH_LENGTH_POSITION, len(rebuilt) - LOG_OVERHEAD_BYTES)
    if record_count is not None:
        _INT32.pack_into(rebuilt, RECORD_COUNT_POSITION, record_count)
    set_crc(rebuilt)
    return rebuilt


def set_crc(batch: bytearray) -> None:
    """Write the CRC32C of a whole batch alone in `batch` (after changing a CRC'd field)."""
    _CRC.pack_into(batch, CRC_POSITION, crc32c.crc32c(memoryview(batch)[CRC_START:]))


# -- codecs ----------------------------------------------------------------------------------


def compress(codec: int, data, level: int | None = None) -> bytes:
    """`data` in `codec`, in a form every client reads (see the module docstring); at the codec's
    `level` (gzip, lz4, zstd), or cramjam's default level."""
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    module = _CODEC_MODULES.get(codec)
    if module is None:
        raise InvalidRecordError(f"unknown compression codec {codec}")
    return bytes(module.compress(data, level=level))


_CODEC_MODULES = {CODEC_GZIP: cramjam.gzip, CODEC_LZ4: cramjam.lz4, CODEC_ZSTD: cramjam.zstd}


class Scratch:
    """Where bounded decompression writes: anonymous memory mapped at its capacity, so that only
    the pages a batch actually fills are ever backed (a zero-filled buffer of the capacity would
    fault in all of it), reused from batch to batch. `give_back_beyond` returns the pages past a
    size to the system after a batch that filled more (madvise), so that one large batch does not
    keep its memory for the life of the thread.

    One thread at a time; views returned by `decompress` are valid until its next call."""

    def __init__(self, capacity_bytes: int):
        self.capacity_bytes = capacity_bytes
        self._map = mmap.mmap(-1, max(capacity_bytes, 1))
        self._view = memoryview(self._map)
        self._filled_bytes = 0

    def decompress(self, codec: int, data, limit_bytes: int | None = None) -> memoryview:
        """`data`, of codec `codec` (not none), decompressed: at most `limit_bytes` (default, and
        at most, the capacity). RecordTooLargeError if it inflates past that, CorruptRecordError
        if it is not that codec's bytes."""
        limit_bytes = self.capacity_bytes if limit_bytes is None else min(limit_bytes, self.capacity_bytes)
        out = self._view[:limit_bytes]
        try:
            if codec == CODEC_SNAPPY:
                size = _unsnappy_into(data, out)
            else:
                module = _CODEC_MODULES.get(codec)
                if module is None:
                    raise InvalidRecordError(f"unknown compression codec {codec}")
                size = module.decompress_into(data, out)
        except cramjam.DecompressionError as error:
            if any(message in str(error) for message in _BUFFER_FULL_MESSAGES):
                raise RecordTooLargeError(f"records inflate past {limit_bytes} bytes") from None
            raise CorruptRecordError(f"records are not {CODEC_NAMES[codec]} data: {error}") from None
        self._filled_bytes = max(self._filled_bytes, size)
        return out[:size]

    def give_back_beyond(self, kept_bytes: int) -> None:
        """Return the pages past `kept_bytes` that batches filled to the system."""
        start = -(-kept_bytes // mmap.PAGESIZE) * mmap.PAGESIZE
        if self._filled_bytes > start:
            self._map.madvise(mmap.MADV_DONTNEED, start, min(self._filled_bytes, len(self._map)) - start)
            self._filled_bytes = start

    def close(self) -> None:
        """Unmap now, or, if a view of it is still alive (held by a traceback, say), when the
        last one goes."""
        self._view.release()
        try:
            self._map.close()
        except BufferError:
            pass


def _unsnappy_into(data, out: memoryview) -> int:
    """Java clients frame snappy in xerial's chunks (16-byte header, then length-prefixed raw
    snappy blocks); librdkafka writes one raw block."""
    if bytes(data[:len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return cramjam.snappy.decompress_raw_into(data, out)
    size = 0
    position = _XERIAL_HEADER_BYTES
    with memoryview(data) as view:
        while position < len(view):  # bounded: each step consumes one chunk of >= 4 bytes
            if len(view) - position < _XERIAL_CHUNK.size:
                raise cramjam.DecompressionError("xerial chunk length cut")
            (chunk_bytes,) = _XERIAL_CHUNK.unpack_from(view, position)
            position += _XERIAL_CHUNK.size
            if not 0 <= chunk_bytes <= len(view) - position:
                raise cramjam.DecompressionError(f"xerial chunk of {chunk_bytes} bytes")
            size += cramjam.snappy.decompress_raw_into(view[position:position + chunk_bytes], out[size:])
            position += chunk_bytes
    return size


def decompress(codec: int, data, limit_bytes: int) -> bytes:
    """`data` decompressed, at most `limit_bytes` of it (see Scratch.decompress); for readers of
    a batch now and then, which keep no scratch of their own."""
    if codec == CODEC_NONE:
        if len(data) > limit_bytes:
            raise RecordTooLargeError(f"records of {len(data)} bytes exceed {limit_bytes}")
        return bytes(data)
    scratch = Scratch(limit_bytes)
    try:
        return bytes(scratch.decompress(codec, data))
    finally:
        scratch.close()


def body_of(batch, scratch: Scratch, limit_bytes: int | None = None):
    """The records of the whole batch `batch` (header included), decompressed into `scratch`
    unless they are not compressed (then a view of `batch`)."""
    codec = batch[ATTRIBUTES_POSITION + 1] & CODEC_MASK
    payload = memoryview(batch)[HEADER_SIZE_BYTES:]
    if codec == CODEC_NONE:
        return payload
    return scratch.decompress(codec, payload, limit_bytes)
