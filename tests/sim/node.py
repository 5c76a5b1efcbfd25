"""One simulated broker: the real replication code of replog wired the way broker.py wires it,
minus the Kafka server.

This is the only module of the simulator that knows how a broker's hosted partitions are built
(replication/hosted.py and the LeadershipContext it is given): when that interface changes,
re-point this module and nothing else. What runs here is replog's own code, not a model of it:
the reconcile against the store's assignment and the topic settings' watches (hosted.py), driven
by the metadata cache's watches of the topics (metadata_cache.py) and by the state-change
listener consuming the broker's queue (replication/state_changes.py), the leadership state
machine and its driver (elections through replication/election.py, the ISR upkeep of
replication/commit.py, the follower fetcher of replication/fetcher.py), ReplicaManager and
Partition on real logs in a directory, over a client of the shared in-process store (store.py).

broker.py parts mirrored here: its start-up order (the queue drained before the metadata cache
first reconciles, so that the close-replicas of a topic deleted while the broker was down delete
their logs before anything opens them; the port accepting connections once the metadata cache
started, where broker.py starts its listeners, so never before the ACLs are loaded),
registration under /brokers/ids after the replicas started, the session follower (every
leadership hears every session state; after a lost session the broker registers again), and
LeaderConnections (which brokers are presumed gone, and the deposal and shrinking that follow),
here over connections through the simulated network (network.py) to the leader broker's
partitions; a crash closes the connections from the crashed broker, which the others probe.
With an authorizer configured, broker.py's AclAuthorizer, loaded from the store by its AclFeed
before the port accepts and kept current by the feed, which the leader asks of every follower
request as the handlers ask it (net/authorization.authorized_as_broker, with this broker as the
handlers' services): the follower's principal is its broker's, from its broker's host.

Every task of the broker runs in its Owner's context (loop.py), so that a pause holds all of
them and a crash stops all of them without any cleanup running, as SIGKILL does.
"""

from __future__ import annotations

import asyncio
import pathlib
from collections.abc import Awaitable, Callable
from typing import Any

from replog.config import BrokerConfig
from replog.coord_backends import NodeExists, SessionState, StoreError, paths
from replog.coord_backends.joined import JoinedStore
from replog.coord_backends.paths import BrokerRegistration
from replog.replication.metadata_cache import MetadataCache
from replog.net.authorization import authorized_as_broker
from replog.net.client import BrokerRefused, BrokerUnavailable
from replog.net.codec import ApiKey, Request
from replog.net.fetch_rounds import RoundAnswer, RoundChanges
from replog.net.leader_connections import LeaderConnections, fetch_from, follower_client_id
from replog.replication.fetcher import EpochAsk, FetchSpec
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replica.partition import EpochEndOffset
from replog.replication.driver import LeadershipContext
from replog.replication.hosted import HostedPartitions
from replog.replication.state_changes import StateChangeListener
from replog.security.acl_feed import AclFeed
from replog.security.authorizer import AclAuthorizer
from tests.sim.loop import Owner
from tests.sim.network import SimNetwork, serve_epoch_ends, serve_replica_fetch
from tests.sim.store import SimStore

STORE_RETRY_S = 0.2
HOST = "127.0.0.1"  # every broker's, as registered and as its peers' ACLs see it


class SimBroker:
    def __init__(self, broker_id: int, data_dir: pathlib.Path, config: BrokerConfig, store: SimStore,
                 network: SimNetwork, clock_ms: Callable[[], int], boot_id: str, life_id: str, principal: str):
        self.broker_id = broker_id
        self.life_id = life_id
        self.principal = principal  # the user its inter-broker client authenticates as
        self.config = config
        self.authorizer = (None if config["authorizer.class.name"] is None
                           else AclAuthorizer(config["super.users"], config["allow.everyone.if.no.acl.found"]))
        self.now_ms = clock_ms  # virtual time
        self.owner = Owner()
        self.store = store
        self.network = network
        # Requests this broker is serving, in arrival order (a set would fail them in address order).
        self._answers: dict[asyncio.Future, None] = {}
        self.lost_power = False  # crashed with its machine: its files lost what was not flushed
        self.listening = False  # whether its port accepts connections: from where broker.py starts its servers
        # The periodic chores keep their Kafka intervals, in virtual time, but the flush's,
        # which the simulation shortens so that a power loss finds logs flushed part-way, and the
        # cleaner's, so that compacted logs are cleaned during the faults (both read as the broker reads them).
        manager_config = ManagerConfig.from_broker_config(config, data_dir, broker_id)
        self.replicas = ReplicaManager(manager_config, self.now_ms, boot_id=boot_id)
        self.metadata = MetadataCache(store)
        self.leader_connections = LeaderConnections(broker_id, lambda: self.metadata.brokers, config["coord.session.timeout.ms"],
                                                    open_connection=self._connect, life_id=life_id)
        self.hosted = HostedPartitions(LeadershipContext(broker_id, store, self.replicas, self.leader_connections, config,
                                                         self.now_ms, self.metadata.changed, lambda: self.metadata.registered,
                                                         self.leader_connections.presumed_gone,
                                                         seen_partition=self.metadata.seen_partition,
                                                         joined=JoinedStore(store), seen_topic_id=self.metadata.topic_id),
                                       config)
        self.leader_connections.on_presumed_gone = self.hosted.broker_presumed_gone
        self.state_changes = StateChangeListener(store, broker_id, self.hosted.start_replica_requested,
                                                 self.hosted.close_replica_requested)

    def spawn(self, coroutine) -> asyncio.Task:
        """Run `coroutine` as one of this broker's tasks (paused and crashed with it)."""
        return asyncio.get_running_loop().create_task(coroutine, context=self.owner.context)

    # -- lifecycle --------------------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        return self.spawn(self._start())

    async def _start(self) -> None:
        """broker.py's start, in its order; the tasks its components create are this broker's
        (they inherit the Owner's context this runs in)."""
        await self.store.start()
        self.replicas.start()
        if self.authorizer is not None:
            feed = AclFeed(self.store, self.authorizer)
            self.spawn(feed.run())
            await feed.loaded.wait()
        await self.state_changes.listen()
        self.spawn(self._follow_session())
        await self.state_changes.drain()
        self.metadata.on_assignment_changed = self.hosted.assignment_changed
        self.metadata.on_brokers_changed = self.hosted.brokers_changed
        await self.metadata.start()
        self.listening = True
        await self._register_until_done()

    def crash(self) -> None:
        """SIGKILL: nothing of this broker runs again; what it wrote stays on disk, its store
        session lives on until the store times it out; requests it was serving fail, and the
        brokers it was connected to see their connections from it close (and probe it)."""
        self.owner.crash()
        for answer in self._answers:
            if not answer.done():
                answer.set_exception(ConnectionResetError(f"broker {self.broker_id} died"))
        self._answers.clear()
        for other in self.network.brokers.values():
            if other is not self and not other.owner.crashed:
                other.owner.context.run(other.leader_connections.connection_failed, self.broker_id)

    async def _connect(self, broker_id: int, registration: BrokerRegistration) -> _Connection:
        """LeaderConnections' opener: a connection to the process running as `broker_id` now."""
        try:
            return _Connection(self, broker_id, await self.network.connect(self.broker_id, broker_id))
        except ConnectionRefusedError as refused:
            raise BrokerRefused(str(refused)) from None
        except ConnectionError as failed:
            raise BrokerUnavailable(str(failed)) from None

    def describe(self, topic: str, partition: int) -> str:
        """The leadership's and the replica's state, for a failure report."""
        leadership = self.hosted.leaderships.get((topic, partition))
        replica = self.replicas.hosted(topic, partition)
        replica_state = "no replica" if replica is None else (
            f"{replica.state.value} epoch={replica.leader_epoch} fenced={replica.fenced} hw={replica.high_watermark} "
            f"leo={replica.log_end_offset} isr={sorted(replica.isr)}")
        role = "none" if leadership is None else f"{leadership.state.role.value} epoch={leadership.state.epoch}"
        return f"{'crashed ' if self.owner.crashed else ''}leadership {role}, replica {replica_state}"

    # -- broker.py's session follower and registration ---------------------------------------------

    async def _follow_session(self) -> None:
        lost = False
        async with self.store.session_events() as states:
            async for state in states:
                self.hosted.session_changed(state)
                lost = lost or state is SessionState.LOST
                if state is SessionState.CONNECTED and lost:
                    lost = False
                    self.spawn(self._register_until_done())

    async def _register_until_done(self) -> None:
        registration = BrokerRegistration(HOST, 9000 + self.broker_id, None, self.life_id).encode()
        try:
            await self._retry_store(lambda: self.store.create(paths.broker(self.broker_id), registration, ephemeral=True))
        except NodeExists:
            return  # an earlier attempt's reply was lost

    @staticmethod
    async def _retry_store(operation: Callable[[], Awaitable[Any]]) -> Any:
        """A simulated start retries its store work until it succeeds (the store's faults end when
        the simulation heals): what is simulated is replication, not a start's error handling."""
        while True:
            try:
                return await operation()
            except NodeExists:
                raise
            except StoreError:
                await asyncio.sleep(STORE_RETRY_S)

    # -- serving the network's requests -------------------------------------------------------------

    def authorizes_as_broker(self, request: Request) -> bool:
        """The Fetch and OffsetForLeaderEpoch handlers' check of a request naming a replica id;
        a refusal is noted in the network, for the simulation to fail the schedule on."""
        if authorized_as_broker(self, request):
            return True
        self.network.refusals.append(f"broker {self.broker_id} refused {ApiKey(request.api_key).name} as a replica from "
                                     f"{request.client_id} principal {request.principal} host {request.client_host}")
        return False

    def answer_later(self, serve, answer: asyncio.Future) -> None:
        """Serve a request as this broker's task; `answer` gets the result."""
        self._answers[answer] = None

        async def serving() -> None:
            try:
                result = await serve(self)
            except Exception as error:
                if not answer.done():
                    answer.set_exception(error)
            else:
                if not answer.done():
                    answer.set_result(result)
            finally:
                self._answers.pop(answer, None)

        self.spawn(serving())


class _Connection:
    """What LeaderConnections and the driver use of a BrokerConnection: the follower's two
    requests, through the simulated network, to the process it was opened to; closed once that
    process is gone, as its kernel's reset closes a real one."""

    def __init__(self, source: SimBroker, target: int, process: SimBroker):
        self._source, self._target, self._process = source, target, process
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or self._process.owner.crashed

    def close(self) -> None:
        self._closed = True

    async def fetch_as_replica(self, replica_id: int, specs: list[FetchSpec], max_wait_ms: int, max_bytes: int,
                               changes: RoundChanges | None = None) -> RoundAnswer:
        """Outside any fetch session: the answer names every partition asked (`changes` unused)."""
        request = self._request(ApiKey.FETCH)
        return RoundAnswer(await self._call(lambda leader: serve_replica_fetch(
            leader.replicas, replica_id, specs, max_wait_ms, leader.now_ms,
            fetch_from(leader.metadata.brokers, leader.metadata.lives, replica_id, request.client_id),
            leader.authorizes_as_broker(request))))

    async def offsets_for_leader_epochs(self, asks: list[EpochAsk], replica_id: int) -> dict[tuple[str, int], EpochEndOffset]:
        request = self._request(ApiKey.OFFSET_FOR_LEADER_EPOCH)
        return await self._call(lambda leader: serve_epoch_ends(leader.replicas, asks, leader.authorizes_as_broker(request)))

    def _request(self, api_key: ApiKey) -> Request:
        """What the leader's handlers check of a request: who sent it, from where (the body
        travels as the serving function's arguments)."""
        return Request(api_key, 0, 0, follower_client_id(self._source.broker_id, self._source.life_id), None,
                       client_host=HOST, principal=self._source.principal)

    async def _call(self, serve):
        if self.closed:
            raise BrokerUnavailable(f"connection to broker {self._target} closed")
        try:
            return await self._source.network.call(self._source.broker_id, self._target, serve, self._process)
        except ConnectionError as failed:
            raise BrokerUnavailable(str(failed)) from None

