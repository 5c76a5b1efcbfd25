"""One partition replica hosted on this broker: the seed's Partition and Replica.

Every rule about the in-sync replica set (ISR) and the high watermark (HW) lives here, as in
Kafka's Partition.scala; the replica manager only routes requests to partitions.

State kept (the seed's "Key data structures"):
    assigned_replicas (AR)  broker ids, first = preferred leader
    isr (ISR)               in-sync replicas, always holding the leader; changed by `update_isr`
    catch_up_replicas (CUR) AR - ISR
    leader_epoch            fences requests from older leaders and their clients
    log_end_offset (LEO)    of the local log; followers' LEOs are what they last fetched from
    high_watermark (HW)     min LEO over the ISR; never moves backwards on the leader; consumers
                            never see data at or above it

States (explicit, `_TRANSITIONS`): a replica starts as LEADER or FOLLOWER; LEADER -> LEADER (a
newer epoch), LEADER -> FOLLOWER (the seed's becomeFollower), FOLLOWER -> FOLLOWER (another
leader or epoch), FOLLOWER -> LEADER (becomeLeader), either -> CLOSED. Anything else raises.

A LEADER is `fenced` while its broker's coordination session is suspended or lost: it may no
longer be the leader without knowing it, so it takes no writes and its HW stands still (acks=-1
appends wait); it keeps serving its followers and committed reads, which cannot harm anyone.
`lift_fence` ends that once the broker has seen its leader node survive; any transition does too.

A follower serves no client: produce, consumer fetch, ListOffsets and OffsetForLeaderEpoch all
answer NOT_LEADER_OR_FOLLOWER. Its log is written only by `append_as_follower` (the leader's
batches verbatim, fetcher.py) and cut only by `truncate_for_new_leader` (KIP-101) or
`truncate_fully_and_start_at` (it fell below the leader's log start).

The commit queue is the seed's commitQ: one entry (last offset, future) per acks=-1 append
waiting for the HW to pass its last offset, in offset order because appends are. Every HW
advance resolves the entries it passed, with NOT_ENOUGH_REPLICAS_AFTER_APPEND instead of success
if the ISR had meanwhile shrunk below min.insync.replicas (Kafka's DelayedProduce rule). The seed's
commit thread is thus not a loop but the HW advance itself; issue 5's ISR maintenance (shrinking
lagging followers after replica.lag.time.max.ms, expanding caught-up ones through the store's
compare-and-set) calls `update_isr`.

Writes the data directory cannot take are answered KAFKA_STORAGE_ERROR (56), partition by
partition, and leave the partition as it was: a leader refuses produce while free space is below
log.dir.min.free.bytes, and followers and the group coordinator append until it is below half
(storage/disk_space.py); a write that fails anyway is taken back by the log and reported in one
line, the same for every partition.

Long polls: a ReadWaiter is registered with any number of partitions and woken by the first
whose readable end passes its fetch offset (HW for consumers, LEO for followers). A follower's
fetch session holds the partitions it is caught up with quiet (QuietHold): they are not visited
each round, so every change such a follower could learn of (log end, HW, log start, ISR,
assignment, leadership) ends the holds first (`_stir_quiet`).

Concurrency: owned by one event loop; methods never block on anything but the local disk.
"""

import asyncio
import bisect
import collections
import dataclasses
import enum
import logging
import threading
from collections.abc import Callable, Collection, Iterable, Iterator
from typing import NamedTuple, Protocol

from replog.replica.throttle import ReplicationThrottle
from replog.storage.checkpoint import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
from replog.storage.cleaner import Cleaned
from replog.storage.disk_space import NOT_WATCHED, DiskSpace, report_write_failure
from replog.storage.errors import KafkaStorageError, ReplicaError
from replog.storage.log import FlushJob, Log
from replog.replica.producer_state import PendingSnapshot, ProducerCheck, ProducerStateManager
from replog.storage import compressed_checks
from replog.storage.batch_format import (
    HEADER_SIZE_BYTES,
    LOG_APPEND_TIME_BIT,
    decompress,
    parse_header,
    producer_fields,
    records_of,
)
from replog.storage.records import checked_first
from replog.storage.segment import FileSlice

logger = logging.getLogger(__name__)

NO_LEADER_EPOCH = -1  # a request that does not say which leader epoch it expects
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3  # ListOffsets v7+ (KIP-734): the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4  # v8+ (KIP-405): the local log's start; without tiered storage, the log start
UNKNOWN_OFFSET = -1
NO_TIMESTAMP = -1
# An acks=-1 request holds a slot until committed or timed out. Requests in flight are bounded
# by connections x in-flight requests each, so this is only reached when the HW is stuck; then
# refusing (before appending, so that a retry duplicates nothing) beats growing without end.
COMMIT_QUEUE_CAPACITY = 10_000
# Long-polling fetches waiting on one partition; beyond this a fetch is answered at once.
WATCHES_PER_PARTITION_MAX = 10_000


class ErrorCode(enum.IntEnum):
    """Kafka error codes a partition answers with, besides those of its log (errors.py)."""

    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    KAFKA_STORAGE_ERROR = 56
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    OFFSET_NOT_AVAILABLE = 78


class FetchFrom(enum.Enum):
    """Which life of a follower's broker a fetch comes from, as its leader can tell
    (net/leader_connections.fetch_from). A fetch sent by an earlier life may reach the leader
    after the broker restarted (a paused leader's socket, a fetch it had parked), and if that
    life's machine lost unflushed writes, the records it claims are gone (KIP-903)."""

    REGISTERED = "registered"  # the life registered now
    EARLIER = "earlier"  # a life registered before it
    # A life not seen registered: a restarted broker fetches before it registers, or a client
    # posing as it. Read as a consumer reads (up to the HW), and nothing of it recorded.
    UNSEEN = "unseen"


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


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """Topic settings the partition enforces (the log's are LogConfig), Kafka's names and defaults.

    min.insync.replicas; producer.id.expiration.ms.
    """

    min_insync_replicas: int = 1
    producer_id_expiration_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}")
        if self.producer_id_expiration_ms < 1:
            raise ValueError(f"producer.id.expiration.ms must be >= 1, got {self.producer_id_expiration_ms}")


class AppendResult(NamedTuple):
    error_code: int
    base_offset: int
    log_append_time_ms: int  # the time the batch took on a LogAppendTime topic; -1 otherwise
    log_start_offset: int
    # Records this append added to the log (0 for a refusal or a duplicate), whatever acks=-1's
    # outcome: the offsets it assigned, which are the batch headers' record counts.
    record_count: int = 0
    # Why a batch was refused, and the records it is about (Produce's error_message and
    # record_errors as (batch_index, message), as Kafka's LogValidator gives them).
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


class _LocalAppend(NamedTuple):
    """What a leader's local append did: the offsets of its batch (or of the original, for a
    duplicate), the records it added and its log append time (-1 on a CreateTime topic)."""

    first_offset: int
    last_offset: int
    record_count: int
    log_append_time_ms: int


class FetchResult(NamedTuple):
    error_code: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int  # = HW: without transactions nothing is unstable below it
    slices: list[FileSlice]  # zero-copy views of the log files, valid until the next truncation


class ListOffsetsResult(NamedTuple):
    error_code: int
    timestamp: int
    offset: int
    leader_epoch: int


class EpochEndOffset(NamedTuple):
    error_code: int
    leader_epoch: int
    end_offset: int


class TruncationResult(NamedTuple):
    """One round of the KIP-101 handshake: where the log now ends (cuts are whole batches), and
    whether the follower must ask the leader again (with `next_epoch`, its latest epoch now)."""

    truncated_to: int
    complete: bool
    next_epoch: int


class ReadWaiter:
    """One long-polling fetch: registered with its partitions, woken by the first with data.

    Use as a context manager so that it leaves every partition it watched, whatever happens.
    """

    def __init__(self) -> None:
        self._woken = asyncio.Event()
        self._watched: list[Partition] = []

    def watch(self, partition: "Partition", fetch_offset: int, for_follower: bool = False) -> None:
        """Be woken once `partition` has data from `fetch_offset` on (for a consumer: below the HW;
        for a follower: below the LEO), at once if it already has or is closed."""
        self._watched.append(partition)
        partition.add_watch(self, fetch_offset, for_follower)

    def wake(self) -> None:
        self._woken.set()

    async def wait(self, timeout_s: float) -> bool:
        """Whether some watched partition became readable (or closed) within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._woken.wait()
        except TimeoutError:
            return False
        return True

    def __enter__(self) -> "ReadWaiter":
        return self

    def __exit__(self, *exc_info) -> None:
        for partition in self._watched:  # bounded by the partitions of one fetch
            partition.remove_watch(self)
        self._watched.clear()


class QuietHold(Protocol):
    """A follower's fetch session that holds a partition quiet (net/fetch_sessions.py): the
    partition is caught up for that follower with nothing new to tell it, so the session neither
    reads it nor asks about it, and each of its requests counts as the follower's fetch at the
    log end, at `fetched_ms`. The partition ends the hold (`stirred`) when anything the follower
    could learn changes; `wake`: the change gave it something to read, which a parked request of
    the session should answer at once, as it would for a partition it reads."""

    @property
    def fetched_ms(self) -> int: ...

    def stirred(self, wake: bool) -> None: ...


class _Follower:
    """What the leader knows of a remote replica: its LEO as of its last fetch, and when it was
    last caught up with the leader's LEO (Kafka's lastCaughtUpTimeMs, the seed's KeepInSyncTime).
    While a fetch session holds the partition quiet for it (`quiet`), its fetches are recorded
    when read (`Partition._credited`), not at each request."""

    __slots__ = ("broker_id", "log_end_offset", "last_caught_up_ms", "last_fetch_ms", "leader_end_at_last_fetch",
                 "fetched_at_leader_epoch", "quiet")

    def __init__(self, broker_id: int, now_ms: int):
        self.broker_id = broker_id
        self.log_end_offset = UNKNOWN_OFFSET  # unknown until it fetches: holds the HW back
        # A new follower gets a full lag period before it counts as out of sync, as in Kafka.
        self.last_caught_up_ms = now_ms
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = UNKNOWN_OFFSET
        self.fetched_at_leader_epoch = False  # it has fetched from this leadership, naming its epoch
        self.quiet: QuietHold | None = None

    def record_fetch(self, fetch_offset: int, leader_end_offset: int, now_ms: int) -> None:
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.leader_end_at_last_fetch >= 0:
            # It has now what the leader had at its previous fetch: caught up as of then.
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_ms = now_ms
        self.leader_end_at_last_fetch = leader_end_offset


class _PendingCommit(NamedTuple):
    last_offset: int
    done: asyncio.Future


class Partition:
    """A partition replica hosted by this broker, leading or following. See the module docstring."""

    def __init__(self, log: Log, local_broker_id: int, leader_epoch: int, assigned_replicas: Collection[int],
                 isr: Collection[int], high_watermark: int, config: PartitionConfig, now_ms: int,
                 leader_id: int | None = None, *, disk_space: DiskSpace = NOT_WATCHED):
        """Start leading at `leader_epoch`, or following `leader_id` if another broker leads.
        `disk_space`: the data directory's, which says when appends are refused."""
        self.log = log
        self._disk_space = disk_space
        self.topic = log.topic
        self.partition_id = log.partition
        self.local_broker_id = local_broker_id
        self.config = config
        self.state = ReplicaState.NEW
        self.leader_epoch = NO_LEADER_EPOCH
        self.leader_id: int | None = None
        self.assigned_replicas: tuple[int, ...] = ()
        self.isr: frozenset[int] = frozenset()
        self._followers: dict[int, _Follower] = {}
        # Being added to the ISR by a store write in flight (KIP-497): counted by the HW already.
        self._joining_isr: frozenset[int] = frozenset()
        # Called when a follower's fetch qualifies it to join the ISR (the upkeep writes it).
        self.on_isr_change_due: Callable[[], None] | None = None
        # Replicas a reassignment adds, whose fetches draw on a throttle (throttle.py).
        self._throttled: tuple[frozenset[int], ReplicationThrottle, int | None] | None = None
        self.fenced = False
        self._leader_epoch_start_offset = UNKNOWN_OFFSET
        # Within the log always: a checkpointed HW may be ahead of a log that lost its tail after
        # a crash, or behind a log start that retention moved after the checkpoint.
        self.high_watermark = max(min(high_watermark, log.log_end_offset), log.log_start_offset)
        self._commit_queue: collections.deque[_PendingCommit] = collections.deque()
        self._consumer_watches: dict[ReadWaiter, int] = {}
        self._follower_watches: dict[ReadWaiter, int] = {}
        self.producer_state = ProducerStateManager(log.directory, self.topic, self.partition_id)
        # Held by a background flush's thread while it writes into the log directory, and by
        # delete around removing it, so that neither leaves the other a half-gone directory.
        self._directory_lock = threading.Lock()
        self._page_cache_eviction: asyncio.Future | None = None  # at most one per log at a time
        # Appends keep their arrival order: one whose batch is checked in another thread first
        # (compressed) takes a turn, done once it appended or gave up; the appends that arrive
        # while a turn is not done take turns after it (append_as_leader).
        self._last_append_turn: asyncio.Future | None = None
        self.producer_state.load(log)
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
        """Lead at `leader_epoch` (the seed's becomeLeader): from start-up, or again at a newer
        epoch with a new assignment, or as the new leader after following. Followers' positions are
        forgotten until they fetch again; a former follower's log is taken as it is (its tail
        beyond the old leader's HW becomes committed once the ISR has it, as in Kafka)."""
        # A follower taking over needs a newer epoch than the one it followed: two leaders must
        # never share an epoch, or fencing could not tell them apart.
        newer_required = self.state is ReplicaState.FOLLOWER
        if leader_epoch < self.leader_epoch or newer_required and leader_epoch == self.leader_epoch:
            raise ValueError(f"leader epoch {leader_epoch} is not newer than the current {self.leader_epoch}")
        assigned_replicas = self._checked_assignment(assigned_replicas)
        self._stir_quiet(wake=True)
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
        self._followers = {broker: _Follower(broker, now_ms)
                           for broker in assigned_replicas if broker != self.local_broker_id}
        self._joining_isr = frozenset()
        logger.info("became leader topic=%s partition=%d broker=%d epoch=%d assigned_replicas=%s hw=%d leo=%d",
                    self.topic, self.partition_id, self.local_broker_id, leader_epoch, list(assigned_replicas),
                    self.high_watermark, self.log_end_offset)
        self.update_isr(isr)

    def become_follower(self, leader_id: int, leader_epoch: int, now_ms: int) -> None:
        """Follow `leader_id` at `leader_epoch` (the seed's becomeFollower).

        Acks=-1 appends still waiting fail with NOT_LEADER_OR_FOLLOWER: they are in our log, but
        whether they survive is the new leader's decision (our tail may be truncated), so the
        producer must not count them as written. Long polls wake to be refused.

        The log is NOT truncated here, unlike the seed's "truncate the log to r.hw": only once
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
        self._fail_pending_commits()
        self._wake_all_watches()
        self._followers = {}
        self._joining_isr = frozenset()
        self.isr = frozenset()  # the leader's business now; a follower never consults it
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        logger.debug("became follower topic=%s partition=%d broker=%d epoch=%d leader=%d hw=%d leo=%d",
                    self.topic, self.partition_id, self.local_broker_id, leader_epoch, leader_id,
                    self.high_watermark, self.log_end_offset)

    def reassign(self, assigned_replicas: Collection[int], now_ms: int) -> None:
        """The assignment changed while this replica leads (a partition reassignment,
        replication/reassignment.py, already written to the store): a replica added is
        followed from its first fetch and joins the ISR once caught up; one removed must
        already be out of the ISR."""
        self._require(ReplicaState.LEADER)
        assigned_replicas = self._checked_assignment(assigned_replicas)
        if not self.isr <= set(assigned_replicas):
            raise ValueError(f"ISR {sorted(self.isr)} must lie within assigned replicas {list(assigned_replicas)}")
        self._stir_quiet(wake=False)
        self._followers = {broker: self._followers.get(broker) or _Follower(broker, now_ms)
                           for broker in assigned_replicas if broker != self.local_broker_id}
        logger.debug("changed assigned replicas topic=%s partition=%d broker=%d epoch=%d assigned_replicas=%s previous=%s",
                    self.topic, self.partition_id, self.local_broker_id, self.leader_epoch, list(assigned_replicas),
                    list(self.assigned_replicas))
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
            logger.debug("fenced leader topic=%s partition=%d broker=%d epoch=%d hw=%d leo=%d",
                         self.topic, self.partition_id, self.local_broker_id, self.leader_epoch,
                         self.high_watermark, self.log_end_offset)

    def lift_fence(self) -> None:
        """The session came back and our leader node still names us at this epoch, so nobody else
        can have led meanwhile: take writes again, and let the HW catch up with the followers."""
        self._require(ReplicaState.LEADER)
        if self.fenced:
            self.fenced = False
            logger.debug("lifted leader fence topic=%s partition=%d broker=%d epoch=%d hw=%d leo=%d",
                         self.topic, self.partition_id, self.local_broker_id, self.leader_epoch,
                         self.high_watermark, self.log_end_offset)
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
            logger.debug("changed ISR topic=%s partition=%d broker=%d epoch=%d isr=%s previous_isr=%s",
                        self.topic, self.partition_id, self.local_broker_id, self.leader_epoch, sorted(isr),
                        sorted(self.isr))
            self.isr = isr
            self._stir_quiet(wake=False)
        self._maybe_advance_high_watermark()

    def update_config(self, config: PartitionConfig) -> None:
        """Take the topic's new settings while running (IncrementalAlterConfigs): the next
        acks=-1 append and commit are judged by the new min.insync.replicas."""
        self.config = config

    def close(self) -> None:
        """Stop serving (the seed's closeReplica): stop_serving, then close_files."""
        self.stop_serving()
        self.close_files()

    def stop_serving(self) -> None:
        """Closing, on the event loop: answer waiting acks=-1 appends with NOT_LEADER_OR_FOLLOWER
        and wake every long poll. close_files follows, in any thread."""
        self._transition(ReplicaState.CLOSED)
        self._fail_pending_commits()
        self._wake_all_watches()

    def close_files(self) -> None:
        """Write the producer snapshot and close the log cleanly, from any thread, once stopped
        serving and nothing reads the log any more."""
        self._require(ReplicaState.CLOSED)
        with self._directory_lock:  # a background flush's fsyncs may still run in a worker thread
            self.producer_state.take_snapshot(self.log.log_end_offset)
            self.log.close()
        logger.debug("closed replica topic=%s partition=%d broker=%d epoch=%d hw=%d leo=%d",
                    self.topic, self.partition_id, self.local_broker_id, self.leader_epoch,
                    self.high_watermark, self.log_end_offset)

    def stop_for_deletion(self) -> None:
        """Deleting the replica (it moved away or its topic was deleted), on the event loop:
        stop serving and answer what waits; `remove_files` follows, in a worker thread."""
        self._transition(ReplicaState.CLOSED)
        self._fail_pending_commits()
        self._wake_all_watches()

    def remove_files(self) -> None:
        """Remove the log and its directory, from any thread, once stopped for deletion."""
        self._require(ReplicaState.CLOSED)
        with self._directory_lock:
            self.log.delete()
        logger.info("deleted replica topic=%s partition=%d broker=%d epoch=%d",
                    self.topic, self.partition_id, self.local_broker_id, self.leader_epoch)

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
        return self._followers[replica_id].log_end_offset

    def follower_lags(self, now_ms: int) -> Iterator[tuple[int, int, int]]:
        """Per follower: (broker, records behind this leader's log end as of its last fetch, ms
        since it was last caught up); one that has not fetched yet is behind by the whole log."""
        end = self.log_end_offset
        for follower in map(self._credited, self._followers.values()):  # bounded by the replication factor
            behind = end - max(follower.log_end_offset, self.log_start_offset)
            yield follower.broker_id, max(behind, 0), max(now_ms - follower.last_caught_up_ms, 0)

    def out_of_sync_replicas(self, now_ms: int, replica_lag_time_max_ms: int) -> frozenset[int]:
        """ISR followers not caught up with the leader's LEO within `replica_lag_time_max_ms`
        (replica.lag.time.max.ms): what the ISR maintenance of replication will shrink away."""
        return frozenset(
            broker for broker in self.isr  # bounded by the replication factor
            if broker != self.local_broker_id
            and (now_ms - self._credited(self._followers[broker]).last_caught_up_ms > replica_lag_time_max_ms
                 or self._lost_committed_records(self._followers[broker]))
        )

    def _lost_committed_records(self, follower: _Follower) -> bool:
        """It fetched at this epoch from below the HW: a replica in sync holds everything below
        it, so this one came back without records (a machine restart lost its unflushed writes,
        unclean_reboot.py). It has taken itself out of the store's ISR; this leader learns it
        here, and its shrink, finding the ISR changed, fences it so the partition elects again."""
        return follower.fetched_at_leader_epoch and 0 <= follower.log_end_offset < self.high_watermark

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
            follower.broker_id for follower in self._followers.values()  # bounded by the replication factor
            if self._ready_to_join(follower) and now_ms - follower.last_fetch_ms <= replica_lag_time_max_ms
        )

    def follows_this_leadership(self, replica_id: int, now_ms: int, within_ms: int) -> bool:
        """`replica_id` fetched from this leadership, naming its epoch, within `within_ms`."""
        follower = self._followers.get(replica_id)
        return (follower is not None and follower.fetched_at_leader_epoch
                and now_ms - self._credited(follower).last_fetch_ms <= within_ms)

    def _ready_to_join(self, follower: _Follower) -> bool:
        return (
            follower.broker_id not in self.isr and follower.fetched_at_leader_epoch
            and follower.log_end_offset >= max(self.high_watermark, self._leader_epoch_start_offset)
        )

    def forget_fetches(self, brokers: Iterable[int]) -> None:
        """These followers' brokers went (their registrations did): what they fetched before
        does not qualify them to join the ISR again, only a fetch of the broker's next life
        does (it may come back without the records it had, unclean_reboot.py)."""
        for broker in brokers:
            follower = self._followers.get(broker)
            if follower is not None:
                if follower.quiet is not None:
                    self._release(follower, stirred=True)
                follower.fetched_at_leader_epoch = False

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
            return ErrorCode.NONE
        if current_leader_epoch < self.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH
        return ErrorCode.UNKNOWN_LEADER_EPOCH

    # -- produce -------------------------------------------------------------------------------

    async def append_as_leader(self, batches: bytearray, acks: int, timeout_ms: int,
                               appended: Callable[[], None] | None = None, *, internal: bool = False) -> AppendResult:
        """Append a producer's batch (the seed's produceRequestHandler) and answer per `acks`:
        0 and 1 after the local append, -1 once the HW passes the last offset appended (or the
        original offsets of a duplicate), REQUEST_TIMED_OUT after `timeout_ms`. `appended` is
        called when an acks=-1 append starts waiting for the ISR (the broker times that wait).
        `internal`: the broker's own (the group coordinator's), refused for lack of space only
        where followers are (disk_space.py).

        An uncompressed batch is validated and appended at once, on the event loop, unless an
        earlier append's turn is still running; a compressed one's records are decompressed and
        checked, and a batch the topic's compression.type re-encodes is re-encoded, in
        compressed_checks' threads first, and it then appends in its turn, so that appends land
        in the order they arrived (an idempotent producer's sequences need it).

        KAFKA_STORAGE_ERROR when the data directory is low on space or the write failed (taken
        back, nothing appended); if only the flush after the write failed, the records stay in
        the log, counted by the producer state, so that an idempotent producer's retry is
        answered as the duplicate it is."""
        error = self._refusal_before_append(acks, internal)
        if error is not ErrorCode.NONE:
            return self._append_error(error)
        if checked_first(batches, self.log.append_rules) or not (self._last_append_turn is None
                                                                 or self._last_append_turn.done()):
            local = await self._append_in_turn(batches, acks, internal)
        else:
            local = self._append_locally(batches, None, internal)
        if isinstance(local, AppendResult):
            return local
        first_offset, last_offset, record_count, log_append_time_ms = local
        if acks != -1:
            return AppendResult(ErrorCode.NONE, first_offset, log_append_time_ms, self.log_start_offset, record_count)
        if appended is not None:
            appended()
        error = await self._wait_for_commit(last_offset, timeout_ms)
        if error is not ErrorCode.NONE:
            return AppendResult(error, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset, record_count)
        return AppendResult(error, first_offset, log_append_time_ms, self.log_start_offset, record_count)

    def _append_locally(self, batches: bytearray, records_max_timestamp: int | None,
                        internal: bool) -> _LocalAppend | AppendResult:
        """Validate and assign the batch, judge it by the producer state, write it; in that order,
        as Kafka's UnifiedLog.append. An AppendResult if refused."""
        try:
            run = self.log.assign_as_leader(batches, self.leader_epoch, records_max_timestamp)
            check = self.producer_state.check(batches)
            if check.duplicate is not None:
                self.log.settle_owed_flush()
                return _LocalAppend(check.duplicate.first_offset, check.duplicate.last_offset, 0, NO_TIMESTAMP)
            try:
                self.log.write_assigned(batches, run, self.leader_epoch)
            except KafkaStorageError as failure:
                if failure.appended is not None:  # written, then the flush after the bytes failed
                    self._after_appended(batches, check, failure.appended[0])
                raise
        except KafkaStorageError as failure:
            self._storage_failed(failure, "group coordinator records" if internal else "produce")
            return self._append_error(failure.error_code)
        except ReplicaError as failure:
            return self._refused(failure)
        first_offset = run.last_offset - run.record_count + 1
        self._after_appended(batches, check, first_offset)
        log_append_time_ms = run.max_timestamp if self.log.append_rules.log_append_time else NO_TIMESTAMP
        return _LocalAppend(first_offset, run.last_offset, run.record_count, log_append_time_ms)

    def _after_appended(self, batches: bytearray, check: ProducerCheck, first_offset: int) -> None:
        self._disk_space.wrote(len(batches))
        self.producer_state.record_append(check, first_offset)
        self._evict_page_cache_behind()
        self._after_local_append()

    async def _append_in_turn(self, batches: bytearray, acks: int, internal: bool) -> _LocalAppend | AppendResult:
        """_append_locally once every append that arrived before this one is done, a batch that
        records.checked_first names checked (and converted) in another thread meanwhile."""
        previous = self._last_append_turn
        turn = self._last_append_turn = asyncio.get_running_loop().create_future()
        try:
            records_max_timestamp = None
            if checked_first(batches, self.log.append_rules):
                try:
                    batches, records_max_timestamp = await compressed_checks.check(batches, self.log.append_rules,
                                                                                   self.log.now_ms())
                except ReplicaError as failure:
                    return self._refused(failure)
            if previous is not None and not previous.done():
                await asyncio.shield(previous)  # our requester giving up must not cancel another's turn
            error = self._refusal_before_append(acks, internal)  # leadership may have moved meanwhile
            if error is not ErrorCode.NONE:
                return self._append_error(error)
            return self._append_locally(batches, records_max_timestamp, internal)
        finally:
            self._end_turn(previous, turn)

    def _end_turn(self, previous: asyncio.Future | None, turn: asyncio.Future) -> None:
        """Let the appends after `turn` go: at once, or, if it gave up before its own turn came
        (its requester went away), once the one before it is done."""
        if previous is None or previous.done():
            turn.set_result(None)
        else:
            previous.add_done_callback(lambda _: turn.set_result(None))
        if self._last_append_turn is turn and turn.done():
            self._last_append_turn = None

    def _refused(self, failure: ReplicaError) -> AppendResult:
        logger.debug("refused append topic=%s partition=%d error=%d reason=%s",
                     self.topic, self.partition_id, failure.error_code, failure)
        error_message, record_errors = failure.produce_answer(f"{self.topic}-{self.partition_id}")
        return AppendResult(failure.error_code, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset, 0, error_message,
                            record_errors)

    def _refusal_before_append(self, acks: int, internal: bool) -> ErrorCode:
        if self.state is not ReplicaState.LEADER or self.fenced:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        if acks not in (-1, 0, 1):
            return ErrorCode.INVALID_REQUIRED_ACKS
        if self._disk_space.refuses_appends if internal else self._disk_space.refuses_produce:
            return ErrorCode.KAFKA_STORAGE_ERROR
        if acks != -1:
            return ErrorCode.NONE
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        self._drop_abandoned_commits()
        if len(self._commit_queue) >= COMMIT_QUEUE_CAPACITY:
            logger.warning("commit queue full topic=%s partition=%d broker=%d epoch=%d hw=%d leo=%d",
                           self.topic, self.partition_id, self.local_broker_id, self.leader_epoch,
                           self.high_watermark, self.log_end_offset)
            return ErrorCode.REQUEST_TIMED_OUT
        return ErrorCode.NONE

    def _append_error(self, error_code: int) -> AppendResult:
        return AppendResult(error_code, UNKNOWN_OFFSET, NO_TIMESTAMP, self.log_start_offset)

    def _after_local_append(self) -> None:
        self._stir_quiet(wake=True)
        for waiter in self._woken_watches(self._follower_watches, self.log_end_offset):
            waiter.wake()
        self._maybe_advance_high_watermark()

    async def _wait_for_commit(self, last_offset: int, timeout_ms: int) -> ErrorCode:
        if self.high_watermark > last_offset:
            return self._commit_outcome()
        done = asyncio.get_running_loop().create_future()
        self._commit_queue.append(_PendingCommit(last_offset, done))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await done
        except TimeoutError:
            return ErrorCode.REQUEST_TIMED_OUT

    def _commit_outcome(self) -> ErrorCode:
        # Kafka's DelayedProduce: committed, but with fewer in-sync copies than the producer
        # asked for, so the producer must not count it as acknowledged by min.insync replicas.
        if len(self.isr) < self.config.min_insync_replicas:
            return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return ErrorCode.NONE

    def _drop_abandoned_commits(self) -> None:
        """Remove entries whose requester stopped waiting (timed out, disconnected) from the front;
        the oldest time out first, so this is where they gather."""
        queue = self._commit_queue
        while queue and queue[0].done.done():  # bounded by COMMIT_QUEUE_CAPACITY
            queue.popleft()

    def _fail_pending_commits(self) -> None:
        while self._commit_queue:  # bounded by COMMIT_QUEUE_CAPACITY
            pending = self._commit_queue.popleft()
            if not pending.done.done():
                pending.done.set_result(ErrorCode.NOT_LEADER_OR_FOLLOWER)

    # -- the high watermark --------------------------------------------------------------------

    def _maybe_advance_high_watermark(self) -> None:
        """HW = min LEO over the ISR and the replicas joining it, never lower than before;
        completes what it passes."""
        if self.fenced:
            return
        new_high_watermark = self.log_end_offset
        for broker in self.isr | self._joining_isr:  # bounded by the replication factor
            if broker != self.local_broker_id:
                new_high_watermark = min(new_high_watermark, self._followers[broker].log_end_offset)
        if new_high_watermark <= self.high_watermark:
            return
        logger.debug("advanced high watermark topic=%s partition=%d epoch=%d hw=%d previous_hw=%d",
                     self.topic, self.partition_id, self.leader_epoch, new_high_watermark, self.high_watermark)
        self.high_watermark = new_high_watermark
        self._stir_quiet(wake=False)
        queue = self._commit_queue
        outcome = self._commit_outcome()
        while queue and queue[0].last_offset < new_high_watermark:  # bounded by COMMIT_QUEUE_CAPACITY
            pending = queue.popleft()
            if not pending.done.done():
                pending.done.set_result(outcome)
        for waiter in self._woken_watches(self._consumer_watches, new_high_watermark):
            waiter.wake()

    # -- fetch ---------------------------------------------------------------------------------

    def read_for_consumer(self, fetch_offset: int, max_bytes: int,
                          current_leader_epoch: int = NO_LEADER_EPOCH, *, min_one_message: bool = True) -> FetchResult:
        """Committed data only: batches below the HW from the one holding `fetch_offset` on;
        `min_one_message`: as Log.read.

        As Kafka, an offset between the HW and the LEO answers empty, not OFFSET_OUT_OF_RANGE: a
        new leader's HW may briefly lag what consumers already read from the old one, and an
        out-of-range answer would make them reset their position."""
        error = self._refusal_before_read(fetch_offset, current_leader_epoch)
        if error is not ErrorCode.NONE:
            return self._fetch_error(error)
        if fetch_offset >= self.high_watermark:
            return self._fetch_result([])
        return self._fetch_result(self.log.read(fetch_offset, max_bytes, max_offset=self.high_watermark,
                                                min_one_message=min_one_message))

    def read_for_follower(self, replica_id: int, fetch_offset: int, max_bytes: int, now_ms: int,
                          current_leader_epoch: int = NO_LEADER_EPOCH, life: FetchFrom = FetchFrom.REGISTERED,
                          *, record: bool = True, min_one_message: bool = True) -> FetchResult:
        """Everything up to the LEO, for follower `replica_id`, whose LEO `fetch_offset` is taken
        to be (the seed's replicaFetch). A fetch from an earlier life of the follower's broker
        is answered but says nothing of the follower: the log it speaks for may be gone.
        `min_one_message`: as Log.read.

        `record=False`: a fetch read again after its long poll, recorded at its first read
        already. As Kafka's DelayedFetch: meanwhile the follower's replica may have been closed
        and opened anew (removed from the assignment, then added back), and the new one holds
        nothing of what the fetch claims."""
        error = self._refusal_before_read(fetch_offset, current_leader_epoch)
        if error is ErrorCode.NONE and record and life is FetchFrom.REGISTERED:
            error = self.record_follower_fetch(replica_id, fetch_offset, now_ms, current_leader_epoch)
        if error is not ErrorCode.NONE:
            return self._fetch_error(error)
        if fetch_offset == self.log.log_end_offset:
            # Caught up: what most partitions of a fetch round are, and the log has nothing to look up.
            return self._fetch_result([])
        allowance_bytes = self._throttle_allowance_bytes(replica_id, now_ms)
        if allowance_bytes is None:
            return self._fetch_result(self.log.read(fetch_offset, max_bytes, min_one_message=min_one_message))
        if not allowance_bytes:
            return self._fetch_result([])
        result = self._fetch_result(self.log.read(fetch_offset, min(max_bytes, allowance_bytes),
                                                  min_one_message=min_one_message))
        self._throttled[1].spent(sum(piece.size_bytes for piece in result.slices))
        return result

    def throttles(self, replica_id: int, now_ms: int) -> bool:
        """Whether the throttle holds a fetch of `replica_id` back now: a long poll should not
        wake for this partition's data, which it could not send."""
        return self._throttle_allowance_bytes(replica_id, now_ms) == 0

    def _throttle_allowance_bytes(self, replica_id: int, now_ms: int) -> int | None:
        """What the throttle lets `replica_id` have now; None if it is not throttled. As Kafka:
        a throttled replica that joined the ISR is not throttled, or acks=all would wait on the
        throttle."""
        if self._throttled is None or replica_id not in self._throttled[0] or replica_id in self.isr:
            return None
        _, throttle, move_rate_bytes_per_s = self._throttled
        rate_bytes_per_s = throttle.rate_bytes_per_s(move_rate_bytes_per_s)
        return None if rate_bytes_per_s is None else throttle.allowance_bytes(rate_bytes_per_s, now_ms)

    def throttle(self, replicas: Collection[int], throttle: ReplicationThrottle, rate_bytes_per_s: int | None) -> None:
        """Fetches of `replicas` (a move's added replicas) draw on `throttle` at the lower of
        the move's `rate_bytes_per_s` and the broker's configured rate, read at each fetch so
        that a rate set or removed applies at once; none are throttled with no replicas."""
        self._throttled = (frozenset(replicas), throttle, rate_bytes_per_s) if replicas else None

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int,
                              current_leader_epoch: int = NO_LEADER_EPOCH) -> ErrorCode:
        """Note that follower `replica_id`, as its broker's registered life, has the log up to
        `fetch_offset`; may advance the HW."""
        follower = self._followers.get(replica_id)
        if follower is None:
            # As Kafka: a fetch that names our epoch comes from a replica we do not know yet
            # (a reassignment in progress), so it may retry; without an epoch it must refresh.
            known_epoch = current_leader_epoch != NO_LEADER_EPOCH
            return ErrorCode.UNKNOWN_LEADER_EPOCH if known_epoch else ErrorCode.NOT_LEADER_OR_FOLLOWER
        if not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        if follower.quiet is not None:  # fetched outside the session holding it (a new connection)
            self._release(follower, stirred=True)
        follower.record_fetch(fetch_offset, self.log_end_offset, now_ms)
        follower.fetched_at_leader_epoch = current_leader_epoch == self.leader_epoch
        self._maybe_advance_high_watermark()
        # One wake per join: while the write adding it is unsettled, the upkeep retries by itself.
        joins = follower.broker_id not in self._joining_isr and self._ready_to_join(follower)
        if self.on_isr_change_due is not None and (joins or (follower.broker_id in self.isr and self._lost_committed_records(follower))):
            self.on_isr_change_due()
        return ErrorCode.NONE

    def hold_quiet(self, replica_id: int, fetch_offset: int, current_leader_epoch: int, told: tuple[int, int, int],
                   hold: QuietHold) -> bool:
        """Whether in-sync follower `replica_id`, whose fetch at `fetch_offset` was just recorded,
        is caught up with nothing to learn but `told` (high watermark, last stable offset, log
        start) again; if so, `hold` holds the partition quiet for it from now on (QuietHold): a
        session's idle partitions (net/fetch_sessions.py) are then neither read nor asked about
        until something changes."""
        if (self.state is not ReplicaState.LEADER or current_leader_epoch != self.leader_epoch
                or fetch_offset != self.log.log_end_offset
                or told != (self.high_watermark, self.high_watermark, self.log.log_start_offset)
                or replica_id not in self.isr):
            return False
        follower = self._followers.get(replica_id)
        if follower is None or follower.log_end_offset != fetch_offset or not follower.fetched_at_leader_epoch:
            return False
        if follower.quiet is not None and follower.quiet is not hold:
            self._release(follower, stirred=True)  # another session's (an earlier connection's): it reads it again
        follower.quiet = hold
        return True

    def release_quiet(self, replica_id: int, hold: QuietHold) -> None:
        """`hold`'s session no longer holds the partition quiet (it closed, forgot the partition,
        or asks at another offset): its requests so far are recorded as the follower's fetches."""
        follower = self._followers.get(replica_id)
        if follower is not None and follower.quiet is hold:
            self._release(follower, stirred=False)

    def _stir_quiet(self, wake: bool) -> None:
        """Something a quiet follower could learn changed (the log end, the high watermark, the
        log start, the ISR, the assignment, the leadership): every hold ends, its fetches so far
        recorded as at the log end it was held at, and its session reads the partition again."""
        for follower in self._followers.values():  # bounded by the replication factor
            if follower.quiet is not None:
                self._release(follower, stirred=True, wake=wake)

    @staticmethod
    def _release(follower: _Follower, stirred: bool, wake: bool = False) -> None:
        hold = follower.quiet
        Partition._credited(follower)
        follower.quiet = None
        if stirred:
            hold.stirred(wake)

    @staticmethod
    def _credited(follower: _Follower) -> _Follower:
        """`follower`, with the requests of a session that holds the partition quiet for it
        recorded as its fetches: at the log end, which a hold outlives no append."""
        hold = follower.quiet
        if hold is not None and hold.fetched_ms > follower.last_fetch_ms:
            follower.record_fetch(follower.log_end_offset, follower.log_end_offset, hold.fetched_ms)
        return follower

    def _refusal(self, current_leader_epoch: int) -> ErrorCode:
        if self.state is not ReplicaState.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return self.check_leader_epoch(current_leader_epoch)

    def _refusal_before_read(self, fetch_offset: int, current_leader_epoch: int) -> ErrorCode:
        error = self._refusal(current_leader_epoch)
        if error is not ErrorCode.NONE:
            return error
        if not self.log_start_offset <= fetch_offset <= self.log_end_offset:
            return ErrorCode.OFFSET_OUT_OF_RANGE
        return ErrorCode.NONE

    def _fetch_result(self, slices: list[FileSlice]) -> FetchResult:
        return FetchResult(ErrorCode.NONE, self.high_watermark, self.log_start_offset, self.high_watermark, slices)

    def _fetch_error(self, error: ErrorCode) -> FetchResult:
        return FetchResult(error, self.high_watermark, self.log_start_offset, self.high_watermark, [])

    # -- following -----------------------------------------------------------------------------

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch in our log (epoch cache): what a follower asks the leader about."""
        return self.log.leader_epoch_cache.latest_epoch

    def truncate_for_new_leader(self, leader_epoch_end: EpochEndOffset) -> TruncationResult:
        """One round of KIP-101 truncation, given the leader's answer to OffsetForLeaderEpoch for
        our `latest_epoch`: the largest epoch <= ours the leader knows, and where it ended there.

        Why not the seed's "truncate the log to r.hw": a follower learns the HW one fetch after
        the leader advanced it, so its HW may lag what is committed. (1) Data loss: a follower
        that restarts and cuts to its HW drops messages the leader already acknowledged; if the
        leader then dies and this follower is elected, they are gone. (2) Divergence: after both
        crash, a replica that comes back first with a shorter log leads and writes new messages
        at offsets the other still holds with old data; the other cuts only to its (higher) HW,
        keeps its old messages at those offsets, and the replicas hold different data at one
        offset forever. Cutting where the leader's epoch ended instead removes exactly what the
        leader does not have, and nothing it has.

        If the leader's epoch is older than ours and we do not know it, our log may diverge even
        earlier: we cut to where our own largest epoch below it ended and the caller asks again
        (`complete` False) with `next_epoch`. Each such round drops at least our latest epoch, so
        the rounds are bounded by the epochs in our cache, as in Kafka's fetcher.
        """
        self._require(ReplicaState.FOLLOWER)
        if leader_epoch_end.error_code != ErrorCode.NONE:
            raise ValueError(f"cannot truncate on a failed OffsetForLeaderEpoch answer {leader_epoch_end}")
        previous_epoch = self.latest_epoch
        epoch, own_end = UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if leader_epoch_end.leader_epoch != UNDEFINED_EPOCH and leader_epoch_end.end_offset != UNDEFINED_EPOCH_OFFSET:
            epoch, own_end = self.log.leader_epoch_cache.end_offset_for(leader_epoch_end.leader_epoch,
                                                                        self.log_end_offset)
        if epoch == UNDEFINED_EPOCH:
            # The leader knows no epoch <= ours, or we none at or below its answer: nothing tells
            # us where we diverge, so fall back to Kafka's pre-KIP-101 rule, cutting to our HW,
            # with the data loss and divergence problems described above.
            offset, complete, reason = self.high_watermark, True, "no common leader epoch: high watermark"
        elif epoch == leader_epoch_end.leader_epoch:
            offset, complete, reason = min(own_end, leader_epoch_end.end_offset), True, "leader epoch end"
        else:
            offset, complete, reason = own_end, False, "leader epoch unknown here: end of our older epoch"
        offset = min(offset, self.log_end_offset)
        try:
            self._after_follower_truncation(offset, reason)
        except OSError as error:
            raise self._storage_failed(error, "truncation") from error
        if not complete and self.latest_epoch >= previous_epoch:
            complete = True  # no progress possible: asking again would get the same answer
        return TruncationResult(self.log_end_offset, complete, self.latest_epoch)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and continue at `offset`: our end fell below the leader's log start
        (retention removed what we miss), so nothing we hold can be continued."""
        self._require(ReplicaState.FOLLOWER)
        try:
            self.log.truncate_fully_and_start_at(offset)
        except OSError as error:
            raise self._storage_failed(error, "truncation") from error
        # Everything below `offset` is gone on the leader too, so it is at most committed data.
        self.high_watermark = offset
        self.producer_state.load(self.log)
        logger.info("restarted log at leader log start topic=%s partition=%d broker=%d epoch=%d leader=%d offset=%d",
                    self.topic, self.partition_id, self.local_broker_id, self.leader_epoch, self.leader_id, offset)

    def _after_follower_truncation(self, offset: int, reason: str) -> None:
        previous_end = self.log_end_offset
        if offset < previous_end:
            self.log.truncate_to(offset)  # also forgets the epochs starting at or after it
            self.producer_state.load(self.log)
        # Also when nothing is cut (as later Kafka's Log.truncateTo does): a replica that led without
        # appending holds an epoch starting at its LEO, which the leader may not know; kept, it
        # would be asked about again and again instead of the older epoch below it.
        self.log.leader_epoch_cache.truncate_from_end(offset)
        previous_high_watermark = self.high_watermark
        self.high_watermark = max(min(self.high_watermark, self.log_end_offset), self.log_start_offset)
        logger.info("truncated for leader topic=%s partition=%d broker=%d epoch=%d leader=%d offset=%d "
                    "previous_leo=%d hw=%d previous_hw=%d reason=%s",
                    self.topic, self.partition_id, self.local_broker_id, self.leader_epoch, self.leader_id,
                    self.log_end_offset, previous_end, self.high_watermark, previous_high_watermark, reason)

    def append_as_follower(self, batches: bytes | bytearray, leader_high_watermark: int,
                           leader_log_start_offset: int) -> None:
        """Append what the leader sent (possibly nothing), keeping its offsets and epochs, and
        take its HW (capped by our LEO: we cannot have committed what we lack) and log start.

        The HW never moves backwards here: a leader's HW only grows, and a reply from a new
        leader whose HW lags ours must not make consumers of this replica (after it leads) lose
        data they could read."""
        self._require(ReplicaState.FOLLOWER)
        if batches:
            self.refuse_appends_if_low()
            try:
                self.log.append_as_follower(batches)
            except KafkaStorageError as failure:
                # Whole runs of the fetch may be in the log: the producer state takes those.
                self.producer_state.record_replicated(batches, end_offset=self.log_end_offset)
                raise self._storage_failed(failure, "follower append")
            self._disk_space.wrote(len(batches))
            self.producer_state.record_replicated(batches)
            self._evict_page_cache_behind()
        new_high_watermark = min(leader_high_watermark, self.log_end_offset)
        if new_high_watermark > self.high_watermark:
            self.high_watermark = new_high_watermark
        if leader_log_start_offset > self.log_start_offset:
            # Retention on the leader moved its log start: drop what it no longer has, within
            # what we know committed (a segment must not hold data past our HW to go).
            try:
                deleted = self.log.delete_segments_below(min(leader_log_start_offset, self.high_watermark))
            except OSError as error:
                raise self._storage_failed(error, "follower retention") from error
            if deleted:
                self.producer_state.truncate_head(self.log_start_offset)

    def refuse_appends_if_low(self) -> None:
        """KafkaStorageError while the data directory is too low on space for replicated records
        (disk_space.py; its state change was logged): a fetcher checks before fetching what it
        could not append."""
        if self._disk_space.refuses_appends:
            raise KafkaStorageError(f"free space of {self.log.directory.parent} is below half of "
                                    "log.dir.min.free.bytes", "below log.dir.min.free.bytes")

    def _storage_failed(self, failure: OSError | KafkaStorageError, writing: str) -> KafkaStorageError:
        """The failed write reported (one line whatever the partition), as the error to raise."""
        report_write_failure(self.log.directory.parent, writing, failure, f"{self.topic}-{self.partition_id}")
        return failure if isinstance(failure, KafkaStorageError) else KafkaStorageError.of(failure, self.log.directory)

    def _evict_page_cache_behind(self) -> None:
        """Drop the log's pages far behind its end in another thread, when due
        (segment.PAGE_CACHE_TAIL_BYTES says why)."""
        if self._page_cache_eviction is not None and not self._page_cache_eviction.done():
            return
        eviction = self.log.take_page_cache_eviction()
        if eviction is not None:
            self._page_cache_eviction = asyncio.get_running_loop().run_in_executor(None, eviction.run)
            self._page_cache_eviction.add_done_callback(self._page_cache_evicted)

    def _page_cache_evicted(self, eviction: asyncio.Future) -> None:
        if not eviction.cancelled() and eviction.exception() is not None:
            logger.warning("page cache eviction failed topic=%s partition=%d broker=%d error=%r",
                           self.topic, self.partition_id, self.local_broker_id, eviction.exception())

    # -- long polls ----------------------------------------------------------------------------

    def add_watch(self, waiter: ReadWaiter, fetch_offset: int, for_follower: bool) -> None:
        """Called by ReadWaiter.watch, which guarantees the matching remove_watch."""
        readable_end = self.log_end_offset if for_follower else self.high_watermark
        watches = self._follower_watches if for_follower else self._consumer_watches
        closed = self.state is not ReplicaState.LEADER
        if closed or fetch_offset < readable_end or len(watches) >= WATCHES_PER_PARTITION_MAX:
            waiter.wake()
        else:
            watches[waiter] = fetch_offset

    def remove_watch(self, waiter: ReadWaiter) -> None:
        self._consumer_watches.pop(waiter, None)
        self._follower_watches.pop(waiter, None)

    async def wait_for_readable(self, fetch_offset: int, timeout_s: float, for_follower: bool = False) -> bool:
        """Whether data from `fetch_offset` on became readable within `timeout_s` (one partition)."""
        with ReadWaiter() as waiter:
            waiter.watch(self, fetch_offset, for_follower)
            return await waiter.wait(timeout_s)

    @staticmethod
    def _woken_watches(watches: dict[ReadWaiter, int], readable_end: int) -> list[ReadWaiter]:
        woken = [waiter for waiter, fetch_offset in watches.items() if fetch_offset < readable_end]
        for waiter in woken:  # bounded by WATCHES_PER_PARTITION_MAX
            del watches[waiter]
        return woken

    def _wake_all_watches(self) -> None:
        self._stir_quiet(wake=True)
        for waiter in [*self._consumer_watches, *self._follower_watches]:  # bounded by 2 x WATCHES_PER_PARTITION_MAX
            waiter.wake()
        self._consumer_watches.clear()
        self._follower_watches.clear()

    # -- offsets -------------------------------------------------------------------------------

    def list_offsets(self, timestamp: int, current_leader_epoch: int = NO_LEADER_EPOCH, *,
                     any_replica: bool = False) -> ListOffsetsResult:
        """ListOffsets for consumers: earliest (-2, and earliest local, -4) is the log start, latest
        (-1) the HW, max (-3) the first record below the HW with the log's largest timestamp,
        otherwise the first record below the HW whose timestamp is >= `timestamp`.

        KIP-207: a new leader learns the committed offset from its followers, so its HW may start
        below the one the previous leader reported. Until it reaches the start offset of our epoch
        (everything the old leader can have committed is below it), an answer that depends on the
        HW is OFFSET_NOT_AVAILABLE rather than an offset lower than clients were already told.

        `any_replica`: Kafka's debugging replica id (-2), which followers answer too, from their
        own log, with the log end in place of the HW: how far a replica has come."""
        error = self.check_leader_epoch(current_leader_epoch) if any_replica else self._refusal(current_leader_epoch)
        if error is not ErrorCode.NONE:
            return ListOffsetsResult(error, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
        end_offset = self.log_end_offset if any_replica else self.high_watermark
        end_offset_lags = not any_replica and self.high_watermark < self._leader_epoch_start_offset
        if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            offset, found_timestamp = self.log_start_offset, NO_TIMESTAMP
        elif end_offset_lags and timestamp == LATEST_TIMESTAMP:
            return ListOffsetsResult(ErrorCode.OFFSET_NOT_AVAILABLE, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
        elif timestamp == LATEST_TIMESTAMP:
            offset, found_timestamp = end_offset, NO_TIMESTAMP
        else:
            if timestamp == MAX_TIMESTAMP:
                timestamp = self.log.max_timestamp
            found = self.log.offset_for_timestamp(timestamp) if timestamp != NO_TIMESTAMP else None
            if found is not None:
                found = _first_record_at_or_after(self.log.read(found[0], 1), timestamp) or found
            if found is None or found[0] >= end_offset:
                error = ErrorCode.OFFSET_NOT_AVAILABLE if end_offset_lags else ErrorCode.NONE
                return ListOffsetsResult(error, NO_TIMESTAMP, UNKNOWN_OFFSET, UNDEFINED_EPOCH)
            offset, found_timestamp = found
        return ListOffsetsResult(ErrorCode.NONE, found_timestamp, offset, self._epoch_at(offset))

    def _epoch_at(self, offset: int) -> int:
        """The leader epoch in force at `offset` (latest epoch for the log end), per the epoch cache."""
        entries = self.log.leader_epoch_cache.entries
        holding = bisect.bisect_right([entry.start_offset for entry in entries], offset) - 1
        return entries[holding].epoch if holding >= 0 else UNDEFINED_EPOCH

    def end_offset_for_epoch(self, leader_epoch: int, current_leader_epoch: int = NO_LEADER_EPOCH) -> EpochEndOffset:
        """OffsetForLeaderEpoch (KIP-101): the largest epoch <= `leader_epoch` this log knows and
        the offset where it ended (the LEO for the latest epoch); -1, -1 if none."""
        error = self._refusal(current_leader_epoch)
        if error is not ErrorCode.NONE:
            return EpochEndOffset(error, UNDEFINED_EPOCH, UNKNOWN_OFFSET)
        epoch, end_offset = self.log.leader_epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)
        return EpochEndOffset(ErrorCode.NONE, epoch, end_offset)

    # -- housekeeping (called by the replica manager's periodic tasks) -------------------------

    def delete_retained_segments(self) -> int:
        """Apply retention below the HW and forget producers whose batches it removed."""
        deleted = self.log.delete_retained_segments(high_watermark=self.high_watermark)
        if deleted:
            self.producer_state.truncate_head(self.log_start_offset)
            self._stir_quiet(wake=False)
        return deleted

    async def clean(self, map_max_bytes: int) -> Cleaned | None:
        """One cleaning pass of a compacted log (storage/cleaner.py), its disk work in another
        thread; what it removed, or None if there was nothing to clean or the log changed meanwhile."""
        job = self.log.begin_clean(self.high_watermark, map_max_bytes)
        if job is None:
            return None
        result = await asyncio.to_thread(job.run)
        return self.log.complete_clean(job, result)

    def remove_expired_producers(self, now_ms: int) -> int:
        return self.producer_state.remove_expired(now_ms, self.config.producer_id_expiration_ms)

    async def flush_in_background(self) -> bool:
        """Make the log durable up to its end and snapshot the producer state there, the fsyncs
        in another thread, then checkpoint the recovery point: a restart after a crash then
        checks only what was written after, whatever the flush settings (Kafka flushes a segment
        when it rolls; this covers the active segment too). Whether it flushed anything."""
        if self.state is ReplicaState.CLOSED:
            return False  # closed or deleted after the caller listed it: closing flushed it
        job = self.log.begin_flush()
        if job is None:
            return False
        snapshot = self.producer_state.prepare_snapshot(job.offset)
        try:
            await asyncio.to_thread(_run_flush, job, snapshot, self._directory_lock)
        except OSError:
            snapshot.discard()
            if self.state is ReplicaState.CLOSED:
                return False  # deleted meanwhile, its directory with it
            raise
        if self.state is not ReplicaState.CLOSED and self.log.complete_flush(job):
            snapshot.install()
            self.log.checkpoint_recovery_point()
        else:  # closing made its own; a truncation below its offset made it wrong
            snapshot.discard()
        return True


def _run_flush(job: FlushJob, snapshot: PendingSnapshot, directory_lock: threading.Lock) -> None:
    """The thread's half of Partition.flush_in_background: the log first, as the snapshot
    describes it up to the flushed offset. A directory deleted meanwhile fails the write."""
    job.run()
    with directory_lock:
        snapshot.write()


# A ListOffsets lookup decodes one batch on the event loop: at most this much of it, about the
# largest batch librdkafka sends (batch.size, 1,000,000 bytes); one that inflates further is
# answered at batch granularity, with its base offset.
LOOKUP_UNCOMPRESSED_BYTES_MAX = 1 << 20


def _first_record_at_or_after(slices: list[FileSlice], timestamp: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record with a timestamp >= `timestamp` in the batch that
    `slices` (a log read of one batch) starts with: ListOffsets answers with records, as Kafka does,
    not with the batch holding them. Only this one cold lookup decodes records, and it trusts
    nothing in them (a log may hold batches older than the leader's validation). None where the
    records do not decode or inflate past LOOKUP_UNCOMPRESSED_BYTES_MAX: the caller keeps the
    batch's base."""
    if not slices:
        return None
    buf = slices[0].read()
    header = parse_header(buf, 0)
    if header.attributes & LOG_APPEND_TIME_BIT:  # its records all read the batch's time
        return header.base_offset, header.max_timestamp
    base_timestamp = producer_fields(buf).base_timestamp
    try:
        body = decompress(header.compression_codec, memoryview(buf)[HEADER_SIZE_BYTES:header.size_bytes],
                          LOOKUP_UNCOMPRESSED_BYTES_MAX)
        for record in records_of(body, header.record_count):  # bounded by the batch's record count
            if not 0 <= record.offset_delta <= header.last_offset_delta:
                return None
            if base_timestamp + record.timestamp_delta >= timestamp:
                return header.base_offset + record.offset_delta, base_timestamp + record.timestamp_delta
    except ReplicaError:  # records that do not decode, or inflate past the lookup's bound
        return None
    return None
