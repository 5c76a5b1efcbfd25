"""Reading and writing one partition of __consumer_offsets, as the coordinator's table.

Writes go through the partition's own leader path with acks=-1, so a commit is answered only
once every in-sync replica has it: a coordinator that fails over loses nothing it confirmed.
Reads (a new leader loading its groups) run from the log start to the log end: as a new
leader's log tail becomes committed once the ISR has it, the leader's whole log is the table.
While a load runs only transaction markers are appended (the coordinator writes nothing until
loaded), and the load reads until it has caught up with them, so that none is missed: a marker
written during the load is read by it, one written after finds the coordinator loaded. The bytes
are read in a worker thread; the index lookups that find them run on the event loop, which owns
the log.

Offsets committed in a transaction are the producer's transactional batches: the table holds
them pending until the producer's marker, then applies or drops them (docs/design.md §16.6).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition, ReplicaState
from replog.replica.producer_state import increment_sequence
from replog.storage.batch_format import NO_PRODUCER_ID
from replog.storage.errors import ReplicaError

from .pending_offsets import Committed, PendingOffsets
from .records import (GroupValue, OffsetKey, RecordFormatError, decode_batches, decode_group_value, decode_key,
                      decode_offset_value, encode_batch, encode_transactional_batch)

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
    # A transactional commit's verification (KIP-890) that could not reach the transaction
    # coordinator: retried by clients without looking for the group coordinator again.
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
}

Verify = Callable[[], Awaitable[int]]  # asks the transaction coordinator (KIP-890); an error code


class LoadAborted(Exception):
    """The partition stopped being led here while its groups loaded."""


class Table:
    """The latest value per key of one partition: offsets and group metadata by group, and the
    offsets of transactions not ended in it."""

    def __init__(self) -> None:
        self.offsets: Committed = {}
        self.groups: dict[str, GroupValue] = {}
        self.pending = PendingOffsets()

    def apply(self, record_offset: int, key: bytes | None, value: bytes | None,
              producer_id: int = NO_PRODUCER_ID) -> None:
        """One record; `producer_id` that of the transaction it was committed in, if any."""
        if key is None:
            raise RecordFormatError("record without a key")
        decoded = decode_key(key)
        if isinstance(decoded, OffsetKey):
            partition = (decoded.topic, decoded.partition)
            if value is None:
                self.offsets.setdefault(decoded.group, {}).pop(partition, None)
                self.pending.discard(decoded.group, [partition])
            elif producer_id == NO_PRODUCER_ID:
                self.offsets.setdefault(decoded.group, {})[partition] = decode_offset_value(value, record_offset)
            else:
                self.pending.add(producer_id, decoded.group, {partition: decode_offset_value(value, record_offset)})
        elif value is None:
            self.groups.pop(decoded.group, None)
        else:
            self.groups[decoded.group] = decode_group_value(value)


async def append(partition: Partition | None, records: Iterable[tuple[bytes, bytes | None]], timeout_ms: int,
                 timestamp_ms: int) -> tuple[int, int]:
    """Write `records` (key, value) in one batch with acks=-1: (a group error code, the offset of
    the first record). The broker's own records: a data directory low on space refuses them later
    than producers' (disk_space.py)."""
    if partition is None:
        return ErrorCode.not_coordinator, -1
    result = await partition.append_as_leader(encode_batch(list(records), timestamp_ms), -1, timeout_ms, internal=True)
    return APPEND_ERRORS.get(result.error_code, result.error_code), result.base_offset


async def append_transactional(partition: Partition | None, records: list[tuple[bytes, bytes | None]],
                               producer_id: int, producer_epoch: int, timeout_ms: int, timestamp_ms: int,
                               verify: Verify | None) -> tuple[int, int]:
    """Write `records` as the producer's batch in its open transaction, with acks=-1: (a group
    error code, the offset of the first record). The caller writes one batch of a producer at a
    time, so that each takes the sequence after the last. A producer with no transaction open in
    the partition yet is first verified with its transaction coordinator (`verify`, KIP-890),
    through a guard taken before asking, so that a marker written meanwhile refuses the batch."""
    if partition is None:
        return ErrorCode.not_coordinator, -1
    batch = encode_transactional_batch(records, timestamp_ms, producer_id, producer_epoch,
                                       _next_sequence(partition, producer_id, producer_epoch))
    guard = None
    if verify is not None and partition.needs_verification(batch) is not None:
        guard = partition.verification_guard(producer_id)
        error = await verify()
        if error != ErrorCode.none:
            return APPEND_ERRORS.get(error, error), -1
    result = await partition.append_as_leader(batch, -1, timeout_ms, internal=True, verification_guard=guard)
    return APPEND_ERRORS.get(result.error_code, result.error_code), result.base_offset


def _next_sequence(partition: Partition, producer_id: int, producer_epoch: int) -> int:
    entry = partition.producer_state.producers.get(producer_id)
    if entry is None or entry.epoch != producer_epoch:
        return 0  # a new epoch starts its sequences at 0
    return increment_sequence(entry.last_sequence, 1)


class AppliesRecords(Protocol):
    """What a load fills. Markers end a Table's pending offsets; __transaction_state, which the
    transaction coordinator loads with its own table, never holds one."""

    def apply(self, record_offset: int, key: bytes | None, value: bytes | None,
              producer_id: int = NO_PRODUCER_ID) -> None: ...


async def load(partition: Partition, table: AppliesRecords | None = None) -> Any:
    """The table of a partition this broker leads, read from its log start to its end: a Table of
    groups, or `table` (the transaction coordinator reads __transaction_state so)."""
    table = Table() if table is None else table
    offset = partition.log_start_offset
    epoch = partition.leader_epoch
    while offset < (end := partition.log_end_offset):  # each turn reads at least one batch
        _check_still_leading(partition, epoch)
        try:
            slices = partition.log.read(offset, LOAD_CHUNK_BYTES, max_offset=end)
            data = await asyncio.to_thread(lambda: b"".join(piece.read() for piece in slices))
        except (OSError, ReplicaError) as error:
            _check_still_leading(partition, epoch)
            raise LoadAborted(f"reading {partition.topic}-{partition.partition_id} at {offset} failed: {error}") from error
        if not data:
            break
        offset = apply_batches(partition, table, data, offset)
    _check_still_leading(partition, epoch)
    return table


def apply_batches(partition: Partition, table: AppliesRecords, data: bytes, offset: int) -> int:
    """The complete batches of `data`, read from `partition` at `offset`, applied to `table`: the
    offset after them. A load's step, also for a table kept up with a log as it grows."""
    start = offset
    for batch in decode_batches(data):  # bounded by the chunk's size
        if batch.skipped:
            logger.warning("skipped a batch of %s-%d while loading: %s", partition.topic, partition.partition_id, batch.skipped)
        if batch.marker is not None:
            table.pending.end(batch.marker.producer_id, batch.marker.committed, table.offsets)
        for record_offset, key, value in batch.records:  # bounded by the batch's records
            try:
                table.apply(record_offset, key, value, batch.producer_id)
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
