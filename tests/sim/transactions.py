"""Transactions in a schedule: transactional producers, and the coordinator they talk to,
modelled on Kafka's TransactionCoordinator; what they write to is replog's real partitions.

The coordinator keeps each transactional id's producer id, epoch and state (Empty, Ongoing,
PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort) in a log that survives its
failovers, as __transaction_state does. It decides a transaction's outcome by writing Prepare*
(at once, in the model) before answering EndTxn; then it writes the marker to every partition
of the transaction through Partition.write_txn_marker on the leader the store names, retrying
until each partition has it, and only then completes. A failover (a fault) stops the marker
writes in flight, takes the next coordinator epoch and, after a load during which every request
is answered COORDINATOR_LOAD_IN_PROGRESS, writes the markers of every Prepare* transaction again
under the new epoch. A marker's reply may be lost (LOST_MARKER_REPLY_CHANCE): it is written
again, as Kafka's coordinator does when a WriteTxnMarkers answer never comes. A transaction
open longer than TRANSACTION_TIMEOUT_S is aborted with its producer's epoch bumped, which
fences the producer; InitProducerId for an id with an open transaction does the same.

Each transactional id has one producer running at a time, but for the zombies: a producer
writes one to RECORDS_MAX records a transaction, each to a partition it first adds to the
transaction (AddPartitionsToTxn), each batch with its producer id, epoch and sequence, appended
as the produce handler appends it: KIP-890's verification asks the coordinator first when the
partition says the batch needs it (Partition.needs_verification), and the append carries the
guard taken before asking. Then, as a consume-transform-produce loop does, it commits its group's
input offset in the transaction: the group's partition (placed as __consumer_offsets places
groups) added to the transaction as AddOffsetsToTxn adds it, and the offset written there as
TxnOffsetCommit writes it, the producer's transactional batch of an offset record, whose offset
is the record's own number. It commits if every record was acknowledged (acks=all), else aborts
and bumps its epoch with InitProducerId (KIP-360); it sometimes aborts anyway. A producer told
it is fenced stops, and another takes its place. The faults: fence_producer starts a second
producer of an id while the first runs on (a zombie, whose writes must never be visible);
stall_producer holds a producer mid-transaction, often past its timeout.

Every record and every decision is reported to the TransactionChecker (transaction_invariants.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition
from replog.replica.results import AppendResult
from replog.groups.placement import partition_for
from replog.groups.records import OffsetKey, OffsetValue, encode_key, encode_offset_value, encode_transactional_batch
from replog.storage.control_batches import ControlType, Marker
from tests.sim.transaction_invariants import INPUT_TOPIC, Transaction, TransactionChecker, group_of

TRANSACTIONAL_IDS = ("app-0", "app-1")
FIRST_PRODUCER_ID = 1000
RECORDS_MAX = 4
VOLUNTARY_ABORT_CHANCE = 0.15
TRANSACTION_TIMEOUT_S = 3.0
TIMEOUT_CHECK_S = 0.5
STALL_S = (1.0, 6.0)
LOAD_S = (0.1, 1.5)
COORDINATOR_ROUND_TRIP_S = (0.001, 0.02)
MARKER_TIMEOUT_MS = 3_000
LOST_MARKER_REPLY_CHANCE = 0.1
THINK_S = (0.0, 0.05)
RETRY_S = 0.05
RETRIABLE = (ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions)
# A marker that the current coordinator's epoch and the producer's latest epoch can never deserve.
FENCING_REFUSALS = (ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced)


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


@dataclasses.dataclass
class _Metadata:
    """A transactional id's entry of the coordinator's log."""

    producer_id: int
    producer_epoch: int
    state: TxnState = TxnState.EMPTY
    transaction: Transaction | None = None  # while Ongoing or Prepare*
    started_s: float = 0.0
    serial: int = 0  # transactions begun


NamedLeader = Callable[[int], Awaitable[tuple[object, object, Partition | None]]]


class ModelCoordinator:
    def __init__(self, rng, note, now_s: Callable[[], float], named_leader: NamedLeader, checker: TransactionChecker):
        self._rng = rng
        self._note = note
        self._now_s = now_s
        self._named_leader = named_leader
        self._checker = checker
        self.epoch = 0
        self.loading = False
        self.transactions: list[Transaction] = []
        self._metadata: dict[str, _Metadata] = {}
        self._next_producer_id = FIRST_PRODUCER_ID
        self._completing: dict[str, asyncio.Task] = {}  # transactional id -> its markers being written
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks.append(asyncio.create_task(self._abort_timed_out()))

    async def close(self) -> None:
        for task in [*self._tasks, *self._completing.values()]:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def settled(self) -> bool:
        return not self.loading and all(meta.state not in (TxnState.ONGOING, *PREPARING) for meta in self._metadata.values())

    def producer_epoch(self, transactional_id: str) -> int:
        return self._metadata[transactional_id].producer_epoch

    # -- the requests -----------------------------------------------------------------------

    async def init_producer_id(self, transactional_id: str, current: tuple[int, int] | None) -> tuple[ErrorCode, tuple[int, int] | None]:
        """`current`: the caller's producer id and epoch, to bump them (KIP-360), or None (a new producer)."""
        if error := await self._round_trip():
            return error, None
        meta = self._metadata.get(transactional_id)
        if meta is None:
            meta = self._metadata[transactional_id] = _Metadata(self._next_producer_id, -1)
            self._next_producer_id += 1
        elif current is not None and current != (meta.producer_id, meta.producer_epoch):
            return ErrorCode.producer_fenced, None
        if meta.state in PREPARING:
            return ErrorCode.concurrent_transactions, None
        if meta.state is TxnState.ONGOING:
            self._prepare(transactional_id, meta, committed=False, fence=True, why="a new producer's InitProducerId")
            return ErrorCode.concurrent_transactions, None
        meta.producer_epoch += 1
        meta.state = TxnState.EMPTY
        self._note(f"txn {transactional_id} producer {meta.producer_id} epoch {meta.producer_epoch} initialised")
        return ErrorCode.none, (meta.producer_id, meta.producer_epoch)

    async def add_partition(self, transactional_id: str, producer_id: int, producer_epoch: int,
                            partition: int) -> tuple[ErrorCode, Transaction | None]:
        if error := await self._round_trip() or self._fenced(transactional_id, producer_id, producer_epoch):
            return error, None
        meta = self._metadata[transactional_id]
        if meta.state in PREPARING:
            return ErrorCode.concurrent_transactions, None
        if meta.state is not TxnState.ONGOING:
            meta.serial += 1
            meta.transaction = Transaction(f"{transactional_id}#{meta.serial}", producer_id, producer_epoch)
            self.transactions.append(meta.transaction)
            meta.state, meta.started_s = TxnState.ONGOING, self._now_s()
        meta.transaction.partitions.add(partition)
        return ErrorCode.none, meta.transaction

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, partition: int) -> ErrorCode:
        """AddPartitionsToTxn's verify_only: is `partition` in the producer's ongoing transaction?"""
        if error := await self._round_trip() or self._fenced(transactional_id, producer_id, producer_epoch):
            return error
        meta = self._metadata[transactional_id]
        if meta.state is not TxnState.ONGOING or partition not in meta.transaction.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      committed: bool) -> tuple[ErrorCode, None]:
        if error := await self._round_trip() or self._fenced(transactional_id, producer_id, producer_epoch):
            return error, None
        meta = self._metadata[transactional_id]
        if meta.state is TxnState.ONGOING:
            self._prepare(transactional_id, meta, committed, fence=False, why="EndTxn")
            return ErrorCode.none, None
        return ErrorCode.invalid_txn_state, None

    async def _round_trip(self) -> ErrorCode:
        await asyncio.sleep(self._rng.uniform(*COORDINATOR_ROUND_TRIP_S))
        return ErrorCode.coordinator_load_in_progress if self.loading else ErrorCode.none

    def _fenced(self, transactional_id: str, producer_id: int, producer_epoch: int) -> ErrorCode:
        meta = self._metadata.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if producer_epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced
        return ErrorCode.none

    # -- ending transactions ----------------------------------------------------------------

    def _prepare(self, transactional_id: str, meta: _Metadata, committed: bool, fence: bool, why: str) -> None:
        """Prepare* written: the outcome is decided here, before any marker goes out. Fencing
        bumps the epoch, so that the markers carry one the producer's writes do not."""
        if fence:
            meta.producer_epoch += 1
        meta.state = TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT
        meta.transaction.committed = committed
        self._note(f"txn {meta.transaction.name} producer {meta.producer_id} epoch {meta.producer_epoch} "
                   f"{meta.state.value} (by {why}) partitions {sorted(meta.transaction.partitions)}")
        self._complete_later(transactional_id, meta)

    def _complete_later(self, transactional_id: str, meta: _Metadata) -> None:
        self._completing[transactional_id] = asyncio.create_task(self._complete(transactional_id, meta, self.epoch))

    async def _complete(self, transactional_id: str, meta: _Metadata, coordinator_epoch: int) -> None:
        transaction = meta.transaction
        marker = Marker(meta.producer_id, meta.producer_epoch,
                        ControlType.COMMIT if transaction.committed else ControlType.ABORT, coordinator_epoch)
        await asyncio.gather(*(self._write_marker(marker, transaction, partition) for partition in sorted(transaction.partitions)))
        meta.state = TxnState.COMPLETE_COMMIT if transaction.committed else TxnState.COMPLETE_ABORT
        meta.transaction = None
        del self._completing[transactional_id]
        self._note(f"txn {transaction.name} {meta.state.value}")

    async def _write_marker(self, marker: Marker, transaction: Transaction, partition: int) -> None:
        """WriteTxnMarkers to the partition's leader until it answers that the marker is written."""
        while True:
            _, broker, replica = await self._named_leader(partition)
            if replica is not None:
                writing = broker.spawn(replica.write_txn_marker(marker, MARKER_TIMEOUT_MS))
                done, _ = await asyncio.wait({writing}, timeout=MARKER_TIMEOUT_MS / 1000 + 1)
                error = writing.result() if done else ErrorCode.request_timed_out
                if error is ErrorCode.none:
                    if self._rng.random() >= LOST_MARKER_REPLY_CHANCE:
                        return
                    self._note(f"txn {transaction.name} marker to partition {partition}: reply lost")
                elif error in FENCING_REFUSALS:
                    self._checker.found(f"marker {marker} of transaction {transaction.name} from the current "
                                        f"coordinator refused by partition {partition}'s leader: {error.name}")
            await asyncio.sleep(RETRY_S)

    async def _abort_timed_out(self) -> None:
        while True:
            await asyncio.sleep(TIMEOUT_CHECK_S)
            if self.loading:
                continue
            for transactional_id, meta in self._metadata.items():
                if meta.state is TxnState.ONGOING and self._now_s() - meta.started_s > TRANSACTION_TIMEOUT_S:
                    self._prepare(transactional_id, meta, committed=False, fence=True, why="its timeout")

    # -- failover ---------------------------------------------------------------------------

    def fail_over(self) -> None:
        """The coordinator's partition of __transaction_state moves: marker writes in flight
        stop, and the new coordinator loads the log, then completes what was prepared."""
        if self.loading:
            return
        self.loading = True
        self.epoch += 1
        self._note(f"fault: transaction coordinator fails over to coordinator epoch {self.epoch}")
        for task in self._completing.values():
            task.cancel()
        self._completing.clear()
        self._tasks.append(asyncio.create_task(self._load(self._rng.uniform(*LOAD_S))))

    async def _load(self, duration_s: float) -> None:
        await asyncio.sleep(duration_s)
        self.loading = False
        preparing = [transactional_id for transactional_id, meta in self._metadata.items() if meta.state in PREPARING]
        self._note(f"transaction coordinator epoch {self.epoch} loaded; markers written again for {preparing}")
        for transactional_id in preparing:
            self._complete_later(transactional_id, self._metadata[transactional_id])


Produce = Callable[[int, Callable[[int, bytes], bytearray], Callable[[Partition, bytearray], Awaitable[AppendResult]],
                    bytes | None], Awaitable[object]]


class TransactionalProducers:
    """The producers of every transactional id, started and fenced as the schedule goes."""

    def __init__(self, rng, note, coordinator: ModelCoordinator, checker: TransactionChecker, produce: Produce,
                 partitions: int, produce_timeout_ms: int):
        self._rng = rng
        self._note = note
        self._coordinator = coordinator
        self._checker = checker
        self._produce = produce
        self._partitions = partitions
        self._produce_timeout_ms = produce_timeout_ms
        self._serials = {transactional_id: 0 for transactional_id in TRANSACTIONAL_IDS}  # producers started
        self._stalls: dict[str, float] = {}
        self._running: dict[asyncio.Task, None] = {}  # ordered: cancelled in the order started
        self._stopped = False

    def start(self) -> None:
        for transactional_id in TRANSACTIONAL_IDS:
            self._start_producer(transactional_id)

    async def stop(self) -> None:
        """The producers go, leaving what they had open to the coordinator's timeout."""
        self._stopped = True
        for task in list(self._running):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def fence(self) -> None:
        transactional_id = self._rng.choice(TRANSACTIONAL_IDS)
        self._note(f"fault: a second producer of {transactional_id} starts, fencing the one running")
        self._start_producer(transactional_id)

    def stall(self) -> None:
        transactional_id = self._rng.choice(TRANSACTIONAL_IDS)
        self._stalls[transactional_id] = self._rng.uniform(*STALL_S)
        self._note(f"fault: {transactional_id}'s producer stalls for {self._stalls[transactional_id]:.2f}s mid-transaction")

    def _start_producer(self, transactional_id: str) -> None:
        self._serials[transactional_id] += 1
        task = asyncio.create_task(self._run(transactional_id, self._serials[transactional_id]))
        self._running[task] = None
        task.add_done_callback(lambda done: self._running.pop(done, None))

    async def _run(self, transactional_id: str, serial: int) -> None:
        await self._transact(transactional_id)
        self._note(f"txn {transactional_id}'s producer {serial} is fenced and stops")
        if serial == self._serials[transactional_id] and not self._stopped:
            self._start_producer(transactional_id)

    async def _transact(self, transactional_id: str) -> None:
        """One producer: transactions until it is fenced."""
        identity = await self._init(transactional_id, None)
        sequences: dict[int, int] = {}
        while identity is not None:
            producer_id, producer_epoch = identity
            transaction, failed = None, False
            for _ in range(self._rng.randint(1, RECORDS_MAX)):
                partition = self._rng.randrange(self._partitions)
                if transaction is None or partition not in transaction.partitions:
                    error, added = await _answered(lambda: self._coordinator.add_partition(
                        transactional_id, producer_id, producer_epoch, partition))
                    if error is ErrorCode.producer_fenced:
                        return
                    if error is not ErrorCode.none:
                        failed = True
                        break
                    transaction = added
                if await self._append(transactional_id, transaction, partition, sequences) is None:
                    failed = True
                    break
                await asyncio.sleep(self._rng.uniform(*THINK_S) + self._stalls.pop(transactional_id, 0.0))
            if transaction is None:
                await asyncio.sleep(RETRY_S)
                continue
            if not failed:
                error = await self._commit_offsets(transactional_id, transaction, sequences)
                if error is ErrorCode.producer_fenced:
                    return
                failed = error is not ErrorCode.none
            committed = not failed and self._rng.random() >= VOLUNTARY_ABORT_CHANCE
            error, _ = await _answered(lambda: self._coordinator.end_txn(transactional_id, producer_id, producer_epoch, committed))
            if error is ErrorCode.producer_fenced:
                return
            if failed:  # what the failed appends did is unknown: a new epoch starts the sequences again
                identity = await self._init(transactional_id, identity)
                sequences = {}

    async def _init(self, transactional_id: str, current: tuple[int, int] | None) -> tuple[int, int] | None:
        error, identity = await _answered(lambda: self._coordinator.init_producer_id(transactional_id, current))
        return identity if error is ErrorCode.none else None

    async def _commit_offsets(self, transactional_id: str, transaction: Transaction, sequences: dict[int, int]) -> ErrorCode:
        """sendOffsetsToTransaction: the group's partition added to the transaction (AddOffsetsToTxn),
        then the offset of its input written there as the producer's batch (TxnOffsetCommit)."""
        group = group_of(transactional_id)
        partition = partition_for(group, self._partitions)
        if partition not in transaction.partitions:
            error, _ = await _answered(lambda: self._coordinator.add_partition(
                transactional_id, transaction.producer_id, transaction.producer_epoch, partition))
            if error is not ErrorCode.none:
                return error

        def records(number: int, key: bytes) -> list[tuple[bytes, bytes]]:
            """The offset committed is the record's own number: the checker knows its transaction by it."""
            return [(key, encode_offset_value(OffsetValue(number, -1, transaction.name, number)))]

        number = await self._append(transactional_id, transaction, partition, sequences, records,
                                    encode_key(OffsetKey(group, INPUT_TOPIC, 0)))
        if number is None:
            return ErrorCode.unknown_server_error
        transaction.offsets[group] = number
        return ErrorCode.none

    async def _append(self, transactional_id: str, transaction: Transaction, partition: int, sequences: dict[int, int],
                      records: Callable[[int, bytes], list[tuple[bytes, bytes]]] = lambda number, key: [(key, b"t" * 16)],
                      key: bytes | None = None) -> int | None:
        """The number of the record appended and acknowledged, None if it was not. `records(number,
        key)`: its record; `key`: the key to give it, None for any."""
        producer_id, producer_epoch = transaction.producer_id, transaction.producer_epoch

        def encode(number: int, key: bytes) -> bytearray:
            fenced = self._coordinator.producer_epoch(transactional_id) != producer_epoch
            self._checker.appended(number, transaction, fenced)
            return encode_transactional_batch(records(number, key), number, producer_id, producer_epoch,
                                              sequences.get(partition, 0))

        async def serve(replica: Partition, batch: bytearray) -> AppendResult:
            """The produce handler on the leader: KIP-890's verification, then the append."""
            guard = None
            if replica.needs_verification(batch) is not None:
                guard = replica.verification_guard(producer_id)
                error = await self._coordinator.verify(transactional_id, producer_id, producer_epoch, partition)
                if error is not ErrorCode.none:
                    return AppendResult(error, -1, -1, replica.log_start_offset)
            return await replica.append_as_leader(batch, -1, self._produce_timeout_ms, verification_guard=guard)

        ack = await self._produce(partition, encode, serve, key)
        if ack is None:
            return None
        sequences[partition] = sequences.get(partition, 0) + 1
        transaction.acknowledged[ack.number] = partition
        return ack.number


async def _answered(request: Callable[[], Awaitable[tuple[ErrorCode, object]]]) -> tuple[ErrorCode, object]:
    """A coordinator request retried while its answer says to retry, as a producer retries."""
    while True:
        error, value = await request()
        if error not in RETRIABLE:
            return error, value
        await asyncio.sleep(RETRY_S)
