"""The records of __consumer_offsets: keys and values in Kafka's own formats (GroupMetadataManager's
schemas), so Kafka's tools can read the topic, and the v2 record batches that carry them.

Every key and value starts with an int16 version. Keys: version 0 or 1 is a committed offset
(group, topic, partition), version 2 is a group's metadata (group). The log is read as a
table: only the latest value per key matters, and a null value (tombstone) deletes the key.

    OffsetCommitValue v3:   offset i64, leader_epoch i32, metadata string, commit_timestamp i64
    GroupMetadataValue v3:  protocol_type string, generation i32, protocol string?, leader string?,
                            current_state_timestamp i64, members [member_id string,
                            group_instance_id string?, client_id string, client_host string,
                            rebalance_timeout i32, session_timeout i32, subscription bytes,
                            assignment bytes]

Older value versions Kafka wrote (offset values v0-v2, group values v0-v2) are not read: this
topic is only ever written by replog's coordinators, which write the versions above.

Batches are written uncompressed by the coordinator only (clients may not produce to the topic):
without a producer id, or, for offsets committed in a transaction, as that producer's
transactional batch, which the transaction's marker (a control batch) later commits or aborts
(docs/design.md §16.6). Anything else found on load is skipped with the reason.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from typing import NamedTuple

from replog.storage.batch_format import (
    CODEC_MASK,
    CONTROL_BATCH_BIT,
    HEADER,
    HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    MAGIC_V2,
    NO_PRODUCER_ID,
    TRANSACTIONAL_BIT,
    NewRecord,
    encode_batch as encode_record_batch,
    producer_fields,
    records_of,
)
from replog.storage.control_batches import Marker, decode_marker
from replog.storage.errors import ReplicaError

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
NO_LEADER_EPOCH = -1


class RecordFormatError(ValueError):
    """A key or value this coordinator cannot read."""


@dataclasses.dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclasses.dataclass(frozen=True)
class GroupKey:
    group: str


@dataclasses.dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    # Where the record is in the log, not part of its encoding: of a plain commit and a
    # transactional one of the same partition, the one later in the log wins when the
    # transaction commits, as in Kafka (pending_offsets.py).
    record_offset: int = dataclasses.field(default=-1, compare=False)


@dataclasses.dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[MemberValue, ...]


# -- primitives -------------------------------------------------------------------------------

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def i16(self, value: int) -> "_Writer":
        self.out += _I16.pack(value)
        return self

    def i32(self, value: int) -> "_Writer":
        self.out += _I32.pack(value)
        return self

    def i64(self, value: int) -> "_Writer":
        self.out += _I64.pack(value)
        return self

    def string(self, value: str | None) -> "_Writer":
        if value is None:
            return self.i16(-1)
        data = value.encode("utf-8")
        self.i16(len(data))
        self.out += data
        return self

    def bytes_(self, value: bytes) -> "_Writer":
        self.i32(len(value))
        self.out += value
        return self


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.position = data, 0

    def _fixed(self, layout: struct.Struct) -> int:
        if self.position + layout.size > len(self.data):
            raise RecordFormatError("field runs past the end")
        (value,) = layout.unpack_from(self.data, self.position)
        self.position += layout.size
        return value

    def i16(self) -> int:
        return self._fixed(_I16)

    def i32(self) -> int:
        return self._fixed(_I32)

    def i64(self) -> int:
        return self._fixed(_I64)

    def _chunk(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise RecordFormatError(f"length {size} runs past the end")
        chunk = self.data[self.position:self.position + size]
        self.position += size
        return bytes(chunk)

    def string(self) -> str | None:
        size = self.i16()
        return None if size == -1 else self._chunk(size).decode("utf-8")

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise RecordFormatError("null where a string is required")
        return value

    def bytes_(self) -> bytes:
        return self._chunk(self.i32())


# -- keys and values --------------------------------------------------------------------------


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return bytes(_Writer().i16(OFFSET_KEY_VERSION).string(key.group).string(key.topic).i32(key.partition).out)
    return bytes(_Writer().i16(GROUP_KEY_VERSION).string(key.group).out)


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.i16()
    if version in (0, OFFSET_KEY_VERSION):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(reader.required_string())
    raise RecordFormatError(f"unknown key version {version}")


def encode_offset_value(value: OffsetValue) -> bytes:
    writer = _Writer().i16(OFFSET_VALUE_VERSION).i64(value.offset).i32(value.leader_epoch)
    return bytes(writer.string(value.metadata).i64(value.commit_timestamp_ms).out)


def decode_offset_value(data: bytes, record_offset: int = -1) -> OffsetValue:
    reader = _Reader(data)
    version = reader.i16()
    if version != OFFSET_VALUE_VERSION:
        raise RecordFormatError(f"unknown offset value version {version}")
    return OffsetValue(reader.i64(), reader.i32(), reader.string() or "", reader.i64(), record_offset)


def encode_group_value(value: GroupValue) -> bytes:
    writer = _Writer().i16(GROUP_VALUE_VERSION).string(value.protocol_type).i32(value.generation)
    writer.string(value.protocol).string(value.leader).i64(value.state_timestamp_ms).i32(len(value.members))
    for member in value.members:  # bounded by the group's size
        writer.string(member.member_id).string(member.group_instance_id).string(member.client_id)
        writer.string(member.client_host).i32(member.rebalance_timeout_ms).i32(member.session_timeout_ms)
        writer.bytes_(member.subscription).bytes_(member.assignment)
    return bytes(writer.out)


def decode_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.i16()
    if version != GROUP_VALUE_VERSION:
        raise RecordFormatError(f"unknown group value version {version}")
    protocol_type, generation = reader.string() or "", reader.i32()
    protocol, leader, state_timestamp_ms = reader.string(), reader.string(), reader.i64()
    count = reader.i32()
    if count < 0 or count > len(data):
        raise RecordFormatError(f"member count {count}")
    members = tuple(
        MemberValue(reader.required_string(), reader.string(), reader.string() or "", reader.string() or "",
                    reader.i32(), reader.i32(), reader.bytes_(), reader.bytes_())
        for _ in range(count)
    )
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp_ms, members)


# -- record batches v2 ------------------------------------------------------------------------


def encode_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int) -> bytearray:
    """One uncompressed batch of (key, value) records; the log assigns its offsets."""
    return encode_record_batch([NewRecord(key, value) for key, value in records], timestamp_ms)


def encode_transactional_batch(records: list[tuple[bytes, bytes | None]], timestamp_ms: int, producer_id: int,
                               producer_epoch: int, base_sequence: int) -> bytearray:
    """encode_batch as a producer's batch in its open transaction."""
    return encode_record_batch([NewRecord(key, value) for key, value in records], timestamp_ms,
                               producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                               attributes=TRANSACTIONAL_BIT)


class DecodedBatch(NamedTuple):
    next_offset: int
    records: list[tuple[int, bytes | None, bytes | None]]  # (offset, key, value)
    skipped: str | None  # why its records were not read (compressed, old format, unreadable); None if read
    producer_id: int = NO_PRODUCER_ID  # the transaction's producer, for a transactional batch
    marker: Marker | None = None  # what a control batch says


def decode_batches(data: bytes) -> Iterator[DecodedBatch]:
    """The complete batches at the start of `data`; a partial trailing batch is left for the
    next read. Control batches carry no group records: they come back with their marker."""
    position = 0
    while position + HEADER_SIZE_BYTES <= len(data):  # each turn consumes one batch
        (base_offset, length, _, magic, _, attributes, last_offset_delta, _, _, _, _, _,
         count) = HEADER.unpack_from(data, position)
        end = position + LOG_OVERHEAD_BYTES + length
        if end > len(data):
            return
        next_offset = base_offset + last_offset_delta + 1
        if magic != MAGIC_V2 or attributes & CODEC_MASK:
            yield DecodedBatch(next_offset, [], f"batch at offset {base_offset} is not an uncompressed v2 batch")
        elif attributes & CONTROL_BATCH_BIT:
            try:
                marker = decode_marker(memoryview(data)[position:end])
            except ReplicaError as error:
                yield DecodedBatch(next_offset, [], f"control batch at offset {base_offset} cannot be read: {error}")
            else:
                yield DecodedBatch(next_offset, [], None, marker=marker)
        else:
            try:
                records = [(base_offset + record.offset_delta, record.key, record.value)
                           for record in records_of(memoryview(data)[position + HEADER_SIZE_BYTES:end], count)]
            except ReplicaError as error:
                yield DecodedBatch(next_offset, [], f"batch at offset {base_offset} cannot be read: {error}")
            else:
                producer_id = producer_fields(data, position).producer_id if attributes & TRANSACTIONAL_BIT \
                    else NO_PRODUCER_ID
                yield DecodedBatch(next_offset, records, None, producer_id)
        position = end
