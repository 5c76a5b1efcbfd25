"""The transaction coordinator of one broker: the transactional ids whose __transaction_state
partition this broker leads, their producer ids and epochs, their open transactions, and the
markers that end them (docs/design.md §16.1).

Ownership follows leadership of the partitions of __transaction_state, as the group
coordinator's follows __consumer_offsets (groups/ownership.py): ids loaded on immigration
(COORDINATOR_LOAD_IN_PROGRESS meanwhile), dropped on emigration (NOT_COORDINATOR), their marker
writes cancelled. A transaction found in PrepareCommit or PrepareAbort on load has its markers
sent again: its outcome was decided before the failover. The partition's leader epoch is the
coordinator epoch the markers carry, so partitions refuse an older coordinator's markers
(TRANSACTION_COORDINATOR_FENCED), and a new leader epoch reads the partition again.

Every transition is written to the id's partition with acks=-1 before it takes effect
(state.py). Ending a transaction: PrepareCommit/PrepareAbort written -> EndTxn answered ->
markers written to every partition of the transaction (`markers`, retried until written) ->
CompleteCommit/CompleteAbort written. While markers are pending, requests for the id answer
CONCURRENT_TRANSACTIONS, which clients retry.

Timers: every transaction.abort.timed.out.transaction.cleanup.interval.ms, ongoing transactions
open longer than their timeout are aborted at a bumped epoch (fencing their producer); every
transaction.remove.expired.transaction.cleanup.interval.ms, ids idle for
transactional.id.expiration.ms are removed (a tombstone). Both, and the loads and marker writes,
are tasks of the task group `run` owns (ownership.py).

Kafka's transaction version 2 (KIP-890 part 2: an epoch bump on every EndTxn) is not
implemented: clients use version 0/1 semantics, where the epoch moves only at InitProducerId
and at fencing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Protocol

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC, partition_for
from replog.groups import offsets_log
from replog.groups.ownership import Owned, PartitionOwner
from replog.groups.records import encode_batch
from replog.replica.partition import Partition
from replog.storage.control_batches import ControlType, Marker

from .markers import WritesMarkers
from .placement import TRANSACTION_STATE_TOPIC
from .records import decode_record, encode_key, encode_value
from .state import (EXPIRABLE, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, PREPARED, TransactionMetadata, TxnState,
                    TxnTransit, epoch_exhausted)

logger = logging.getLogger(__name__)

APPEND_ERRORS = {
    # Kafka's TransactionStateManager maps the log's answers to what a producer understands.
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.request_timed_out: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
    ErrorCode.message_too_large: ErrorCode.unknown_server_error,
    ErrorCode.record_list_too_large: ErrorCode.unknown_server_error,
}
# A Complete* record that could not be written is tried again after this, while the partition
# is led here; a new leader sends the markers again itself.
COMPLETE_RETRY_BACKOFF_MS = 100


class ProducerIds(Protocol):
    async def next_id(self) -> int: ...


class AbortCause(enum.StrEnum):
    CLIENT = "client"  # EndTxn
    TIMEOUT = "timeout"  # open past its transaction.timeout.ms
    FENCED = "fenced"  # a new producer of the id (InitProducerId) while it was open


class TransactionObserver(Protocol):
    """Learns each transaction's outcome once it is decided in the log (obs/metrics.py)."""

    def transaction_committed(self) -> None: ...

    def transaction_aborted(self, cause: str) -> None: ...


@dataclasses.dataclass(frozen=True)
class TransactionConfig:
    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    id_expiration_ms: int = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms
    write_timeout_ms: int = 5000  # acks=-1 writes to __transaction_state (offsets.commit.timeout.ms)
    offsets_topic_partitions: int = 50  # to place a group's __consumer_offsets partition (AddOffsetsToTxn)
    # Ids held in memory, as the group coordinator bounds its groups: an InitProducerId that
    # would make one more is refused COORDINATOR_NOT_AVAILABLE, which clients retry, while
    # expiry (transactional.id.expiration.ms) makes room.
    ids_max: int = 100_000


@dataclasses.dataclass(frozen=True)
class InitResult:
    error: int
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclasses.dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    error: int
    state: str = ""
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 0
    start_timestamp_ms: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


class _Table:
    """The latest record per transactional id of one partition, as it is loaded."""

    def __init__(self) -> None:
        self.transits: dict[str, TxnTransit] = {}

    def apply(self, record_offset: int, key: bytes | None, value: bytes | None, producer_id: int = -1) -> None:
        record = decode_record(key, value)
        if record.value is None:
            self.transits.pop(record.transactional_id, None)
        else:
            self.transits[record.transactional_id] = record.value


class TransactionCoordinator(PartitionOwner):
    topic = TRANSACTION_STATE_TOPIC
    keys = "transactional_ids"
    # The partition's leader epoch is the coordinator epoch markers carry: a new one sends them again.
    reload_on_new_epoch = True

    def __init__(self, broker_id: int, config: TransactionConfig, hosted: Callable[[str, int], Partition | None],
                 partition_count: Callable[[], int], clock_ms: Callable[[], int], wall_clock_ms: Callable[[], int],
                 producer_ids: ProducerIds, markers: WritesMarkers, observer: TransactionObserver):
        """`hosted(topic, partition)`: the replica this broker hosts, if any; `partition_count`:
        the partitions of __transaction_state ids are placed by; `clock_ms` paces the timers,
        `wall_clock_ms` stamps transactions (their timeouts count in it, as Kafka's)."""
        super().__init__(broker_id, partition_count)
        self.config = config
        self._hosted = hosted
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._producer_ids = producer_ids
        self._markers = markers
        self._observer = observer
        self._transactions: dict[str, TransactionMetadata] = {}
        self._marker_writes: dict[str, asyncio.Task] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def _started(self, tasks: asyncio.TaskGroup) -> None:
        tasks.create_task(self._every(self.config.abort_timed_out_interval_ms, self.abort_timed_out_transactions),
                          name="abort-timed-out-transactions")
        tasks.create_task(self._every(self.config.remove_expired_interval_ms, self.remove_expired_transactional_ids),
                          name="remove-expired-transactional-ids")

    async def _every(self, interval_ms: int, action: Callable[[], None]) -> None:
        while True:  # until cancelled with the coordinator
            await asyncio.sleep(interval_ms / 1000)
            action()

    # -- immigration and emigration ----------------------------------------------------------

    async def _read(self, partition: Partition) -> _Table:
        return await offsets_log.load(partition, _Table())

    def _loaded(self, index: int, table: _Table, epoch: int) -> int:
        """A transaction found decided but not complete has its markers sent again."""
        for transactional_id, transit in table.transits.items():  # bounded by the partition's ids
            metadata = TransactionMetadata.from_transit(transactional_id, transit)
            self._transactions[transactional_id] = metadata
            if metadata.state in PREPARED:
                self._send_markers(metadata, epoch)
        return len(table.transits)

    def _dropped(self, index: int) -> int:
        leaving = self._placed_in(self._transactions, index)
        for transactional_id in leaving:  # bounded by the partition's ids
            del self._transactions[transactional_id]
            writing = self._marker_writes.pop(transactional_id, None)
            if writing is not None:
                writing.cancel()
        return len(leaving)

    def _coordinator_epoch(self, transactional_id: str) -> int | None:
        return self._owned_epoch(self.partition_of(transactional_id))

    def _current(self, transactional_id: str) -> TransactionMetadata | int:
        """The id's metadata, or the error to answer: not coordinated here, or unknown."""
        error = self.owns(transactional_id)
        if error is not None:
            return error
        metadata = self._transactions.get(transactional_id)
        return ErrorCode.invalid_producer_id_mapping if metadata is None else metadata

    # -- InitProducerId ----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID,
                               producer_epoch: int = NO_PRODUCER_EPOCH) -> InitResult:
        """A producer id and epoch for the id: a new producer (no id given) fences every older
        one; a producer recovering from an error (its id and epoch given, KIP-360) keeps its id at
        the next epoch. An open transaction is aborted first (CONCURRENT_TRANSACTIONS meanwhile)."""
        if not transactional_id:
            return InitResult(ErrorCode.invalid_request)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return InitResult(ErrorCode.invalid_transaction_timeout)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitResult(ErrorCode.invalid_request)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        error = self.owns(transactional_id)
        if error is not None:
            return InitResult(error)
        if transactional_id not in self._transactions:
            if len(self._transactions) >= self.config.ids_max:
                return InitResult(ErrorCode.coordinator_not_available)
            new_id = await self._producer_ids.next_id()
            error = self.owns(transactional_id)
            if error is not None:
                return InitResult(error)
            if transactional_id not in self._transactions:  # not made by another request meanwhile
                self._transactions[transactional_id] = TransactionMetadata(
                    transactional_id, new_id, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms,
                    TxnState.EMPTY, set(), -1, self._wall_clock_ms())
        metadata = self._transactions[transactional_id]
        rotated_id: int | None = None
        if metadata.epoch_exhausted and metadata.state in EXPIRABLE and metadata.pending is None:
            rotated_id = await self._producer_ids.next_id()
            current = self._current(transactional_id)
            if isinstance(current, int):
                return InitResult(current)
            metadata = current
        refusal = self._init_refusal(metadata, expected)
        if refusal is not None:
            return InitResult(refusal)
        if metadata.state is TxnState.ONGOING:
            # The epoch this abort bumps to is never handed out: the client retries after
            # CONCURRENT_TRANSACTIONS and gets the next one (or a new id, the epochs spent).
            error = await self._end(metadata, False, AbortCause.FENCED)
            return InitResult(error if error != ErrorCode.none else ErrorCode.concurrent_transactions)
        now_ms = self._wall_clock_ms()
        if metadata.epoch_exhausted:
            if expected is not None and expected[1] != metadata.producer_epoch:
                return InitResult(ErrorCode.producer_fenced)
            if rotated_id is None:
                return InitResult(ErrorCode.concurrent_transactions)  # became exhausted while allocating: retry
            transit = metadata.prepare_producer_id_rotation(rotated_id, timeout_ms, now_ms, expected is not None)
        else:
            transit = metadata.prepare_increment_epoch(timeout_ms, None if expected is None else expected[1], now_ms)
            if isinstance(transit, int):
                return InitResult(transit)
        error = await self._write(metadata, transit)
        if error != ErrorCode.none:
            return InitResult(error)
        logger.info("initialized transactional id transactional_id=%s producer_id=%d epoch=%d partition=%d broker=%d",
                    transactional_id, metadata.producer_id, metadata.producer_epoch, self.partition_of(transactional_id),
                    self.broker_id)
        return InitResult(ErrorCode.none, metadata.producer_id, metadata.producer_epoch)

    @staticmethod
    def _init_refusal(metadata: TransactionMetadata, expected: tuple[int, int] | None) -> int | None:
        if metadata.pending is not None or metadata.state in PREPARED:
            return ErrorCode.concurrent_transactions
        if expected is not None:
            # Kafka's rule: the id just made, the current producer id, or a retry of a rotation
            # whose answer was lost (the previous id at a spent epoch).
            expected_id, expected_epoch = expected
            valid = (metadata.producer_epoch == NO_PRODUCER_EPOCH or expected_id == metadata.producer_id
                     or (expected_id == metadata.last_producer_id and epoch_exhausted(expected_epoch)))
            if not valid:
                return ErrorCode.producer_fenced
        return None

    # -- AddPartitionsToTxn, AddOffsetsToTxn -------------------------------------------------

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Collection[tuple[str, int]]) -> int:
        """Partitions join the id's transaction (one starts if none is open)."""
        metadata = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(metadata, int):
            return metadata
        added = frozenset(partitions)
        if metadata.pending is not None or metadata.state in PREPARED:
            return ErrorCode.concurrent_transactions
        if metadata.state is TxnState.ONGOING and added <= metadata.partitions:
            return ErrorCode.none
        return await self._write(metadata, metadata.prepare_add_partitions(added, self._wall_clock_ms()))

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> int:
        """The group's __consumer_offsets partition joins the transaction, so that its
        transactional offsets are committed or aborted with it."""
        group_partition = partition_for(group_id, self.config.offsets_topic_partitions)
        return await self.add_partitions(transactional_id, producer_id, producer_epoch, [(OFFSETS_TOPIC, group_partition)])

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """AddPartitionsToTxn's verify_only (KIP-890): whether each partition is in the id's open
        transaction (TRANSACTION_ABORTABLE if not), writing nothing."""
        partitions = list(partitions)
        metadata = self._producer(transactional_id, producer_id, producer_epoch)
        if not isinstance(metadata, int) and metadata.state in PREPARED:
            metadata = ErrorCode.concurrent_transactions
        if isinstance(metadata, int):
            return dict.fromkeys(partitions, metadata)
        return {partition: ErrorCode.none if partition in metadata.partitions else ErrorCode.transaction_abortable
                for partition in partitions}

    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TransactionMetadata | int:
        """The id's metadata if the producer is its current one, else the error to answer."""
        metadata = ErrorCode.invalid_request if not transactional_id else self._current(transactional_id)
        if isinstance(metadata, int):
            return metadata
        if metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        return metadata

    # -- EndTxn ------------------------------------------------------------------------------

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool) -> int:
        """Commit or abort the open transaction: answered once the decision is in the log; the
        markers follow. A retry of an end already complete answers NONE."""
        metadata = self._producer(transactional_id, producer_id, producer_epoch)
        if isinstance(metadata, int):
            return metadata
        if metadata.pending is not None:
            return ErrorCode.concurrent_transactions
        state = metadata.state
        if state is TxnState.ONGOING:
            return await self._end(metadata, committed)
        if state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            return ErrorCode.none if (state is TxnState.COMPLETE_COMMIT) == committed else ErrorCode.invalid_txn_state
        if state in PREPARED:
            same = (state is TxnState.PREPARE_COMMIT) == committed
            return ErrorCode.concurrent_transactions if same else ErrorCode.invalid_txn_state
        return ErrorCode.invalid_txn_state  # Empty: nothing to end

    def _end(self, metadata: TransactionMetadata, committed: bool,
             cause: AbortCause = AbortCause.CLIENT) -> Awaitable[int]:
        """Decide now (the transition pending from here on), then write PrepareCommit/PrepareAbort
        and send the markers in the background: what the returned awaitable does. An abort the
        client did not ask for fences its producer."""
        coordinator_epoch = self._coordinator_epoch(metadata.transactional_id)
        if cause is not AbortCause.CLIENT:
            metadata.fence_epoch()
        transit = metadata.prepare_end(committed, self._wall_clock_ms())
        return self._write_end(metadata, transit, coordinator_epoch, cause)

    async def _write_end(self, metadata: TransactionMetadata, transit: TxnTransit, coordinator_epoch: int,
                         cause: AbortCause) -> int:
        error = await self._write(metadata, transit, fencing=cause is not AbortCause.CLIENT)
        if error != ErrorCode.none:
            return error
        # Counted once the outcome is in the log, and only here: a coordinator that completes it
        # after a failover did not decide it.
        if transit.state is TxnState.PREPARE_COMMIT:
            self._observer.transaction_committed()
        else:
            self._observer.transaction_aborted(cause)
        logger.info("ending transaction transactional_id=%s producer_id=%d epoch=%d result=%s partitions=%d "
                    "coordinator_epoch=%d broker=%d", metadata.transactional_id, metadata.producer_id,
                    metadata.producer_epoch, transit.state.kafka_name, len(metadata.partitions),
                    coordinator_epoch, self.broker_id)
        self._send_markers(metadata, coordinator_epoch)
        return ErrorCode.none

    def _send_markers(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        complete = metadata.prepare_complete(self._wall_clock_ms())
        task = self._spawn(lambda: self._complete(metadata, complete, coordinator_epoch),
                           f"transaction-markers-{metadata.transactional_id}")
        if task is not None:
            self._marker_writes[metadata.transactional_id] = task

    async def _complete(self, metadata: TransactionMetadata, complete: TxnTransit, coordinator_epoch: int) -> None:
        transactional_id = metadata.transactional_id
        control = ControlType.COMMIT if complete.state is TxnState.COMPLETE_COMMIT else ControlType.ABORT
        marker = Marker(metadata.producer_id, metadata.producer_epoch, control, coordinator_epoch)
        await self._markers.write_markers(marker, sorted(metadata.partitions))
        while self._transactions.get(transactional_id) is metadata:  # until written, or led elsewhere
            error = await self._write(metadata, complete, keep_pending=True)
            if error == ErrorCode.none:
                break
            logger.warning("transaction end not written transactional_id=%s error=%d broker=%d",
                           transactional_id, error, self.broker_id)
            await asyncio.sleep(COMPLETE_RETRY_BACKOFF_MS / 1000)
        if self._marker_writes.get(transactional_id) is asyncio.current_task():
            del self._marker_writes[transactional_id]

    # -- writing ---------------------------------------------------------------------------

    async def _write(self, metadata: TransactionMetadata, transit: TxnTransit, *, fencing: bool = False,
                     keep_pending: bool = False) -> int:
        """Append `transit` (acks=-1) and complete it, or abandon it on failure (or keep it
        pending, for a Complete* tried again). NOT_COORDINATOR if the partition was led
        elsewhere meanwhile, however the write went."""
        transactional_id = metadata.transactional_id
        index = self.partition_of(transactional_id)
        owner = self._partitions.get(index)
        partition = self._hosted(TRANSACTION_STATE_TOPIC, index)
        if partition is None or not isinstance(owner, Owned):
            error = ErrorCode.not_coordinator
        else:
            value = None if transit.state is TxnState.DEAD else encode_value(transit)
            batch = encode_batch([(encode_key(transactional_id), value)], self._wall_clock_ms())
            result = await partition.append_as_leader(batch, -1, self.config.write_timeout_ms, internal=True)
            error = APPEND_ERRORS.get(result.error_code, result.error_code)
            if self._partitions.get(index) is not owner or self._transactions.get(transactional_id) is not metadata:
                error = ErrorCode.not_coordinator
        if error == ErrorCode.none:
            metadata.complete(transit)
        elif not keep_pending and metadata.pending is transit:
            metadata.abandon(fencing)
        return error

    # -- timeouts and expiry -----------------------------------------------------------------

    def abort_timed_out_transactions(self) -> None:
        """Abort, at a bumped epoch, every ongoing transaction open longer than its timeout."""
        now_ms = self._wall_clock_ms()
        for metadata in list(self._transactions.values()):  # bounded by the ids coordinated here
            if (metadata.state is TxnState.ONGOING and metadata.pending is None
                    and self.owns(metadata.transactional_id) is None
                    and metadata.start_timestamp_ms + metadata.timeout_ms < now_ms):
                logger.info("aborting timed out transaction transactional_id=%s producer_id=%d epoch=%d broker=%d",
                            metadata.transactional_id, metadata.producer_id, metadata.producer_epoch, self.broker_id)
                aborting = self._end(metadata, False, AbortCause.TIMEOUT)
                self._spawn(lambda aborting=aborting: aborting, f"abort-timed-out-{metadata.transactional_id}")

    def remove_expired_transactional_ids(self) -> None:
        now_ms = self._wall_clock_ms()
        for metadata in list(self._transactions.values()):  # bounded by the ids coordinated here
            if (metadata.state in EXPIRABLE and metadata.pending is None
                    and self.owns(metadata.transactional_id) is None
                    and metadata.last_update_timestamp_ms + self.config.id_expiration_ms <= now_ms):
                dead = metadata.prepare_dead()
                self._spawn(lambda metadata=metadata, dead=dead: self._expire(metadata, dead),
                            f"expire-{metadata.transactional_id}")

    async def _expire(self, metadata: TransactionMetadata, dead: TxnTransit) -> None:
        if await self._write(metadata, dead) != ErrorCode.none:
            return  # the next check tries again
        if self._transactions.get(metadata.transactional_id) is metadata:
            del self._transactions[metadata.transactional_id]
        logger.info("removed expired transactional id transactional_id=%s producer_id=%d broker=%d",
                    metadata.transactional_id, metadata.producer_id, self.broker_id)

    # -- administration ----------------------------------------------------------------------

    def describe(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        described = []
        for transactional_id in transactional_ids:  # bounded by the request's ids
            metadata = ErrorCode.invalid_request if not transactional_id else self._current(transactional_id)
            if metadata == ErrorCode.invalid_producer_id_mapping:
                metadata = ErrorCode.transactional_id_not_found
            if isinstance(metadata, int):
                described.append(TransactionDescription(transactional_id, metadata))
                continue
            described.append(TransactionDescription(
                transactional_id, ErrorCode.none, metadata.state.kafka_name, metadata.producer_id,
                metadata.producer_epoch, metadata.timeout_ms, metadata.start_timestamp_ms,
                tuple(sorted(metadata.partitions))))
        return described

    def list_transactions(self, state_filters: Collection[str] = (), producer_id_filters: Collection[int] = (),
                          duration_filter_ms: int = -1) -> tuple[int, list[str], list[TransactionListing]]:
        """(error, the state filters no state has, the ids that pass every filter)."""
        if self.loading:
            return ErrorCode.coordinator_load_in_progress, [], []
        by_name = {state.kafka_name: state for state in TxnState}
        unknown = [name for name in state_filters if name not in by_name]
        states = {by_name[name] for name in state_filters if name in by_name}
        now_ms = self._wall_clock_ms()
        listed = [
            TransactionListing(metadata.transactional_id, metadata.producer_id, metadata.state.kafka_name)
            for metadata in self._transactions.values()  # bounded by the ids coordinated here
            if metadata.state is not TxnState.DEAD
            and (not producer_id_filters or metadata.producer_id in producer_id_filters)
            and (not state_filters or metadata.state in states)
            and (duration_filter_ms < 0 or now_ms - metadata.start_timestamp_ms > duration_filter_ms)
        ]
        return ErrorCode.none, unknown, listed

    def ongoing_count(self) -> int:
        """Transactions open or ending here, for the metrics."""
        return sum(1 for metadata in self._transactions.values()
                   if metadata.state in (TxnState.ONGOING, TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT))
