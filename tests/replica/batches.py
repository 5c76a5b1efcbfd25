"""v2 record batches with settable producer fields, on top of tests/unit/replica_batches.py (which
fixes them at -1). Records are filler: the broker never decodes them."""

import struct

import crc32c

from tests.unit.replica_batches import build_batch

_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_PRODUCER_FIELDS_POSITION = 43
_CRC = struct.Struct(">I")
_CRC_POSITION = 17
_CRC_START = 21


def producer_batch(record_count: int = 1, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   max_timestamp: int = 0, payload_bytes: int = 16, attributes: int = 0) -> bytearray:
    batch = build_batch(record_count=record_count, payload_bytes=payload_bytes, max_timestamp=max_timestamp,
                        attributes=attributes)
    _PRODUCER_FIELDS.pack_into(batch, _PRODUCER_FIELDS_POSITION, producer_id, producer_epoch, base_sequence)
    _CRC.pack_into(batch, _CRC_POSITION, crc32c.crc32c(bytes(batch[_CRC_START:])))
    return batch
