"""Transaction markers: the control batches that end a producer's transaction in a partition.

Kafka's EndTransactionMarker, byte for byte, so that every client skips them and reads their
outcome as Kafka's do: a batch with the transactional and control bits set, the producer's id
and epoch, no sequence (-1), and one record whose key is (version 0, type: 0 abort, 1 commit)
and whose value is (version 0, coordinator epoch), all big-endian. The coordinator epoch lets a
partition tell a marker from a coordinator that has since lost its partition of
__transaction_state (docs/design.md §16).
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from replog.storage.batch_format import (
    CONTROL_BATCH_BIT,
    HEADER_SIZE_BYTES,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
    NewRecord,
    encode_batch,
    producer_fields,
    records_of,
)
from replog.storage.errors import InvalidRecordError

CONTROL_ATTRIBUTES = TRANSACTIONAL_BIT | CONTROL_BATCH_BIT
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_MARKER_VERSION = 0


class ControlType(enum.IntEnum):
    ABORT = 0
    COMMIT = 1


class Marker(NamedTuple):
    """What a control batch says: whose transaction ended, how, and from which coordinator."""

    producer_id: int
    producer_epoch: int
    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


def encode_marker(marker: Marker, timestamp_ms: int) -> bytearray:
    """A one-record control batch for `marker`, base offset 0 and no leader epoch: the partition
    leader assigns both on append, as for a producer's batch."""
    record = NewRecord(_KEY.pack(_MARKER_VERSION, marker.control_type),
                       _VALUE.pack(_MARKER_VERSION, marker.coordinator_epoch))
    return encode_batch([record], timestamp_ms, producer_id=marker.producer_id, producer_epoch=marker.producer_epoch,
                        base_sequence=NO_SEQUENCE, attributes=CONTROL_ATTRIBUTES)


def decode_marker(batch) -> Marker:
    """The marker of one whole, uncompressed control batch (header included); InvalidRecordError
    if its record is not a marker this format knows."""
    fields = producer_fields(batch)
    body = memoryview(batch)[HEADER_SIZE_BYTES:]
    records = list(records_of(body, 1))
    if len(records) != 1:
        raise InvalidRecordError("a control batch holds one record")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError("a control record's key is too short")
    _, control_type = _KEY.unpack_from(key)
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise InvalidRecordError(f"unknown control record type {control_type}")
    if value is None or len(value) < _VALUE.size:
        raise InvalidRecordError("a transaction marker's value is too short")
    _, coordinator_epoch = _VALUE.unpack_from(value)
    return Marker(fields.producer_id, fields.producer_epoch, ControlType(control_type), coordinator_epoch)
