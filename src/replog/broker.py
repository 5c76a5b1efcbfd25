"""One broker: wires the coordination store, the replica manager, the metadata cache and the
Kafka server, and runs brokerStartup.

brokerStartup, in the order of docs/design.md §3.1: make sure this broker's paths exist (its state-change
queue included), register the state-change listener and the session listener, drain the queue
(close-replicas sent while this broker was down delete their logs before anything opens them),
follow the topics in the store, which computes the replicas assigned here and starts each
(its leadership task subscribes to the partition's leader node and elects, leads or follows),
start serving, and only then register `/brokers/ids/[id]`, so that no client or peer is sent
here before the replicas are open.

After start-up the state-change listener keeps consuming the queue (replication/state_changes.py):
start-replica prepares a new partition's log, close-replica stops the replica and deletes its
log. Leadership of a new partition starts when the partition appears in the store.

Hosted partitions converge to the store (replication/hosted.py): on every assignment change
the metadata cache sees (again after a pause, if the store failed then) and on every
start-replica.

Shutdown (SIGTERM), controlled: first remove the registration, so that the leaders this broker
follows shrink it out of their ISRs; hand each partition this broker leads to another in-sync
replica (leave the ISR, release the leader node); wait until it is out of the ISRs of the
partitions it follows; then stop accepting and finish the requests already received, close every
log cleanly (flush, checkpoints, the record of the logs closed cleanly), and end the store session. The store
steps are best effort, each bounded by the session timeout: an outage of the store during
shutdown skips the hand-over (logged) but never the clean close of the logs.

The data directory is locked (storage/data_dir_lock.py) before anything reads or writes it and
released once the broker has stopped (or failed to be built): a second broker on the same
directory is refused before it touches a file.

The group coordinator (groups/) and the transaction coordinator (transactions/) follow the
replicas of __consumer_offsets and __transaction_state through the replica manager's
`on_replica_changed`, and their tasks run from start to stop; the broker makes each topic when
a client first looks for a coordinator in it.

The data directory's free space is read before anything is served and watched from start to
stop (storage/disk_space.py): below `log.dir.min.free.bytes` produce is refused with
KAFKA_STORAGE_ERROR until space returns.

The broker is also the `services` object the request handlers receive: they reach the
replicas, the metadata cache and a few broker-level decisions through it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import pathlib
import ssl
import time
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from replog import admin
from replog.admin.errors import AdminError
from replog.admin.scram_credentials import credential as scram_credential
from replog import listener_settings, sasl_settings, tls_settings
from replog.config import BrokerConfig, ConfigError, HostPort, store_security
from replog.listener_settings import Endpoint
from replog.coord_backends import BadVersion, NodeExists, NoNode, ObservedStore, SessionState, StoreError, open_store
from replog.coord_backends import paths
from replog.coord_backends.joined import JoinedStore
from replog.coord_backends.paths import BrokerRegistration, ClusterId, InvalidNodeValue
from replog.groups import OFFSETS_TOPIC, CoordinatorConfig, GroupCoordinator, GroupLimits
from replog.transactions import TRANSACTION_STATE_TOPIC, TransactionConfig, TransactionCoordinator
from replog.replication.metadata_cache import MetadataCache, each_seen
from replog.net.fetch_sessions import FetchSessions
from replog.net import certificate_reload, tls
from replog.net.certificate_reload import CertificateWatch
from replog.net.client_security import ClientSecurity
from replog.net.principals import certificate_principals
from replog.net.connection_limits import BrokerConnections
from replog.net.sasl_session import SaslSession
from replog.net.server import KafkaServer
from replog.net.services import Authorizes
from replog.obs import BrokerMetrics, MetricsServer, StateChangeEvents, StateSources, UnservedMetrics
from replog.replica.producer_ids import ProducerIdAllocator
from replog.security import inter_broker
from replog.security.acl_feed import AclFeed
from replog.security.authorizer import AclAuthorizer
from replog.security.client_quota_feed import ClientQuotaFeed
from replog.security.client_quotas import ClientQuotas
from replog.security.quota_manager import ClientQuotaManagers
from replog.security.sasl import ListenerSasl
from replog.security.sasl_mechanisms import listener_mechanisms
from replog.storage.data_dir_lock import DataDirectoryLock
from replog.storage.disk_space import DiskSpace, DiskSpaceState
from replog.tasks import cancel_and_wait
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replication.state_changes import StateChangeListener
from replog.replication.throttle_rates import ThrottleRates
from replog.net import high_watermarks
from replog.net.leader_connections import LeaderConnections
from replog.net.txn_markers import TxnMarkerChannel
from replog.net.transaction_verification import TransactionVerifier
from replog.replication.driver import LeadershipContext
from replog.replication.hosted import HostedPartitions

logger = logging.getLogger(__name__)


REGISTRATION_RETRY_MAX_S = 5.0
# A topic's partitions are written in one store transaction; a stock etcd allows 128 operations
# per transaction (each partition takes a few), so __consumer_offsets (50 partitions by default)
# is created with this many and then grown, this many at a time.
# What a scrape reads of the store and asks of other brokers: well within Prometheus's default
# scrape timeout (10 s), as a scrape must answer while the store or a leader does not.
SCRAPE_READ_MAX_S = 2.0


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def group_coordinator_config(config: BrokerConfig) -> CoordinatorConfig:
    limits = GroupLimits(
        initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
        min_session_timeout_ms=config["group.min.session.timeout.ms"],
        max_session_timeout_ms=config["group.max.session.timeout.ms"],
        max_size=config["group.max.size"],
    )
    return CoordinatorConfig(limits, offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
                             commit_timeout_ms=config["offsets.commit.timeout.ms"],
                             offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
                             offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"])


def transaction_coordinator_config(config: BrokerConfig) -> TransactionConfig:
    return TransactionConfig(
        max_timeout_ms=config["transaction.max.timeout.ms"],
        id_expiration_ms=config["transactional.id.expiration.ms"],
        abort_timed_out_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
        remove_expired_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        write_timeout_ms=config["offsets.commit.timeout.ms"],
        offsets_topic_partitions=config["offsets.topic.num.partitions"],
    )


class BrokerIdInUse(Exception):
    def __init__(self, broker_id: int, waited_s: float):
        super().__init__(f"broker id {broker_id} is registered by another live broker (its registration outlived "
                         f"{waited_s:.0f} s, two coordination session timeouts); give each broker its own broker.id")


class Broker:
    def __init__(self, config: BrokerConfig):
        self.config = config
        self.broker_id: int = config["broker.id"]
        self.data_dir = pathlib.Path(config["log.dirs"][0]).resolve()
        # Before anything reads or writes the directory (the embedded store keeps its file there,
        # the replica manager reads its checkpoint): a second broker on it must touch nothing.
        self.data_dir_lock = DataDirectoryLock(self.data_dir)
        try:
            self._build(config)
        except BaseException:
            self.data_dir_lock.release()  # no stop() comes for a broker never built
            raise

    def _build(self, config: BrokerConfig) -> None:
        """The components, on the locked data directory."""
        manager_config = ManagerConfig.from_broker_config(config, self.data_dir, self.broker_id)
        metrics_listener = config["metrics.listeners"]
        served = BrokerMetrics if metrics_listener is not None else UnservedMetrics
        self.metrics = served(per_partition=config["metrics.per.partition.enable"])
        self.state_change_events = StateChangeEvents(self.broker_id, config["state.change.events.max"], wall_clock_ms)
        self.store = ObservedStore(open_store(
            config["coord.url"], data_dir=str(self.data_dir), session_timeout_ms=config["coord.session.timeout.ms"],
            security=store_security(config),
        ), self.metrics.store_operation)
        # Read once now, so that a broker started on a full disk refuses from its first request.
        self.disk_space = DiskSpace(self.data_dir, config["log.dir.min.free.bytes"])
        self.disk_space.check()
        self._disk_space_watch: asyncio.Task | None = None
        self.replicas = ReplicaManager(manager_config, wall_clock_ms, monotonic_ms, log_flushed=self.metrics.log_flushed,
                                       log_cleaned=self.metrics.log_cleaned, disk_space=self.disk_space)
        self.metadata = MetadataCache(self.store)
        self.producer_ids = ProducerIdAllocator(self.store, self.broker_id)
        self.fetch_sessions = FetchSessions()
        self.authorizer = (None if config["authorizer.class.name"] is None
                           else AclAuthorizer(config["super.users"], config["allow.everyone.if.no.acl.found"]))
        self._acl_feed: asyncio.Task | None = None
        self.groups = GroupCoordinator(self.broker_id, group_coordinator_config(config), self.replicas.hosted,
                                       self._offsets_partition_count, monotonic_ms, wall_clock_ms)
        self.life_id = uuid.uuid4().hex[:16]
        # Markers go over connections of their own: a marker must not wait behind a follower's
        # parked fetch (net/txn_markers.py).
        self.marker_connections = LeaderConnections(self.broker_id, lambda: self.metadata.brokers,
                                                    config["coord.session.timeout.ms"], life_id=self.life_id,
                                                    security=lambda: self.inter_broker_security)
        self.txn_markers = TxnMarkerChannel(self.broker_id, self.metadata, self.store, self.marker_connections,
                                            self.replicas.hosted, self.groups, config["request.timeout.ms"])
        self.transactions = TransactionCoordinator(
            self.broker_id, transaction_coordinator_config(config), self.replicas.hosted,
            lambda: self.config["transaction.state.log.num.partitions"], monotonic_ms, wall_clock_ms, self.producer_ids,
            self.txn_markers, self.metrics)
        self.replicas.on_replica_changed = self._coordinated_replica_changed
        self.client_quotas = ClientQuotas()
        # The rates and throttles the client quotas are enforced by.
        self.quotas = ClientQuotaManagers(self.client_quotas, config, observer=self.metrics)
        self._client_quota_feed: asyncio.Task | None = None
        self._group_coordinator: asyncio.Task | None = None
        self._transaction_coordinator: asyncio.Task | None = None
        self._creating_internal_topics: dict[str, asyncio.Task] = {}
        # One server per listener; `server` is the first listener's. max.connections is the
        # broker's, over them all.
        connections = BrokerConnections(config["max.connections"], config["inter.broker.listener.name"])
        self.servers = [
            KafkaServer(self, endpoint.host, endpoint.port, max_request_bytes=config["socket.request.max.bytes"],
                        metrics=self.metrics, settings=config, on_failure=lambda: self.failed.set(),
                        listener=endpoint.name, tls=self._listener_tls(endpoint.name),
                        identify=self._listener_principals(endpoint.name), sasl=self._listener_sasl(endpoint.name),
                        broker_connections=connections, quotas=self.quotas)
            for endpoint in config["listeners"]
        ]
        self.server = self.servers[0]
        self._certificate_watches = [
            CertificateWatch(config, server.listener, functools.partial(self._serve_tls, server), self.metrics.certificate_loaded)
            for server in self.servers if server.tls is not None
        ]
        self._certificate_watch: asyncio.Task | None = None
        self.metrics.watch(StateSources(
            broker_id=self.broker_id,
            partitions=lambda: self.replicas.partitions,
            min_insync_replicas=lambda partition: partition.config.min_insync_replicas,
            cluster_partitions=lambda: self.metadata.topics,
            registered_brokers=lambda: self.metadata.registered,
            connections=lambda: sum(server.connection_count for server in self.servers),
            store_session_state=lambda: self.store.session_state.value,
            store_session_states=tuple(state.value for state in SessionState),
            now_ms=self.now_ms,
            committed_offsets=self.groups.committed_offsets,
            high_watermarks=lambda: self._high_watermarks,
            fetch_sessions=lambda: (len(self.fetch_sessions), self.fetch_sessions.cached_partitions),
            log_dir_space=lambda: (self.disk_space.free_bytes, self.disk_space.state.value),
            log_dir_space_states=tuple(state.value for state in DiskSpaceState),
            queued_request_bytes=lambda: sum(server.queued_request_bytes for server in self.servers),
            ongoing_transactions=self.transactions.ongoing_count,
            markers_pending=lambda: self.txn_markers.pending_markers,
        ))
        self.metrics_server = (None if metrics_listener is None
                               else MetricsServer(self.metrics.registry, metrics_listener.host, metrics_listener.port,
                                                  before_scrape=self._before_scrape))
        self._high_watermarks: dict[tuple[str, int], int] = {}  # of the groups' partitions, at the last scrape
        self.cluster_id: str | None = None
        self._session_follower: asyncio.Task | None = None
        self._registered = False
        self._started = False
        try:
            self._inter_broker_credentials = inter_broker.credentials(config)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        self.inter_broker_security = self._inter_broker_security()
        self.leader_connections = LeaderConnections(self.broker_id, lambda: self.metadata.brokers, config["coord.session.timeout.ms"],
                                                    life_id=self.life_id, security=lambda: self.inter_broker_security)
        self.joined = JoinedStore(self.store)
        self.hosted = HostedPartitions(LeadershipContext(
            self.broker_id, self.store, self.replicas, self.leader_connections, config, self.now_ms, self.metadata.changed,
            lambda: self.metadata.registered, self.leader_connections.presumed_gone, self.metrics,
            self.state_change_events, self.metadata.seen_partition, self.joined, self.metadata.topic_id,
        ), config)
        self.leader_connections.on_presumed_gone = self.hosted.broker_presumed_gone
        self.transaction_verifier = (
            TransactionVerifier(self.broker_id, self.metadata, self.transactions, self.leader_connections.call)
            if config["transaction.partition.verification.enable"] else None)
        self.state_changes = StateChangeListener(self.store, self.broker_id, self.hosted.start_replica_requested,
                                                 self.hosted.close_replica_requested, self.state_change_events)
        # Set when a task the broker cannot run without ended: the broker must stop (see _follow_session).
        self.failed = asyncio.Event()
        self._registering: asyncio.Task | None = None
        self._throttle_rates: asyncio.Task | None = None

    def _listener_tls(self, listener: str) -> ssl.SSLContext | None:
        """The TLS context listener `listener` serves with; None for a plaintext one."""
        if listener_settings.security_protocol(self.config, listener) not in listener_settings.TLS_PROTOCOLS:
            return None
        return tls.server_context(self.config, listener)

    def _listener_principals(self, listener: str) -> Callable[[asyncio.BaseTransport], str | None] | None:
        """How listener `listener` names its clients' principals; None: User:ANONYMOUS, all."""
        if listener_settings.security_protocol(self.config, listener) not in listener_settings.TLS_PROTOCOLS:
            return None
        return certificate_principals(tls_settings.settings_of(self.config, listener)["ssl.principal.mapping.rules"])

    def _listener_sasl(self, listener: str) -> Callable[[], SaslSession] | None:
        """What makes a SASL session for each connection of listener `listener`; None for a
        listener without SASL."""
        if listener_settings.security_protocol(self.config, listener) not in listener_settings.SASL_PROTOCOLS:
            return None
        mechanisms = listener_mechanisms(ListenerSasl(listener, self.config, functools.partial(scram_credential, self.store)))
        values = sasl_settings.settings_of(self.config, listener)
        return functools.partial(SaslSession, listener, mechanisms, max_reauth_ms=values["connections.max.reauth.ms"],
                                 failure_delay_ms=values["connection.failed.authentication.delay.ms"],
                                 max_receive_bytes=values["sasl.server.max.receive.size"], metrics=self.metrics)

    def _inter_broker_security(self) -> ClientSecurity:
        """What this broker connects to other brokers with: their inter-broker listener's
        security protocol, with its TLS (this broker's own listener's settings say whom to
        trust) and its SASL mechanism and this broker's credentials."""
        listener = self.config["inter.broker.listener.name"]
        protocol = listener_settings.security_protocol(self.config, listener)
        context = tls.client_context(self.config, listener) if protocol in listener_settings.TLS_PROTOCOLS else None
        credentials = self._inter_broker_credentials
        if credentials is None:
            return ClientSecurity(protocol, context)
        return ClientSecurity(protocol, context, credentials.mechanism, credentials.username, credentials.password)

    def _warn_of_inter_broker_authentication(self) -> None:
        """A SASL inter-broker listener without this broker's credentials (a broker alone needs
        none; one of a cluster cannot fetch); brokers that authenticate each other and take
        any authenticated client for one (an operator who set up the first most likely meant to
        restrict the second)."""
        listener = self.config["inter.broker.listener.name"]
        protocol = listener_settings.security_protocol(self.config, listener)
        if protocol in listener_settings.SASL_PROTOCOLS and self._inter_broker_credentials is None:
            mechanism = self.config["sasl.mechanism.inter.broker.protocol"]
            logger.warning("%s is not set: this broker cannot authenticate to other brokers, nor fetch from them, with "
                           "%s broker=%d", sasl_settings.jaas_config_name(listener, mechanism), mechanism, self.broker_id)
        authenticates = (protocol in listener_settings.SASL_PROTOCOLS
                         or (protocol == "SSL" and tls_settings.settings_of(self.config, listener)["ssl.client.auth"] == "required"))
        if authenticates and not self.config["super.users"]:
            logger.warning("super.users is empty: any client that authenticates to inter-broker listener %s may fetch as "
                           "a follower; set super.users=User:<broker user> broker=%d", listener, self.broker_id)

    def _serve_tls(self, server: KafkaServer, context: ssl.SSLContext) -> None:
        """New files of `server`'s listener: new connections get `context`; the inter-broker
        listener's also change what this broker presents to and trusts of other brokers."""
        server.tls = context
        if server.listener == self.config["inter.broker.listener.name"]:
            self.inter_broker_security = self._inter_broker_security()

    # lifecycle
    async def start(self) -> None:
        if self.metrics_server is not None:
            # First: a port that cannot be bound fails the start at once, and a long start
            # (loading logs, waiting for the store) can be watched.
            await self.metrics_server.start()
        await self.store.start()
        await self._ensure_paths()
        # Without it the broker would go on refusing produce after space returned, or never refuse.
        self._disk_space_watch = self._run_until_stopped(self.disk_space.watch(), "disk space watch")
        self.replicas.start()
        await self._load_client_quotas()
        # Both retry store failures themselves: only a bug ends them. Without the first, the rates
        # an operator sets would no longer reach the moves; without the second, groups would lose
        # their timers and be served wrong.
        self._throttle_rates = self._run_until_stopped(
            ThrottleRates(self.store, self.broker_id, self.replicas.replication_throttle).run(), "throttle rate watch")
        self._group_coordinator = self._run_until_stopped(self.groups.run(), "group coordinator")
        self._transaction_coordinator = self._run_until_stopped(self.transactions.run(), "transaction coordinator")
        if self.authorizer is not None:
            await self._load_acls()
        await self.state_changes.listen()
        self._session_follower = asyncio.create_task(self._follow_session(), name="session-follower")
        self._session_follower.add_done_callback(self._session_follower_ended)
        await self.state_changes.drain()
        self.metadata.on_assignment_changed = self.hosted.assignment_changed
        self.metadata.on_brokers_changed = self.hosted.brokers_changed
        await self.metadata.start()  # startReplica for every replica the store assigns here
        await self._wait_for_first_leaderships()
        self.hosted.report_stray_logs(self.data_dir)
        for server in self.servers:
            await server.start()
        self._warn_plaintext_beyond_loopback()
        for certificate_watch in self._certificate_watches:
            certificate_watch.loaded()
        if self._certificate_watches:
            # Without it, certificates replaced under the broker would never serve, and expire.
            self._certificate_watch = self._run_until_stopped(certificate_reload.watch(self._certificate_watches),
                                                              "certificate watch")
        await self._register_at_start()
        self._registered = True
        self._started = True
        self._warn_of_inter_broker_authentication()
        logger.info("broker started broker=%d listeners=%s metrics=%s data_dir=%s", self.broker_id,
                    ",".join(str(endpoint) for endpoint in self.bound_listeners), self.metrics_address or "off", self.data_dir)

    async def _load_acls(self) -> None:
        """Before any listener accepts: a request is never checked against ACLs not yet read.
        The feed then keeps them current; without it, an ACL removed would go on granting."""
        feed = AclFeed(self.store, self.authorizer)
        self._acl_feed = self._run_until_stopped(feed.run(), "ACL feed")
        await feed.loaded.wait()
        logger.info("authorizer loaded broker=%d acls=%d super_users=%d allow_everyone_if_no_acl_found=%s",
                    self.broker_id, self.authorizer.acl_count, len(self.authorizer.super_users),
                    self.authorizer.allow_everyone_if_no_acl_found)

    async def _load_client_quotas(self) -> None:
        """Before any listener accepts, so that the first requests are held to the quotas set; at
        most one session timeout, for a store that does not answer (the feed goes on trying).
        The feed then keeps them current; without it, a quota changed would never apply."""
        feed = ClientQuotaFeed(self.store, self.client_quotas)
        self._client_quota_feed = self._run_until_stopped(feed.run(), "client quota feed")
        try:
            await asyncio.wait_for(feed.loaded.wait(), self.store.session_timeout_ms / 1000)
        except TimeoutError:
            logger.warning("serving before the client quotas were loaded broker=%d", self.broker_id)

    @property
    def bound_listeners(self) -> list[Endpoint]:
        """Each listener with the port it bound (port 0 asks for any free one)."""
        return [Endpoint(server.listener, server.host, server.port) for server in self.servers]

    def _bound_addresses(self) -> list[Endpoint]:
        """Each listener at each address it bound (the wildcard as such)."""
        return [Endpoint(server.listener, host, port) for server in self.servers for host, port in server.addresses]

    def _warn_plaintext_beyond_loopback(self) -> None:
        """Started, but said once: a listener any host may reach serves without authentication."""
        exposed = listener_settings.plaintext_beyond_loopback(self._bound_addresses(),
                                                              dict(self.config["listener.security.protocol.map"]))
        if exposed:
            logger.warning("PLAINTEXT listener bound beyond loopback broker=%d listeners=%s: %s", self.broker_id,
                           ",".join(str(endpoint) for endpoint in exposed),
                           listener_settings.PLAINTEXT_BEYOND_LOOPBACK_ADVICE)

    @property
    def metrics_address(self) -> str | None:
        """host:port of the Prometheus endpoint once bound (port 0 asks for any free one); None when off."""
        if self.metrics_server is None:
            return None
        return str(HostPort(self.metrics_server.host, self.metrics_server.port))

    async def _wait_for_first_leaderships(self) -> None:
        """Serve once every hosted partition has led, followed or lost its election, so that a
        broker that says it is listening answers for its partitions (their logs were loaded by
        the startReplicas above, before any election); at most one session timeout, for a
        store that does not answer or an election that waits on another broker."""
        unsettled = await self.hosted.wait_until_settled(self.store.session_timeout_ms / 1000)
        if unsettled:
            logger.warning("serving before every partition has a leader broker=%d unsettled=%d", self.broker_id, unsettled)

    async def stop(self) -> None:
        try:
            await self._stop_components()
        finally:
            # Last, once every file is written and the embedded store is closed; after a failed
            # step too, so that a broker started again in this process can take the directory.
            self.data_dir_lock.release()
        if self._started:  # a start that failed says so in its own error, and only there
            logger.info("broker stopped broker=%d", self.broker_id)

    async def _stop_components(self) -> None:
        for task in (self._session_follower, self._registering, self._throttle_rates,
                     *self._creating_internal_topics.values(), self._certificate_watch, self._acl_feed):
            if task is not None:
                await cancel_and_wait(task)
        await self.state_changes.close()
        await self._deregister()
        await self.hosted.hand_over(self.store.session_timeout_ms / 1000)
        await self._wait_until_out_of_followed_isrs(self.store.session_timeout_ms / 1000)
        # Group requests wait for rebalances: answered NOT_COORDINATOR now, so that the server
        # finishing its requests does not wait for them, and their clients look elsewhere.
        self.groups.close()
        self.transactions.close()
        await asyncio.gather(*(server.stop() for server in self.servers))
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        self.metadata.on_assignment_changed = None
        self.metadata.on_brokers_changed = None
        await self.hosted.stop()
        await self.joined.close()
        for coordinator in (self._group_coordinator, self._transaction_coordinator):
            if coordinator is not None:
                await cancel_and_wait(coordinator)
        await self.txn_markers.close()
        self.marker_connections.close()
        self.leader_connections.close()
        await self.metadata.close()
        await self.replicas.shutdown()
        if self._client_quota_feed is not None:
            await cancel_and_wait(self._client_quota_feed)
        if self._disk_space_watch is not None:
            await cancel_and_wait(self._disk_space_watch)
        await self._end_session()

    async def _deregister(self) -> None:
        """Controlled shutdown starts here: the leaders this broker follows see it go and shrink
        it out of their ISRs at once (commit.py), as Kafka's controller does on a controlled
        shutdown, so that no acks=all waits for a replica that is stopping; clients stop
        being told of it."""
        if not self._registered:
            # A start that failed before registering: the node, if any, is another broker's
            # (BrokerIdInUse), and a store that never connected has nothing to remove.
            return
        try:
            await self.store.delete(paths.broker(self.broker_id))
        except NoNode:
            pass
        except StoreError as error:
            logger.warning("controlled shutdown: registration not removed broker=%d error=%s", self.broker_id, error)

    async def _wait_until_out_of_followed_isrs(self, timeout_s: float) -> None:
        """Serve fetches until every live leader this broker follows has shrunk it out (the
        metadata cache watches every ISR), at most `timeout_s`. The partitions are those it
        follows at the start: leaders take no deregistered broker back in, so one seen out
        stays out (metadata_cache.each_seen)."""
        def in_followed_isr(key: tuple[str, int]) -> bool:
            view = self.metadata.topics.get(key[0], {}).get(key[1])
            return (view is not None and self.broker_id in view.isr and view.leader != self.broker_id
                    and view.leader in (self.metadata.registered or frozenset()))

        out_of_followed_isrs = each_seen(
            [(topic, partition) for topic, partitions in self.metadata.topics.items() for partition in partitions  # bounded by the partitions
             if in_followed_isr((topic, partition))],
            lambda key: not in_followed_isr(key))

        if not await self.metadata.wait_for(out_of_followed_isrs, timeout_s):
            logger.warning("controlled shutdown: still in the ISR of a partition it follows after %d ms broker=%d",
                           timeout_s * 1000, self.broker_id)

    async def _end_session(self) -> None:
        """End the store session, so that the registration and leader nodes go at once; bounded
        by the session timeout, after which the server ends the session by itself anyway."""
        try:
            async with asyncio.timeout(self.store.session_timeout_ms / 1000):
                await self.store.close()
        except (StoreError, TimeoutError) as error:
            logger.warning("coordination session not ended cleanly broker=%d error=%r", self.broker_id, error)

    async def _ensure_paths(self) -> None:
        for path in (paths.BROKER_IDS, paths.TOPICS, paths.state_queue(self.broker_id), paths.TOPIC_CONFIGS):
            if await self.store.exists(path) is None:
                try:
                    await self.store.create(path, b"", make_parents=True)
                except NodeExists:
                    pass
        try:
            await self.store.create(paths.CLUSTER_ID, ClusterId(uuid.uuid4().hex[:22]).encode(), make_parents=True)
        except NodeExists:
            pass
        self.cluster_id = ClusterId.decode((await self.store.get(paths.CLUSTER_ID))[0]).cluster_id

    def _registration(self) -> BrokerRegistration:
        """Every advertised listener, and host/port the inter-broker one's (paths.BrokerRegistration)."""
        bound = {server.listener: server.port for server in self.servers}
        # Port 0 means "whatever was bound".
        advertised = [Endpoint(endpoint.name, endpoint.host, endpoint.port or bound[endpoint.name])
                      for endpoint in self.config["advertised.listeners"]]
        inter_broker = next(endpoint for endpoint in advertised if endpoint.name == self.config["inter.broker.listener.name"])
        protocols = dict(self.config["listener.security.protocol.map"])
        return BrokerRegistration(inter_broker.host, inter_broker.port, self.config["broker.rack"], self.life_id,
                                  endpoints=tuple(str(endpoint) for endpoint in advertised),
                                  listener_security_protocol_map={endpoint.name: protocols[endpoint.name]
                                                                  for endpoint in advertised},
                                  listeners=tuple(str(endpoint) for endpoint in self._bound_addresses()))

    async def _register(self) -> None:
        await self.store.create(paths.broker(self.broker_id), self._registration().encode(), ephemeral=True)

    async def _register_at_start(self) -> None:
        """A broker started again right after a crash (SIGKILL) finds its previous life's
        registration, which stays until the store ends that life's session, within
        coord.session.timeout.ms. If it names this broker's own address, that life is over:
        this process listens there now (and holds the data directory), so nothing else can
        answer at that address; the registration is removed at once. Otherwise wait for it to
        go, as Kafka does, rather than fail. A registration that outlives two session timeouts
        is a live broker with the same id."""
        path = paths.broker(self.broker_id)
        timeout_s = 2 * self.store.session_timeout_ms / 1000
        try:
            async with asyncio.timeout(timeout_s):
                while True:  # bounded by the timeout: each turn removes or waits for the node
                    try:
                        await self._register()
                        return
                    except NodeExists:
                        if await self._remove_previous_life_registration(path):
                            continue
                        logger.warning("broker id still registered, by this broker's previous life until its session "
                                       "ends; waiting broker=%d", self.broker_id)
                    async with await self.store.watch_data(path) as registrations:
                        async for registration in registrations:
                            if not registration.exists:
                                break
        except TimeoutError:
            raise BrokerIdInUse(self.broker_id, timeout_s) from None

    async def _remove_previous_life_registration(self, path: str) -> bool:
        """Whether the registration at `path` named this broker's address and is gone now."""
        try:
            data, version = await self.store.get(path)
            registered = BrokerRegistration.decode(data)
        except NoNode:
            return True
        except InvalidNodeValue:
            return False  # not ours to judge: wait for its session
        mine = self._registration()
        if (registered.host, registered.port) != (mine.host, mine.port):
            return False
        try:
            await self.store.delete(path, version)
        except (NoNode, BadVersion):
            return True  # gone or replaced meanwhile: the next attempt finds out which
        logger.warning("removed this broker's previous registration, which names the address this process listens on "
                       "(its previous life ended before its session did) broker=%d address=%s:%d",
                       self.broker_id, mine.host, mine.port)
        return True

    async def _follow_session(self) -> None:
        """Tell every partition's leadership of the session's state: a leader is fenced as soon
        as its session is in doubt, and decides when it is connected again whether its leader
        node survived (leadership.py); after a lost session (the store dropped this broker's
        ephemeral nodes) the broker registers again."""
        async with self.store.session_events() as states:
            lost = False
            async for state in states:
                if state is not SessionState.CONNECTED:
                    logger.warning("coordination session %s broker=%d", state.value, self.broker_id)
                self.hosted.session_changed(state)
                lost = lost or state is SessionState.LOST
                if state is SessionState.CONNECTED and lost and self._registered:
                    lost = False
                    if self._registering is None or self._registering.done():
                        self._registering = asyncio.create_task(self._register_again(), name="register-again")

    def _session_follower_ended(self, task: asyncio.Task) -> None:
        """Without its session follower the broker would lead on through a lost session: fence
        every leader for good and have the broker stopped (the CLI waits on `failed`)."""
        if task.cancelled():
            return
        logger.critical("coordination session follower ended, stopping the broker broker=%d", self.broker_id,
                        exc_info=task.exception())
        self.hosted.session_changed(SessionState.SUSPENDED)
        self.failed.set()

    def _run_until_stopped(self, coroutine, what: str) -> asyncio.Task:
        """A task the broker cannot serve correctly without, which runs until the broker stops
        (and cancels it): ending before that, the broker is stopped rather than run on unaware
        (the CLI waits on `failed`)."""

        def ended(task: asyncio.Task) -> None:
            if task.cancelled():
                return
            logger.critical("%s ended, stopping the broker broker=%d", what, self.broker_id, exc_info=task.exception())
            self.failed.set()

        task = asyncio.create_task(coroutine, name=what.replace(" ", "-"))
        task.add_done_callback(ended)
        return task

    async def _register_again(self) -> None:
        """Register after a lost session, retrying while the store fails; ends once registered
        (or when the broker stops, which cancels it)."""
        failures = 0
        while True:  # bounded by success; each failure waits longer, up to REGISTRATION_RETRY_MAX_S
            try:
                await self._register()
                return
            except NodeExists:
                return  # registered by an earlier attempt whose reply was lost
            except StoreError as error:
                delay_s = min(0.1 * 2 ** failures, REGISTRATION_RETRY_MAX_S)
                logger.warning("registration after a lost session failed broker=%d retry_in_s=%.1f error=%s",
                               self.broker_id, delay_s, error)
                failures += 1
                await asyncio.sleep(delay_s)

    async def _before_scrape(self) -> None:
        await asyncio.gather(self._observe_state_change_queue(), self._learn_high_watermarks())

    async def _learn_high_watermarks(self) -> None:
        """The high watermarks the consumer group lag is computed from, for a scrape."""
        wanted = {(topic, partition) for _, topic, partition, _ in self.groups.committed_offsets()}
        self._high_watermarks = await high_watermarks.learn(
            wanted, self._high_watermark_led_here, self._leader_of, self.metadata.brokers.get, SCRAPE_READ_MAX_S,
            self.inter_broker_security)

    def _high_watermark_led_here(self, topic: str, partition: int) -> int | None:
        hosted = self.replicas.hosted(topic, partition)
        return hosted.high_watermark if hosted is not None and hosted.leader_id == self.broker_id else None

    def _leader_of(self, topic: str, partition: int) -> int | None:
        view = self.metadata.topics.get(topic, {}).get(partition)
        return None if view is None or view.leader < 0 else view.leader

    async def _observe_state_change_queue(self) -> None:
        """The state-change queue's gauges, from the store, for a scrape: a store that does not
        answer within SCRAPE_READ_MAX_S leaves them as they were, and the scrape goes on."""
        if self._session_follower is None:
            return  # the store is not started yet: there is no queue to read
        try:
            async with asyncio.timeout(SCRAPE_READ_MAX_S):
                depth, oldest_ms = await self.state_changes.backlog(self.now_ms())
        except (StoreError, TimeoutError) as error:
            logger.debug("state-change queue not read for the metrics broker=%d error=%r", self.broker_id, error)
            return
        self.metrics.state_change_queue_requests.set(depth)
        self.metrics.state_change_queue_oldest_seconds.set(oldest_ms / 1000)

    # services for the request handlers
    authorizer: Authorizes | None = None  # no authorizer: every request allowed

    def _offsets_partition_count(self) -> int:
        """The setting, always: Kafka takes the topic's count once it exists, but the metadata
        cache learns a new topic's partitions one by one, and a count that grows while groups
        are placed by it would move them between coordinators."""
        return self.config["offsets.topic.num.partitions"]

    def _coordinated_replica_changed(self, partition) -> None:
        self.groups.partition_changed(partition)
        self.transactions.partition_changed(partition)

    def create_offsets_topic(self) -> None:
        """Create __consumer_offsets in the background (a group asked for its coordinator);
        once at a time."""
        self._create_internal_topic(OFFSETS_TOPIC)

    def create_transaction_state_topic(self) -> None:
        """Create __transaction_state in the background (a producer asked for its transaction
        coordinator); once at a time."""
        self._create_internal_topic(TRANSACTION_STATE_TOPIC)

    def _create_internal_topic(self, topic: str) -> None:
        creating = self._creating_internal_topics.get(topic)
        if creating is None or creating.done():
            creating = asyncio.create_task(self._make_internal_topic(topic), name=f"create-{topic.strip('_')}")
            creating.add_done_callback(functools.partial(self._internal_topic_creation_ended, topic))
            self._creating_internal_topics[topic] = creating

    def _internal_topic_creation_ended(self, topic: str, task: asyncio.Task) -> None:
        """Expected failures are logged by the task; anything else is a bug, logged in full (the
        next FindCoordinator tries again)."""
        if not task.cancelled() and task.exception() is not None:
            logger.error("creating %s failed broker=%d", topic, self.broker_id, exc_info=task.exception())

    async def _make_internal_topic(self, topic: str) -> None:
        """Create the topic, or grow it to its count if an earlier creation was cut short."""
        prefix = "offsets.topic" if topic == OFFSETS_TOPIC else "transaction.state.log"
        wanted = self.config[f"{prefix}.replication.factor"]
        factor = min(wanted, max(1, len(self.metadata.brokers)))
        total = self.config[f"{prefix}.num.partitions"]
        try:
            initial = await self._internal_topic_partitions(topic)
            if initial == 0:
                if factor < wanted:
                    logger.warning("creating %s with replication factor %d: %s.replication.factor is %d but "
                                   "only %d brokers are registered broker=%d", topic, factor, prefix, wanted, factor,
                                   self.broker_id)
                await admin.create_topic(self.store, topic, total, factor, self._internal_topic_config(topic, factor),
                                         limits=self.state_change_limits(0), broker_config=self.config)
            elif initial < total:  # made in steps by an earlier replog, cut short
                await admin.create_partitions(self.store, topic, total, limits=self.state_change_limits(0))
        except (AdminError, StoreError) as error:
            # Another broker making it at the same time (it grows it to the full count), or the
            # store failing: a later FindCoordinator for a missing partition tries again.
            racing = isinstance(error, AdminError) and error.code in (ErrorCode.topic_already_exists,
                                                                        ErrorCode.invalid_partitions)
            logger.log(logging.INFO if racing else logging.WARNING, "%s not made or grown here broker=%d error=%s",
                       topic, self.broker_id, error)
            return
        if initial < total:
            logger.info("made %s partitions=%d (had %d) broker=%d", topic, total, initial, self.broker_id)

    def _internal_topic_config(self, topic: str, factor: int) -> dict[str, str]:
        """Only the latest value per key matters: compacted, as in Kafka, in small segments so
        that the cleaner, which never touches the active segment, soon reaches old records.
        __transaction_state's decisions need its min.insync.replicas (at most its replicas, so
        that a small cluster can still write them)."""
        if topic == OFFSETS_TOPIC:
            return {"cleanup.policy": "compact", "segment.bytes": str(self.config["offsets.topic.segment.bytes"])}
        return {"cleanup.policy": "compact", "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
                "min.insync.replicas": str(min(factor, self.config["transaction.state.log.min.isr"]))}

    async def _internal_topic_partitions(self, topic: str) -> int:
        try:
            return len((await admin.describe_topic(self.store, topic)).partitions)
        except admin.UnknownTopicOrPartition:
            return 0

    def now_ms(self) -> int:
        """For durations (follower lag, fetch pacing): monotonic, so a clock step changes no ISR."""
        return monotonic_ms()

    def state_change_limits(self, timeout_s: float) -> admin.StateChangeLimits:
        """For admin commands run here: wait `timeout_s` for brokers to consume their requests.
        A request timeout of 0 asks Kafka to answer without waiting for the change to
        complete; here the change completes only once consumed, so 0 means the default wait."""
        return admin.StateChangeLimits(
            timeout_s if timeout_s > 0 else admin.StateChangeLimits.timeout_s,
            self.config["state.change.queue.max.requests"],
        )

    def serving(self, topic: str, partition: int) -> bool:
        """Whether clients can use the partition now: a leader is known and, where that is this
        broker, its replica is open (the leader node is written just before the replica opens)."""
        view = self.metadata.topics.get(topic, {}).get(partition)
        if view is None or view.leader < 0:
            return False
        return view.leader != self.broker_id or self.replicas.hosted(topic, partition) is not None

    def unknown_partition_error(self, topic: str, partition: int) -> int:
        """A partition this broker does not host: led elsewhere, or one the metadata does not know
        (a topic or partition that does not exist), which Kafka answers at once as unknown."""
        known = partition in self.metadata.topics.get(topic, {})
        return ErrorCode.not_leader_or_follower if known else ErrorCode.unknown_topic_or_partition

    def follower_connection_lost(self, broker_id: int) -> None:
        self.leader_connections.connection_failed(broker_id)

    async def topic_missing(self, name: str, allow_auto_create: bool) -> int:
        """The error a Metadata answer gives for a topic absent from the cache; auto-creates it
        when `auto.create.topics.enable` and the client both allow."""
        try:
            admin.validate_topic_name(name)
        except AdminError as error:
            return error.code
        if not (allow_auto_create and self.config["auto.create.topics.enable"]):
            return ErrorCode.unknown_topic_or_partition
        try:
            await admin.create_topic(self.store, name, self.config["num.partitions"], self.config["default.replication.factor"],
                                     limits=self.state_change_limits(0))
        except AdminError as error:
            if error.code != ErrorCode.topic_already_exists:
                return error.code
        return ErrorCode.leader_not_available
