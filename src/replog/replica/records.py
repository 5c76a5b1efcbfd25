"""Record batch format v2 (magic 2): the 61-byte header, validated and rewritten in place.

Layout of one batch, big-endian, as the Kafka protocol defines it (byte offsets within the batch):

    0   int64   base offset                  } outside the CRC: the broker rewrites these two
    8   int32   batch length (bytes after this field)
    12  int32   partition leader epoch       }
    16  int8    magic (2)
    17  uint32  CRC32C of bytes 21 .. end of batch
    21  int16   attributes: bits 0-2 compression codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                4 zstd), bit 3 timestamp type, bit 4 transactional, bit 5 control
    23  int32   last offset delta
    27  int64   base timestamp
    35  int64   max timestamp
    43  int64   producer id
    51  int16   producer epoch
    53  int32   base sequence
    57  int32   record count
    61  ...     records, possibly compressed: never decoded here

A buffer may hold several batches back to back. Batches are opaque: only headers are read, so the
cost of an append is per batch, never per record, and compressed batches are stored as they came.

The append path's scans (validate_batches, assign_batches) have two implementations with one
contract (BatchCodec): the pure-Python one below and the compiled `_fastbatch` extension beside
this file, which is used whenever it was built. The compiled one exists because a produce of
16 KiB spent as long in Python (header unpacking, CRC call, result tuples) as in its write
syscall. Recovery scans and lookups use parse_header and verify_batch directly.

Concurrency: pure functions over caller-owned buffers; no state.
"""

import struct
from collections.abc import Callable
from typing import NamedTuple

import crc32c

from replog.replica.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
)

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE_BYTES = HEADER.size  # 61
LOG_OVERHEAD_BYTES = 12  # base offset + batch length: the part not counted by batch length
_PREFIX = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_POSITION = 12
_MAGIC_POSITION = 16
_CRC_START = 21
MAGIC_V2 = 2
_LEGACY_MAGICS = (0, 1)
_CODEC_MASK = 0x07
_MAX_CODEC = 4  # zstd
NO_TIMESTAMP = -1
_MAX_OFFSET = 2**63 - 1
_MIN_INT32 = -(2**31)
_MAX_INT32 = 2**31 - 1


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
        return self.attributes & _CODEC_MASK


def parse_header(buf, position: int) -> BatchHeader:
    """Read and sanity-check the header at `position`; says nothing yet about the bytes after it.

    Raises InvalidRecordError for message format v0/v1 and CorruptRecordError for anything that
    cannot be a v2 header (too short, wrong magic, impossible length or counts).
    """
    available = len(buf) - position
    if available < LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"{available} bytes at position {position} cannot hold a batch")
    _, batch_length = _PREFIX.unpack_from(buf, position)
    # v0/v1 messages also keep their magic at byte 16, so they are recognised before the v2
    # length rule would call them merely corrupt.
    if batch_length >= _MAGIC_POSITION - LOG_OVERHEAD_BYTES + 1 and available > _MAGIC_POSITION:
        magic = buf[position + _MAGIC_POSITION]
        if magic in _LEGACY_MAGICS:
            raise InvalidRecordError(f"magic {magic} at position {position}: only v2 batches are accepted")
        if magic != MAGIC_V2:
            raise CorruptRecordError(f"magic {magic} at position {position} is not a record batch")
    if batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES:
        raise CorruptRecordError(f"batch length {batch_length} at position {position} is shorter than a header")
    if available < HEADER_SIZE_BYTES:
        raise CorruptRecordError(f"header at position {position} is cut after {available} bytes")
    (base_offset, _, epoch, _, crc, attributes, last_offset_delta, _, max_timestamp,
     _, _, _, record_count) = HEADER.unpack_from(buf, position)
    if last_offset_delta < 0 or record_count < 0:
        raise CorruptRecordError(
            f"batch at position {position} has last offset delta {last_offset_delta}, count {record_count}"
        )
    if attributes & _CODEC_MASK > _MAX_CODEC:
        raise InvalidRecordError(f"batch at position {position} has unknown codec {attributes & _CODEC_MASK}")
    return BatchHeader(position, batch_length + LOG_OVERHEAD_BYTES, base_offset, epoch, attributes,
                       last_offset_delta, max_timestamp, record_count, crc)


def verify_batch(buf, header: BatchHeader) -> None:
    """Check that the whole batch described by `header` is in `buf` and its CRC32C matches."""
    end = header.position + header.size_bytes
    if end > len(buf):
        raise CorruptRecordError(
            f"batch at position {header.position} needs {header.size_bytes} bytes, {len(buf) - header.position} remain"
        )
    with memoryview(buf) as view:
        computed_crc = crc32c.crc32c(view[header.position + _CRC_START:end])
    if computed_crc != header.crc:
        raise CorruptRecordError(
            f"batch at position {header.position}: CRC32C {computed_crc:#010x} != stored {header.crc:#010x}"
        )


class BatchRun(NamedTuple):
    """What the log needs of all the batches of one append together.

    No per-batch headers: a producer's append holds one batch (one per partition per request)
    whose facts these are, and building header objects cost the leader's append path more than
    its bookkeeping; the few appends of several batches get them from `batch_headers`.
    """

    batch_count: int
    last_offset: int
    max_timestamp: int  # NO_TIMESTAMP if no batch carries one
    record_count: int


def run_of(headers: list[BatchHeader]) -> BatchRun:
    """The BatchRun of batches whose headers are `headers` (at least one)."""
    max_timestamp = NO_TIMESTAMP
    record_count = 0
    for header in headers:
        if header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
        record_count += header.record_count
    return BatchRun(len(headers), headers[-1].last_offset, max_timestamp, record_count)


def batch_headers(buf) -> list[BatchHeader]:
    """Headers of a buffer of batches that already passed validation; reads headers only."""
    headers = []
    position = 0
    while position < len(buf):  # bounded: every batch is at least HEADER_SIZE_BYTES long
        header = parse_header(buf, position)
        headers.append(header)
        position += header.size_bytes
    return headers


def _validate_batches_py(buf, max_batch_bytes: int) -> list[BatchHeader]:
    return _scan(buf, max_batch_bytes, None, 0)


def _assign_batches_py(buf, max_batch_bytes: int, first_offset: int, leader_epoch: int) -> BatchRun:
    if first_offset < 0 or not _MIN_INT32 <= leader_epoch <= _MAX_INT32:
        raise ValueError(f"first offset {first_offset} or leader epoch {leader_epoch} out of range")
    return run_of(_scan(buf, max_batch_bytes, first_offset, leader_epoch))


def _scan(buf, max_batch_bytes: int, first_offset: int | None, leader_epoch: int) -> list[BatchHeader]:
    """validate_batches, and with a `first_offset` the rest of assign_batches (headers as
    assigned)."""
    if not buf:
        raise InvalidRecordError("no record batch in the request")
    headers = []
    position = 0
    end = len(buf)
    next_offset = first_offset
    while position < end:  # bounded: every batch is at least HEADER_SIZE_BYTES long
        header = parse_header(buf, position)
        if header.size_bytes > max_batch_bytes:
            raise RecordTooLargeError(f"batch of {header.size_bytes} bytes exceeds max.message.bytes {max_batch_bytes}")
        verify_batch(buf, header)
        if next_offset is not None:
            # Kafka's LogValidator rule for producers; followers skip it, as compaction on the
            # leader may leave batches with offset gaps or no records.
            if header.record_count == 0 or header.record_count != header.last_offset_delta + 1:
                raise InvalidRecordError(
                    f"batch at position {position} claims {header.record_count} records "
                    f"but spans {header.last_offset_delta + 1} offsets"
                )
            if next_offset + header.last_offset_delta >= _MAX_OFFSET:
                raise InvalidRecordError(f"batch at position {position} would pass the largest offset")
            header = header._replace(base_offset=next_offset, partition_leader_epoch=leader_epoch)
            next_offset += header.last_offset_delta + 1
        headers.append(header)
        position += header.size_bytes
    if first_offset is not None:
        # Only once every batch passed, so that a refused request leaves its buffer as it came.
        for header in headers:
            _BASE_OFFSET.pack_into(buf, header.position, header.base_offset)
            _LEADER_EPOCH.pack_into(buf, header.position + _LEADER_EPOCH_POSITION, leader_epoch)
    return headers


class BatchCodec(NamedTuple):
    """One implementation of the append-path scans: the pure-Python one or the compiled one.

    validate_batches(buf, max_batch_bytes) -> list[BatchHeader]
        `buf` must consist of whole v2 batches only; each must pass parse_header, be at most
        `max_batch_bytes` long and match its CRC32C. Headers are returned as stored.
    assign_batches(buf, max_batch_bytes, first_offset, leader_epoch) -> BatchRun
        As a leader appends a producer's batches: validate_batches, plus each batch must hold
        exactly last_offset_delta + 1 records; then, once all passed, base offsets from
        `first_offset` on and `leader_epoch` are written into `buf` (writable) in place. Both lie
        before the CRC'd range, so the CRCs stay valid. Returns run_of the assigned headers.

    Both raise the errors of errors.py, in the same order and with the same messages.
    """

    name: str
    validate_batches: Callable[..., BatchRun]
    assign_batches: Callable[..., BatchRun]


PURE_PYTHON = BatchCodec("python", _validate_batches_py, _assign_batches_py)


def _load_compiled() -> BatchCodec | None:
    try:
        from replog.replica import _fastbatch
    except ImportError:  # not built (no C compiler at install): the pure-Python path serves
        return None
    _fastbatch.bind(BatchHeader, BatchRun, CorruptRecordError, InvalidRecordError, RecordTooLargeError)
    return BatchCodec(f"c/{_fastbatch.CRC32C_IMPLEMENTATIONS[-1]}", _fastbatch.validate_batches, _fastbatch.assign_batches)


COMPILED = _load_compiled()
CODEC = COMPILED or PURE_PYTHON
validate_batches = CODEC.validate_batches
assign_batches = CODEC.assign_batches


def complete_batches_size(buf) -> int:
    """Bytes of `buf` taken by whole batches, judged by length fields only.

    A fetch response may end in a partial batch (Kafka semantics); a follower appends only this
    prefix.
    """
    position = 0
    end = len(buf)
    while end - position >= LOG_OVERHEAD_BYTES:  # bounded: each step advances by >= 12 bytes
        _, batch_length = _PREFIX.unpack_from(buf, position)
        size = batch_length + LOG_OVERHEAD_BYTES
        if batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES or position + size > end:
            break
        position += size
    return position
