"""v2 record batches with settable producer fields, on top of tests/unit/replica_batches.py (which
fixes them at -1). Records are filler: the broker never decodes them."""

from tests.unit.replica_batches import build_batch


def producer_batch(record_count: int = 1, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   max_timestamp: int = 0, payload_bytes: int = 16, attributes: int = 0) -> bytearray:
    return build_batch(record_count=record_count, payload_bytes=payload_bytes, max_timestamp=max_timestamp,
                       attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)
