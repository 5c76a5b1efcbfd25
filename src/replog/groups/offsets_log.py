"""Reading and writing one partition of __consumer_offsets, as the coordinator's table.

Writes go through the partition's own leader path with acks=-1, so a commit is answered only
once every in-sync replica has it: a coordinator that fails over loses nothing it confirmed.
Reads (a new leader loading its groups) run from the log start to the log end seen when the
load began: as a new leader's log tail becomes committed once the ISR has it, the leader's
whole log is the table. The bytes are read in a worker thread; the index lookups that find
them run on the event loop, which owns the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition, ReplicaState
from replog.storage.errors import ReplicaError

from .records import (GroupValue, OffsetKey, OffsetValue, RecordFormatError, decode_batches,
                      decode_group_value, decode_key, decode_offset_value, encode_batch)

logger = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20
APPEND_ERRORS = {
    # Kafka's GroupMetadataManager maps the log's answers to what a group client understands.
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.message_too_large: ErrorCode.invalid_commit_offset_size,
    ErrorCode.record_list_too_large: ErrorCode.invalid_commit_offset_size,
}


class LoadAborted(Exception):
    """The partition stopped being led here while its groups loaded."""


class Table:
    """The latest value per key of one partition: offsets and group metadata by group."""

    def __init__(self) -> None:
        self.offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        self.groups: dict[str, GroupValue] = {}

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            raise RecordFormatError("record without a key")
        decoded = decode_key(key)
        if isinstance(decoded, OffsetKey):
            offsets = self.offsets.setdefault(decoded.group, {})
            if value is None:
                offsets.pop((decoded.topic, decoded.partition), None)
            else:
                offsets[(decoded.topic, decoded.partition)] = decode_offset_value(value)
        elif value is None:
            self.groups.pop(decoded.group, None)
        else:
            self.groups[decoded.group] = decode_group_value(value)


async def append(partition: Partition | None, records: Iterable[tuple[bytes, bytes | None]], timeout_ms: int,
                 timestamp_ms: int) -> int:
    """Write `records` (key, value) in one batch with acks=-1; a group error code. The broker's
    own records: a data directory low on space refuses them later than producers' (disk_space.py)."""
    if partition is None:
        return ErrorCode.not_coordinator
    result = await partition.append_as_leader(encode_batch(list(records), timestamp_ms), -1, timeout_ms, internal=True)
    return APPEND_ERRORS.get(result.error_code, result.error_code)


class AppliesRecords(Protocol):
    def apply(self, key: bytes | None, value: bytes | None) -> None: ...


async def load(partition: Partition, table: AppliesRecords | None = None) -> Any:
    """The table of a partition this broker leads, read from its log start to its current end:
    a Table of groups, or `table` (the transaction coordinator reads __transaction_state so)."""
    table = Table() if table is None else table
    offset, end = partition.log_start_offset, partition.log_end_offset
    epoch = partition.leader_epoch
    while offset < end:  # each turn reads at least one batch
        _check_still_leading(partition, epoch)
        try:
            slices = partition.log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            data = await asyncio.to_thread(lambda: b"".join(piece.read() for piece in slices))
        except (OSError, ReplicaError) as error:
            _check_still_leading(partition, epoch)
            raise LoadAborted(f"reading {partition.topic}-{partition.partition_id} at {offset} failed: {error}") from error
        if not data:
            break
        offset = _apply_batches(partition, table, data, offset)
    _check_still_leading(partition, epoch)
    return table


def _apply_batches(partition: Partition, table: AppliesRecords, data: bytes, offset: int) -> int:
    start = offset
    for batch in decode_batches(data):  # bounded by the chunk's size
        if batch.skipped:
            logger.warning("skipped a batch of %s-%d while loading: %s", partition.topic, partition.partition_id, batch.skipped)
        for record_offset, key, value in batch.records:  # bounded by the batch's records
            try:
                table.apply(key, value)
            except (RecordFormatError, UnicodeDecodeError) as error:
                logger.warning("skipped a record of %s-%d at offset %d while loading: %s",
                               partition.topic, partition.partition_id, record_offset, error)
        offset = batch.next_offset
    if offset == start:
        raise LoadAborted(f"no complete batch at offset {offset} of {partition.topic}-{partition.partition_id}")
    return offset


def _check_still_leading(partition: Partition, epoch: int) -> None:
    if partition.state is not ReplicaState.LEADER or partition.leader_epoch != epoch:
        raise LoadAborted(f"{partition.topic}-{partition.partition_id} is no longer led here at epoch {epoch}")
