"""v2 record batches with settable producer fields, on top of tests/support/batches.py (which
fixes them at -1). Records are filler in producer_batch's, real in readable_producer_batch's."""

from aiokafka.record.default_records import DefaultRecordBatchBuilder

from tests.support.batches import build_batch


def producer_batch(record_count: int = 1, producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                   max_timestamp: int = 0, payload_bytes: int = 16, attributes: int = 0) -> bytearray:
    return build_batch(record_count=record_count, payload_bytes=payload_bytes, max_timestamp=max_timestamp,
                       attributes=attributes, producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def timed_batch(timestamps: list[int]) -> bytearray:
    """A batch of one readable record per timestamp, in that order."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, timestamp in enumerate(timestamps):
        builder.append(offset, timestamp=timestamp, key=None, value=b"v", headers=[])
    return bytearray(builder.build())


def readable_producer_batch(producer_id: int, producer_epoch: int, base_sequence: int, record_count: int,
                            value: bytes) -> bytearray:
    """A batch of `record_count` records of `value` that clients, and any validation, can read."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=base_sequence, batch_size=1 << 20)
    for offset in range(record_count):
        builder.append(offset, timestamp=0, key=None, value=value, headers=[])
    return bytearray(builder.build())
