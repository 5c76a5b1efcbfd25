"""A transactional id's state at its coordinator, and Kafka's transitions between its states
(TransactionMetadata): sans-IO, so the coordinator (coordinator.py) and tests drive it.

A transition is prepared (`prepare_*`, which checks it is legal and marks it pending), written to
__transaction_state, then completed (`complete`) or abandoned (`abandon`) by the write's outcome;
while one is pending, requests for the id answer CONCURRENT_TRANSACTIONS. The coordinator's event
loop is its only thread, so no lock guards the state.

    Empty ---------------> Ongoing ---> PrepareCommit ---> CompleteCommit --+
      ^  (AddPartitions)      |    +--> PrepareAbort  ---> CompleteAbort  --+--> Ongoing/Empty ...
      |                       v            ^
      +-- InitProducerId   PrepareEpochFence (a producer fenced, or a timeout: abort at a new epoch)

Dead is a tombstone: an id expired after transactional.id.expiration.ms (docs/design.md §16.1).
"""

from __future__ import annotations

import dataclasses
import enum

from kio.schema.errors import ErrorCode

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka never hands out Short.MaxValue, so the coordinator can always fence with one more bump:
# an id whose epoch reaches this is replaced by a new producer id (KIP-360).
EPOCH_EXHAUSTED = 32767 - 1


class TxnState(enum.IntEnum):
    """Kafka's states and the ids __transaction_state stores them by."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As DescribeTransactions and ListTransactions name it."""
        return "".join(word.capitalize() for word in self.name.split("_"))


_VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.ONGOING: frozenset({TxnState.ONGOING, TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.ONGOING}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.ONGOING, TxnState.PREPARE_EPOCH_FENCE}),
    TxnState.COMPLETE_COMMIT: frozenset({TxnState.PREPARE_COMMIT}),
    TxnState.COMPLETE_ABORT: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT}),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.ONGOING}),
}
# States an idle id may expire from.
EXPIRABLE = frozenset({TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT})
PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})


class IllegalTransition(Exception):
    """A transition Kafka's table does not allow: a bug in the caller, never a client's error."""


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= EPOCH_EXHAUSTED


@dataclasses.dataclass(frozen=True)
class TxnTransit:
    """The values a transition writes, and which the metadata takes once written."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[tuple[str, int]]
    start_timestamp_ms: int
    last_update_timestamp_ms: int


@dataclasses.dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int  # Kafka's previousProducerId: the id before a rotation, for a retried InitProducerId
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[tuple[str, int]]
    start_timestamp_ms: int
    last_update_timestamp_ms: int
    pending: TxnTransit | None = None
    # An epoch fence whose write failed: its epoch was bumped in memory but never handed out, so
    # the next fence reuses it rather than bumping again.
    failed_epoch_fence: bool = False

    @classmethod
    def from_transit(cls, transactional_id: str, transit: TxnTransit) -> "TransactionMetadata":
        metadata = cls(transactional_id, NO_PRODUCER_ID, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, 0,
                       TxnState.EMPTY, set(), -1, -1)
        metadata._apply(transit)
        return metadata

    @property
    def epoch_exhausted(self) -> bool:
        return epoch_exhausted(self.producer_epoch)

    # -- transitions --------------------------------------------------------------------------

    def prepare_increment_epoch(self, timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TxnTransit | int:
        """InitProducerId on an id with no open transaction: the next epoch, or the current one
        for a retry of a bump whose answer was lost; PRODUCER_FENCED for an older producer."""
        if self.epoch_exhausted:
            raise IllegalTransition(f"no epoch left after {self.producer_epoch} for producer id {self.producer_id}")
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            return ErrorCode.producer_fenced
        return self._prepare(TxnState.EMPTY, producer_id=self.producer_id, producer_epoch=epoch,
                             last_producer_epoch=last_epoch, timeout_ms=timeout_ms, partitions=frozenset(),
                             start_timestamp_ms=-1, last_update_timestamp_ms=now_ms)

    def prepare_producer_id_rotation(self, producer_id: int, timeout_ms: int, now_ms: int,
                                     record_last_epoch: bool) -> TxnTransit:
        """The epochs of the current producer id are spent: a new id, at epoch 0."""
        return self._prepare(TxnState.EMPTY, producer_id=producer_id, last_producer_id=self.producer_id, producer_epoch=0,
                             last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
                             timeout_ms=timeout_ms, partitions=frozenset(), start_timestamp_ms=-1,
                             last_update_timestamp_ms=now_ms)

    def prepare_add_partitions(self, added: frozenset[tuple[str, int]], now_ms: int) -> TxnTransit:
        starts = self.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
        return self._prepare(TxnState.ONGOING, partitions=frozenset(self.partitions) | added,
                             start_timestamp_ms=now_ms if starts else self.start_timestamp_ms,
                             last_update_timestamp_ms=now_ms)

    def fence_epoch(self) -> None:
        """The producer of an ongoing transaction is replaced, or timed out: the transaction is
        aborted at the next epoch (never handed to a client), which fences the old producer from
        every partition the markers reach. PrepareEpochFence is this moment, held in memory only."""
        self._check(TxnState.PREPARE_EPOCH_FENCE)
        if not self.failed_epoch_fence:
            self.producer_epoch += 1
        self.last_producer_epoch = NO_PRODUCER_EPOCH
        self.state = TxnState.PREPARE_EPOCH_FENCE

    def prepare_end(self, committed: bool, now_ms: int) -> TxnTransit:
        return self._prepare(TxnState.PREPARE_COMMIT if committed else TxnState.PREPARE_ABORT,
                             last_update_timestamp_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransit:
        """The markers are written: the transaction is over, its partitions forgotten."""
        done = TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT else TxnState.COMPLETE_ABORT
        return self._prepare(done, last_producer_epoch=self.producer_epoch, partitions=frozenset(),
                             last_update_timestamp_ms=now_ms)

    def prepare_dead(self) -> TxnTransit:
        return self._prepare(TxnState.DEAD, partitions=frozenset())

    def complete(self, transit: TxnTransit) -> None:
        """The pending transition is written."""
        if self.pending is not transit:
            raise IllegalTransition(f"{self.transactional_id}: completing {transit.state.kafka_name}, "
                                    f"pending {self.pending.state.kafka_name if self.pending else None}")
        self._apply(transit)
        self.pending = None
        if transit.state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            self.failed_epoch_fence = False

    def abandon(self, fencing: bool = False) -> None:
        """The pending transition was not written; an epoch fence's bump stays, unreturned."""
        self.pending = None
        if fencing:
            self.failed_epoch_fence = True
            self.state = TxnState.ONGOING

    def _check(self, state: TxnState) -> None:
        if self.pending is not None:
            raise IllegalTransition(f"{self.transactional_id}: {self.pending.state.kafka_name} is pending")
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")

    def _prepare(self, state: TxnState, **changes) -> TxnTransit:
        self._check(state)
        values = dict(producer_id=self.producer_id, last_producer_id=self.last_producer_id,
                      producer_epoch=self.producer_epoch, last_producer_epoch=self.last_producer_epoch,
                      timeout_ms=self.timeout_ms, partitions=frozenset(self.partitions),
                      start_timestamp_ms=self.start_timestamp_ms, last_update_timestamp_ms=self.last_update_timestamp_ms)
        values.update(changes)
        self.pending = TxnTransit(state=state, **values)
        return self.pending

    def _apply(self, transit: TxnTransit) -> None:
        self.producer_id, self.last_producer_id = transit.producer_id, transit.last_producer_id
        self.producer_epoch, self.last_producer_epoch = transit.producer_epoch, transit.last_producer_epoch
        self.timeout_ms, self.state = transit.timeout_ms, transit.state
        self.partitions = set(transit.partitions)
        self.start_timestamp_ms, self.last_update_timestamp_ms = transit.start_timestamp_ms, transit.last_update_timestamp_ms
