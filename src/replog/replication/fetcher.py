"""The follower's fetch loop for one partition: Kafka's ReplicaFetcherThread, one asyncio task.

It fetches from the follower's LEO forever, appending what comes and taking the leader's HW.
Before the first fetch (and whenever the leader says our offset is beyond its end) it first
runs the KIP-101 handshake instead of truncating the log to its HW (docs/design.md §6.2 says
what data loss that avoids):

    TRUNCATING  ask the leader OffsetForLeaderEpoch for our latest epoch and cut our log there;
                repeat while the answer names an epoch we do not hold (bounded); skipped by a
                replica that holds no records and no epochs (a new partition's follower)
    FETCHING    fetch from our LEO, append, take the HW and log start; an offset below the
                leader's log start restarts our log there, one above its end truncates again
    STOPPED     stop() was called, or the leader is not (or no longer) the one we follow:
                FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH,
                UNKNOWN_TOPIC_OR_PARTITION go to `on_leader_problem` once, and the broker then
                re-reads the partition's leader from the store and starts another fetcher

replication/ does not import net/ (net is above it): the broker passes two callables that reach the
leader, `FetchFromLeader` and `EpochEndFromLeader`. An exception they raise (connection lost,
timeout) is retried after an exponential backoff capped at `backoff_max_ms`; so is an append
the log refuses (a corrupt batch on the wire), from the same offset, and one the data directory
does not take (KAFKA_STORAGE_ERROR: a failed write, or free space below what followers need,
which is checked before fetching what could not be appended). The storage's own line reports
those, once for all partitions; the fetcher's backoff is then a DEBUG line.

Concurrency: runs on the partition's event loop. Every reply is applied only if the partition
still follows the same leader epoch it was asked for: a become_follower/become_leader in between
(the broker should stop us first) makes the reply stale, and the fetcher stops.
"""

import asyncio
import dataclasses
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from replog.storage.checkpoint import UNDEFINED_EPOCH
from replog.storage.errors import KafkaStorageError, ReplicaError
from replog.replica.partition import EpochEndOffset, Partition, ReplicaState
from replog.storage.records import complete_batches_size
from replog.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

# Answers after which fetching from this leader at this epoch cannot succeed: the broker must
# learn the partition's current leader and epoch again (and, for another topic id, one side's
# replica is replaced: hosted.py).
LEADER_PROBLEMS = frozenset({
    ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower, ErrorCode.unknown_leader_epoch,
    ErrorCode.unknown_topic_or_partition,
    # A fetch naming its topic by id (KIP-516): the leader hosts no partition of that id, or hosts
    # the partition of another topic of the name (one side's replica is a deleted topic's).
    ErrorCode.unknown_topic_id, ErrorCode.inconsistent_topic_id,
})
# What a leader callable raises when the leader cannot be reached or does not answer in time.
CONNECTION_PROBLEMS = (OSError, TimeoutError, EOFError)


class EpochAsk(NamedTuple):
    """One partition's part of a follower's OffsetForLeaderEpoch request."""

    topic: str
    partition: int
    leader_epoch: int  # the follower's latest epoch, whose end it asks for
    current_leader_epoch: int  # the leadership it follows, which the leader checks


class FetchSpec(NamedTuple):
    """One partition's part of a replica Fetch request."""

    topic: str
    partition: int
    fetch_offset: int
    current_leader_epoch: int
    max_bytes: int
    max_wait_ms: int
    # The id of the topic the follower's log belongs to (KIP-516): the leader refuses a fetch
    # naming another id (a replica of a deleted topic of the same name). None: untagged, named.
    topic_id: str | None = None


class FetchReply(NamedTuple):
    """The leader's answer for that partition; `records` are whole batches."""

    error_code: int
    high_watermark: int
    log_start_offset: int
    records: bytes


FetchFromLeader = Callable[[FetchSpec], Awaitable[FetchReply]]
# (topic, partition, leader_epoch asked about, current_leader_epoch for fencing) -> answer
EpochEndFromLeader = Callable[[str, int, int, int], Awaitable[EpochEndOffset]]
# (partition, error code): the fetcher stopped because the leader refused us
LeaderProblemCallback = Callable[[Partition, int], None]


@dataclasses.dataclass(frozen=True)
class FetcherConfig:
    """Kafka's replica.fetch.max.bytes, replica.fetch.wait.max.ms, replica.fetch.backoff.ms (the
    first backoff, doubled up to backoff_max_ms), and a bound on KIP-101 handshake rounds."""

    max_bytes: int = 1024 * 1024
    max_wait_ms: int = 500
    backoff_ms: int = 1000
    backoff_max_ms: int = 10_000
    truncation_rounds_max: int = 64
    # An empty answer sooner than this after asking (a leader that could not long-poll) is
    # followed by a pause of that length, so that no leader makes this loop spin.
    empty_reply_min_interval_ms: int = 10

    def __post_init__(self) -> None:
        for name in ("max_bytes", "backoff_ms", "truncation_rounds_max"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.empty_reply_min_interval_ms < 0:
            raise ValueError("max_wait_ms and empty_reply_min_interval_ms must be >= 0")
        if self.backoff_max_ms < self.backoff_ms:
            raise ValueError(f"backoff_max_ms {self.backoff_max_ms} is below backoff_ms {self.backoff_ms}")


class FetcherState(enum.Enum):
    NEW = "new"
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    STOPPED = "stopped"


_TRANSITIONS: dict[FetcherState, frozenset[FetcherState]] = {
    FetcherState.NEW: frozenset({FetcherState.TRUNCATING, FetcherState.FETCHING, FetcherState.STOPPED}),
    FetcherState.TRUNCATING: frozenset({FetcherState.FETCHING, FetcherState.STOPPED}),
    FetcherState.FETCHING: frozenset({FetcherState.TRUNCATING, FetcherState.STOPPED}),
    FetcherState.STOPPED: frozenset(),
}


class _RetriableAnswer(Exception):
    """The leader answered with an error worth retrying after a backoff (e.g. not yet ready)."""


class _LeaderRefused(Exception):
    """The leader answered with one of LEADER_PROBLEMS, or our partition changed leader."""

    def __init__(self, error_code: int):
        super().__init__(error_code)
        self.error_code = error_code


class ReplicaFetcher:
    """Keeps one follower partition's log a copy of its leader's. See the module docstring."""

    def __init__(self, partition: Partition, fetch_from_leader: FetchFromLeader,
                 epoch_end_from_leader: EpochEndFromLeader, config: FetcherConfig, clock: Callable[[], int],
                 on_leader_problem: LeaderProblemCallback | None = None):
        if partition.state is not ReplicaState.FOLLOWER:
            raise RuntimeError(f"{partition.topic}-{partition.partition_id} is {partition.state.value}, "
                               "not a follower")
        self.partition = partition
        self._fetch_from_leader = fetch_from_leader
        self._epoch_end_from_leader = epoch_end_from_leader
        self.config = config
        self._clock = clock
        self._on_leader_problem = on_leader_problem
        # Fixed at start: every request carries it, and a partition that moved on makes us stop.
        self.leader_id = partition.leader_id
        self.leader_epoch = partition.leader_epoch
        self.state = FetcherState.NEW
        self._task: asyncio.Task | None = None
        self._backoff_ms = config.backoff_ms

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        """Run the fetch loop as a task on the running loop; returns it (done once stopped)."""
        if self._task is not None:
            raise RuntimeError("fetcher already started")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"fetcher-{self.partition.topic}-{self.partition.partition_id}")
        return self._task

    async def stop(self) -> None:
        """Cancel the loop and wait until it has stopped; a reply in flight is dropped."""
        if self._task is None:
            self._transition(FetcherState.STOPPED, "stopped before start")
            return
        await cancel_and_wait(self._task)
        # Cancelled before its first step, the task never ran to record this.
        self._transition(FetcherState.STOPPED, "stopped")

    @property
    def stopped(self) -> bool:
        return self.state is FetcherState.STOPPED

    def _transition(self, state: FetcherState, reason: str) -> None:
        if state is self.state is FetcherState.STOPPED:
            return
        if state not in _TRANSITIONS[self.state]:
            raise RuntimeError(f"fetcher cannot go from {self.state.value} to {state.value}")
        self.state = state
        partition = self.partition
        logger.debug("fetcher %s topic=%s partition=%d broker=%d leader=%d epoch=%d leo=%d hw=%d reason=%s",
                    state.value, partition.topic, partition.partition_id, partition.local_broker_id,
                    self.leader_id, self.leader_epoch, partition.log_end_offset, partition.high_watermark, reason)

    async def _run(self) -> None:
        reason = "stopped"
        try:
            if self._holds_nothing():
                self._transition(FetcherState.FETCHING, "start: nothing held, nothing to truncate")
            else:
                self._transition(FetcherState.TRUNCATING, "start")
            while True:  # cancellable; every pass awaits the leader or a backoff
                try:
                    if self.state is FetcherState.TRUNCATING:
                        await self._truncate_to_leader()
                        self._transition(FetcherState.FETCHING, "truncated")
                    else:
                        await self._fetch_once()
                    self._backoff_ms = self.config.backoff_ms
                except (*CONNECTION_PROBLEMS, _RetriableAnswer, ReplicaError) as failure:
                    await self._back_off(failure)
        except _LeaderRefused as refused:
            reason = f"leader refused error={refused.error_code}"
            if self._on_leader_problem is not None:
                self._on_leader_problem(self.partition, refused.error_code)
        except Exception as failure:
            reason = f"failed error={failure!r}"  # a bug, not the leader's doing: the task holds it
            raise
        finally:
            self._transition(FetcherState.STOPPED, reason)

    async def _back_off(self, failure: Exception) -> None:
        partition = self.partition
        level = logging.DEBUG if isinstance(failure, KafkaStorageError) else logging.WARNING
        logger.log(level, "fetch from leader failed topic=%s partition=%d broker=%d leader=%d epoch=%d state=%s "
                   "backoff_ms=%d error=%r", partition.topic, partition.partition_id, partition.local_broker_id,
                   self.leader_id, self.leader_epoch, self.state.value, self._backoff_ms, failure)
        await asyncio.sleep(self._backoff_ms / 1000)
        self._backoff_ms = min(self._backoff_ms * 2, self.config.backoff_max_ms)

    def _check_still_following(self) -> None:
        """After every await: the partition may have changed leader or closed meanwhile."""
        partition = self.partition
        if (partition.state is not ReplicaState.FOLLOWER or partition.leader_epoch != self.leader_epoch
                or partition.leader_id != self.leader_id):
            raise _LeaderRefused(ErrorCode.not_leader_or_follower)

    @staticmethod
    def _check_answer(error_code: int) -> None:
        if error_code in LEADER_PROBLEMS:
            raise _LeaderRefused(error_code)

    # -- KIP-101 truncation --------------------------------------------------------------------

    def _holds_nothing(self) -> bool:
        """No records and no leader epochs: the handshake could cut nothing and forget no epoch,
        so a new partition's follower fetches at once. Each handshake is a request of its own,
        which cuts short the fetch round parked at the leader (net/fetch_rounds.py): one per
        new partition made creating a topic of thousands quadratic in fetch rounds."""
        partition = self.partition
        return partition.log_end_offset == partition.log_start_offset and partition.latest_epoch == UNDEFINED_EPOCH

    async def _truncate_to_leader(self) -> None:
        """Ask the leader where each of our epochs ended and cut there, until an answer names an
        epoch we hold (Partition.truncate_for_new_leader). Each incomplete round drops an epoch
        from our cache; the round bound only guards against a leader answering nonsense."""
        partition = self.partition
        for _ in range(self.config.truncation_rounds_max):
            answer = await self._epoch_end_from_leader(partition.topic, partition.partition_id,
                                                       partition.latest_epoch, self.leader_epoch)
            self._check_still_following()
            self._check_answer(answer.error_code)
            if answer.error_code != ErrorCode.none:
                raise _RetriableAnswer(f"OffsetForLeaderEpoch answered error {answer.error_code}")
            if partition.truncate_for_new_leader(answer).complete:
                return
        logger.error("leader epoch answers do not converge topic=%s partition=%d broker=%d leader=%d epoch=%d "
                     "rounds=%d", partition.topic, partition.partition_id, partition.local_broker_id,
                     self.leader_id, self.leader_epoch, self.config.truncation_rounds_max)
        raise _LeaderRefused(ErrorCode.unknown_leader_epoch)

    # -- fetching ------------------------------------------------------------------------------

    async def _fetch_once(self) -> None:
        partition = self.partition
        partition.refuse_appends_if_low()
        fetch_offset = partition.log_end_offset
        asked_ms = self._clock()
        reply = await self._fetch_from_leader(FetchSpec(
            partition.topic, partition.partition_id, fetch_offset, self.leader_epoch, self.config.max_bytes,
            self.config.max_wait_ms, partition.topic_id))
        self._check_still_following()
        self._check_answer(reply.error_code)
        if reply.error_code == ErrorCode.offset_out_of_range:
            self._out_of_range(fetch_offset, reply)
        elif reply.error_code != ErrorCode.none:
            raise _RetriableAnswer(f"fetch answered error {reply.error_code}")
        else:
            partition.append_as_follower(self._whole_batches(reply.records), reply.high_watermark, reply.log_start_offset)
            if not reply.records and self._clock() - asked_ms < self.config.empty_reply_min_interval_ms:
                await asyncio.sleep(self.config.empty_reply_min_interval_ms / 1000)

    @staticmethod
    def _whole_batches(records: bytes) -> bytes | memoryview:
        """The batches `records` holds whole: a fetch answer may end in a cut batch (Kafka
        semantics: `max_bytes` is cut at a byte, not a batch), which the next fetch brings whole.
        Appending the cut one would fail, and the retry from the same offset with it."""
        whole = complete_batches_size(records)
        if whole == len(records):
            return records
        if whole == 0:  # the leader always sends the first batch whole (KIP-74): not a leader's answer
            raise _RetriableAnswer(f"fetch answered {len(records)} bytes without one whole batch")
        return memoryview(records)[:whole]

    def _out_of_range(self, fetch_offset: int, reply: FetchReply) -> None:
        if fetch_offset < reply.log_start_offset:
            # Retention on the leader removed what we miss: nothing of ours can be continued.
            self.partition.truncate_fully_and_start_at(reply.log_start_offset)
        else:
            # Beyond the leader's end: our tail is not the leader's (an unclean election, or a
            # leader that truncated itself): find the divergence again.
            self._transition(FetcherState.TRUNCATING, f"fetch offset {fetch_offset} beyond leader end")
