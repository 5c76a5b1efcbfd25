"""Builds v2 record batches for tests: a valid header and CRC around opaque record bytes.

The log never decodes records, so the record section here is filler of the requested size.
"""

import struct

import crc32c

from replog.storage.records import HEADER

_CRC_START = 21


def build_batch(
    record_count: int = 1,
    payload_bytes: int = 16,
    max_timestamp: int = 0,
    base_offset: int = 0,
    leader_epoch: int = 0,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    fill: int = 0x61,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    last_offset_delta = record_count - 1 if last_offset_delta is None else last_offset_delta
    batch = bytearray(HEADER.size + payload_bytes)
    batch[HEADER.size:] = bytes([fill]) * payload_bytes
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, leader_epoch, 2, 0, attributes, last_offset_delta,
                     max_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[_CRC_START:])))
    return batch
