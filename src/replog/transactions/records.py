"""The records of __transaction_state: keys and values in Kafka's own formats (TransactionLogKey,
TransactionLogValue), so that Kafka's tools read the topic, one record per transactional id.

    TransactionLogKey v0:   transactional_id string
    TransactionLogValue v0: producer_id i64, producer_epoch i16, transaction_timeout_ms i32,
                            transaction_status i8, transaction_partitions [topic string,
                            partition_ids [i32]] (null when Empty), last_update_timestamp i64,
                            start_timestamp i64

Every key and value starts with its int16 version. Version 0 of the value is what Kafka 4 writes
until transaction.version 1 is finalized, which replog never advertises; the flexible version 1
(with the previous and next producer ids as tagged fields) is not read. A tombstone (null value)
removes the id: what an expired id leaves. The batches are the group coordinator's
(groups/records.py): uncompressed, without producer ids, written by the coordinator only.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

from replog.groups.records import RecordFormatError, _Reader, _Writer

from .state import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnState, TxnTransit

KEY_VERSION = 0
VALUE_VERSION = 0


class TxnRecord(NamedTuple):
    transactional_id: str
    value: TxnTransit | None  # None: a tombstone


def encode_key(transactional_id: str) -> bytes:
    return bytes(_Writer().i16(KEY_VERSION).string(transactional_id).out)


def decode_key(data: bytes) -> str:
    reader = _Reader(data)
    version = reader.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown transaction log key version {version}")
    return reader.required_string()


def encode_value(transit: TxnTransit) -> bytes:
    writer = _Writer().i16(VALUE_VERSION).i64(transit.producer_id).i16(transit.producer_epoch)
    writer.i32(transit.timeout_ms).out.append(int(transit.state))
    if transit.state is TxnState.EMPTY:
        writer.i32(-1)
    else:
        by_topic = itertools.groupby(sorted(transit.partitions), key=lambda partition: partition[0])
        topics = [(topic, [index for _, index in partitions]) for topic, partitions in by_topic]
        writer.i32(len(topics))
        for topic, indexes in topics:  # bounded by the transaction's partitions
            writer.string(topic).i32(len(indexes))
            for index in indexes:
                writer.i32(index)
    return bytes(writer.i64(transit.last_update_timestamp_ms).i64(transit.start_timestamp_ms).out)


def decode_value(data: bytes) -> TxnTransit:
    reader = _Reader(data)
    version = reader.i16()
    if version != VALUE_VERSION:
        raise RecordFormatError(f"unknown transaction log value version {version}")
    producer_id, producer_epoch, timeout_ms = reader.i64(), reader.i16(), reader.i32()
    status = reader._chunk(1)[0]
    try:
        state = TxnState(status)
    except ValueError:
        raise RecordFormatError(f"unknown transaction status {status}") from None
    partitions: set[tuple[str, int]] = set()
    topics = reader.i32()
    if topics > len(data):
        raise RecordFormatError(f"topic count {topics}")
    for _ in range(max(topics, 0)):  # bounded by the value's size
        topic, count = reader.required_string(), reader.i32()
        if count < 0 or count > len(data):
            raise RecordFormatError(f"partition count {count}")
        partitions.update((topic, reader.i32()) for _ in range(count))
    last_update_ms, start_ms = reader.i64(), reader.i64()
    # Version 0 keeps neither the previous producer id nor the last epoch (Kafka's neither).
    return TxnTransit(producer_id, NO_PRODUCER_ID, producer_epoch, NO_PRODUCER_EPOCH, timeout_ms, state,
                      frozenset(partitions) if state is not TxnState.EMPTY else frozenset(), start_ms, last_update_ms)


def decode_record(key: bytes | None, value: bytes | None) -> TxnRecord:
    if key is None:
        raise RecordFormatError("record without a key")
    return TxnRecord(decode_key(key), None if value is None else decode_value(value))
