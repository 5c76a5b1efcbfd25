"""Producer state of one partition: Kafka's ProducerStateManager (docs/design.md §16.3).

For every producer id seen in the log it keeps the producer epoch and the last
BATCHES_KEPT_PER_PRODUCER batches appended for it (first and last sequence, first and last
offset), the coordinator epoch of its last transaction marker, and the first offset of its
transaction open in this partition, if any. Before a leader appends, `check` compares a
request's batch headers with that state:

    producer id -1                          not idempotent: no checks, no state
    same epoch, same sequence range as a    duplicate (a retry after a lost response): not
      kept batch                            appended again, acknowledged with its first offsets
    producer unknown (no kept batch)        accepted with any sequence: its batches may have
                                            been removed by retention (as Kafka)
    epoch older than the kept one, or       INVALID_PRODUCER_EPOCH (47)
      below -1 for a producer unknown
      (as Kafka's ProducerAppendInfo)
    epoch newer than the kept one           accepted only from sequence 0, else OUT_OF_ORDER (45)
    same epoch                              accepted only at the next sequence, else OUT_OF_ORDER
                                            (0 after a marker alone: a marker holds no sequence)
    transactional, no transaction open at   INVALID_TXN_STATE unless it carries the producer's
      its epoch, a verification guard given   current guard (KIP-890's VerificationGuard)
    not transactional, a transaction open   INVALID_TXN_STATE

A producer id below -1, or one with a negative base sequence, never gets here: the log's
validation (storage/records.py, Kafka's LogValidator) refuses those batches first, as it
refuses clients' control batches.

Transactions (Kafka's ProducerAppendInfo): a producer's first transactional batch opens its
transaction here; its marker (a control batch the coordinator has the leader write,
`check_marker` then `record_marker`) ends it, with an epoch no older than the producer's
(INVALID_PRODUCER_EPOCH) and a coordinator epoch no older than its last marker's
(TRANSACTION_COORDINATOR_FENCED). An ended transaction stays unstable until the high watermark
passes its marker (`on_high_watermark`): the first unstable offset, the LSO's bound, is the
first offset of the oldest transaction that is open or not yet replicated. An abort yields the
AbortedTxn the segment's index keeps (storage/transaction_index.py).

Sequences are int32 and wrap from 2**31 - 1 to 0, as Kafka's do. Only the 61-byte batch headers
are read, never records.

Persistence: the state is derived from the log's batch headers, and snapshots of it spare a
restart from reading them all. A snapshot `<offset, 20 digits>.snapshot` in the log directory
(Kafka's name) is the state the batches below `offset` give; it is written at clean shutdown
(take_snapshot, at the log end) and by the owner's background flush (prepare_snapshot, once the
log is durable up to its offset), and the newest SNAPSHOTS_KEPT are kept. `load` takes the newest
snapshot between the log start and the log end and replays the batch headers after it; with
none, it reads every header from the log start. A snapshot past the log end describes batches
the log no longer has (a crash cut them, or a truncation) and is deleted, so call `load` again
after the log is truncated: the kept window of 5 batches cannot be rolled back in memory.

Control batches other than transaction markers are skipped.

Concurrency: owned by the partition's event loop, like its Log; no locking.
"""

import collections
import dataclasses
import logging
import os
import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from replog.storage.checkpoint import read_checkpoint, write_checkpoint, write_checkpoint_aside
from replog.storage.control_batches import Marker, decode_marker
from replog.storage.errors import InvalidRecordError, InvalidTxnStateError, ReplicaError
from replog.storage.log import Log, RecoveredProducers
from replog.storage.batch_format import (
    CONTROL_BATCH_BIT,
    HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TRANSACTIONAL_BIT,
)
from replog.storage.records import PRODUCER_BATCHES_KEPT
from replog.storage.transaction_index import AbortedTxn

logger = logging.getLogger(__name__)

BATCHES_KEPT_PER_PRODUCER = PRODUCER_BATCHES_KEPT  # records.py says why 5
SNAPSHOT_SUFFIX = ".snapshot"
# The background flush writes one per log.flush.offset.checkpoint.interval.ms: a truncation below
# the oldest (a follower far behind its leader's epochs) reads every header again.
SNAPSHOTS_KEPT = 3
_MAX_SEQUENCE = 2**31 - 1
# A line per kept batch: producer id, epoch, last timestamp, coordinator epoch, first offset of
# the open transaction (-1: none), offset of its last batch or marker, then the batch's first and
# last sequence and offset (all -1 for a producer whose marker came after its last batch).
_SNAPSHOT_FIELDS = 10
_SNAPSHOT_FIELDS_BEFORE_TRANSACTIONS = 7  # what snapshots held before: the batch alone
NO_COORDINATOR_EPOCH = -1
# A rebuild reads headers through windows of this size: one syscall covers many small batches,
# and a large batch costs one header-sized read rather than a read of its records.
_SCAN_WINDOW_BYTES = 64 << 10
# The header fields producer state needs: base offset, batch length, attributes, last offset
# delta, max timestamp, producer id, producer epoch, base sequence.
_PRODUCER_HEADER = struct.Struct(">qi9xhi8xqqhi4x")
assert _PRODUCER_HEADER.size == HEADER_SIZE_BYTES


class OutOfOrderSequenceError(ReplicaError):
    """A batch's first sequence does not follow the producer's last one (or a new epoch's is not 0)."""

    error_code = ErrorCode.out_of_order_sequence_number


class InvalidProducerEpochError(ReplicaError):
    """A batch comes from an epoch older than the producer's current one (a fenced producer)."""

    error_code = ErrorCode.invalid_producer_epoch


class TransactionCoordinatorFencedError(ReplicaError):
    """A marker from a coordinator epoch older than the one of the producer's last marker: a
    coordinator that has since lost its __transaction_state partition."""

    error_code = ErrorCode.transaction_coordinator_fenced


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` in Kafka's int32 sequence space, which wraps to 0 after 2**31 - 1."""
    if sequence > _MAX_SEQUENCE - increment:
        return increment - (_MAX_SEQUENCE - sequence) - 1
    return sequence + increment


class ProducerBatch(NamedTuple):
    """The producer fields of one batch header, and where its offsets start."""

    base_offset: int  # as stored in the header: the real offset in the log, 0-based in a request
    last_offset_delta: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int = 0
    marker: Marker | None = None  # what a control batch says, if it is a transaction marker

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)


class BatchMetadata(NamedTuple):
    """One appended batch of a producer: what a retry of it is recognised and answered by."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclasses.dataclass
class ProducerEntry:
    """A producer's epoch, its last kept batches (oldest first; none after a marker of a new
    epoch), its last batch or marker timestamp (the batch's max timestamp, as Kafka: expiry
    counts from it), the coordinator epoch of its last marker, the first offset of its open
    transaction, and the offset of its last batch or marker (what retention compares)."""

    epoch: int
    batches: collections.deque
    last_timestamp_ms: int
    last_offset: int
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int | None = None

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def in_transaction(self, epoch: int) -> bool:
        """Whether a transaction of `epoch` is open here (Kafka's hasOngoingTransaction)."""
        return self.current_txn_first_offset is not None and self.epoch == epoch

    def find_duplicate(self, batch: ProducerBatch) -> BatchMetadata | None:
        if batch.producer_epoch != self.epoch:
            return None
        for kept in self.batches:  # bounded by BATCHES_KEPT_PER_PRODUCER
            if kept.first_sequence == batch.base_sequence and kept.last_sequence == batch.last_sequence:
                return kept
        return None


class ProducerCheck(NamedTuple):
    """What `check` found: a duplicate (its original offsets) or the idempotent batch to record
    once the log has written it (None for a batch without a producer id)."""

    duplicate: BatchMetadata | None
    batch: ProducerBatch | None


_NOTHING_TO_RECORD = ProducerCheck(None, None)


def _parse_producer_header(buf, position: int) -> tuple[int, ProducerBatch | None]:
    """(size in bytes, producer fields) of the batch at `position`, which `buf` holds whole if it
    is a control batch; size 0 if the header cannot be read (the log's own validation reports
    that batch); fields None for a control batch that is not a transaction marker."""
    (base_offset, batch_length, attributes, last_offset_delta, max_timestamp, producer_id,
     producer_epoch, base_sequence) = _PRODUCER_HEADER.unpack_from(buf, position)
    if batch_length < HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES or last_offset_delta < 0:
        return 0, None
    size_bytes = batch_length + LOG_OVERHEAD_BYTES
    marker = None
    if attributes & CONTROL_BATCH_BIT:
        try:
            with memoryview(buf) as view:
                marker = decode_marker(view[position:position + size_bytes])
        except (InvalidRecordError, ValueError, struct.error):
            return size_bytes, None
    batch = ProducerBatch(base_offset, last_offset_delta, max_timestamp, producer_id, producer_epoch, base_sequence,
                          attributes, marker)
    return size_bytes, batch


def _control_batch_size(buf, position: int) -> int:
    """The size of the batch at `position` if it is a control batch (which a scan must hold whole
    to read its marker), else 0."""
    (_, batch_length, attributes, *_) = _PRODUCER_HEADER.unpack_from(buf, position)
    return batch_length + LOG_OVERHEAD_BYTES if attributes & CONTROL_BATCH_BIT else 0


def iter_producer_batches(buf) -> Iterator[ProducerBatch]:
    """The producer fields of each batch in `buf` (whole batches), control batches that are not
    transaction markers skipped."""
    position = 0
    end = len(buf)
    while end - position >= HEADER_SIZE_BYTES:  # bounded: each step advances >= 61 bytes
        size_bytes, batch = _parse_producer_header(buf, position)
        if not size_bytes:
            return
        if batch is not None:
            yield batch
        position += size_bytes


def _check_sequence(entry: ProducerEntry | None, batch: ProducerBatch) -> None:
    """Raise unless `batch` may follow what `entry` kept of its producer (None: nothing kept,
    which Kafka's ProducerAppendInfo compares as epoch -1, so that an epoch below it is fenced)."""
    epoch = NO_PRODUCER_EPOCH if entry is None else entry.epoch
    if batch.producer_epoch < epoch:
        raise InvalidProducerEpochError(
            f"producer {batch.producer_id} epoch {batch.producer_epoch} is older than its current epoch {epoch}"
        )
    if epoch == NO_PRODUCER_EPOCH:
        return
    if batch.producer_epoch > epoch:
        if batch.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {batch.producer_id} new epoch {batch.producer_epoch} starts at sequence "
                f"{batch.base_sequence}, not 0"
            )
        return
    expected = increment_sequence(entry.last_sequence, 1)
    if batch.base_sequence != expected:
        raise OutOfOrderSequenceError(
            f"producer {batch.producer_id} epoch {epoch} sent sequence {batch.base_sequence}, expected {expected}"
        )


class ProducerStateManager:
    """Producer id -> ProducerEntry for one partition's log. See the module docstring."""

    def __init__(self, directory: Path, topic: str, partition: int):
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its open transaction: the LSO's bound, without a walk
        # over every producer (Kafka's ongoingTxns).
        self._ongoing: dict[int, int] = {}
        # (first offset, marker offset) of ended transactions whose markers the high watermark
        # has not passed yet, in marker order (Kafka's unreplicatedTxns): still unstable.
        self._unreplicated: collections.deque[tuple[int, int]] = collections.deque()
        # Producer id -> its verification guard (KIP-890): taken before a transactional batch
        # that opens a transaction is verified with the coordinator, dropped once a
        # transaction opens or ends here, so that a guard verified for one transaction cannot
        # let a late batch into the next.
        self._guards: dict[int, object] = {}
        # (log end, snapshot lines) that a load finds with no snapshot written now: the one it
        # read there, or an empty state for a log holding no batches. take_snapshot does not
        # write it again: a clean shutdown wrote 10,000 idle logs' unchanged snapshots, two
        # fsyncs each, and that kept a broker from exiting for seconds (Kafka skips them too).
        self._next_load_finds: tuple[int, list[str]] | None = None

    @property
    def producers(self) -> Mapping[int, ProducerEntry]:
        return self._producers

    @property
    def open_transaction_count(self) -> int:
        return len(self._ongoing)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """The first offset of the oldest transaction open here or ended by a marker the high
        watermark (`high_watermark`, if given, else as last told) has not passed; None if there
        is none."""
        if not self._ongoing and not self._unreplicated:  # most partitions, on every consumer fetch
            return None
        if high_watermark is not None:
            self.on_high_watermark(high_watermark)
        first = min(self._ongoing.values(), default=None)
        if self._unreplicated:
            oldest = min(first_offset for first_offset, _ in self._unreplicated)  # bounded by unreplicated markers
            first = oldest if first is None else min(first, oldest)
        return first

    def on_high_watermark(self, high_watermark: int) -> None:
        """The high watermark moved: the ended transactions whose markers it passed are stable."""
        unreplicated = self._unreplicated
        while unreplicated and unreplicated[0][1] < high_watermark:  # bounded by unreplicated markers
            unreplicated.popleft()

    # -- the append path -----------------------------------------------------------------------

    def check(self, batch_bytes, verification_guard: object | None = None) -> ProducerCheck:
        """Judge a producer's batch (the leader's one batch per partition, which the log has
        validated) before the log writes it; raises the Kafka errors of the module docstring.
        `verification_guard`: the guard the batch's transaction was verified with; None for an
        append that is not verified (verification disabled, or the broker's own)."""
        _, batch = _parse_producer_header(batch_bytes, 0)
        if batch is None or batch.producer_id == NO_PRODUCER_ID:
            return _NOTHING_TO_RECORD
        entry = self._producers.get(batch.producer_id)
        duplicate = entry.find_duplicate(batch) if entry is not None else None
        if duplicate is not None:
            return ProducerCheck(duplicate, None)
        transactional = batch.attributes & TRANSACTIONAL_BIT
        if (transactional and verification_guard is not None
                and not (entry is not None and entry.in_transaction(batch.producer_epoch))
                and verification_guard is not self._guards.get(batch.producer_id)):
            raise InvalidTxnStateError(f"producer {batch.producer_id} epoch {batch.producer_epoch}: the batch is not "
                                       "part of a transaction verified with its coordinator")
        _check_sequence(entry, batch)
        if not transactional and entry is not None and entry.current_txn_first_offset is not None:
            raise InvalidTxnStateError(f"producer {batch.producer_id} sent a non-transactional batch while its "
                                       f"transaction from offset {entry.current_txn_first_offset} is open")
        return ProducerCheck(None, batch)

    def needs_verification(self, batch_bytes) -> tuple[int, int] | None:
        """(producer id, epoch) of a transactional batch whose producer has no transaction of that
        epoch open here: its coordinator must confirm the partition is in its transaction."""
        _, batch = _parse_producer_header(batch_bytes, 0)
        if batch is None or not batch.transactional or batch.producer_id == NO_PRODUCER_ID:
            return None
        entry = self._producers.get(batch.producer_id)
        if entry is not None and entry.in_transaction(batch.producer_epoch):
            return None
        return batch.producer_id, batch.producer_epoch

    def verification_guard(self, producer_id: int) -> object:
        """The producer's current guard, made if it has none: concurrent requests of one
        transaction verify under the same guard, as Kafka's VerificationStateEntry."""
        guard = self._guards.get(producer_id)
        if guard is None:
            guard = self._guards[producer_id] = object()
        return guard

    def check_marker(self, marker: Marker) -> None:
        """Judge a marker the leader is about to write (Kafka's appendEndTxnMarker checks)."""
        entry = self._producers.get(marker.producer_id)
        if entry is None:
            return
        if marker.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(f"marker of producer {marker.producer_id} epoch {marker.producer_epoch} "
                                            f"is older than its current epoch {entry.epoch}")
        if marker.coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker of producer {marker.producer_id} from coordinator epoch {marker.coordinator_epoch} is older "
                f"than its last marker's {entry.coordinator_epoch}")

    def record_append(self, check: ProducerCheck, first_offset: int) -> None:
        """Record the batch `check` accepted, now that the log wrote it from `first_offset`."""
        if check.batch is not None:
            self._record(check.batch._replace(base_offset=first_offset))

    def record_marker(self, marker: Marker, offset: int, timestamp_ms: int) -> AbortedTxn | None:
        """Record a marker the leader wrote at `offset`; the aborted transaction it ends, if any,
        for the segment's index."""
        batch = ProducerBatch(offset, 0, timestamp_ms, marker.producer_id, marker.producer_epoch, NO_SEQUENCE,
                              TRANSACTIONAL_BIT | CONTROL_BATCH_BIT, marker)
        return self._record_marker(batch)

    def record_replicated(self, batches, end_offset: int | None = None) -> list[AbortedTxn]:
        """Record batches copied from a leader (offsets as in their headers), without checks: the
        leader judged them, and a follower must hold whatever its leader holds. `end_offset`:
        the log took only the batches below it (an append that failed part-way). Returns the
        transactions their markers aborted, for the segments' indexes."""
        aborted = []
        for batch in iter_producer_batches(batches):  # bounded by the batches in the buffer
            if end_offset is not None and batch.base_offset >= end_offset:
                break
            if batch.marker is not None:
                if (ended := self._record_marker(batch)) is not None:
                    aborted.append(ended)
            elif batch.producer_id != NO_PRODUCER_ID:
                self._record(batch)
        return aborted

    def _entry_for(self, batch: ProducerBatch) -> ProducerEntry:
        """The producer's entry at the batch's epoch: a new epoch starts a new sequence space,
        so the old epoch's batches can no longer be retried (Kafka clears them too); its
        transaction and coordinator epoch carry on."""
        entry = self._producers.get(batch.producer_id)
        if entry is None:
            entry = ProducerEntry(batch.producer_epoch, collections.deque(maxlen=BATCHES_KEPT_PER_PRODUCER),
                                  batch.max_timestamp, batch.base_offset)
            self._producers[batch.producer_id] = entry
        elif entry.epoch != batch.producer_epoch:
            entry.epoch = batch.producer_epoch
            entry.batches.clear()
        return entry

    def _record(self, batch: ProducerBatch) -> None:
        entry = self._producers.get(batch.producer_id)
        if entry is None or entry.epoch != batch.producer_epoch:
            entry = self._entry_for(batch)
        last_offset = batch.base_offset + batch.last_offset_delta
        entry.batches.append(BatchMetadata(batch.base_sequence, batch.last_sequence, batch.base_offset, last_offset))
        entry.last_timestamp_ms = batch.max_timestamp
        entry.last_offset = last_offset
        if batch.transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = batch.base_offset
            self._ongoing[batch.producer_id] = batch.base_offset
            self._guards.pop(batch.producer_id, None)

    def _record_marker(self, batch: ProducerBatch) -> AbortedTxn | None:
        """End the producer's transaction here (Kafka's appendEndTxnMarker, then completeTxn):
        a marker with no transaction open ends none, and changes only the producer's epochs."""
        entry = self._entry_for(batch)
        first_offset = entry.current_txn_first_offset
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = batch.marker.coordinator_epoch
        entry.last_timestamp_ms = batch.max_timestamp
        entry.last_offset = batch.base_offset
        self._guards.pop(batch.producer_id, None)
        if first_offset is None:
            return None
        del self._ongoing[batch.producer_id]
        self._unreplicated.append((first_offset, batch.base_offset))
        if batch.marker.committed:
            return None
        # The LSO once this transaction is done: where the next open one starts (Kafka's
        # lastStableOffset(completedTxn)); a reader of the index stops at it.
        last_stable_offset = min(self._ongoing.values(), default=batch.base_offset + 1)
        return AbortedTxn(batch.producer_id, first_offset, batch.base_offset, last_stable_offset)

    # -- keeping the state consistent with the log ---------------------------------------------

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget producers whose last batch or marker is below `log_start_offset` (retention
        removed it), so that the state equals what a rebuild from the log would find."""
        gone = [pid for pid, entry in self._producers.items() if entry.last_offset < log_start_offset]
        for producer_id in gone:  # bounded by the number of producers
            self._forget(producer_id)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers silent for `expiration_ms` (producer.id.expiration.ms), but never one
        with a transaction open (Kafka); returns how many. This is what bounds the number of
        producers kept, and the verification guards of producers that never appended."""
        expired = [pid for pid, entry in self._producers.items()
                   if now_ms - entry.last_timestamp_ms >= expiration_ms and entry.current_txn_first_offset is None]
        for producer_id in expired:  # bounded by the number of producers
            self._forget(producer_id)
        for producer_id in [pid for pid in self._guards if pid not in self._producers]:  # bounded by the guards
            del self._guards[producer_id]
        if expired:
            logger.debug("expired producer ids topic=%s partition=%d count=%d",
                        self.topic, self.partition, len(expired))
        return len(expired)

    def _forget(self, producer_id: int) -> None:
        del self._producers[producer_id]
        self._ongoing.pop(producer_id, None)
        self._guards.pop(producer_id, None)

    def load(self, log: Log) -> None:
        """Build the state for `log` as it is now: at open, and again after a truncation. The
        log's aborted-transaction index is rebuilt from where the replay of headers starts."""
        recovered = log.take_recovered_producers()
        self._producers = {}
        self._ongoing = {}
        self._unreplicated.clear()
        self._guards = {}
        self._next_load_finds = None
        for offset, path in reversed(self._snapshots()):  # bounded by SNAPSHOTS_KEPT and stray files
            if not log.log_start_offset <= offset <= log.log_end_offset:
                path.unlink()  # batches it describes are gone, or it reaches past the log
            elif self._read_snapshot(path):
                read = offset, self._snapshot_lines()
                self._catch_up(log, offset, recovered, f"snapshot at {offset}")
                self._next_load_finds = self._next_load_finds or read
                return
            else:
                path.unlink()
        self._catch_up(log, log.log_start_offset, recovered, "log start")
        if log.log_start_offset == log.log_end_offset:  # no batches: the catch-up read none, nor wrote
            self._next_load_finds = log.log_end_offset, []

    def _catch_up(self, log: Log, offset: int, recovered: "RecoveredProducers | None", origin: str) -> None:
        """Take the state from the batches at `offset` on: by reading their headers, except
        those crash recovery has just checked and summed up (`recovered`), if it could."""
        summed_up = (recovered is not None and recovered.from_offset >= offset
                     and all(runs is not None for runs in recovered.segment_runs))
        replay_end = recovered.from_offset if summed_up else log.log_end_offset
        log.truncate_aborted_from(offset)
        batches_read = 0
        for batch in _scan_log(log, offset, replay_end):  # bounded by the batches in between
            batches_read += 1
            if batch.marker is not None:
                if (aborted := self._record_marker(batch)) is not None:
                    log.add_aborted(aborted)
            elif batch.producer_id != NO_PRODUCER_ID:
                self._record(batch)
        producers_recovered = 0
        if summed_up:
            for runs in recovered.segment_runs:  # in log order
                producers_recovered += len(runs)
                self._apply_runs(runs)
        self.truncate_head(log.log_start_offset)
        logger.debug("loaded producer state topic=%s partition=%d from=%r batches_read=%d producers_recovered=%d "
                    "producers=%d", self.topic, self.partition, origin, batches_read, producers_recovered,
                    len(self._producers))
        if batches_read or producers_recovered:
            # Another load of this log (a crash before the next background flush) starts here,
            # so the aborted transactions indexed from `offset` must be on disk by then.
            log.persist_aborted_from(offset)
            self.take_snapshot(log.log_end_offset)

    def _apply_runs(self, runs) -> None:
        """What _record over the batches a SegmentScan's producer runs sum up would do (runs
        hold no transactional batches: a scan that met one answers none)."""
        for producer_id, epoch, epoch_changed, batches in runs:  # bounded by the producers
            entry = self._producers.get(producer_id)
            if epoch_changed and entry is not None:
                entry.batches.clear()  # the batches before the scan's last epoch end there
            for base_offset, last_offset_delta, max_timestamp, base_sequence in batches:  # <= 5
                self._record(ProducerBatch(base_offset, last_offset_delta, max_timestamp, producer_id, epoch,
                                           base_sequence))

    def take_snapshot(self, log_end_offset: int) -> None:
        """Write the state as of `log_end_offset`, which must be the log's end: at clean shutdown,
        and after a load that had to read headers or apply recovered runs; not if the next load
        would find this state without it."""
        lines = self._snapshot_lines()
        if self._next_load_finds == (log_end_offset, lines):
            return
        write_checkpoint(self._snapshot_path(log_end_offset), lines)
        self._next_load_finds = log_end_offset, lines
        self.trim_snapshots()

    def prepare_snapshot(self, log_end_offset: int) -> "PendingSnapshot":
        """The state as of `log_end_offset` (the log's end now), to be written by another thread
        once the log is durable up to there, and then installed or discarded here."""
        return PendingSnapshot(self, self._snapshot_path(log_end_offset), self._snapshot_lines())

    def _snapshot_path(self, offset: int) -> Path:
        return self.directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"

    def _snapshot_lines(self) -> list[str]:
        lines = []
        for pid, entry in self._producers.items():  # bounded by the number of producers
            txn_first_offset = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
            prefix = (f"{pid} {entry.epoch} {entry.last_timestamp_ms} {entry.coordinator_epoch} {txn_first_offset} "
                      f"{entry.last_offset}")
            lines.extend(f"{prefix} {b.first_sequence} {b.last_sequence} {b.first_offset} {b.last_offset}"
                         for b in entry.batches)
            if not entry.batches:
                lines.append(f"{prefix} -1 -1 -1 -1")
        return lines

    def _snapshots(self) -> list[tuple[int, Path]]:
        """(offset, path) of every snapshot file, oldest first."""
        try:
            names = os.listdir(self.directory)  # not Path.glob, whose pattern matching cost more than the listing
        except FileNotFoundError:
            return []  # the log was deleted meanwhile
        return sorted((int(stem), self.directory / name) for name in names
                      if name.endswith(SNAPSHOT_SUFFIX) and (stem := name[:-len(SNAPSHOT_SUFFIX)]).isdigit())

    def snapshot_installed(self) -> None:
        """A background flush's snapshot replaced whatever a load would have found."""
        self._next_load_finds = None
        self.trim_snapshots()

    def trim_snapshots(self) -> None:
        """Delete all but the newest SNAPSHOTS_KEPT snapshots."""
        for _, path in self._snapshots()[:-SNAPSHOTS_KEPT]:  # bounded by the snapshot files
            path.unlink(missing_ok=True)

    def _read_snapshot(self, path: Path) -> bool:
        entries = read_checkpoint(path, (_SNAPSHOT_FIELDS, _SNAPSHOT_FIELDS_BEFORE_TRANSACTIONS))
        try:
            rows = [[int(field) for field in entry] for entry in entries]
        except ValueError:
            logger.warning("malformed producer snapshot path=%s", path)
            return False
        # read_checkpoint answers [] for a damaged file as for an empty state; only the latter
        # may be trusted.
        if not rows and path.read_text().split() != ["0", "0"]:
            return False
        producers: dict[int, ProducerEntry] = {}
        for row in rows:  # bounded by the snapshot's lines
            if len(row) == _SNAPSHOT_FIELDS_BEFORE_TRANSACTIONS:
                pid, epoch, timestamp_ms, *batch = row
                coordinator_epoch, txn_first_offset, last_offset = NO_COORDINATOR_EPOCH, -1, batch[-1]
            else:
                pid, epoch, timestamp_ms, coordinator_epoch, txn_first_offset, last_offset, *batch = row
            entry = producers.setdefault(pid, ProducerEntry(
                epoch, collections.deque(maxlen=BATCHES_KEPT_PER_PRODUCER), timestamp_ms, last_offset,
                coordinator_epoch, None if txn_first_offset < 0 else txn_first_offset))
            if batch[0] != NO_SEQUENCE:
                entry.batches.append(BatchMetadata(*batch))
        self._producers = producers
        self._ongoing = {pid: entry.current_txn_first_offset for pid, entry in producers.items()
                         if entry.current_txn_first_offset is not None}
        return True


class PendingSnapshot:
    """A snapshot taken on the owner's thread (ProducerStateManager.prepare_snapshot), written and
    made durable beside its final name by another thread (`write`), then renamed into place
    (`install`) or dropped (`discard`) on the owner's thread: only there can it be known that the
    log was not truncated below the snapshot's offset meanwhile, and the rename is atomic with
    that check. The rename is not made durable: a snapshot lost in a crash costs a longer replay."""

    def __init__(self, manager: ProducerStateManager, path: Path, lines: list[str]):
        self._manager = manager
        self._path = path
        self._lines = lines
        self._written: Path | None = None

    def write(self) -> None:
        self._written = write_checkpoint_aside(self._path, self._lines)

    def install(self) -> None:
        if self._written is not None:
            os.replace(self._written, self._path)
            self._manager.snapshot_installed()

    def discard(self) -> None:
        if self._written is not None:
            self._written.unlink(missing_ok=True)


def _scan_log(log: Log, offset: int, end_offset: int) -> Iterator[ProducerBatch]:
    """Every batch header of `log` from the batch at `offset` to the one at `end_offset`, reading
    headers only (not records), and transaction markers whole."""
    if offset >= end_offset:
        return
    for piece in log.read(offset, log.size_bytes, end_offset):  # bounded by the segments
        window = b""
        window_position = 0
        position = piece.position
        end_position = piece.position + piece.size_bytes
        while end_position - position >= HEADER_SIZE_BYTES:  # bounded: each step advances >= 61 bytes
            if position + HEADER_SIZE_BYTES > window_position + len(window):
                window_position = position
                window = os.pread(piece.fd, min(_SCAN_WINDOW_BYTES, end_position - position), position)
            control_bytes = _control_batch_size(window, position - window_position)
            if position + control_bytes > window_position + len(window):
                window_position = position
                window = os.pread(piece.fd, min(max(_SCAN_WINDOW_BYTES, control_bytes), end_position - position),
                                  position)
            size_bytes, batch = _parse_producer_header(window, position - window_position)
            if not size_bytes:
                raise InvalidRecordError(f"unreadable batch header at position {position} of {log.directory}")
            if batch is not None:
                yield batch
            position += size_bytes
