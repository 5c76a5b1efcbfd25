"""The Kafka protocol server: accepts connections and routes each request to its handler.

Handlers live in `handlers/`, one module per API family; each is a plain coroutine
`handler(services, request) -> response body | None` that can be tested without sockets. The
server owns only the sockets: `start` binds the listener and starts serving it, then `stop`
(stop accepting, let each connection finish the requests it already sent, close). It counts and
times every request, and counts the error code a request answers with as a whole
(obs/metrics.py); Produce and Fetch count their partitions' errors themselves, where the codes
are at hand.

Accepting (connection_limits.py says what a client meets at each limit): the server waits
for room (max.connections, file descriptors), accepts, closes at once a connection past its
address's max.connections.per.ip, and makes the others KafkaConnections. An accept that fails
(EMFILE, ENFILE, ENOBUFS...) pauses accepting, from ACCEPT_RETRY_MIN_S doubling up to
ACCEPT_RETRY_MAX_S, rather than spin on a listener that stays readable.

The sweep, every SWEEP_INTERVAL_MAX_S (or a quarter of connections.max.idle.ms if that is
less): closes the connections idle past connections.max.idle.ms, has the others give back the
receive buffer big frames grew, counts the broker's own file descriptors, and closes the
connections idle longest if those need the descriptors they hold.

A listener has a name and a security protocol (listener_settings.py); each request carries the
listener's name, so that the answers that name brokers give the addresses of the listener the
client came in on. An SSL listener serves TLS (tls.py): each accepted connection's handshake
runs on its own, each bounded by tls.HANDSHAKE_TIMEOUT_S, so that clients that stall it (or
speak plaintext to the port) hold up no other connection; one that fails is closed, and counted
as closed for "tls_handshake". At most HANDSHAKES_PENDING_MAX are under way: a connection
accepted past it closes the oldest, counted as closed for "tls_handshakes_pending", rather than
wait for one to end, which would let a few hundred silent connections hold every newcomer
for the handshake timeout. A
SASL_PLAINTEXT or SASL_SSL listener gives each connection a SASL session (sasl_session.py), which
the connection consults before it reads a request.

Client quotas (client_throttles.py), when the broker enforces them: each request counted is
recorded against its client's quotas once handled; over one, its answer carries the throttle
time and the connection is muted for it (framing.py), or, for a client too old to wait by
itself, the answer is held back that long. A client with a quota has its requests handled one
at a time, as Kafka handles a connection's, each once the connection's mute is over: else the
requests it had sent before the mute began would all pass at once, each mute.

Both run in one task group from start to stop, with the TLS handshakes under way: one that ends
otherwise (a bug) would leave the broker unable to accept, or to bound its connections, so it
is logged and `on_failure` is told (the broker stops).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable, Mapping
from typing import Any, Awaitable

from kio.schema.errors import ErrorCode

from replog.config import defaults
from replog.obs import BrokerMetrics
from replog.obs.logs import LineBudget
from replog.security.quota_limits import user_of_principal
from replog.security.quota_manager import ClientQuotaManagers
from replog.tasks import cancel_and_wait

from . import codec
from .client_throttles import client_throttles, counted, run_timed, set_throttle_ms, throttle_time_ms, with_throttle
from .connection_limits import (
    DESCRIPTORS_EXHAUSTED,
    BrokerConnections,
    ConnectionLimits,
    addresses_of,
    listener_max_connections,
    raise_descriptor_limit,
)
from .framing import CLOSES_LOGGED_MAX, KafkaConnection
from .handlers import API_NAMES, HANDLERS, count_error
from .handlers.api_versions import unsupported_version_answer
from .leader_connections import registered_follower
from .request_memory import RequestMemory
from .sasl_session import SaslSession
from .services import Services
from .tls import HANDSHAKE_TIMEOUT_S

logger = logging.getLogger(__name__)

IN_FLIGHT_PER_CONNECTION_MAX = 64
LISTEN_BACKLOG = 100  # asyncio's default, which the listener had before it accepted by itself
ACCEPT_RETRY_MIN_S = 0.05
ACCEPT_RETRY_MAX_S = 1.0
SWEEP_INTERVAL_MAX_S = 1.0
# Accepts that fail because the client went away before they came: the next may well succeed.
ACCEPT_ABANDONED = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EINTR})
# TLS handshakes under way at once on a listener; past it, the oldest is closed. Well above what
# honest clients start at once: each of theirs ends in milliseconds.
HANDSHAKES_PENDING_MAX = 256
# Each names its peer, so a flood of failing handshakes is held back by count.
_HANDSHAKE_FAILURES_LOGGED = LineBudget(logger, "TLS handshake failed", lines_max=CLOSES_LOGGED_MAX)


class CannotListen(Exception):
    """The listener's address cannot be bound (in use, not local, not resolvable)."""


class KafkaServer:
    def __init__(self, services: Services, host: str, port: int, *, max_request_bytes: int, metrics: BrokerMetrics,
                 settings: Mapping[str, Any] | None = None, on_failure: Callable[[], None] = lambda: None,
                 listener: str = "PLAINTEXT", tls: ssl.SSLContext | None = None,
                 identify: Callable[[asyncio.BaseTransport], str | None] | None = None,
                 sasl: Callable[[], SaslSession] | None = None,
                 broker_connections: BrokerConnections | None = None, quotas: ClientQuotaManagers | None = None):
        """`settings`: the listener's limits by Kafka name (max.connections, max.connections.per.ip
        and its overrides, connections.max.idle.ms, queued.max.request.bytes); None: their defaults.
        `listener`: the listener's name; `tls`: the context an SSL listener serves with (None:
        plaintext), replaced by `tls` for the connections accepted after; `identify`: the
        principal of a new connection (principals.py; None: User:ANONYMOUS); `sasl`: makes each
        new connection's SASL session, on a SASL_PLAINTEXT or SASL_SSL listener;
        `broker_connections`: every listener's, held to the broker-wide max.connections (None:
        this listener's alone). `quotas`: the client quotas enforced (None: none)."""
        settings = defaults() if settings is None else settings
        self._services = services
        self._quotas = quotas
        self.listener = listener
        self.tls = tls
        self._identify = identify
        self._sasl = sasl
        self._handshakes: dict[asyncio.Task, None] = {}  # under way, oldest first
        self._metrics = metrics
        self.host, self.port = host, port
        self._max_request_bytes = max_request_bytes
        self._idle_max_ms = settings["connections.max.idle.ms"]
        self._per_ip_overrides = settings["max.connections.per.ip.overrides"]
        max_setting, max_connections = listener_max_connections(settings, listener)
        self._limits = ConnectionLimits(max_connections=max_connections, per_ip_max=settings["max.connections.per.ip"],
                                        metrics=metrics, listener=listener, max_connections_setting=max_setting,
                                        broker=broker_connections)
        self._memory = RequestMemory(settings["queued.max.request.bytes"])
        self._on_failure = on_failure
        self._listeners: list[socket.socket] = []  # one per address the host resolves to, as asyncio binds
        self._serving: asyncio.Task | None = None  # the accept and sweep tasks, from start to stop

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            for family, *_, address in dict.fromkeys(await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM,
                                                                          flags=socket.AI_PASSIVE)):
                self._listeners.append(socket.create_server(address, family=family, backlog=LISTEN_BACKLOG))
                self._listeners[-1].setblocking(False)
        except OSError as error:
            self._close_listeners()
            raise CannotListen(f"cannot listen on {self.host}:{self.port}: {error.strerror or error}") from None
        self.port = self._listeners[0].getsockname()[1]
        self._limits.per_ip_overrides = await addresses_of(self._per_ip_overrides)
        self._limits.watch_descriptors(raise_descriptor_limit())
        await self._limits.count_descriptors(loop.time())
        self._serving = asyncio.create_task(self._serve(), name=f"kafka-listener-{self.listener}")
        self._serving.add_done_callback(self._served)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        """(address, port) of each socket bound: one per address the host resolved to."""
        return [listener.getsockname()[:2] for listener in self._listeners]

    @property
    def connection_count(self) -> int:
        return len(self._limits.connections)

    @property
    def queued_request_bytes(self) -> int:
        return self._memory.used_bytes

    async def _serve(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            for listener in self._listeners:
                tasks.create_task(self._accept(listener, tasks))
            tasks.create_task(self._sweep())

    def _served(self, serving: asyncio.Task) -> None:
        if not serving.cancelled():
            logger.critical("the kafka listener stopped serving", exc_info=serving.exception())
            self._on_failure()

    async def _accept(self, listener: socket.socket, tasks: asyncio.TaskGroup) -> None:
        loop = asyncio.get_running_loop()
        retry_s = ACCEPT_RETRY_MIN_S
        while True:  # until stop() cancels it; each turn accepts a connection or waits
            await self._limits.wait_for_room()
            try:
                accepted, peer = await loop.sock_accept(listener)
            except OSError as error:
                if error.errno in ACCEPT_ABANDONED:
                    continue
                if error.errno in DESCRIPTORS_EXHAUSTED:
                    self._limits.descriptors_exhausted()
                self._metrics.accept_paused("accept_failed")
                logger.warning("accepting a connection failed, trying again after a pause error=%s",
                               errno.errorcode.get(error.errno, error))
                await asyncio.sleep(retry_s)
                retry_s = min(2 * retry_s, ACCEPT_RETRY_MAX_S)
                continue
            retry_s = ACCEPT_RETRY_MIN_S
            if not self._limits.admits(peer[0]):
                accepted.close()
                continue
            if self.tls is not None:
                if len(self._handshakes) >= HANDSHAKES_PENDING_MAX:
                    oldest = next(iter(self._handshakes))
                    del self._handshakes[oldest]  # its own callback would come only once it ends
                    oldest.cancel()
                    self._metrics.connection_closed("tls_handshakes_pending")
                handshake = tasks.create_task(self._serve_accepted(accepted, peer, self.tls))
                self._handshakes[handshake] = None
                handshake.add_done_callback(lambda ended: self._handshakes.pop(ended, None))
            else:
                await self._serve_accepted(accepted, peer, None)

    async def _serve_accepted(self, accepted: socket.socket, peer: Any, tls: ssl.SSLContext | None) -> None:
        loop = asyncio.get_running_loop()
        try:
            if accepted.family in (socket.AF_INET, socket.AF_INET6):
                accepted.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is None:
                await loop.connect_accepted_socket(self._connection, accepted)
            else:
                await loop.connect_accepted_socket(self._connection, accepted, ssl=tls,
                                                   ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError) as error:  # the client went away already, or failed the handshake
            if tls is None:
                logger.debug("accepted connection not served listener=%s peer=%s error=%r", self.listener, peer, error)
            else:
                if _HANDSHAKE_FAILURES_LOGGED.allows():
                    logger.info("TLS handshake failed, connection closed listener=%s peer=%s error=%r", self.listener,
                                peer, error)
                self._metrics.connection_closed("tls_handshake")
            accepted.close()
        except asyncio.CancelledError:  # the server stops, or a newer connection took its place (see TLS)
            accepted.close()
            raise

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        idle_max_s = self._idle_max_ms / 1000
        while True:  # until stop() cancels it
            await asyncio.sleep(min(SWEEP_INTERVAL_MAX_S, idle_max_s / 4))
            now_s = loop.time()
            for connection in list(self._limits.connections):  # bounded by max.connections
                if connection.idle_s(now_s) >= idle_max_s:
                    connection.close_idle(f"idle past connections.max.idle.ms={self._idle_max_ms}")
                    self._metrics.connection_closed("connections.max.idle.ms")
                else:
                    connection.trim()
            await self._limits.count_descriptors(now_s)
            self._give_descriptors_back(loop.time())

    def _give_descriptors_back(self, now_s: float) -> None:
        """Close the connections idle longest that hold descriptors the broker's own files need."""
        excess = self._limits.excess_connections()
        if not excess:
            return
        idle = [connection for connection in self._limits.connections if connection.idle_s(now_s) > 0]
        idle.sort(key=lambda connection: connection.idle_s(now_s), reverse=True)
        logger.warning("closing the connections idle longest: the broker's own files need the file descriptors "
                       "they hold")
        for connection in idle[:excess]:  # bounded by the excess
            connection.close_idle("its file descriptor is needed by the broker's own files")
            self._metrics.connection_closed("descriptors")

    def _connection(self) -> KafkaConnection:
        # The broker whose follower connection this is, once it named that broker's registered
        # life: no other client can have a live broker presumed gone by closing a connection.
        follower: list[int] = []
        # Requests handled and not yet answered, by their task: (api, received, handled) for
        # the sending and total times. At most the connection's requests in flight.
        handled: dict[asyncio.Future, tuple[str, float, float]] = {}

        def dispatch(request: codec.Request) -> Awaitable[list[bytes] | None]:
            # Called as the frame is decoded; the coroutine runs when the loop gets to it (queued).
            if not follower and (broker_id := registered_follower(request.client_id, lambda: self._services.metadata.brokers)) is not None:
                follower.append(broker_id)
            return self._dispatch(request, time.perf_counter(), handled, connection)

        def answered(task: asyncio.Future) -> None:
            timing = handled.pop(task, None)  # None for an answer the connection made itself
            if timing is not None:
                self._metrics.request_sent(*timing, time.perf_counter())

        def lost() -> None:
            if follower:
                # Perhaps its process died: the broker finds out at once (LeaderConnections).
                self._services.follower_connection_lost(follower[0])

        connection = KafkaConnection(
            dispatch,
            unsupported_version_answer,
            max_request_bytes=self._max_request_bytes,
            in_flight_max=IN_FLIGHT_PER_CONNECTION_MAX,
            # One largest request at a time, as Kafka reads one request per connection at a time;
            # pipelined smaller ones up to its size.
            queued_bytes_max=self._max_request_bytes,
            memory=self._memory,
            registry=self._limits,
            listener=self.listener,
            identify=self._identify,
            sasl=None if self._sasl is None else self._sasl(),
            on_lost=lost,
            on_answered=answered,
        )
        return connection

    async def _dispatch(self, request: codec.Request, received_s: float,
                        handled: dict[asyncio.Future, tuple[str, float, float]],
                        connection: KafkaConnection) -> list[bytes] | None:
        started_s = time.perf_counter()
        if self._quotas is None or not counted(request):
            body = await HANDLERS[request.api_key](self._services, request)
            throttle_ms = 0
        elif not self._quotas.limit(user_of_principal(request.principal), request.client_id or ""):
            body = await HANDLERS[request.api_key](self._services, request)
            throttle_ms = set_throttle_ms(body)  # the controller mutation quota's, if any
            if throttle_ms > 0:
                connection.mute(throttle_ms / 1000)
        else:
            # As Kafka reads a throttled client's next request only once the throttle is over:
            # one request at a time, each after the mute, which requests read before it began
            # would otherwise escape.
            async with connection.turns:
                await connection.unmuted()
                spent_s = [0.0]
                body = await run_timed(HANDLERS[request.api_key](self._services, request), spent_s)
                throttle_ms = throttle_time_ms(self._quotas, request, body, spent_s[0])
                if throttle_ms > 0:
                    connection.mute(throttle_ms / 1000)
        api, handled_s = API_NAMES[request.api_key], time.perf_counter()
        self._metrics.request_handled(api, request.api_version, received_s, started_s, handled_s)
        handled[asyncio.current_task()] = (api, received_s, handled_s)
        if throttle_ms > 0:
            body = with_throttle(body, throttle_ms)
            if not client_throttles(request):
                await asyncio.sleep(throttle_ms / 1000)
        if body is None:
            return None
        count_error(self._metrics, request, getattr(body, "error_code", ErrorCode.none))  # not every response has one
        return codec.encode_response(request.api_key, request.api_version, request.correlation_id, body)

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        if not self._listeners:
            return
        await cancel_and_wait(self._serving)  # and the handshakes under way, in its task group
        self._close_listeners()
        await asyncio.gather(*(connection.drain_and_close(drain_timeout_s) for connection in list(self._limits.connections)))

    def _close_listeners(self) -> None:
        for listener in self._listeners:
            listener.close()
        self._listeners.clear()
