"""One hosted partition's leadership on this broker, driven by its leader node in the store.

The seed's per-partition state changes, as one task per partition following
`/brokers/topics/[topic]/[partition]/leader` (the seed's leader-change listener):

- the node is absent: leaderElection; the winner's record arrives as the next change;
- it names this broker at an epoch this replica leads: nothing to do (our own write);
- it names another broker: becomeFollower, then a ReplicaFetcher pulling from that broker
  over the Kafka protocol (Fetch with replica_id, OffsetForLeaderEpoch for KIP-101
  truncation), through one BrokerConnection per leader broker shared by all partitions;
- becomeLeader: stop fetching, lead at the new epoch, start the ISR upkeep whose
  compare-and-set writes fence a leader that lost its leadership without noticing.

A fetcher that meets a leader problem (fenced, not leader) stops; this task then looks at the
leader node again after a short pause, since a change of leader may reach the old leader's
followers before it reaches the store watch.

Session events (the broker relays them): a leader whose session is SUSPENDED or LOST cannot
know whether its ephemeral leader node still stands, so it is fenced at once (no writes, no HW
advance). CONNECTED after SUSPENDED: if the leader node still names this broker at the epoch
it leads, the session survived with it and nobody else can have led, so the fence is lifted;
otherwise it stops leading. LOST: the node is gone with the session; leadership is given up
and the leader watch elects again once the new session is up.

One change at a time: the leader watch, the recheck and the session events each take
`_changing` around a transition, so that none of them acts on a replica half-way through another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from replog.config import log_config
from replog.coord_backends import NoNode, SessionState, StoreError
from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration, IsrRecord, LeaderRecord, ReplicaAssignment
from replog.net.client import BrokerConnection, BrokerRefused, BrokerUnavailable
from replog.replica.commit import IsrMaintainer
from replog.replica.election import elected_versions, leader_election
from replog.replica.fetcher import FetcherConfig, FetchReply, FetchSpec, ReplicaFetcher
from replog.replica.partition import EpochEndOffset, Partition, PartitionConfig, ReplicaState

if TYPE_CHECKING:
    from replog.broker import Broker

logger = logging.getLogger(__name__)
T = TypeVar("T")

LEADER_PROBLEM_PAUSE_S = 0.5
LEADER_READ_ATTEMPTS_MAX = 120  # a minute of LEADER_PROBLEM_PAUSE_S
SESSION_IN_DOUBT = object()
# How often a leader presumed gone is probed: a restarted one is believed again within this.
GONE_PROBE_INTERVAL_S = 0.25


def _code(error: Any) -> int:
    return int(getattr(error, "value", error))


class _Refusal(NamedTuple):
    registration: BrokerRegistration  # the address that refused
    first_at_s: float  # event-loop time of the first refusal in a row


class LeaderConnections:
    """One connection per leader broker, opened on first use, replaced after a failure; and
    which leader brokers are presumed gone.

    A leader killed outright keeps its registration and leader nodes until its session expires,
    so for seconds the store names a leader that cannot answer, and clients sent there
    (librdkafka stops its fast leader queries once a leader is named) find the successor only
    at their next periodic metadata refresh. Its followers can tell sooner: when a connection
    to it fails they reconnect at once, and a refusal (its host answered, nothing listens on
    its port) presumes it gone, so that Metadata answers LEADER_NOT_AVAILABLE for its
    partitions, which clients retry with short backoffs until a successor is named.

    A presumption holds for the registration that refused, is re-probed every
    GONE_PROBE_INTERVAL_S, ends with the first connection that succeeds, and lasts at most one
    session timeout per run of refusals: by then a dead broker's session has expired and its
    registration with it, so a broker the store still holds live is believed."""

    def __init__(self, broker: Broker):
        self._broker = broker
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._refusals: dict[int, _Refusal] = {}  # bounded by the brokers in the cluster
        self._probes: dict[int, asyncio.Task] = {}

    async def get(self, broker_id: int) -> BrokerConnection:
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            registration = self._broker.metadata.brokers.get(broker_id)
            if registration is None:
                self._refusals.pop(broker_id, None)  # what refused says nothing of its next registration
                raise ConnectionError(f"leader broker {broker_id} is not registered")
            try:
                connection = await BrokerConnection.open(registration.host, registration.port, client_id=f"replog-follower-{self._broker.broker_id}")
            except BrokerRefused:
                self._refused(broker_id, registration)
                raise
            self._refusals.pop(broker_id, None)
            self._connections[broker_id] = connection
            return connection

    async def call(self, broker_id: int, request: Callable[[BrokerConnection], Awaitable[T]]) -> T:
        """`request` on the connection to `broker_id`. A failure reaches the fetcher as a plain
        ConnectionError (replica/ knows nothing of net/) and sets off a probe of whether the
        broker is gone."""
        try:
            return await request(await self.get(broker_id))
        except BrokerUnavailable as error:
            self.connection_failed(broker_id)
            raise ConnectionError(str(error)) from None

    def presumed_gone(self, broker_id: int) -> bool:
        """Whether `broker_id`, as registered now, refused connections lately (see the class)."""
        refusal = self._refusals.get(broker_id)
        return (
            refusal is not None
            and refusal.registration == self._broker.metadata.brokers.get(broker_id)
            and asyncio.get_running_loop().time() < refusal.first_at_s + self._presumption_max_s
        )

    def connection_failed(self, broker_id: int) -> None:
        """A request to `broker_id` failed: find out now whether it is gone (see the class)."""
        probe = self._probes.get(broker_id)
        if probe is None or probe.done():
            self._probes[broker_id] = asyncio.create_task(self._probe(broker_id))

    @property
    def _presumption_max_s(self) -> float:
        return self._broker.config["coord.session.timeout.ms"] / 1000

    def _refused(self, broker_id: int, registration: BrokerRegistration) -> None:
        refusal = self._refusals.get(broker_id)
        if refusal is None or refusal.registration != registration:
            self._refusals[broker_id] = _Refusal(registration, asyncio.get_running_loop().time())
            logger.info("leader broker presumed gone (connection refused) broker=%d leader_broker=%d address=%s:%d",
                        self._broker.broker_id, broker_id, registration.host, registration.port)

    async def _probe(self, broker_id: int) -> None:
        """Reconnect now, and while refused and presumed gone again every interval: the
        presumption ends by the session timeout, so this loop does too."""
        while True:
            try:
                await self.get(broker_id)
                return  # it answers, and its fetchers find a connection waiting
            except BrokerRefused:
                if not self.presumed_gone(broker_id):
                    return
            except ConnectionError:
                return  # unregistered, or not a refusal: nothing to presume
            await asyncio.sleep(GONE_PROBE_INTERVAL_S)

    def close(self) -> None:
        for probe in self._probes.values():
            probe.cancel()
        self._probes.clear()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()


class PartitionLeadership:
    def __init__(self, broker: Broker, topic: str, partition: int, settings):
        self._broker = broker
        self.topic, self.partition = topic, partition
        self._settings = settings
        self._task: asyncio.Task | None = None
        self._fetcher: ReplicaFetcher | None = None
        self._maintainer: IsrMaintainer | None = None
        self._recheck: asyncio.Task | None = None
        self._changing = asyncio.Lock()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    @property
    def leading(self) -> bool:
        hosted = self._hosted()
        return hosted is not None and hosted.state is ReplicaState.LEADER

    async def hand_over(self) -> None:
        """Controlled shutdown: if this broker leads, leave the ISR, stop taking writes and
        release the leader node, so another in-sync replica takes over at once rather than
        after this broker's session times out."""
        hosted, maintainer = self._hosted(), self._maintainer
        if not self.leading or maintainer is None:
            return
        if self._task is not None:
            self._task.cancel()  # our own release must not re-elect us
            await asyncio.gather(self._task, return_exceptions=True)
        await self._stop_maintainer()
        if not await maintainer.leave_isr():
            return  # no other replica in sync (or fenced): leadership goes with the session
        await self._release_leadership()
        logger.info("handed over leadership topic=%s partition=%d broker=%d epoch=%d",
                    self.topic, self.partition, self._broker.broker_id, hosted.leader_epoch)

    async def stop(self) -> None:
        for task in (self._task, self._recheck):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self._stop_fetcher()
        await self._stop_maintainer()

    # the leader-change listener
    async def _run(self) -> None:
        store = self._broker.store
        async with await store.watch_data(paths.leader(self.topic, self.partition)) as watch:
            async for event in watch:
                try:
                    async with self._changing:
                        if event.exists:
                            await self._on_leader(LeaderRecord.decode(event.data))
                        else:
                            await self._elect()
                except (StoreError, ValueError, RuntimeError) as error:
                    # The next change of the leader node (or a session event) brings another try.
                    logger.warning("leadership change failed topic=%s partition=%d broker=%d error=%s",
                                   self.topic, self.partition, self._broker.broker_id, error)

    async def _elect(self) -> None:
        broker = self._broker
        isr = await leader_election(
            broker.store, self.topic, self.partition, broker.broker_id,
            preferred_wait_s=broker.config["preferred.replica.election.wait.ms"] / 1000,
            unclean_allowed=self._settings["unclean.leader.election.enable"],
        )
        if isr is not None:
            await self._lead(isr)

    async def _on_leader(self, record: LeaderRecord) -> None:
        hosted = self._hosted()
        if record.leader == self._broker.broker_id:
            # Our own write; a record of ours from a lost session vanishes with it and re-elects.
            return
        if hosted is not None and hosted.state is ReplicaState.FOLLOWER and (hosted.leader_id, hosted.leader_epoch) == (record.leader, record.leader_epoch):
            if self._fetcher is not None and not self._fetcher.stopped:
                return
        await self._follow(record)

    # becomeLeader / becomeFollower
    async def _lead(self, isr: IsrRecord) -> None:
        broker = self._broker
        await self._stop_fetcher()
        hosted = broker.replicas.start_replica(
            self.topic, self.partition, log_config(self._settings), await self._assigned(),
            isr.leader_epoch, isr.isr, self._partition_config(),
        )
        if broker.store.session_state is not SessionState.CONNECTED:
            hosted.fence()  # elected just before the session went into doubt: wait for its verdict
        versions = await elected_versions(broker.store, self.topic, self.partition, broker.broker_id, isr)
        if versions is None:
            return  # another leader wrote meanwhile; its leader record will make us follow
        leader_version, isr_version = versions
        await self._stop_maintainer()
        rebalance = broker.config["auto.leader.rebalance.enable"]
        self._maintainer = IsrMaintainer(
            broker.store, hosted, leader_version, isr_version,
            replica_lag_time_max_ms=broker.config["replica.lag.time.max.ms"],
            clock_ms=broker.now_ms,
            on_fenced=self._fenced,
            on_preferred_ready=self._resign if rebalance else None,
            balance_check_interval_ms=broker.config["leader.imbalance.check.interval.seconds"] * 1000,
        )
        self._maintainer.start()
        broker.metadata.changed()

    async def _follow(self, record: LeaderRecord) -> None:
        broker = self._broker
        await self._stop_maintainer()
        await self._stop_fetcher()
        hosted = broker.replicas.start_replica(
            self.topic, self.partition, log_config(self._settings), await self._assigned(),
            record.leader_epoch, None, self._partition_config(), leader_id=record.leader,
        )
        self._fetcher = ReplicaFetcher(
            hosted, self._fetch_from(record.leader), self._epoch_end_from(record.leader), FetcherConfig(),
            broker.now_ms, on_leader_problem=self._leader_problem,
        )
        self._fetcher.start()

    async def _fenced(self) -> None:
        """Our ISR write met a newer version: someone else leads. Stop leading at once."""
        logger.warning("fenced, stopping leadership topic=%s partition=%d broker=%d", self.topic, self.partition, self._broker.broker_id)
        self._maintainer = None  # this is its own task ending
        self._close_if_leading()
        self._schedule_recheck()

    def _close_if_leading(self) -> None:
        if self.leading:
            hosted = self._hosted()
            logger.warning("stopped leading topic=%s partition=%d broker=%d epoch=%d",
                           self.topic, self.partition, self._broker.broker_id, hosted.leader_epoch)
            self._broker.replicas.close_replica(self.topic, self.partition)

    async def _resign(self) -> None:
        """checkLoadBalancing: the preferred replica is in sync, so give leadership back. Stop
        taking writes first, then release the leader node; the preferred replica races without
        waiting while this one waits PreferredReplicaTime, so it wins, and this one follows."""
        logger.info("resigning leadership to the preferred replica topic=%s partition=%d broker=%d",
                    self.topic, self.partition, self._broker.broker_id)
        self._maintainer = None  # this is its own task ending
        await self._release_leadership()

    async def _release_leadership(self) -> None:
        """Stop taking writes, then delete the leader node so the others elect at once."""
        self._broker.replicas.close_replica(self.topic, self.partition)
        try:
            await self._broker.store.delete(paths.leader(self.topic, self.partition))
        except StoreError as error:
            logger.warning("leader node release failed topic=%s partition=%d error=%s", self.topic, self.partition, error)

    def _leader_problem(self, partition: Partition, error_code: int) -> None:
        logger.info("follower fetch stopped topic=%s partition=%d broker=%d error=%d", self.topic, self.partition, self._broker.broker_id, error_code)
        self._schedule_recheck()

    def _schedule_recheck(self) -> None:
        if self._recheck is None or self._recheck.done():
            self._recheck = asyncio.create_task(self._recheck_leader())

    async def _recheck_leader(self) -> None:
        await asyncio.sleep(LEADER_PROBLEM_PAUSE_S)  # let the store catch up with the leadership change
        try:
            data, _ = await self._broker.store.get(paths.leader(self.topic, self.partition))
        except StoreError:
            return  # absent or unreachable: the watch's next event elects or retries
        record = LeaderRecord.decode(data)
        if record.leader != self._broker.broker_id:
            async with self._changing:
                await self._follow(record)

    # session events
    def session_suspended(self) -> None:
        if self.leading:
            self._hosted().fence()

    async def session_resumed(self) -> None:
        """The session is connected again: lead on if our leader node survived with it."""
        async with self._changing:
            hosted = self._hosted()
            if not self.leading or not hosted.fenced:
                return
            record = await self._read_leader_while_connected()
            if record is SESSION_IN_DOUBT:
                return  # the next CONNECTED looks again
            if record == LeaderRecord(self._broker.broker_id, hosted.leader_epoch):
                hosted.lift_fence()
                return
            logger.warning("leader node changed while suspended topic=%s partition=%d broker=%d epoch=%d record=%s",
                           self.topic, self.partition, self._broker.broker_id, hosted.leader_epoch, record)
            await self._give_up_leadership()
            if record is not None and record.leader != self._broker.broker_id:
                await self._follow(record)

    async def _read_leader_while_connected(self) -> LeaderRecord | None | object:
        """The leader record (None if there is none), or SESSION_IN_DOUBT if the session is
        suspended or lost again.

        Retried while connected: no later session event would bring another look, and a fenced
        leader that nobody tells otherwise would refuse writes for good."""
        store = self._broker.store
        for _ in range(LEADER_READ_ATTEMPTS_MAX):
            if store.session_state is not SessionState.CONNECTED:
                return SESSION_IN_DOUBT
            try:
                data, _ = await store.get(paths.leader(self.topic, self.partition))
                return LeaderRecord.decode(data)
            except NoNode:
                return None
            except StoreError as error:
                logger.warning("leader node unreadable after reconnect topic=%s partition=%d broker=%d error=%s",
                               self.topic, self.partition, self._broker.broker_id, error)
                await asyncio.sleep(LEADER_PROBLEM_PAUSE_S)
        logger.error("leader node unreadable, staying fenced topic=%s partition=%d broker=%d attempts=%d",
                     self.topic, self.partition, self._broker.broker_id, LEADER_READ_ATTEMPTS_MAX)
        return SESSION_IN_DOUBT

    async def session_lost(self) -> None:
        """Our leader node went with the session: stop leading; the leader watch re-elects
        once the broker has a new session.

        The watch may already have seen the node vanish and won an election in the new session
        before this event arrives (the embedded store delivers the node's deletion first, and
        the leader watch can run before the session listener): that leadership is given up here
        too, so its node is released for another election, or it would keep naming a broker
        that does not lead and nobody would elect again."""
        self.session_suspended()  # at once: a transition in progress may hold the lock a while
        async with self._changing:
            await self._give_up_leadership()
            await self._release_leader_node_won_since()

    async def _release_leader_node_won_since(self) -> None:
        store, path = self._broker.store, paths.leader(self.topic, self.partition)
        try:
            data, version = await store.get(path)
            if LeaderRecord.decode(data).leader == self._broker.broker_id:  # the lost session's node is gone: a new one
                await store.delete(path, version)
        except StoreError:
            pass  # absent (it went with the session), replaced meanwhile, or unreachable: the watch elects

    async def _give_up_leadership(self) -> None:
        await self._stop_maintainer()
        self._close_if_leading()  # the maintainer, fenced by the store, may have closed it already

    # fetcher plumbing: replica/ does not import net/, so the broker hands it callables
    def _fetch_from(self, leader: int):
        connections, replica_id = self._broker.leader_connections, self._broker.broker_id

        async def fetch(spec: FetchSpec) -> FetchReply:
            result = await connections.call(leader, lambda connection: connection.fetch_as_replica(
                replica_id, spec.topic, spec.partition, spec.fetch_offset, spec.current_leader_epoch,
                spec.max_bytes, spec.max_wait_ms,
            ))
            return FetchReply(_code(result.error_code), result.high_watermark, result.log_start_offset, result.records)

        return fetch

    def _epoch_end_from(self, leader: int):
        connections, replica_id = self._broker.leader_connections, self._broker.broker_id

        async def epoch_end(topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> EpochEndOffset:
            answer = await connections.call(leader, lambda connection: connection.offset_for_leader_epoch(
                topic, partition, leader_epoch, current_leader_epoch, replica_id))
            return EpochEndOffset(_code(answer.error_code), answer.leader_epoch, answer.end_offset)

        return epoch_end

    # helpers
    def _hosted(self) -> Partition | None:
        return self._broker.replicas.hosted(self.topic, self.partition)

    async def _assigned(self) -> tuple[int, ...]:
        data, _ = await self._broker.store.get(paths.replicas(self.topic, self.partition))
        return ReplicaAssignment.decode(data).replicas

    def _partition_config(self) -> PartitionConfig:
        return PartitionConfig(
            min_insync_replicas=self._settings["min.insync.replicas"],
            message_timestamp_type=self._settings["message.timestamp.type"],
        )

    async def _stop_fetcher(self) -> None:
        if self._fetcher is not None:
            await self._fetcher.stop()
            self._fetcher = None

    async def _stop_maintainer(self) -> None:
        if self._maintainer is not None:
            await self._maintainer.stop()
            self._maintainer = None
