"""The driver of one hosted partition's leadership: it feeds events to the state machine
(leadership.py) and carries out the actions it decides, one at a time.

Sources of events, all into one bounded queue consumed by one task:
- the watch of `/brokers/topics/[topic]/[partition]/leader` (the leader-change listener);
- the broker's session events (`session_changed`), whose fence is applied at once, before the
  queue, since a leader whose session is in doubt must stop taking writes now;
- the ends of the tasks this driver starts: the ISR upkeep (IsrMaintainer, docs/design.md
  §5.3) and the follower fetcher (ReplicaFetcher); each reports how it ended, so none dies
  unnoticed (§4.5);
- brokers presumed gone (`broker_presumed_gone`: a follower deposes such a leader);
- its own recheck timer.

Ownership: the watch reader and the event loop of the driver run in one task group. If either
fails (a bug, or the store's watch breaking), the group ends both, the partition stops leading
(a leader that cannot follow its leader node must not take writes), and the driver starts again
after a backoff, reading the leader node afresh. `stop()` ends everything it started.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from replog.coord_backends import BadVersion, NoNode, SessionState, Store, StoreError
from replog.coord_backends import paths
from replog.coord_backends.base import TxnOp
from replog.coord_backends.joined import JoinedStore
from replog.coord_backends.paths import LeaderRecord, ReplicaAssignment
from replog.obs import BrokerMetrics, StateChangeEvents
from replog.replication.commit import IsrMaintainer
from replog.replication.election import SeenPartition, leader_election
from replog.replication.fetcher import EpochAsk, FetcherConfig, FetchReply, FetchSpec, ReplicaFetcher
from replog.replication.reassignment import Reassigner
from replog.replica.manager import ReplicaManager
from replog.replica.partition import EpochEndOffset, Partition, ReplicaState
from replog.replica.partition_config import PartitionConfig
from replog.storage.log_config import LogConfig
from replog.replication import leadership as machine
from replog.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

# Events waiting for one partition. Only leader-node values and rechecks pile up (a flapping
# node); on overflow they are replaced by one read of the node, which gives its latest value.
EVENTS_MAX = 64
_SUPERSEDED_BY_A_READ = (machine.LeaderNode, machine.RecheckDue)
_SESSION_EVENTS = {
    SessionState.SUSPENDED: machine.SessionSuspended(),
    SessionState.LOST: machine.SessionLost(),
    SessionState.CONNECTED: machine.SessionConnected(),
}


class LeaderCalls(Protocol):
    """Requests to a leader broker over the Kafka protocol (net/leader_connections.py): replication
    does not import net/. A failure raises ConnectionError."""

    async def fetch_as_replica(self, broker_id: int, spec: FetchSpec) -> FetchReply: ...

    async def epoch_end(self, broker_id: int, ask: EpochAsk) -> Any: ...


@dataclasses.dataclass(frozen=True)
class LeadershipContext:
    """What a partition's leadership needs of its broker, and nothing more."""

    broker_id: int
    store: Store
    replicas: ReplicaManager
    connections: LeaderCalls
    config: Mapping[str, Any]  # broker settings
    now_ms: Callable[[], int]
    leadership_changed: Callable[[], None]  # a leader was started here: metadata answers change
    registered_brokers: Callable[[], Collection[int] | None] = lambda: None  # None: not known (yet)
    presumed_gone: Callable[[int], bool] = lambda broker_id: False  # its process is gone (leader_connections.py)
    metrics: BrokerMetrics = dataclasses.field(default_factory=BrokerMetrics)  # elections, ISR changes
    # The broker's ring of state-change events, where a leader's requests are recorded (None: not recorded).
    state_change_events: StateChangeEvents | None = None
    # A partition's assignment and ISR as the broker's watches saw them, for an election to start from.
    seen_partition: Callable[[str, int], SeenPartition | None] = lambda topic, partition: None
    # Where elections' reads and transactions, and leaders' ISR writes, go joined with other
    # partitions' (None: each alone, to the store).
    joined: JoinedStore | None = None
    # A topic's id as the broker's watches saw it (None: unseen, or none).
    seen_topic_id: Callable[[str], str | None] = lambda topic: None

    @property
    def joined_or_store(self) -> Store | JoinedStore:
        """For the reads and transactions that thousands of partitions make at once, when a
        topic is created or a broker starts, leaves or comes back: joined with each other's."""
        return self.joined if self.joined is not None else self.store


class PartitionLeadership:
    def __init__(self, context: LeadershipContext, topic: str, partition: int, settings: Callable[[], Mapping[str, Any]]):
        self._context = context
        self.topic, self.partition = topic, partition
        self._settings = settings  # the topic's current settings
        # A leadership started while the session is in doubt must not lead unfenced on it.
        self._state = machine.State(context.broker_id, session_in_doubt=context.store.session_state is not SessionState.CONNECTED)
        self._events: collections.deque[machine.Event] = collections.deque()
        self._event_posted = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._stopping = False  # the driver task is being cancelled by _stop_driver
        self._fetcher: ReplicaFetcher | None = None
        self._maintainer: IsrMaintainer | None = None
        self._recheck: asyncio.TimerHandle | None = None
        # Set once this broker has first led, followed, or lost the election (the broker's
        # start waits for it before serving).
        self.settled = asyncio.Event()

    @property
    def state(self) -> machine.State:
        return self._state

    @property
    def leading(self) -> bool:
        hosted = self._hosted()
        return hosted is not None and hosted.state is ReplicaState.LEADER

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"leadership-{self.topic}-{self.partition}")

    @property
    def running(self) -> bool:
        """Started and not stopped since."""
        return self._task is not None

    async def stop(self, *, moved_off: bool = False) -> None:
        """`moved_off`: the partition is no longer assigned here (a reassignment moved it). A
        leader then releases its leader node, so that the replicas it moved to elect now rather
        than when this broker's session ends; the reassignment's own resignation may not have
        run yet, or been cut short (the assignment watch or the close-replica can stop the
        leadership first). A store error propagates, and the caller stops again later: the
        release checks the node still names this broker at this leadership's epoch, so a
        successor's node is never taken for it."""
        await self._stop_driver()
        if moved_off:
            # Whatever the driver was doing when stopped (a resignation half carried out
            # included): the node goes if it still names this broker at its last epoch.
            self._close_if_leading()
            await self._depose(self._context.broker_id, self._state.epoch, "moved off by a reassignment")
        await self._shut_down()

    def session_changed(self, session: SessionState) -> None:
        if session is not SessionState.CONNECTED and self.leading:
            self._hosted().fence()
        self._post(_SESSION_EVENTS[session])

    def brokers_changed(self) -> None:
        if self._maintainer is not None:
            self._maintainer.brokers_changed()

    def broker_presumed_gone(self, broker_id: int) -> None:
        self.brokers_changed()
        self._post(machine.BrokerPresumedGone(broker_id))

    async def begin_hand_over(self) -> list[TxnOp] | None:
        """Controlled shutdown, first half: if this broker leads, stop the driver (our own
        release must not re-elect us) and the ISR upkeep, and return the writes that hand the
        leadership to another in-sync replica (IsrMaintainer.hand_over_ops). None: nothing to
        hand over, or no other replica in sync; the leadership then goes with the session."""
        maintainer = self._maintainer
        if not self.leading or maintainer is None:
            return None
        await self._stop_driver()
        await self._stop_maintainer()
        return maintainer.hand_over_ops()

    def stop_taking_writes(self) -> None:
        """Controlled shutdown, before its writes are committed: from here on a producer is told
        to find the next leader. The files close later, with every other log's, off the event
        loop: closed here, 5,000 logs' fsyncs held the loop past the hand-over's deadline."""
        self._close_if_leading(files_later=True)

    def handed_over(self) -> None:
        logger.info("handed over leadership topic=%s partition=%d broker=%d epoch=%d",
                    self.topic, self.partition, self._context.broker_id, self._state.epoch)

    # -- the driver task ------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        task = asyncio.current_task()
        while True:  # ends when stopped; each failure waits a longer backoff
            cancels_before = task.cancelling()
            try:
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._read_watch())
                    group.create_task(self._consume_events())
            except* Exception as failed:
                logger.error("leadership driver failed, restarting topic=%s partition=%d broker=%d role=%s",
                             self.topic, self.partition, self._context.broker_id, self._state.role.value,
                             exc_info=failed.exceptions[0])
            # Python 3.11's TaskGroup mixes its own cancellations of this task with others' as a
            # child fails (fixed in 3.12). It drops a stop's: the driver ran on, and stop(), which
            # waits for it, never returned (the simulator found it: a close-replica, and with it a
            # deletion, hung). And it leaves counted the one it sends this task to abort the
            # other child, which ended every driver at its first failure as if stopped: a
            # partition whose replica failed to open (EMFILE) was never led again.
            if task.cancelling() > cancels_before:
                task.uncancel()  # the TaskGroup's
            if self._stopping or task.cancelling() > cancels_before:
                raise asyncio.CancelledError
            await self._reset()
            await asyncio.sleep(machine.backoff_s(failures))
            failures += 1

    async def _reset(self) -> None:
        """After a failure of the driver: stop leading, forget what the failed run knew, and
        begin again with a read of the leader node (which releases a node naming us)."""
        if self.leading:
            self._hosted().fence()
        await self._shut_down()
        self._close_if_leading()
        self._state = machine.State(self._context.broker_id, session_in_doubt=self._state.session_in_doubt)
        self._post(machine.RecheckDue())

    async def _read_watch(self) -> None:
        async with await self._context.store.watch_data(paths.leader(self.topic, self.partition)) as watch:
            async for event in watch:
                try:
                    record = LeaderRecord.decode(event.data) if event.exists else None
                except ValueError as error:
                    logger.warning("unreadable leader node topic=%s partition=%d error=%s", self.topic, self.partition, error)
                    continue
                self._post(machine.LeaderNode(record, event.version))
        raise StoreError("the leader node watch ended")

    async def _consume_events(self) -> None:
        while True:  # until cancelled
            while not self._events:
                self._event_posted.clear()
                await self._event_posted.wait()
            await self._handle(self._events.popleft())

    def _post(self, event: machine.Event) -> None:
        if len(self._events) >= EVENTS_MAX:
            kept = [queued for queued in self._events if not isinstance(queued, _SUPERSEDED_BY_A_READ)]
            self._events = collections.deque([*kept, machine.RecheckDue()])
        self._events.append(event)
        self._event_posted.set()

    async def _handle(self, event: machine.Event) -> None:
        pending = [event]
        while pending:  # each action yields at most one event, and chains end within a few steps
            event = pending.pop(0)
            self._state, actions = machine.decide(self._state, event)
            for action in actions:
                try:
                    outcome = await self._carry_out(action)
                except StoreError as error:
                    outcome = machine.StoreFailed(f"{type(action).__name__}: {error}")
                if outcome is not None:
                    pending.append(outcome)
                    break

    async def _carry_out(self, action: machine.Action) -> machine.Event | None:
        match action:
            case machine.Elect():
                outcome = await self._elect()
                if isinstance(outcome, machine.NotElected):
                    self.settled.set()
                return outcome
            case machine.Lead(elected):
                await self._lead(elected)
                self.settled.set()
            case machine.Follow(leader, epoch):
                await self._follow(leader, epoch)
                self.settled.set()
            case machine.Fence():
                if self.leading:
                    self._hosted().fence()
            case machine.LiftFence():
                if self.leading:
                    self._hosted().lift_fence()
            case machine.StopLeading():
                await self._stop_maintainer()
                self._close_if_leading()
            case machine.ReleaseLeaderNode(version):
                await self._release(version)
            case machine.DeposeLeader(leader, epoch):
                await self._depose(leader, epoch, "presumed gone")
            case machine.ReadLeaderNode():
                return await self._read_leader_node()
            case machine.RecheckAfter(delay_s):
                self._cancel_recheck()
                self._recheck = asyncio.get_running_loop().call_later(delay_s, self._post, machine.RecheckDue())
            case machine.Shutdown():
                await self._shut_down()
        return None

    # -- actions --------------------------------------------------------------------------------

    async def _elect(self) -> machine.Event:
        context = self._context
        topic_id = context.seen_topic_id(self.topic)
        if context.replicas.of_another_topic(self.topic, self.partition, topic_id):
            # The replica belongs to a deleted topic of the name, which this broker missed (it
            # was cut off from the store): it must not lead the new one with the other's records.
            # The reconcile that the topic's new id sets off replaces it (hosted.py); should the
            # view be the one behind instead, the election runs once it has caught up.
            logger.warning("not electing a replica of a deleted topic of the name topic=%s partition=%d broker=%d "
                           "topic_id=%s", self.topic, self.partition, context.broker_id, topic_id)
            return machine.ElectionDeferred(f"the replica is not of topic id {topic_id}")
        settings = self._settings()
        won = await leader_election(
            context.joined_or_store, self.topic, self.partition, context.broker_id,
            preferred_wait_s=context.config["preferred.replica.election.wait.ms"] / 1000,
            # Should the preferred replica die meanwhile, its partitions wait no longer for a
            # leader than those it led would.
            new_partition_wait_s=context.store.session_timeout_ms / 1000,
            unclean_allowed=settings["unclean.leader.election.enable"],
            registered=context.registered_brokers,
            seen=lambda: context.seen_partition(self.topic, self.partition),
        )
        if won is None:
            context.metrics.elections_lost.inc()
            return machine.NotElected()
        context.metrics.elections_won.inc()
        return machine.Elected(won.isr, won.assigned, won.leader_version, won.isr_version)

    async def _lead(self, elected: machine.Elected) -> None:
        """becomeLeader, on what the election's own transaction wrote: no store access here, so
        no store failure can leave a won election without a leader behind it."""
        context = self._context
        await self._stop_fetcher()
        await self._stop_maintainer()
        settings = self._settings()
        hosted = await context.replicas.open_replica(
            self.topic, self.partition, LogConfig.from_topic_settings(settings), elected.assigned,
            elected.isr.leader_epoch, elected.isr.isr, PartitionConfig.from_topic_settings(settings),
        )
        rebalance = context.config["auto.leader.rebalance.enable"]
        epoch = elected.isr.leader_epoch
        maintainer = IsrMaintainer(
            context.store, hosted, elected.leader_version, elected.isr_version,
            replica_lag_time_max_ms=context.config["replica.lag.time.max.ms"],
            clock_ms=context.now_ms,
            on_fenced=self._poster(machine.UpkeepFenced(epoch)),
            on_preferred_ready=self._poster(machine.PreferredReplicaReady(epoch)) if rebalance else None,
            balance_check_interval_ms=context.config["leader.imbalance.check.interval.seconds"] * 1000,
            registered_brokers=context.registered_brokers,
            presumed_gone=context.presumed_gone,
            reassigner=Reassigner(context.store, hosted, context.replicas.replication_throttle, clock_ms=context.now_ms,
                                  queue_max_requests=context.config["state.change.queue.max.requests"],
                                  events=context.state_change_events),
            on_moved_off=self._poster(machine.MovedOff(epoch)),
            metrics=context.metrics,
            commit=context.joined.commits.commit if context.joined is not None else None,
        )
        self._maintainer = maintainer
        maintainer.start().add_done_callback(lambda task: self._upkeep_ended(maintainer, task, epoch))
        context.leadership_changed()

    async def _follow(self, leader: int, epoch: int) -> None:
        """becomeFollower: the replica follows `leader` at `epoch` and a fetcher pulls from it."""
        context = self._context
        await self._stop_maintainer()
        await self._stop_fetcher()
        settings = self._settings()
        assigned = await self._assigned_here()
        hosted = await context.replicas.open_replica(
            self.topic, self.partition, LogConfig.from_topic_settings(settings), assigned, epoch, None,
            PartitionConfig.from_topic_settings(settings), leader_id=leader,
        )
        fetcher = ReplicaFetcher(
            hosted, self._fetch_from(leader), self._epoch_end_from(leader), FetcherConfig(),
            context.now_ms, on_leader_problem=lambda _, error_code: self._post(machine.FetcherEnded(leader, epoch, f"leader refused error={error_code}")),
        )
        self._fetcher = fetcher
        fetcher.start().add_done_callback(lambda task: self._fetcher_failed(fetcher, task, leader, epoch))

    async def _assigned_here(self) -> tuple[int, ...]:
        """The assignment a follower opens its replica with, which checks only that this broker
        is in it: as the broker's watches saw it if it names this broker (a topic's creation
        and a broker's restart start thousands of followers at once), else as the store has it."""
        context = self._context
        seen = context.seen_partition(self.topic, self.partition)
        if seen is not None and context.broker_id in seen.assigned:
            return seen.assigned
        return ReplicaAssignment.decode((await context.joined_or_store.get(paths.replicas(self.topic, self.partition)))[0]).replicas

    async def _release(self, version: int | None) -> None:
        """Delete the leader node if it is still the one seen; the others elect at once."""
        try:
            await self._context.store.delete(paths.leader(self.topic, self.partition), version)
        except (NoNode, BadVersion):
            return  # gone or replaced meanwhile: the watch brings the news
        logger.debug("released leader node topic=%s partition=%d broker=%d version=%s",
                    self.topic, self.partition, self._context.broker_id, version)

    async def _depose(self, leader: int, epoch: int, reason: str) -> None:
        node = await self._read_leader_node()
        if node.record is None or (node.record.leader, node.record.leader_epoch) != (leader, epoch):
            return  # another leadership already: the watch brings the news
        try:
            await self._context.store.delete(paths.leader(self.topic, self.partition), node.version)
        except (NoNode, BadVersion):
            return
        logger.info("deposed a leader topic=%s partition=%d broker=%d leader=%d epoch=%d reason=%s",
                    self.topic, self.partition, self._context.broker_id, leader, epoch, reason)

    async def _read_leader_node(self) -> machine.LeaderNode:
        try:
            data, version = await self._context.joined_or_store.get(paths.leader(self.topic, self.partition))
        except NoNode:
            return machine.LeaderNode(None, read=True)
        return machine.LeaderNode(LeaderRecord.decode(data), version, read=True)

    def _close_if_leading(self, files_later: bool = False) -> None:
        if self.leading:
            hosted = self._hosted()
            logger.warning("stopped leading topic=%s partition=%d broker=%d epoch=%d",
                           self.topic, self.partition, self._context.broker_id, hosted.leader_epoch)
            self._context.replicas.close_replica(self.topic, self.partition, files_later=files_later)

    # -- the ends of the tasks this driver started -------------------------------------------------

    def _poster(self, event: machine.Event):
        async def post() -> None:
            self._post(event)
        return post

    def _upkeep_ended(self, maintainer: IsrMaintainer, task: asyncio.Task, epoch: int) -> None:
        """A maintainer ends by itself only after reporting fenced or resign; an exception is
        a bug that must not leave a leader without ISR upkeep."""
        if task.cancelled() or task.exception() is None or maintainer is not self._maintainer:
            return
        self._post(machine.UpkeepEnded(epoch, repr(task.exception())))

    def _fetcher_failed(self, fetcher: ReplicaFetcher, task: asyncio.Task, leader: int, epoch: int) -> None:
        if task.cancelled() or task.exception() is None or fetcher is not self._fetcher:
            return
        self._post(machine.FetcherEnded(leader, epoch, f"failed error={task.exception()!r}"))

    # -- fetcher plumbing: replica/ does not import net/, so it gets callables ------------------------

    def _fetch_from(self, leader: int):
        connections = self._context.connections

        async def fetch(spec: FetchSpec) -> FetchReply:
            reply = await connections.fetch_as_replica(leader, spec)
            return reply._replace(error_code=_code(reply.error_code))

        return fetch

    def _epoch_end_from(self, leader: int):
        connections = self._context.connections

        async def epoch_end(topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> EpochEndOffset:
            answer = await connections.epoch_end(leader, EpochAsk(topic, partition, leader_epoch, current_leader_epoch))
            return EpochEndOffset(_code(answer.error_code), answer.leader_epoch, answer.end_offset)

        return epoch_end

    # -- helpers --------------------------------------------------------------------------------

    def _hosted(self) -> Partition | None:
        return self._context.replicas.hosted(self.topic, self.partition)

    async def _stop_driver(self) -> None:
        if self._task is not None:
            self._stopping = True
            await cancel_and_wait(self._task)
            self._task = None
            self._stopping = False

    async def _shut_down(self) -> None:
        self._cancel_recheck()
        await self._stop_fetcher()
        await self._stop_maintainer()

    def _cancel_recheck(self) -> None:
        if self._recheck is not None:
            self._recheck.cancel()
            self._recheck = None

    async def _stop_fetcher(self) -> None:
        if self._fetcher is not None:
            fetcher, self._fetcher = self._fetcher, None
            await fetcher.stop()

    async def _stop_maintainer(self) -> None:
        if self._maintainer is not None:
            maintainer, self._maintainer = self._maintainer, None
            await maintainer.stop()


def _code(error: Any) -> int:
    return int(getattr(error, "value", error))
