"""The append path's and crash recovery's scans of buffers of v2 record batches.

batch_format.py describes the bytes; here they are checked as a log takes them:

- a leader's append of a producer's batch (assign_batches, check_records): Kafka's LogValidator
  rules, every record read; then the base offset, leader epoch and, if the producer's was wrong,
  the max timestamp are written in place and the bytes appended as they came;
- a follower's append of its leader's batches (validate_batches): headers and CRCs only, as the
  leader checked the rest;
- crash recovery's check of a segment file (scan_segment): headers, CRCs and offsets.

Each has two implementations with one contract (BatchCodec): the pure-Python one below and the
compiled `_fastbatch` extension beside this file, which is used whenever it was built. The
compiled one exists because a produce of 16 KiB spent as long in Python (header unpacking, CRC
call, result tuples) as in its write syscall, because every record of every produced batch is
read, and because recovery checks every batch of up to GiBs of log before a partition opens.

A compressed batch's records are checked in two steps, so that the decompression and the walk
over what it gives can run in another thread (check_compressed, and the partition's validation
executor): check_records reads the decompressed records; assign_batches is then told their
max timestamp rather than reading them again.

Concurrency: pure functions over caller-owned buffers and file descriptors; no state.
"""

import collections
import os
import struct
from collections.abc import Callable
from typing import NamedTuple

import crc32c

from replog.storage.batch_format import (
    ATTRIBUTES_POSITION,
    CODEC_MASK,
    CODEC_NONE,
    CODEC_PRODUCER,
    CONTROL_BATCH_BIT,
    CRC_START,
    HEADER_SIZE_BYTES,
    LEADER_EPOCH_POSITION,
    LOG_APPEND_TIME_BIT,
    LOG_OVERHEAD_BYTES,
    MAX_TIMESTAMP_POSITION,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TRANSACTIONAL_BIT,
    BatchHeader,
    Scratch,
    VarintError,
    compress,
    crc_mismatch,
    parse_header,
    producer_fields,
    read_varint,
    set_crc,
    short_batch,
    verify_batch,
    with_payload,
)
from replog.storage.errors import (
    RECORD_ERRORS_MAX,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
    RejectedRecords,
    ReplicaError,
)

_PREFIX = struct.Struct(">qi")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_MAX_TIMESTAMP = struct.Struct(">q")
_ATTRIBUTES = struct.Struct(">h")
_MAX_OFFSET = 2**63 - 1
_MIN_INT32 = -(2**31)
_MAX_INT32 = 2**31 - 1
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1
MAX_RELATIVE_OFFSET = _MAX_INT32  # index entries store offset - segment base offset as int32
# Kafka's NUM_BATCHES_TO_RETAIN: a client keeps at most 5 requests in flight per partition with
# idempotence on, so any retry it can send is one of the last 5 batches (producer_state.py).
PRODUCER_BATCHES_KEPT = 5
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_FIELDS_POSITION = 43
SCAN_BUFFER_BYTES = 1 << 20  # scan_segment's buffer: measured, larger ones fall out of cache before the CRC


class AppendRules(NamedTuple):
    """What a leader enforces on a producer's batch beyond its framing (Kafka's LogValidator), from
    the topic's settings: max.message.bytes; message.timestamp.before.max.ms and
    message.timestamp.after.max.ms (a record's CreateTime at most that far before or after now);
    keys on compacted topics; how far compressed records may inflate (batch_format's limit);
    message.timestamp.type=LogAppendTime (the batch takes the append time, and its records'
    CreateTimes go unchecked, as they are no consumer's timestamps); compression.type (the codec
    the log stores batches in, or CODEC_PRODUCER: the producer's) and that codec's level
    (compression.<codec>.level; None: cramjam's default)."""

    max_batch_bytes: int
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    keys_required: bool
    uncompressed_bytes_max: int
    log_append_time: bool = False
    topic_codec: int = CODEC_PRODUCER
    topic_codec_level: int | None = None


class BatchRun(NamedTuple):
    """What the log needs of all the batches of one append together.

    No per-batch headers: a producer's append holds one batch (one per partition per request)
    whose facts these are, and building header objects cost the leader's append path more than
    its bookkeeping; a follower's appends of several batches get them from `batch_headers`.
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


def is_compressed(buf) -> bool:
    """Whether the batch `buf` starts with claims a compression codec (read before validation)."""
    return len(buf) > ATTRIBUTES_POSITION + 1 and buf[ATTRIBUTES_POSITION + 1] & CODEC_MASK != CODEC_NONE


def converts(buf, rules: AppendRules) -> bool:
    """Whether the topic's compression.type re-encodes the batch `buf` starts with: it names a
    codec, and not the one the batch claims (read before validation)."""
    return (rules.topic_codec != CODEC_PRODUCER and len(buf) > ATTRIBUTES_POSITION + 1
            and buf[ATTRIBUTES_POSITION + 1] & CODEC_MASK != rules.topic_codec)


def checked_first(buf, rules: AppendRules) -> bool:
    """Whether a producer's batch must pass check_and_convert before assign_batches."""
    return is_compressed(buf) or converts(buf, rules)


# -- a follower's append: framing and CRCs ---------------------------------------------------


def _validate_batches_py(buf, max_batch_bytes: int) -> list[BatchHeader]:
    if not buf:
        raise InvalidRecordError("no record batch in the request")
    headers = []
    position = 0
    while position < len(buf):  # bounded: every batch is at least HEADER_SIZE_BYTES long
        headers.append(_read_batch(buf, position, max_batch_bytes))
        position = headers[-1].position + headers[-1].size_bytes
    return headers


def _read_batch(buf, position: int, max_batch_bytes: int) -> BatchHeader:
    """parse_header, the max.message.bytes rule and verify_batch, in that order."""
    header = parse_header(buf, position)
    if header.size_bytes > max_batch_bytes:
        raise RecordTooLargeError(f"batch of {header.size_bytes} bytes exceeds max.message.bytes {max_batch_bytes}")
    verify_batch(buf, header)
    return header


# -- a leader's append: Kafka's LogValidator -------------------------------------------------


def _check_producer_batch(buf, rules: AppendRules) -> BatchHeader:
    """The rules of a producer's batch before its records (UnifiedLog.analyzeAndValidateRecords,
    ProduceRequest.validateRecords and LogValidator.validateBatch), in the order both
    implementations apply them."""
    if not buf:
        raise InvalidRecordError("no record batch in the request")
    header = _read_batch(buf, 0, rules.max_batch_bytes)
    if header.size_bytes < len(buf):
        # Produce v3+ carries exactly one batch per partition, and LogValidator takes one only.
        raise InvalidRecordError(f"only one record batch per partition is accepted: {len(buf) - header.size_bytes} "
                                 "bytes follow the first")
    if header.record_count == 0 or header.record_count != header.last_offset_delta + 1:
        raise InvalidRecordError(f"batch at position 0 claims {header.record_count} records "
                                 f"but spans {header.last_offset_delta + 1} offsets")
    if header.attributes & CONTROL_BATCH_BIT:
        raise InvalidRecordError("clients may not write control batches")
    fields = producer_fields(buf)
    if fields.producer_id < NO_PRODUCER_ID:
        raise InvalidRecordError(f"producer id {fields.producer_id} is not valid")
    if header.attributes & TRANSACTIONAL_BIT and fields.producer_id == NO_PRODUCER_ID:
        raise InvalidRecordError("a transactional batch needs a producer id")
    if fields.producer_id != NO_PRODUCER_ID and fields.base_sequence < 0:
        raise InvalidRecordError(f"invalid sequence number {fields.base_sequence} in a batch with producer id "
                                 f"{fields.producer_id}")
    if header.attributes & LOG_APPEND_TIME_BIT:
        raise InvalidTimestampError("producers may not set the timestamp type to LogAppendTime")
    return header


def _check_records_body(body, count: int, base_offset: int, base_timestamp: int, rules: AppendRules, now_ms: int) -> int:
    """Read every record of a batch body as Kafka's DefaultRecord.readFrom and LogValidator's
    validateRecord do; the records' max timestamp (NO_TIMESTAMP if none has one). A record
    without a key where the rules require one, or else with a timestamp out of bounds, is
    rejected on its own, and the batch refused once every record is read (RejectedRecords)."""
    end = len(body)
    position = 0
    max_timestamp = NO_TIMESTAMP
    low = max(now_ms - rules.timestamp_before_max_ms, _MIN_INT64)
    high = min(now_ms + rules.timestamp_after_max_ms, _MAX_INT64)
    rejected_total, rejected_indexes, rejected_timestamps, invalid_timestamp = 0, [], [], False
    for index in range(count):  # bounded by count and by the body: each record takes >= 2 bytes
        if position >= end:
            raise InvalidRecordError(f"record {index} of {count} is missing", index)
        field = "length"
        try:
            length, position = read_varint(body, position, end, 32)
            if length < 0 or length > end - position:
                raise InvalidRecordError(f"record {index}: length {length} but {end - position} bytes remain", index)
            record_start, record_end = position, position + length
            field = "attributes"
            if position >= record_end:
                raise VarintError(cut=True)
            position += 1
            field = "timestamp delta"
            timestamp_delta, position = read_varint(body, position, record_end, 64)
            field = "offset delta"
            offset_delta, position = read_varint(body, position, record_end, 32)
            if offset_delta != index:
                raise InvalidRecordError(f"record {index}: offset delta {offset_delta}, expected {index}", index)
            key_size, position = _skip_field(body, position, record_end, "key", index, nullable=True)
            _, position = _skip_field(body, position, record_end, "value", index, nullable=True)
            field = "header count"
            header_count, position = read_varint(body, position, record_end, 32)
            if header_count < 0 or header_count > record_end - position:
                raise InvalidRecordError(f"record {index}: header count {header_count}", index)
            for _ in range(header_count):  # bounded: checked against the record's bytes left
                _, position = _skip_field(body, position, record_end, "header key", index, nullable=False)
                _, position = _skip_field(body, position, record_end, "header value", index, nullable=True)
        except VarintError as fault:
            raise _varint_refusal(index, field, fault) from None
        if position != record_end:
            raise InvalidRecordError(f"record {index}: read {position - record_start} bytes of its {length}", index)
        timestamp = base_timestamp + timestamp_delta
        if not _MIN_INT64 <= timestamp <= _MAX_INT64:
            raise InvalidTimestampError(f"record {index}: timestamp delta {timestamp_delta} takes it out of range",
                                        index)
        no_key = rules.keys_required and key_size < 0
        if no_key or (not rules.log_append_time and timestamp != NO_TIMESTAMP
                      and (now_ms - timestamp > rules.timestamp_before_max_ms
                           or timestamp - now_ms > rules.timestamp_after_max_ms)):
            if rejected_total < RECORD_ERRORS_MAX:
                rejected_indexes.append(index)
                rejected_timestamps.append(None if no_key else timestamp)
            rejected_total += 1
            invalid_timestamp = invalid_timestamp or not no_key
            continue
        max_timestamp = max(max_timestamp, timestamp)
    if position != end:
        raise InvalidRecordError(f"{end - position} bytes follow the batch's last record")
    if rejected_total:
        error = InvalidTimestampError if invalid_timestamp else InvalidRecordError
        raise error(f"{rejected_total} of the batch's records rejected", None,
                    RejectedRecords(rejected_total, tuple(rejected_indexes), tuple(rejected_timestamps), base_offset,
                                    low, high))
    return max_timestamp


def _skip_field(body, position: int, end: int, what: str, index: int, nullable: bool) -> tuple[int, int]:
    """Past the length-prefixed field `what` (length -1: null, where `nullable`) of record `index`,
    which ends at `end`: (its length, the position after it)."""
    try:
        size, position = read_varint(body, position, end, 32)
    except VarintError as fault:
        raise _varint_refusal(index, f"{what} length", fault) from None
    if size < (-1 if nullable else 0):
        raise InvalidRecordError(f"record {index}: {what} length {size}", index)
    if size > end - position:
        raise InvalidRecordError(f"record {index}: {what} of {size} bytes runs past the record", index)
    return size, position + max(size, 0)


def _varint_refusal(index: int, field: str, fault: VarintError) -> InvalidRecordError:
    what = "is cut short" if fault.cut else "is not a valid varint"
    return InvalidRecordError(f"record {index}: {field} {what}", index)


def _check_records_py(batch, body, rules: AppendRules, now_ms: int) -> int:
    header = _check_producer_batch(batch, rules)
    return _check_records_body(body, header.record_count, header.base_offset, producer_fields(batch).base_timestamp,
                               rules, now_ms)


def _assign_batches_py(buf, rules: AppendRules, first_offset: int, leader_epoch: int, now_ms: int,
                       records_max_timestamp: int | None = None) -> BatchRun:
    if first_offset < 0 or not _MIN_INT32 <= leader_epoch <= _MAX_INT32:
        raise ValueError(f"first offset {first_offset} or leader epoch {leader_epoch} out of range")
    header = _check_producer_batch(buf, rules)
    if header.compression_codec == CODEC_NONE:
        with memoryview(buf) as view:
            records_max_timestamp = _check_records_body(view[HEADER_SIZE_BYTES:header.size_bytes], header.record_count,
                                                        header.base_offset, producer_fields(buf).base_timestamp, rules,
                                                        now_ms)
    elif records_max_timestamp is None:
        raise ValueError("a compressed batch's records must be checked first (check_records)")
    if first_offset + header.last_offset_delta >= _MAX_OFFSET:
        raise InvalidRecordError("batch at position 0 would pass the largest offset")
    # Only once every check passed, so that a refused batch stays as it came. LogValidator sets
    # the max timestamp (batch.setMaxTimestamp), which the time index trusts, to the records'
    # or, for LogAppendTime, to now with the timestamp type: every record then reads it.
    attributes = header.attributes
    if rules.log_append_time:
        records_max_timestamp = now_ms
        attributes |= LOG_APPEND_TIME_BIT
    if header.max_timestamp != records_max_timestamp or header.attributes != attributes:
        _ATTRIBUTES.pack_into(buf, ATTRIBUTES_POSITION, attributes)
        _MAX_TIMESTAMP.pack_into(buf, MAX_TIMESTAMP_POSITION, records_max_timestamp)
        set_crc(buf)
    _BASE_OFFSET.pack_into(buf, 0, first_offset)
    _LEADER_EPOCH.pack_into(buf, LEADER_EPOCH_POSITION, leader_epoch)
    return BatchRun(1, first_offset + header.last_offset_delta, records_max_timestamp, header.record_count)


def assign_control_batch(buf: bytearray, first_offset: int, leader_epoch: int) -> BatchRun:
    """The broker's own control batch (a transaction marker, control_batches.py), one whole batch
    it built, assigned `first_offset` and `leader_epoch` in place: both lie before the CRC'd
    range, and none of a producer's batch rules apply to it."""
    header = parse_header(buf, 0)
    if not header.attributes & CONTROL_BATCH_BIT or header.size_bytes != len(buf):
        raise ValueError("only one whole control batch is assigned this way")
    _BASE_OFFSET.pack_into(buf, 0, first_offset)
    _LEADER_EPOCH.pack_into(buf, LEADER_EPOCH_POSITION, leader_epoch)
    return BatchRun(1, first_offset + header.last_offset_delta, header.max_timestamp, header.record_count)


class CheckedBatch(NamedTuple):
    """What check_and_convert makes of a producer's batch, for assign_batches."""

    batch: bytearray  # the producer's own, or that batch re-encoded in the topic's codec
    records_max_timestamp: int


def check_and_convert(buf, rules: AppendRules, now_ms: int, scratch: Scratch) -> CheckedBatch:
    """A producer's batch's records, decompressed into `scratch` (bounded by the rules) if
    compressed, and checked (check_records); then, where the topic's compression.type re-encodes
    it (converts), the batch in that codec, as LogValidator.validateMessagesAndAssignOffsetsCompressed
    builds one: the same header fields and records, compressed anew, with its own length and CRC.
    Kafka re-encodes each record too, relative to the first record's timestamp; Kafka's clients
    make that the base timestamp, so their records' bytes would come out the same, and are kept."""
    header = parse_header(buf, 0)
    with memoryview(buf) as view:
        payload = view[HEADER_SIZE_BYTES:header.size_bytes]
        codec = header.compression_codec
        records = payload if codec == CODEC_NONE else scratch.decompress(codec, payload, rules.uncompressed_bytes_max)
        with records as body:
            records_max_timestamp = check_records(buf, body, rules, now_ms)
            if not converts(buf, rules):
                return CheckedBatch(buf, records_max_timestamp)
            converted = with_payload(view[:HEADER_SIZE_BYTES], compress(rules.topic_codec, body, rules.topic_codec_level),
                                     rules.topic_codec)
    return CheckedBatch(converted, records_max_timestamp)


# -- crash recovery --------------------------------------------------------------------------


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
    # with the last PRODUCER_BATCHES_KEPT batches of that epoch, oldest first. None if one of
    # those batches is transactional (or a marker): runs cannot sum up transactions, so the
    # producer state reads those headers itself.
    producer_runs: list[tuple[int, int, bool, tuple[tuple[int, int, int, int], ...]]] | None
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
        self._transactional = False

    def record(self, header_bytes: bytes, header: BatchHeader) -> None:
        producer_id, epoch, base_sequence = _PRODUCER_FIELDS.unpack_from(header_bytes, _PRODUCER_FIELDS_POSITION)
        if header.attributes & TRANSACTIONAL_BIT:
            self._transactional = True
        if producer_id == NO_PRODUCER_ID or header.attributes & (CONTROL_BATCH_BIT | TRANSACTIONAL_BIT):
            return
        run = self._runs.get(producer_id)
        if run is None:
            run = self._runs[producer_id] = [epoch, False, collections.deque(maxlen=PRODUCER_BATCHES_KEPT)]
        elif run[0] != epoch:
            run[:] = [epoch, True, collections.deque(maxlen=PRODUCER_BATCHES_KEPT)]
        run[2].append((header.base_offset, header.last_offset_delta, header.max_timestamp, base_sequence))

    def as_list(self) -> list[tuple[int, int, bool, tuple[tuple[int, int, int, int], ...]]] | None:
        if self._transactional:
            return None
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
                raise short_batch(position, header.size_bytes, remaining)
            # The base offset is outside the CRC: order and range are all that can be checked of it.
            if header.base_offset < next_offset:
                raise CorruptRecordError(f"base offset {header.base_offset} is below next offset {next_offset}")
            if header.last_offset - segment_base_offset > MAX_RELATIVE_OFFSET:
                raise CorruptRecordError(f"offset {header.last_offset} is out of range of segment {segment_base_offset}")
            # Taken before the CRC moves the window on.
            header_bytes = (bytes(window.buffer[at:at + HEADER_SIZE_BYTES])
                            if header.base_offset >= producers_from_offset else None)
            crc = window.crc_through(position + CRC_START, position + header.size_bytes)
            if window.end_position < position + header.size_bytes:  # the file shrank under the scan
                raise short_batch(position, header.size_bytes, window.end_position - position)
            if crc != header.crc:
                raise crc_mismatch(position, crc, header.crc)
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
        As a follower appends its leader's batches: `buf` must consist of whole v2 batches only;
        each must pass parse_header, be at most `max_batch_bytes` long and match its CRC32C.
        Headers are returned as stored.
    assign_batches(buf, rules, first_offset, leader_epoch, now_ms, records_max_timestamp=None) -> BatchRun
        As a leader appends a producer's batch (AppendRules `rules`): `buf` must hold exactly one
        batch, passing validate_batches' checks and LogValidator's batch rules
        (_check_producer_batch); if uncompressed, its records are read as check_records reads
        them; a compressed one's must have been (`records_max_timestamp`, what check_records
        returned). Then, once all passed, its max timestamp is set to its records' (and the CRC
        with it) if it differed, or on a LogAppendTime topic (`rules.log_append_time`) to
        `now_ms` with the timestamp-type attribute bit; and the base offset `first_offset` and
        `leader_epoch`, which lie before the CRC'd range, are written into `buf` (writable) in
        place.
    check_records(batch, body, rules, now_ms) -> int
        The batch rules of assign_batches on the batch `batch`, then its records read from `body`
        (its records, decompressed) as Kafka's DefaultRecord.readFrom and LogValidator do: every
        record whole, offset deltas 0, 1, 2, ..., lengths -1 (null) or within the record, header
        counts and headers well formed, nothing left after the last; keys where `rules` require
        them; CreateTime timestamps within the rules' bounds of `now_ms` (none on a LogAppendTime
        topic). A record failing only
        these last two is rejected on its own and the walk goes on, as Kafka's LogValidator
        collects its record errors: the batch is refused once all are read, with RejectedRecords
        (INVALID_TIMESTAMP if any timestamp is out of bounds, else INVALID_RECORD), unless a later
        record cannot be read, which is the refusal then. Returns the records' max timestamp
        (NO_TIMESTAMP if none has one). The compiled one runs without the GIL.

    scan_segment(fd, position, end_position, next_offset, segment_base_offset, index_due_position,
                 index_interval_bytes, max_timestamp, producers_from_offset) -> SegmentScan
        Crash recovery of a segment file: check every batch of the file from `position` (a batch
        start) to `end_position` as parse_header and verify_batch do, and that base offsets are
        >= `next_offset` and increasing and last offsets within 2**31 - 1 of the segment's base;
        stop at the first batch that fails, whatever its size or place in the file. Positions in
        refusals are file positions. The other arguments carry the segment's state at `position`
        on, as SegmentScan returns it; the producer runs cover the batches passed whose base
        offset is >= `producers_from_offset`.

    All raise or refuse with the errors of errors.py, in the same order and with the same messages
    (and record_index, where a refusal is about one record, or RejectedRecords).
    """

    name: str
    validate_batches: Callable[..., list[BatchHeader]]
    assign_batches: Callable[..., BatchRun]
    check_records: Callable[..., int]
    scan_segment: Callable[..., SegmentScan]


PURE_PYTHON = BatchCodec("python", _validate_batches_py, _assign_batches_py, _check_records_py, _scan_segment_py)


def _load_compiled() -> BatchCodec | None:
    try:
        from replog.storage import _fastbatch
    except ImportError:  # not built (no C compiler at install): the pure-Python path serves
        return None
    _fastbatch.bind(BatchHeader, BatchRun, SegmentScan, RejectedRecords, CorruptRecordError, InvalidRecordError,
                    RecordTooLargeError, InvalidTimestampError)
    return BatchCodec(f"c/{_fastbatch.CRC32C_IMPLEMENTATIONS[-1]}", _fastbatch.validate_batches,
                      _fastbatch.assign_batches, _fastbatch.check_records, _fastbatch.scan_segment)


COMPILED = _load_compiled()
CODEC = COMPILED or PURE_PYTHON
validate_batches = CODEC.validate_batches
assign_batches = CODEC.assign_batches
check_records = CODEC.check_records
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
