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

The append path's scans (validate_batches, assign_batches) and crash recovery's scan of a segment
file (scan_segment) have two implementations with one contract (BatchCodec): the pure-Python one
below and the compiled `_fastbatch` extension beside this file, which is used whenever it was
built. The compiled one exists because a produce of 16 KiB spent as long in Python (header
unpacking, CRC call, result tuples) as in its write syscall, and because recovery checks every
batch of up to GiBs of log before a partition opens. Lookups use parse_header directly.

Concurrency: pure functions over caller-owned buffers and file descriptors; no state.
"""

import collections
import os
import struct
from collections.abc import Callable
from typing import NamedTuple

import crc32c

from replog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    RecordTooLargeError,
    ReplicaError,
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
MAX_RELATIVE_OFFSET = _MAX_INT32  # index entries store offset - segment base offset as int32
# Kafka's NUM_BATCHES_TO_RETAIN: a client keeps at most 5 requests in flight per partition with
# idempotence on, so any retry it can send is one of the last 5 batches (producer_state.py).
PRODUCER_BATCHES_KEPT = 5
NO_PRODUCER_ID = -1
CONTROL_BATCH_BIT = 0x20  # attributes: a transaction marker, not a producer's records
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_FIELDS_POSITION = 43
SCAN_BUFFER_BYTES = 1 << 20  # scan_segment's buffer: measured, larger ones fall out of cache before the CRC


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
    if batch_length >= _MAGIC_POSITION - LOG_OVERHEAD_BYTES + 1 and available > _MAGIC_POSITION:
        magic = buf[position + _MAGIC_POSITION]
        if magic in _LEGACY_MAGICS:
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
    if attributes & _CODEC_MASK > _MAX_CODEC:
        raise InvalidRecordError(f"batch at position {reported} has unknown codec {attributes & _CODEC_MASK}")
    return BatchHeader(position, batch_length + LOG_OVERHEAD_BYTES, base_offset, epoch, attributes,
                       last_offset_delta, max_timestamp, record_count, crc)


def _short_batch(position: int, size_bytes: int, remaining_bytes: int) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {position} needs {size_bytes} bytes, {remaining_bytes} remain")


def _crc_mismatch(position: int, computed_crc: int, stored_crc: int) -> CorruptRecordError:
    return CorruptRecordError(f"batch at position {position}: CRC32C {computed_crc:#010x} != stored {stored_crc:#010x}")


def verify_batch(buf, header: BatchHeader) -> None:
    """Check that the whole batch described by `header` is in `buf` and its CRC32C matches."""
    end = header.position + header.size_bytes
    if end > len(buf):
        raise _short_batch(header.position, header.size_bytes, len(buf) - header.position)
    with memoryview(buf) as view:
        computed_crc = crc32c.crc32c(view[header.position + _CRC_START:end])
    if computed_crc != header.crc:
        raise _crc_mismatch(header.position, computed_crc, header.crc)


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


class SegmentScan(NamedTuple):
    """What scan_segment found in a segment file from the position it started at."""

    end_position: int  # where it stopped: the file's end, or the start of the refused batch
    next_offset: int
    max_timestamp: int
    index_due_position: int
    # The index entries of the batches passed (segment.py's rule: the first batch past
    # index_due_position takes one, with the running max timestamp of the batches before it).
    index_offsets: list[int]
    index_positions: list[int]
    index_timestamps: list[int]
    # What the batches from producers_from_offset on leave of each producer's state (replaying
    # producer_state's _record over them), by producer id: (producer id, epoch, whether the epoch
    # changed among them, ((base offset, last offset delta, max timestamp, base sequence), ...))
    # with the last PRODUCER_BATCHES_KEPT batches of that epoch, oldest first.
    producer_runs: list[tuple[int, int, bool, tuple[tuple[int, int, int, int], ...]]]
    refusal: str | None  # why the batch at end_position was refused; None if the file ended


class _FileWindow:
    """A stretch of a file in one reused buffer, read forward: what scan_segment reads through,
    so that a batch of any size costs one buffer of memory."""

    def __init__(self, fd: int, position: int, end_position: int):
        self._fd = fd
        self.buffer = memoryview(bytearray(min(SCAN_BUFFER_BYTES, max(end_position - position, 0))))
        self.position = position
        self.size_bytes = 0
        self.end_position = end_position  # moves back if the file turns out shorter

    @property
    def end(self) -> int:
        return self.position + self.size_bytes

    def fill(self, position: int) -> None:
        """Hold the file from `position` on, as far as the buffer or the file goes. A read that
        comes back short means the file ends there."""
        wanted = min(len(self.buffer), self.end_position - position)
        got = 0
        while got < wanted:  # bounded: each pass reads >= 1 byte or ends the file
            read = os.preadv(self._fd, [self.buffer[got:wanted]], position + got)
            if read == 0:
                self.end_position = position + got
                break
            got += read
        self.position = position
        self.size_bytes = got

    def crc_through(self, start: int, end: int) -> int:
        """CRC32C of the file's [start, end), which starts inside the window (or of as much as the
        file still has); refills the window as needed."""
        crc = 0
        while True:  # bounded: each pass covers a window or ends
            upto = min(end, self.end)
            crc = crc32c.crc32c(self.buffer[start - self.position:upto - self.position], crc)
            if upto in (end, self.end_position):
                return crc
            self.fill(upto)
            start = upto


class _ProducerRuns:
    """producer id -> [epoch, whether it changed, deque of batches]: SegmentScan.producer_runs in
    the making, by the rule of producer_state's _record."""

    def __init__(self) -> None:
        self._runs: dict[int, list] = {}

    def record(self, header_bytes: bytes, header: BatchHeader) -> None:
        producer_id, epoch, base_sequence = _PRODUCER_FIELDS.unpack_from(header_bytes, _PRODUCER_FIELDS_POSITION)
        if producer_id == NO_PRODUCER_ID or header.attributes & CONTROL_BATCH_BIT:
            return
        run = self._runs.get(producer_id)
        if run is None:
            run = self._runs[producer_id] = [epoch, False, collections.deque(maxlen=PRODUCER_BATCHES_KEPT)]
        elif run[0] != epoch:
            run[:] = [epoch, True, collections.deque(maxlen=PRODUCER_BATCHES_KEPT)]
        run[2].append((header.base_offset, header.last_offset_delta, header.max_timestamp, base_sequence))

    def as_list(self) -> list[tuple[int, int, bool, tuple[tuple[int, int, int, int], ...]]]:
        return [(producer_id, epoch, changed, tuple(batches))
                for producer_id, (epoch, changed, batches) in sorted(self._runs.items())]


def _scan_segment_py(fd: int, position: int, end_position: int, next_offset: int, segment_base_offset: int,
                     index_due_position: int, index_interval_bytes: int, max_timestamp: int,
                     producers_from_offset: int) -> SegmentScan:
    window = _FileWindow(fd, position, end_position)
    offsets: list[int] = []
    positions: list[int] = []
    timestamps: list[int] = []
    producers = _ProducerRuns()
    refusal = None
    # To the end the caller asked for: a file found shorter is refused where its data runs out.
    while position < end_position:  # bounded: each pass advances >= 61 bytes or ends
        remaining = window.end_position - position
        if position < window.position or position + min(HEADER_SIZE_BYTES, remaining) > window.end:
            window.fill(position)
            remaining = window.end_position - position
        try:
            at = position - window.position
            header = parse_header(window.buffer[:window.size_bytes], at, window.position)
            if header.size_bytes > remaining:
                raise _short_batch(position, header.size_bytes, remaining)
            # The base offset is outside the CRC: order and range are all that can be checked of it.
            if header.base_offset < next_offset:
                raise CorruptRecordError(f"base offset {header.base_offset} is below next offset {next_offset}")
            if header.last_offset - segment_base_offset > MAX_RELATIVE_OFFSET:
                raise CorruptRecordError(f"offset {header.last_offset} is out of range of segment {segment_base_offset}")
            # Taken before the CRC moves the window on.
            header_bytes = (bytes(window.buffer[at:at + HEADER_SIZE_BYTES])
                            if header.base_offset >= producers_from_offset else None)
            crc = window.crc_through(position + _CRC_START, position + header.size_bytes)
            if window.end_position < position + header.size_bytes:  # the file shrank under the scan
                raise _short_batch(position, header.size_bytes, window.end_position - position)
            if crc != header.crc:
                raise _crc_mismatch(position, crc, header.crc)
        except ReplicaError as error:
            refusal = str(error)
            break
        if position > index_due_position:
            offsets.append(header.base_offset)
            positions.append(position)
            timestamps.append(max_timestamp)
            index_due_position = position + index_interval_bytes
        if header_bytes is not None:
            producers.record(header_bytes, header)
        if header.max_timestamp > max_timestamp:
            max_timestamp = header.max_timestamp
        next_offset = header.next_offset
        position += header.size_bytes
    return SegmentScan(position, next_offset, max_timestamp, index_due_position, offsets, positions, timestamps,
                       producers.as_list(), refusal)


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

    scan_segment(fd, position, end_position, next_offset, segment_base_offset, index_due_position,
                 index_interval_bytes, max_timestamp, producers_from_offset) -> SegmentScan
        Crash recovery of a segment file: check every batch of the file from `position` (a batch
        start) to `end_position` as parse_header and verify_batch do, and that base offsets are
        >= `next_offset` and increasing and last offsets within 2**31 - 1 of the segment's base;
        stop at the first batch that fails, whatever its size or place in the file. Positions in
        refusals are file positions. The other arguments carry the segment's state at `position`
        on, as SegmentScan returns it; the producer runs cover the batches passed whose base
        offset is >= `producers_from_offset`.

    All raise or refuse with the errors of errors.py, in the same order and with the same messages.
    """

    name: str
    validate_batches: Callable[..., BatchRun]
    assign_batches: Callable[..., BatchRun]
    scan_segment: Callable[..., SegmentScan]


PURE_PYTHON = BatchCodec("python", _validate_batches_py, _assign_batches_py, _scan_segment_py)


def _load_compiled() -> BatchCodec | None:
    try:
        from replog.storage import _fastbatch
    except ImportError:  # not built (no C compiler at install): the pure-Python path serves
        return None
    _fastbatch.bind(BatchHeader, BatchRun, SegmentScan, CorruptRecordError, InvalidRecordError, RecordTooLargeError)
    return BatchCodec(f"c/{_fastbatch.CRC32C_IMPLEMENTATIONS[-1]}", _fastbatch.validate_batches,
                      _fastbatch.assign_batches, _fastbatch.scan_segment)


COMPILED = _load_compiled()
CODEC = COMPILED or PURE_PYTHON
validate_batches = CODEC.validate_batches
assign_batches = CODEC.assign_batches
scan_segment = CODEC.scan_segment


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
