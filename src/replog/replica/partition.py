"""One partition replica hosted on this broker: Partition and Replica (docs/design.md §1, §5).

Every rule about the in-sync replica set (ISR) and the high watermark (HW) lives here, as in
Kafka's Partition.scala; the replica manager only routes requests to partitions.

State kept (the names of docs/design.md §1):
    assigned_replicas (AR)  broker ids, first = preferred leader
    isr (ISR)               in-sync replicas, always holding the leader; changed by `update_isr`
    catch_up_replicas (CUR) AR - ISR
    leader_epoch            fences requests from older leaders and their clients
    log_end_offset (LEO)    of the local log; followers' LEOs are what they last fetched from
    high_watermark (HW)     min LEO over the ISR; never moves backwards on the leader; consumers
                            never see data at or above it

States (explicit, `_TRANSITIONS`): a replica starts as LEADER or FOLLOWER; LEADER -> LEADER (a
newer epoch), LEADER -> FOLLOWER (becomeFollower), FOLLOWER -> FOLLOWER (another
leader or epoch), FOLLOWER -> LEADER (becomeLeader), either -> CLOSED. Anything else raises.

A LEADER is `fenced` while its broker's coordination session is suspended or lost: it may no
longer be the leader without knowing it, so it takes no writes and its HW stands still (acks=-1
appends wait); it keeps serving its followers and committed reads, which cannot harm anyone.
`lift_fence` ends that once the broker has seen its leader node survive; any transition does too.

A follower serves no client: produce, consumer fetch, ListOffsets and OffsetForLeaderEpoch all
answer NOT_LEADER_OR_FOLLOWER. Its log is written only by `append_as_follower` (the leader's
batches verbatim, fetcher.py) and cut only by `truncate_for_new_leader` (KIP-101) or
`truncate_fully_and_start_at` (it fell below the leader's log start).

Every HW advance answers the acks=-1 appends it passed (commit_queue.py), with
NOT_ENOUGH_REPLICAS_AFTER_APPEND instead of success if the ISR had meanwhile shrunk below
min.insync.replicas (Kafka's DelayedProduce rule). The ISR maintenance (replication/: shrinking
lagging followers after replica.lag.time.max.ms, expanding caught-up ones through the store's
compare-and-set) calls `update_isr`.

Transactions (docs/design.md §16.3): the producer state tracks each producer's open transaction
from the batches appended or copied, so a follower that becomes leader knows them. The last
stable offset (LSO) is min(first offset of the oldest transaction open or not yet replicated,
HW): read_committed reads and ListOffsets stop there, and retention never passes it. The
coordinator ends a transaction with `write_txn_marker` (acks=-1); an abort goes into the
aborted-transaction index, which read_committed fetches answer from. KIP-890's verification:
a transactional batch that opens a transaction here carries the guard its produce took
(`verification_guard`) before asking the coordinator.

The local log, its producer state and its disk space are ReplicaLog's (replica_log.py); writes
the data directory cannot take are answered KAFKA_STORAGE_ERROR, partition by partition, and
leave the partition as it was. Long polls wait in ReadWatches (read_waiters.py). A follower's
fetch session holds the partitions it is caught up with quiet (QuietHold): they are not visited
each round, so every change such a follower could learn of (log end, HW, log start, ISR,
assignment, leadership) ends the holds first (Followers.stir).

Concurrency: owned by one event loop; methods never block on anything but the local disk.
"""

import enum
import logging
from collections.abc import Callable, Collection, Iterable, Iterator

from kio.schema.errors import ErrorCode

from replog.replica.append_order import AppendTurns
from replog.replica.commit_queue import CommitQueue
from replog.replica.divergence import divergence
from replog.replica.followers import FollowerReplica, Followers, QuietSnapshot
from replog.replica.partition_config import PartitionConfig
from replog.replica.read_waiters import ReadWaiter, ReadWatches
from replog.replica.replica_log import LocalAppend, ReplicaLog
from replog.replica.producer_state import ProducerEntry
from replog.replica.results import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    NO_LEADER_EPOCH,
    NO_TIMESTAMP,
    READ_COMMITTED,
    UNKNOWN_OFFSET,
    AbortedTransaction,
    AppendResult,
    EpochEndOffset,
    FetchFrom,
    FetchResult,
    ListOffsetsResult,
    ProducerStateView,
    TruncationResult,
)
from replog.replica.throttle import ReplicationThrottle, ThrottledReplicas
from replog.storage import compressed_checks
from replog.storage.checkpoint import UNDEFINED_EPOCH
from replog.storage.cleaner import Cleaned
from replog.storage.control_batches import Marker
from replog.storage.disk_space import NOT_WATCHED, DiskSpace
from replog.storage.errors import KafkaStorageError, ReplicaError
from replog.storage.log import Log
from replog.storage.records import checked_first
from replog.storage.segment import FileSlice

logger = logging.getLogger(__name__)

class ReplicaState(enum.Enum):
    NEW = "new"  # only inside the constructor
    LEADER = "leader"
    FOLLOWER = "follower"
    CLOSED = "closed"


_TRANSITIONS: dict[ReplicaState, frozenset[ReplicaState]] = {
    ReplicaState.NEW: frozenset({ReplicaState.LEADER, ReplicaState.FOLLOWER}),
    ReplicaState.LEADER: frozenset({ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.CLOSED}),
    ReplicaState.FOLLOWER: frozenset({ReplicaState.LEADER, ReplicaState.FOLLOWER, ReplicaState.CLOSED}),
    ReplicaState.CLOSED: frozenset(),
}


class Partition:
    """A partition replica hosted by this broker, leading or following. See the module docstring."""

    def __init__(self, log: Log, local_broker_id: int, leader_epoch: int, assigned_replicas: Collection[int],
                 isr: Collection[int], high_watermark: int, config: PartitionConfig, now_ms: int,
                 leader_id: int | None = None, *, disk_space: DiskSpace = NOT_WATCHED):
        """Start leading at `leader_epoch`, or following `leader_id` if another broker leads.
        `disk_space`: the data directory's, which says when appends are refused."""
        self.log = log
        self.topic = log.topic
        self.partition_id = log.partition
        self.local_broker_id = local_broker_id
        self.config = config
        self.state = ReplicaState.NEW
        self.leader_epoch = NO_LEADER_EPOCH
        self.leader_id: int | None = None
        self.assigned_replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        # What this leader knows of each follower, and the fetch sessions holding it quiet.
        self.followers = Followers()
        # Being added to the ISR by a store write in flight (KIP-497): counted by the HW already.
        self._joining_isr: frozenset[int] = frozenset()
        # Called when a follower's fetch qualifies it to join the ISR (the upkeep writes it).
        self.on_isr_change_due: Callable[[], None] | None = None
        # Replicas a reassignment adds, whose fetches draw on a throttle (throttle.py).
        self._throttled: ThrottledReplicas | None = None
        self.fenced = False
        self._leader_epoch_start_offset = UNKNOWN_OFFSET
        # Within the log always: a checkpointed HW may be ahead of a log that lost its tail after
        # a crash, or behind a log start that retention moved after the checkpoint.
        self.high_watermark = max(min(high_watermark, log.log_end_offset), log.log_start_offset)
        self._commit_queue = CommitQueue()
        self._watches = ReadWatches()
        self._local = ReplicaLog(log, disk_space, local_broker_id, appended=self._after_local_append)
        self.producer_state = self._local.producer_state
        self._append_turns = AppendTurns()
        if leader_id is None or leader_id == local_broker_id:
            self.become_leader(leader_epoch, assigned_replicas, isr, now_ms)
        else:
            self.assigned_replicas = self._checked_assignment(assigned_replicas)
            self.become_follower(leader_id, leader_epoch, now_ms)

    @property
    def topic_id(self) -> str | None:
        """The id of the topic the log belongs to (KIP-516), None if untagged."""
        return self.log.topic_id

    # -- state transitions ---------------------------------------------------------------------

    def become_leader(self, leader_epoch: int, assigned_replicas: Collection[int], isr: Collection[int],
                      now_ms: int) -> None:
        """Lead at `leader_epoch` (becomeLeader): from start-up, or again at a newer
        epoch with a new assignment, or as the new leader after following. Followers' positions are
        forgotten until they fetch again; a former follower's log is taken as it is (its tail
        beyond the old leader's HW becomes committed once the ISR has it, as in Kafka)."""
        # A follower taking over needs a newer epoch than the one it followed: two leaders must
        # never share an epoch, or fencing could not tell them apart.
        newer_required = self.state is ReplicaState.FOLLOWER
        if leader_epoch < self.leader_epoch or newer_required and leader_epoch == self.leader_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is not newer than the current {self.leader_epoch}")
        assigned_replicas = self._checked_assignment(assigned_replicas)
        self.followers.stir(wake=True)
        self._transition(ReplicaState.LEADER)
        self.fenced = False
        self.assigned_replicas = assigned_replicas
        self.leader_epoch = leader_epoch
        self.leader_id = self.local_broker_id
        self._leader_epoch_start_offset = self.log_end_offset
        if leader_epoch > self.log.leader_epoch_cache.latest_epoch:
            # As Kafka's makeLeader: the epoch starts at the LEO even before its first append, so
            # that a follower asking for this epoch's end offset (KIP-101) gets an answer.
            self.log.leader_epoch_cache.begin_at_log_end(leader_epoch, self.log_end_offset)
        self.followers = Followers((broker, FollowerReplica(broker, now_ms))
                                    for broker in assigned_replicas if broker != self.local_broker_id)
        self._joining_isr = frozenset()
        self._log(logging.INFO, "became leader", assigned_replicas=list(assigned_replicas), hw=self.high_watermark,
                  leo=self.log_end_offset)
        self.update_isr(isr)

    def become_follower(self, leader_id: int, leader_epoch: int, now_ms: int) -> None:
        """Follow `leader_id` at `leader_epoch` (becomeFollower).

        Acks=-1 appends still waiting fail with NOT_LEADER_OR_FOLLOWER: they are in our log, but
        whether they survive is the new leader's decision (our tail may be truncated), so the
        producer must not count them as written. Long polls wake to be refused.

        The log is NOT truncated here, unlike the classic design's truncation to the HW (docs/design.md §6.2): only once
        the leader has said where our logs diverge (`truncate_for_new_leader`, KIP-101)."""
        if leader_id == self.local_broker_id:
            raise ValueError(f"broker {leader_id} cannot follow itself; use become_leader")
        # Following the same epoch we led would let two brokers claim one epoch; re-following at
        # the same epoch (the same leader announced again) is harmless.
        newer_required = self.state is ReplicaState.LEADER
        same_leader = self.state is ReplicaState.FOLLOWER and leader_id == self.leader_id
        same_epoch = leader_epoch == self.leader_epoch
        if leader_epoch < self.leader_epoch or same_epoch and (newer_required or not same_leader):
            raise ValueError(f"leader epoch {leader_epoch} of leader {leader_id} is not newer than the current "
                             f"{self.leader_epoch} of leader {self.leader_id}")
        self._transition(ReplicaState.FOLLOWER)
        self.fenced = False
        self._commit_queue.fail_all()
        self._wake_all_watches()
        self.followers = Followers()
        self._joining_isr = frozenset()
        self.isr = frozenset()  # the leader's business now; a follower never consults it
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self._log(logging.DEBUG, "became follower", leader=leader_id, hw=self.high_watermark, leo=self.log_end_offset)

    def reassign(self, assigned_replicas: Collection[int], now_ms: int) -> None:
        """The assignment changed while this replica leads (a partition reassignment,
        replication/reassignment.py, already written to the store): a replica added is
        followed from its first fetch and joins the ISR once caught up; one removed must
        already be out of the ISR."""
        self._require(ReplicaState.LEADER)
        assigned_replicas = self._checked_assignment(assigned_replicas)
        if not self.isr <= set(assigned_replicas):
            raise ValueError(f"ISR {sorted(self.isr)} must lie within assigned replicas {list(assigned_replicas)}")
        self.followers.stir(wake=False)
        self.followers = Followers((broker, self.followers.get(broker) or FollowerReplica(broker, now_ms))
                                    for broker in assigned_replicas if broker != self.local_broker_id)
        self._log(logging.DEBUG, "changed assigned replicas", assigned_replicas=list(assigned_replicas),
                  previous=list(self.assigned_replicas))
        self.assigned_replicas = assigned_replicas

    def _checked_assignment(self, assigned_replicas: Collection[int]) -> tuple[int, ...]:
        assigned_replicas = tuple(assigned_replicas)
        if self.local_broker_id not in assigned_replicas or len(set(assigned_replicas)) != len(assigned_replicas):
            raise ValueError(f"broker {self.local_broker_id} must be in assigned replicas {assigned_replicas} once")
        return assigned_replicas

    def fence(self) -> None:
        """The session that holds our leader node is suspended or lost: stop taking writes and
        advancing the HW at once, since another broker may be elected any moment now."""
        self._require(ReplicaState.LEADER)
        if not self.fenced:
            self.fenced = True
            self._log(logging.DEBUG, "fenced leader", hw=self.high_watermark, leo=self.log_end_offset)

    def lift_fence(self) -> None:
        """The session came back and our leader node still names us at this epoch, so nobody else
        can have led meanwhile: take writes again, and let the HW catch up with the followers."""
        self._require(ReplicaState.LEADER)
        if self.fenced:
            self.fenced = False
            self._log(logging.DEBUG, "lifted leader fence", hw=self.high_watermark, leo=self.log_end_offset)
            self._maybe_advance_high_watermark()

    def update_isr(self, isr: Collection[int]) -> None:
        """Take a new ISR (already written to the store by the caller, once replication exists).

        It must be a subset of AR holding the leader. A shrink may let the HW advance, and
        completes waiting acks=-1 appends it passes with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR
        is now below min.insync.replicas."""
        self._require(ReplicaState.LEADER)
        isr = frozenset(isr)
        if self.local_broker_id not in isr or not isr <= set(self.assigned_replicas):
            raise ValueError(f"ISR {sorted(isr)} must hold the leader {self.local_broker_id} and lie within "
                             f"assigned replicas {list(self.assigned_replicas)}")
        self._joining_isr = frozenset()
        if isr != self.isr:
            self._log(logging.DEBUG, "changed ISR", isr=sorted(isr), previous_isr=sorted(self.isr))
            self.isr = isr
            self.followers.stir(wake=False)
        self._maybe_advance_high_watermark()

    def update_config(self, config: PartitionConfig) -> None:
        """Take the topic's new settings while running (IncrementalAlterConfigs): the next
        acks=-1 append and commit are judged by the new min.insync.replicas."""
        self.config = config

    def close(self) -> None:
        """Stop serving (closeReplica): stop_serving, then close_files."""
        self.stop_serving()
        self.close_files()

    def stop_serving(self) -> None:
        """Closing, on the event loop: answer waiting acks=-1 appends with NOT_LEADER_OR_FOLLOWER
        and wake every long poll. close_files follows, in any thread."""
        self._transition(ReplicaState.CLOSED)
        self._commit_queue.fail_all()
        self._wake_all_watches()

    def close_files(self) -> None:
        """Write the producer snapshot and close the log cleanly, from any thread, once stopped
        serving and nothing reads the log any more."""
        self._require(ReplicaState.CLOSED)
        self._local.close()
        self._log(logging.DEBUG, "closed replica", hw=self.high_watermark, leo=self.log_end_offset)

    def stop_for_deletion(self) -> None:
        """Deleting the replica (it moved away or its topic was deleted), on the event loop:
        stop serving and answer what waits; `remove_files` follows, in a worker thread."""
        self.stop_serving()

    def remove_files(self) -> None:
        """Remove the log and its directory, from any thread, once stopped for deletion."""
        self._require(ReplicaState.CLOSED)
        self._local.delete()
        self._log(logging.INFO, "deleted replica")

    def _log(self, level: int, event: str, **fields: object) -> None:
        """One line per state change, naming topic, partition, broker and epoch, then `fields`."""
        if logger.isEnabledFor(level):
            logger.log(level, "%s topic=%s partition=%d broker=%d epoch=%d%s", event, self.topic, self.partition_id,
                       self.local_broker_id, self.leader_epoch,
                       "".join(f" {name}={value}" for name, value in fields.items()))

    def _transition(self, state: ReplicaState) -> None:
        if state not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"{self.topic}-{self.partition_id} cannot go from {self.state.value} to {state.value}")
        self.state = state

    def _require(self, state: ReplicaState) -> None:
        if self.state is not state:
            raise RuntimeError(f"{self.topic}-{self.partition_id} is {self.state.value}, not {state.value}")

    # -- views ---------------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def catch_up_replicas(self) -> frozenset[int]:
        return frozenset(self.assigned_replicas) - self.isr

    def follower_log_end_offset(self, replica_id: int) -> int:
        return self.followers[replica_id].log_end_offset

    def follower_lags(self, now_ms: int) -> Iterator[tuple[int, int, int]]:
        """Per follower: (broker, records behind this leader's log end as of its last fetch, ms
        since it was last caught up); one that has not fetched yet is behind by the whole log."""
        return self.followers.lags(self.log_end_offset, self.log_start_offset, now_ms)

    def out_of_sync_replicas(self, now_ms: int, replica_lag_time_max_ms: int) -> frozenset[int]:
        """ISR followers not caught up with the leader's LEO within `replica_lag_time_max_ms`
        (replica.lag.time.max.ms): what the ISR maintenance of replication will shrink away."""
        return frozenset(
            broker for broker in self.isr  # bounded by the replication factor
            if broker != self.local_broker_id
            and (now_ms - self.followers[broker].credited().last_caught_up_ms > replica_lag_time_max_ms
                 or self.followers[broker].lost_committed_records(self.high_watermark))
        )

    def followers_ready_to_join(self, now_ms: int, replica_lag_time_max_ms: int) -> frozenset[int]:
        """Followers outside the ISR that may join it: Kafka's isFollowerInSync, on a fetch.

        - It fetched from this leadership, naming its epoch, within `replica_lag_time_max_ms`: a
          replica rejoins only by fetching, never on what it held when it was last heard of (a
          dead follower put back into the ISR would hold acks=all back, and be electable).
        - Its log reaches the HW: it holds everything acknowledged.
        - Its log reaches the start offset of this leader's epoch (KAFKA-7128): a new leader's HW
          may lag what the previous leader committed, and a follower admitted against that stale
          HW could win an election without records that were acknowledged.
        """
        return frozenset(
            follower.broker_id for follower in self.followers.values()  # bounded by the replication factor
            if self._ready_to_join(follower) and now_ms - follower.last_fetch_ms <= replica_lag_time_max_ms
        )

    def follows_this_leadership(self, replica_id: int, now_ms: int, within_ms: int) -> bool:
        """`replica_id` fetched from this leadership, naming its epoch, within `within_ms`."""
        follower = self.followers.get(replica_id)
        return (follower is not None and follower.fetched_at_leader_epoch
                and now_ms - follower.credited().last_fetch_ms <= within_ms)

    def _ready_to_join(self, follower: FollowerReplica) -> bool:
        return (
            follower.broker_id not in self.isr and follower.fetched_at_leader_epoch
            and follower.log_end_offset >= max(self.high_watermark, self._leader_epoch_start_offset)
        )

    def forget_fetches(self, brokers: Iterable[int]) -> None:
        """These followers' brokers went (their registrations did): what they fetched before
        does not qualify them to join the ISR again, only a fetch of the broker's next life
        does (it may come back without the records it had, unclean_reboot.py)."""
        self.followers.forget_fetches(brokers)

    def isr_joining(self, replicas: Collection[int]) -> None:
        """An ISR write adding `replicas` is in flight (KIP-497): from now until `update_isr`
        the HW counts them, so that nothing they lack is acknowledged while the store may
        already name them in sync (and so electable). A write whose outcome is unknown leaves
        them counted: only a later write that succeeds tells what the store holds."""
        self._require(ReplicaState.LEADER)
        self._joining_isr = self._joining_isr | frozenset(replicas)

    @property
    def joining_isr(self) -> frozenset[int]:
        return self._joining_isr

    def check_leader_epoch(self, current_leader_epoch: int) -> ErrorCode:
        """Fencing: a request that expects another leader epoch than ours is refused."""
        if current_leader_epoch == NO_LEADER_EPOCH or current_leader_epoch == self.leader_epoch:
            return ErrorCode.none
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.fenced_leader_epoch
        return ErrorCode.unknown_leader_epoch

    # -- produce -------------------------------------------------------------------------------

    async def append_as_leader(self, batches: bytearray, acks: int, timeout_ms: int,
                               appended: Callable[[], None] | None = None, *, internal: bool = False,
                               verification_guard: object | None = None) -> AppendResult:
        """Append a producer's batch (docs/design.md §5.2) and answer per `acks`:
        0 and 1 after the local append, -1 once the HW passes the last offset appended (or the
        original offsets of a duplicate), REQUEST_TIMED_OUT after `timeout_ms`. `appended` is
        called when an acks=-1 append starts waiting for the ISR (the broker times that wait).
        `internal`: the broker's own (the group coordinator's), refused for lack of space only
        where followers are (disk_space.py).

        An uncompressed batch is validated and appended at once, on the event loop, unless an
        earlier append's turn is still running; a compressed one is checked (and re-encoded if
        the topic's compression.type says so) in compressed_checks' threads first, then appends
        in its turn (append_order.py). KAFKA_STORAGE_ERROR when the data directory is low on
        space or the write failed (replica_log.py). `verification_guard`: the one this
        producer's transaction was verified with (`verification_guard`), for a batch
        `needs_verification` named; INVALID_TXN_STATE if it is no longer the producer's."""
        error = self._refusal_before_append(acks, internal)
        if error is not ErrorCode.none:
            return self._append_error(error)
        if checked_first(batches, self.log.append_rules) or self._append_turns.busy:
            local = await self._append_in_turn(batches, acks, internal, verification_guard)
        else:
            local = self._append_locally(batches, None, internal, verification_guard)
        if isinstance(local, AppendResult):
            return local
        first_offset, last_offset, record_count, log_append_time_ms = local
        if acks != -1:
            return AppendResult(ErrorCode.none, first_offset, log_append_time_ms, self.log_start_offset, record_count)
        if appended is not None:
            appended()
        error = await self._wait_for_commit(last_offset, timeout_ms)
        if error is not ErrorCode.none:
            return AppendResult(error, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset, record_count)
        return AppendResult(error, first_offset, log_append_time_ms, self.log_start_offset, record_count)

    def _append_locally(self, batches: bytearray, records_max_timestamp: int | None, internal: bool,
                        verification_guard: object | None) -> LocalAppend | AppendResult:
        """The batch appended to the local log (ReplicaLog.append_as_leader); an AppendResult if refused."""
        try:
            local = self._local.append_as_leader(batches, self.leader_epoch, records_max_timestamp, internal,
                                                 verification_guard)
        except KafkaStorageError as failure:
            return self._append_error(failure.error_code)
        except ReplicaError as failure:
            return self._refused(failure)
        return local

    async def _append_in_turn(self, batches: bytearray, acks: int, internal: bool,
                              verification_guard: object | None) -> LocalAppend | AppendResult:
        """_append_locally in its turn (append_order.py), a batch that records.checked_first
        names checked (and converted) in another thread meanwhile."""
        with self._append_turns.take() as turn:
            records_max_timestamp = None
            if checked_first(batches, self.log.append_rules):
                try:
                    batches, records_max_timestamp = await compressed_checks.check(batches, self.log.append_rules,
                                                                                   self.log.now_ms())
                except ReplicaError as failure:
                    return self._refused(failure)
            await turn.come()
            error = self._refusal_before_append(acks, internal)  # leadership may have moved meanwhile
            if error is not ErrorCode.none:
                return self._append_error(error)
            return self._append_locally(batches, records_max_timestamp, internal, verification_guard)

    def _refused(self, failure: ReplicaError) -> AppendResult:
        logger.debug("refused append topic=%s partition=%d error=%d reason=%s",
                     self.topic, self.partition_id, failure.error_code, failure)
        error_message, record_errors = failure.produce_answer(f"{self.topic}-{self.partition_id}")
        return AppendResult(failure.error_code, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset, 0, error_message,
                            record_errors)

    def _refusal_before_append(self, acks: int, internal: bool) -> ErrorCode:
        if self.state is not ReplicaState.LEADER or self.fenced:
            return ErrorCode.not_leader_or_follower
        if acks not in (-1, 0, 1):
            return ErrorCode.invalid_required_acks
        if self._local.disk_space.refuses_appends if internal else self._local.disk_space.refuses_produce:
            return ErrorCode.kafka_storage_error
        if acks != -1:
            return ErrorCode.none
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas
        if self._commit_queue.full():
            self._log(logging.WARNING, "commit queue full", hw=self.high_watermark, leo=self.log_end_offset)
            return ErrorCode.request_timed_out
        return ErrorCode.none

    # -- transactions --------------------------------------------------------------------------

    async def write_txn_marker(self, marker: Marker, timeout_ms: int) -> ErrorCode:
        """Write the coordinator's `marker` (WriteTxnMarkers) as leader and answer once the HW
        passed it, as an acks=-1 append: NOT_LEADER_OR_FOLLOWER on a follower,
        INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED if the producer state refuses
        it (ProducerStateManager.check_marker). It is written even with no transaction of the
        producer open here, as Kafka does. Its turn comes after appends still being checked."""
        error = self._refusal_before_append(-1, internal=True)
        if error is not ErrorCode.none:
            return error
        if self._append_turns.busy:
            with self._append_turns.take() as turn:
                await turn.come()
                error = self._refusal_before_append(-1, internal=True)  # leadership may have moved meanwhile
                if error is not ErrorCode.none:
                    return error
                local = self._append_marker(marker)
        else:
            local = self._append_marker(marker)
        if isinstance(local, ErrorCode):
            return local
        return await self._wait_for_commit(local.last_offset, timeout_ms)

    def _append_marker(self, marker: Marker) -> LocalAppend | ErrorCode:
        try:
            local = self._local.append_marker(marker, self.leader_epoch)
        except ReplicaError as failure:
            logger.debug("refused transaction marker topic=%s partition=%d producer=%d error=%d reason=%s",
                         self.topic, self.partition_id, marker.producer_id, failure.error_code, failure)
            return ErrorCode(failure.error_code)
        self._log(logging.DEBUG, "wrote transaction marker", producer=marker.producer_id,
                  producer_epoch=marker.producer_epoch, committed=marker.committed,
                  coordinator_epoch=marker.coordinator_epoch, offset=local.last_offset)
        return local

    @property
    def last_stable_offset(self) -> int:
        """min(first offset of the oldest transaction open or not yet replicated, HW)."""
        first_unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        if first_unstable is None or first_unstable > self.high_watermark:
            return self.high_watermark
        return max(first_unstable, self.log_start_offset)

    @property
    def open_transaction_count(self) -> int:
        return self.producer_state.open_transaction_count

    def producer_states(self) -> list[ProducerStateView]:
        """The producers this replica knows (DescribeProducers), by producer id."""
        return [_producer_view(producer_id, entry)
                for producer_id, entry in sorted(self.producer_state.producers.items())]  # bounded by the producers

    def needs_verification(self, batches) -> tuple[int, int] | None:
        """(producer id, epoch) of a producer's transactional batch that would open its
        transaction here, which its coordinator must confirm first (KIP-890); else None."""
        return self.producer_state.needs_verification(batches)

    def verification_guard(self, producer_id: int) -> object:
        """The guard to take before asking the coordinator, and to append with after."""
        return self.producer_state.verification_guard(producer_id)

    def _append_error(self, error_code: int) -> AppendResult:
        return AppendResult(error_code, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset)

    def _after_local_append(self) -> None:
        self.followers.stir(wake=True)
        self._watches.wake_followers(self.log_end_offset)
        self._maybe_advance_high_watermark()

    async def _wait_for_commit(self, last_offset: int, timeout_ms: int) -> ErrorCode:
        if self.high_watermark > last_offset:
            return self._commit_outcome()
        return await self._commit_queue.wait(last_offset, timeout_ms)

    def _commit_outcome(self) -> ErrorCode:
        # Kafka's DelayedProduce: committed, but with fewer in-sync copies than the producer
        # asked for, so the producer must not count it as acknowledged by min.insync replicas.
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.not_enough_replicas_after_append
        return ErrorCode.none

    # -- the high watermark --------------------------------------------------------------------

    def _maybe_advance_high_watermark(self) -> None:
        """HW = min LEO over the ISR and the replicas joining it, never lower than before;
        completes what it passes."""
        if self.fenced:
            return
        new_high_watermark = self.log_end_offset
        for broker in self.isr | self._joining_isr:  # bounded by the replication factor
            if broker != self.local_broker_id:
                new_high_watermark = min(new_high_watermark, self.followers[broker].log_end_offset)
        if new_high_watermark <= self.high_watermark:
            return
        logger.debug("advanced high watermark topic=%s partition=%d epoch=%d hw=%d previous_hw=%d",
                     self.topic, self.partition_id, self.leader_epoch, new_high_watermark, self.high_watermark)
        self.high_watermark = new_high_watermark
        self.producer_state.on_high_watermark(new_high_watermark)
        self.followers.stir(wake=False)
        self._commit_queue.commit(new_high_watermark, self._commit_outcome())
        self._watches.wake_consumers(new_high_watermark)

    # -- fetch ---------------------------------------------------------------------------------

    def read_for_consumer(self, fetch_offset: int, max_bytes: int,
                          current_leader_epoch: int = NO_LEADER_EPOCH, *, min_one_message: bool = True,
                          isolation_level: int = 0) -> FetchResult:
        """Committed data only: batches below the HW from the one holding `fetch_offset` on;
        `min_one_message`: as Log.read. READ_COMMITTED (`isolation_level` 1) reads below the
        LSO instead and answers the aborted transactions overlapping what it read (Kafka's
        rule: those whose markers lie at or after the fetch offset and whose first offset lies
        before the end of the segments read), for the consumer to drop.

        As Kafka, an offset between the HW and the LEO answers empty, not OFFSET_OUT_OF_RANGE: a
        new leader's HW may briefly lag what consumers already read from the old one, and an
        out-of-range answer would make them reset their position."""
        error = self._refusal_before_read(fetch_offset, current_leader_epoch)
        if error is not ErrorCode.none:
            return self._fetch_error(error)
        if isolation_level != READ_COMMITTED:
            if fetch_offset >= self.high_watermark:
                return self._fetch_result([], self.last_stable_offset)
            return self._fetch_result(self.log.read(fetch_offset, max_bytes, max_offset=self.high_watermark,
                                                    min_one_message=min_one_message), self.last_stable_offset)
        last_stable_offset = self.last_stable_offset
        if fetch_offset >= last_stable_offset:
            return self._fetch_result([], last_stable_offset, ())
        slices = self.log.read(fetch_offset, max_bytes, max_offset=last_stable_offset, min_one_message=min_one_message)
        upper_bound = min(last_stable_offset, self.log.end_of_segments_from(fetch_offset, len(slices)))
        aborted = tuple(AbortedTransaction(txn.producer_id, txn.first_offset)
                        for txn in self.log.collect_aborted_transactions(fetch_offset, upper_bound))
        return self._fetch_result(slices, last_stable_offset, aborted)

    def read_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, now_ms: int,
                          current_leader_epoch: int = NO_LEADER_EPOCH, life: FetchFrom = FetchFrom.REGISTERED,
                          *, record: bool = True, min_one_message: bool = True) -> FetchResult:
        """Everything up to the LEO, for follower `replica_id`, whose LEO `fetch_offset` is taken
        to be (docs/design.md §6.1). A fetch from an earlier life of the follower's broker
        is answered but says nothing of the follower: the log it speaks for may be gone.
        `min_one_message`: as Log.read.

        `record=False`: a fetch read again after its long poll, recorded at its first read
        already. As Kafka's DelayedFetch: meanwhile the follower's replica may have been closed
        and opened anew (removed from the assignment, then added back), and the new one holds
        nothing of what the fetch claims."""
        error = self._refusal_before_read(fetch_offset, current_leader_epoch)
        if error is ErrorCode.none and record and life is FetchFrom.REGISTERED:
            error = self.record_follower_fetch(replica_id, fetch_offset, now_ms, current_leader_epoch)
        if error is not ErrorCode.none:
            return self._fetch_error(error)
        if fetch_offset == self.log.log_end_offset:
            # Caught up: what most partitions of a fetch round are, and the log has nothing to look up.
            return self._fetch_result([], self.high_watermark)
        if self._throttled is None:
            return self._fetch_result(self.log.read(fetch_offset, max_bytes, min_one_message=min_one_message),
                                      self.high_watermark)
        return self._fetch_result(self._throttled.read(self.log, replica_id, self.isr, fetch_offset, max_bytes, now_ms,
                                                       min_one_message), self.high_watermark)

    def throttles(self, replica_id: int, now_ms: int) -> bool:
        """Whether the throttle holds a fetch of `replica_id` back now: a long poll should not
        wake for this partition's data, which it could not send."""
        throttled = self._throttled
        return throttled is not None and throttled.allowance_bytes(replica_id, self.isr, now_ms) == 0

    def throttle(self, replicas: Collection[int], throttle: ReplicationThrottle, rate_bytes_per_s: int | None) -> None:
        """Fetches of `replicas` (a move's added replicas) draw on `throttle` at the lower of
        the move's `rate_bytes_per_s` and the broker's configured rate, read at each fetch so
        that a rate set or removed applies at once; none are throttled with no replicas."""
        self._throttled = ThrottledReplicas(frozenset(replicas), throttle, rate_bytes_per_s) if replicas else None

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              current_leader_epoch: int = NO_LEADER_EPOCH) -> ErrorCode:
        """Note that follower `replica_id`, as its broker's registered life, has the log up to
        `fetch_offset`; may advance the HW."""
        follower = self.followers.get(replica_id)
        if follower is None:
            # As Kafka: a fetch that names our epoch comes from a replica we do not know yet
            # (a reassignment in progress), so it may retry; without an epoch it must refresh.
            known_epoch = current_leader_epoch != NO_LEADER_EPOCH
            return ErrorCode.unknown_leader_epoch if known_epoch else ErrorCode.not_leader_or_follower
        if not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            return ErrorCode.offset_out_of_range
        if follower.quiet is not None:  # fetched outside the session holding it (a new connection)
            follower.release(stirred=True)
        follower.record_fetch(fetch_offset, self.log_end_offset, now_ms)
        follower.fetched_at_leader_epoch = current_leader_epoch == self.leader_epoch
        self._maybe_advance_high_watermark()
        # One wake per join: while the write adding it is unsettled, the upkeep retries by itself.
        joins = follower.broker_id not in self._joining_isr and self._ready_to_join(follower)
        if self.on_isr_change_due is not None and (joins or (follower.broker_id in self.isr and follower.lost_committed_records(self.high_watermark))):
            self.on_isr_change_due()
        return ErrorCode.none

    def quiet_snapshot(self, replica_id: int) -> QuietSnapshot | None:
        """What in-sync follower `replica_id`, fetching from this leadership, has and could learn
        now; None for any other replica. A fetch session compares it with the fetch it just
        answered to tell whether it may hold the partition quiet (net/fetch_sessions.py)."""
        follower = self.followers.get(replica_id)
        if (self.state is not ReplicaState.LEADER or replica_id not in self.isr or follower is None
                or not follower.fetched_at_leader_epoch):
            return None
        told = (self.high_watermark, self.high_watermark, self.log.log_start_offset)
        return QuietSnapshot(self.leader_epoch, follower.log_end_offset, self.log.log_end_offset, told)

    def _refusal(self, current_leader_epoch: int) -> ErrorCode:
        if self.state is not ReplicaState.LEADER:
            return ErrorCode.not_leader_or_follower
        return self.check_leader_epoch(current_leader_epoch)

    def _refusal_before_read(self, fetch_offset: int, current_leader_epoch: int) -> ErrorCode:
        error = self._refusal(current_leader_epoch)
        if error is not ErrorCode.none:
            return error
        if not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            return ErrorCode.offset_out_of_range
        return ErrorCode.none

    def _fetch_result(self, slices: list[FileSlice], last_stable_offset: int,
                      aborted_transactions: tuple[AbortedTransaction, ...] | None = None) -> FetchResult:
        """A read's answer. A follower's carries the HW as its LSO: followers take no LSO from
        their leader (they track transactions from the batches), and their fetches are the
        hot path."""
        return FetchResult(ErrorCode.none, self.high_watermark, self.log_start_offset, last_stable_offset, slices,
                           aborted_transactions)

    def _fetch_error(self, error: ErrorCode) -> FetchResult:
        return FetchResult(error, self.high_watermark, self.log_start_offset, self.high_watermark, [])

    # -- following -----------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch in our log (epoch cache): what a follower asks the leader about."""
        return self.log.leader_epoch_cache.latest_epoch

    def truncate_for_new_leader(self, leader_epoch_end: EpochEndOffset) -> TruncationResult:
        """One round of KIP-101 truncation, given the leader's answer to OffsetForLeaderEpoch for
        our `latest_epoch` (divergence.py says where, and why not at our HW); `complete` False:
        ask again, with `next_epoch`."""
        self._require(ReplicaState.FOLLOWER)
        if leader_epoch_end.error_code != ErrorCode.none:
            raise ValueError(f"cannot truncate on a failed OffsetForLeaderEpoch answer {leader_epoch_end}")
        previous_epoch = self.latest_epoch
        previous_end = self.log_end_offset
        offset, complete, reason = divergence(self.log.leader_epoch_cache, leader_epoch_end, previous_end,
                                              self.high_watermark)
        self._local.truncate_to(offset)
        previous_high_watermark = self.high_watermark
        self.high_watermark = max(min(self.high_watermark, self.log_end_offset), self.log_start_offset)
        self._log(logging.INFO, "truncated for leader", leader=self.leader_id, offset=self.log_end_offset,
                  previous_leo=previous_end, hw=self.high_watermark, previous_hw=previous_high_watermark, reason=reason)
        if not complete and self.latest_epoch >= previous_epoch:
            complete = True  # no progress possible: asking again would get the same answer
        return TruncationResult(self.log_end_offset, complete, self.latest_epoch)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and continue at `offset`: our end fell below the leader's log start
        (retention removed what we miss), so nothing we hold can be continued."""
        self._require(ReplicaState.FOLLOWER)
        self._local.truncate_fully_and_start_at(offset)
        # Everything below `offset` is gone on the leader too, so it is at most committed data.
        self.high_watermark = offset
        self._log(logging.INFO, "restarted log at leader log start", leader=self.leader_id, offset=offset)

    def append_as_follower(self, batches: bytes | bytearray, leader_high_watermark: int,
                           leader_log_start_offset: int) -> None:
        """Append what the leader sent (possibly nothing), keeping its offsets and epochs, and
        take its HW (capped by our LEO: we cannot have committed what we lack) and log start.

        The HW never moves backwards here: a leader's HW only grows, and a reply from a new
        leader whose HW lags ours must not make consumers of this replica (after it leads) lose
        data they could read."""
        self._require(ReplicaState.FOLLOWER)
        if batches:
            self._local.append_as_follower(batches)
        new_high_watermark = min(leader_high_watermark, self.log_end_offset)
        if new_high_watermark > self.high_watermark:
            self.high_watermark = new_high_watermark
            self.producer_state.on_high_watermark(new_high_watermark)
        if leader_log_start_offset > self.log_start_offset:
            # Retention on the leader moved its log start: drop what it no longer has, within
            # what we know committed (a segment must not hold data past our HW to go).
            self._local.delete_segments_below(min(leader_log_start_offset, self.high_watermark))

    def refuse_appends_if_low(self) -> None:
        """KafkaStorageError while the data directory is too low on space for replicated records."""
        self._local.refuse_appends_if_low()

    # -- long polls ----------------------------------------------------------------------------

    def add_watch(self, waiter: ReadWaiter, fetch_offset: int, for_follower: bool) -> None:
        """Called by ReadWaiter.watch, which guarantees the matching remove_watch."""
        readable_end = self.log_end_offset if for_follower else self.high_watermark
        self._watches.add(waiter, fetch_offset, for_follower, readable_end, self.state is ReplicaState.LEADER)

    def remove_watch(self, waiter: ReadWaiter) -> None:
        self._watches.remove(waiter)

    async def wait_for_readable(self, fetch_offset: int, timeout_s: float, for_follower: bool = False) -> bool:
        """Whether data from `fetch_offset` on became readable within `timeout_s` (one partition)."""
        with ReadWaiter() as waiter:
            waiter.watch(self, fetch_offset, for_follower)
            return await waiter.wait(timeout_s)

    def _wake_all_watches(self) -> None:
        self.followers.stir(wake=True)
        self._watches.wake_all()

    # -- offsets -------------------------------------------------------------------------------

    def list_offsets(self, timestamp: int, current_leader_epoch: int = NO_LEADER_EPOCH, *,
                     any_replica: bool = False, isolation_level: int = 0) -> ListOffsetsResult:
        """ListOffsets for consumers: earliest (-2, and earliest local, -4) is the log start, latest
        (-1) the HW, max (-3) the first record below the HW with the log's largest timestamp,
        otherwise the first record below the HW whose timestamp is >= `timestamp`. READ_COMMITTED
        (`isolation_level` 1) puts the LSO in the HW's place, as Kafka's fetchOffsetForTimestamp.

        KIP-207: a new leader learns the committed offset from its followers, so its HW may start
        below the one the previous leader reported. Until it reaches the start offset of our epoch
        (everything the old leader can have committed is below it), an answer that depends on the
        HW is OFFSET_NOT_AVAILABLE rather than an offset lower than clients were already told.

        `any_replica`: Kafka's debugging replica id (-2), which followers answer too, from their
        own log, with the log end in place of the HW: how far a replica has come."""
        error = self.check_leader_epoch(current_leader_epoch) if any_replica else self._refusal(current_leader_epoch)
        if error is not ErrorCode.none:
            return ListOffsetsResult(error, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
        end_offset = self.log_end_offset if any_replica else self.high_watermark
        if isolation_level == READ_COMMITTED and not any_replica:
            end_offset = self.last_stable_offset
        end_offset_lags = not any_replica and self.high_watermark < self._leader_epoch_start_offset
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            offset, found_timestamp = self.log_start_offset, NO_TIMESTAMP
        elif end_offset_lags and timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResult(ErrorCode.offset_not_available, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
        elif timestamp == LATEST_TIMESTAMP:
            offset, found_timestamp = end_offset, NO_TIMESTAMP
        else:
            if timestamp == MAX_TIMESTAMP:
                timestamp = self.log.max_timestamp
            found = self.log.record_for_timestamp(timestamp) if timestamp != NO_TIMESTAMP else None
            if found is None or found[0] >= end_offset:
                error = ErrorCode.offset_not_available if end_offset_lags else ErrorCode.none
                return ListOffsetsResult(error, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
            offset, found_timestamp = found
        return ListOffsetsResult(ErrorCode.none, found_timestamp, offset, self.log.leader_epoch_cache.epoch_at(offset))

    def end_offset_for_epoch(self, leader_epoch: int, current_leader_epoch: int = NO_LEADER_EPOCH) -> EpochEndOffset:
        """OffsetForLeaderEpoch (KIP-101): the largest epoch <= `leader_epoch` this log knows and
        the offset where it ended (the LEO for the latest epoch); -1, -1 if none."""
        error = self._refusal(current_leader_epoch)
        if error is not ErrorCode.none:
            return EpochEndOffset(error, UNDEFINED_EPOCH, UNKNOWN_OFFSET)
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)
        return EpochEndOffset(ErrorCode.none, epoch, end_offset)

    # -- housekeeping (called by the replica manager's periodic tasks) -------------------------

    def delete_retained_segments(self) -> int:
        """Apply retention below the HW (ReplicaLog.delete_retained_segments)."""
        deleted = self._local.delete_retained_segments(self.high_watermark)
        if deleted:
            self.followers.stir(wake=False)
        return deleted

    async def clean(self, map_max_bytes: int) -> Cleaned | None:
        """One cleaning pass below the HW and the first unstable offset (ReplicaLog.clean)."""
        return await self._local.clean(self.high_watermark, map_max_bytes)

    def remove_expired_producers(self, now_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, self.config.producer_id_expiration_ms)

    async def flush_in_background(self) -> bool:
        """The log made durable up to its end, off the event loop (ReplicaLog.flush_in_background)."""
        return await self._local.flush_in_background(lambda: self.state is ReplicaState.CLOSED)


def _producer_view(producer_id: int, entry: ProducerEntry) -> ProducerStateView:
    txn_start_offset = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
    return ProducerStateView(producer_id, entry.epoch, entry.last_sequence, entry.last_timestamp_ms,
                             entry.coordinator_epoch, txn_start_offset)
