"""Connections from a follower to the leader brokers it fetches from, and which brokers are
presumed gone (see LeaderConnections); and, on the leader's side, which connections are a
follower's (fetch_from, registered_follower).

A follower's connections carry its broker id and its process's life id in their client id
(follower_client_id). The life id is random, new for each process, told to no client and left
out of log lines (client_id_for_logs): only the coordination store holds it, in the broker's
registration, and the broker's own connections carry it. A Fetch naming a replica id is a
follower's only when its client id carries that broker's registered life id (KIP-903's broker
epoch, checked where Kafka checks the CLUSTER_ACTION right); any client may claim a replica id
and a client id, none can name a life id it never saw.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import NamedTuple, TypeVar

from replog.coord_backends.paths import BrokerRegistration
from replog.net.client import BrokerConnection, BrokerRefused, BrokerUnavailable, ConnectionLost
from replog.net.client_security import NO_SECURITY, ClientSecurity
from replog.net.epoch_asks import EpochAsks
from replog.net.fetch_rounds import FetchRounds, RoundAnswer, RoundChanges
from replog.replica.partition import FetchFrom
from replog.replication.fetcher import EpochAsk, FetchReply, FetchSpec

logger = logging.getLogger(__name__)
T = TypeVar("T")

# How often a broker presumed gone is probed: a restarted one is believed again within this.
GONE_PROBE_INTERVAL_S = 0.25
# Probes after one whose connection the broker's end closed: a process being killed completes
# connections to its dying listener and drops them, and refuses only a moment later.
PROBES_AFTER_LOST_CONNECTION_MAX = 8
# The client id of a follower's connections, which tells a leader whose connection it was.
FOLLOWER_CLIENT_ID_PREFIX = "replog-follower-"
# A broker id is an int32: longer digit strings name no broker (and int() of thousands of
# digits raises).
_BROKER_ID_DIGITS_MAX = 10

Opener = Callable[[int, BrokerRegistration], Awaitable[BrokerConnection]]


def follower_client_id(broker_id: int, life_id: str | None) -> str:
    return f"{FOLLOWER_CLIENT_ID_PREFIX}{broker_id}" + (f".{life_id}" if life_id else "")


def _follower_and_life(client_id: str | None) -> tuple[int, str] | None:
    """(broker id, life id or "") in a follower connection's client id (follower_client_id),
    None for any other client."""
    if client_id is None or not client_id.startswith(FOLLOWER_CLIENT_ID_PREFIX):
        return None
    broker_id, _, life_id = client_id[len(FOLLOWER_CLIENT_ID_PREFIX):].partition(".")
    if not (broker_id.isascii() and broker_id.isdigit() and len(broker_id) <= _BROKER_ID_DIGITS_MAX):
        return None
    return int(broker_id), life_id


def client_id_for_logs(client_id: str | None) -> str | None:
    """`client_id` with any life id left out: it is what makes a connection a follower's."""
    follower = _follower_and_life(client_id)
    return client_id if follower is None or not follower[1] else f"{FOLLOWER_CLIENT_ID_PREFIX}{follower[0]}.*"


def follower_of(client_id: str | None) -> int | None:
    """The broker id in a follower connection's client id, None for any other client. Only the
    client's word: what may be trusted is registered_follower's."""
    follower = _follower_and_life(client_id)
    return None if follower is None else follower[0]


def _life_named(client_id: str | None, broker_id: int) -> str:
    """The life id a client id names for broker `broker_id`; "" if it names none of it."""
    follower = _follower_and_life(client_id)
    return follower[1] if follower is not None and follower[0] == broker_id else ""


def _is_life(life_id: str, known: str | None) -> bool:
    return bool(known) and hmac.compare_digest(life_id.encode(), known.encode())


def fetch_from(registrations: Mapping[int, BrokerRegistration], lives: Mapping[int, Collection[str]], broker_id: int,
               client_id: str | None) -> FetchFrom | None:
    """Which life of follower `broker_id` a fetch on a connection with `client_id` comes from
    (Partition.FetchFrom): the one registered now, an earlier one this broker saw registered
    (`lives`, MetadataCache.lives), or one it has not seen registered (UNSEEN: a restarted broker
    fetches before it registers, and so may a client posing as it). None when the client id
    names no life of the broker: a plain client posing as a follower, refused."""
    life_id = _life_named(client_id, broker_id)
    if not life_id:
        return None
    registered = registrations.get(broker_id)
    if registered is not None and _is_life(life_id, registered.life_id):
        return FetchFrom.REGISTERED
    if any(_is_life(life_id, earlier) for earlier in lives.get(broker_id, ())):  # bounded by LIVES_KEPT_PER_BROKER
        return FetchFrom.EARLIER
    return FetchFrom.UNSEEN


def registered_follower(client_id: str | None, registrations: Callable[[], Mapping[int, BrokerRegistration]]) -> int | None:
    """The broker whose registered life a connection with `client_id` is (see fetch_from), None
    for any other client; `registrations` is asked only for a client id of a follower's form."""
    follower = _follower_and_life(client_id)
    if follower is None:
        return None
    registered = registrations().get(follower[0])
    return follower[0] if registered is not None and _is_life(follower[1], registered.life_id) else None


class _Refusal(NamedTuple):
    registration: BrokerRegistration  # the address that refused
    first_at_s: float  # event-loop time of the first refusal in a row


class LeaderConnections:
    """One connection per leader broker, opened on first use, replaced after a failure; and
    which brokers are presumed gone.

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
    registration with it, so a broker the store still holds live is believed.

    The same evidence serves the other direction: when a follower's connection to this broker
    closes (a killed process's sockets are closed by its kernel at once), the broker probes the
    follower's own address, and a refusal presumes the follower gone. `on_presumed_gone` hears
    of each new presumption: replication acts on it (driver.py: a follower deposes a leader
    presumed gone; commit.py: a leader shrinks a follower presumed gone out of the ISR). A paused
    process keeps its sockets and its listener, whose backlog still accepts connections: it is
    never presumed gone, and its session decides, as before."""

    def __init__(self, broker_id: int, registrations: Callable[[], dict[int, BrokerRegistration]], session_timeout_ms: int,
                 open_connection: Opener | None = None, life_id: str | None = None,
                 security: Callable[[], ClientSecurity] = lambda: NO_SECURITY):
        self._broker_id = broker_id
        self._life_id = life_id  # this broker process's, in its registration and its fetches' client id
        self._registrations = registrations  # the live brokers as the metadata cache sees them
        self._presumption_max_s = session_timeout_ms / 1000
        self._open = open_connection or self._open_over_tcp
        # How the inter-broker listener is connected to now: its certificate files may be replaced.
        self._security = security
        self._connections: dict[int, BrokerConnection] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._refusals: dict[int, _Refusal] = {}  # bounded by the brokers in the cluster
        self._probes: dict[int, asyncio.Task] = {}
        self._fetch_rounds: dict[int, FetchRounds] = {}  # bounded by the brokers in the cluster
        self._epoch_asks: dict[int, EpochAsks] = {}  # bounded by the brokers in the cluster
        self._closed = False
        self.on_presumed_gone: Callable[[int], None] | None = None

    async def _open_over_tcp(self, broker_id: int, registration: BrokerRegistration) -> BrokerConnection:
        return await BrokerConnection.open(registration.host, registration.port,
                                           client_id=follower_client_id(self._broker_id, self._life_id), security=self._security())

    async def get(self, broker_id: int) -> BrokerConnection:
        async with self._locks.setdefault(broker_id, asyncio.Lock()):
            connection = self._connections.get(broker_id)
            if connection is not None and not connection.closed:
                return connection
            registration = self._registrations().get(broker_id)
            if registration is None:
                self._refusals.pop(broker_id, None)  # what refused says nothing of its next registration
                raise ConnectionError(f"leader broker {broker_id} is not registered")
            try:
                connection = await self._open(broker_id, registration)
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

    async def fetch_as_replica(self, broker_id: int, spec: FetchSpec) -> FetchReply:
        """A follower's fetch of one partition from leader `broker_id`, sent together with this
        broker's other fetches from it (net/fetch_rounds.py)."""
        rounds = self._fetch_rounds.get(broker_id)
        if rounds is None:
            async def send_round(specs: list[FetchSpec], changes: RoundChanges, max_wait_ms: int, max_bytes: int) -> RoundAnswer:
                return await self.call(broker_id, lambda connection: connection.fetch_as_replica(
                    self._broker_id, specs, max_wait_ms, max_bytes, changes))
            rounds = self._fetch_rounds[broker_id] = FetchRounds(send_round, f"{self._broker_id}-from-{broker_id}")
        return await rounds.fetch(spec)

    async def epoch_end(self, broker_id: int, ask: EpochAsk) -> object:
        """A follower's OffsetForLeaderEpoch for one partition to leader `broker_id`, sent
        together with this broker's other such asks to it (net/epoch_asks.py)."""
        asks = self._epoch_asks.get(broker_id)
        if asks is None:
            async def send(batch: list[EpochAsk]) -> dict:
                return await self.call(broker_id, lambda connection: connection.offsets_for_leader_epochs(batch, self._broker_id))
            asks = self._epoch_asks[broker_id] = EpochAsks(send)
        return await asks.epoch_end(ask)

    def presumed_gone(self, broker_id: int) -> bool:
        """Whether `broker_id`, as registered now, refused connections lately (see the class)."""
        refusal = self._refusals.get(broker_id)
        return refusal is not None and refusal.registration == self._registrations().get(broker_id) and self._lasts(refusal)

    def _lasts(self, refusal: _Refusal) -> bool:
        return asyncio.get_running_loop().time() < refusal.first_at_s + self._presumption_max_s

    def connection_failed(self, broker_id: int) -> None:
        """A connection to or from `broker_id` failed: find out now whether it is gone (see the
        class)."""
        if self._closed or broker_id == self._broker_id:
            return
        probe = self._probes.get(broker_id)
        if probe is None or probe.done():
            self._probes[broker_id] = asyncio.create_task(self._probe(broker_id), name=f"probe-broker-{broker_id}")

    def _refused(self, broker_id: int, registration: BrokerRegistration) -> None:
        refusal = self._refusals.get(broker_id)
        if refusal is None or refusal.registration != registration:
            self._refusals[broker_id] = _Refusal(registration, asyncio.get_running_loop().time())
            logger.info("broker presumed gone (connection refused) broker=%d gone_broker=%d address=%s:%d",
                        self._broker_id, broker_id, registration.host, registration.port)
            if self.on_presumed_gone is not None:
                self.on_presumed_gone(broker_id)

    async def _probe(self, broker_id: int) -> None:
        """Reconnect now, and while refused and presumed gone again every interval: the
        presumption ends by the session timeout, so this loop does too. A connection the
        broker's end closes is probed again too, a bounded number of times (see
        PROBES_AFTER_LOST_CONNECTION_MAX): it was caught dying, and a probe that stopped there
        left a killed leader named until its session expired."""
        lost_connections = 0
        while True:
            try:
                await self.get(broker_id)
                return  # it answers, and its fetchers find a connection waiting
            except BrokerRefused:
                if not self.presumed_gone(broker_id):
                    # Over: a refusal after this, of a broker killed again once it came back
                    # (with no connection to it meanwhile to end the presumption), is a new death.
                    self._refusals.pop(broker_id, None)
                    return
            except ConnectionLost as error:
                lost_connections += 1
                if lost_connections > PROBES_AFTER_LOST_CONNECTION_MAX:
                    self._not_presumed(broker_id, error)
                    return
            except ConnectionError as error:
                self._not_presumed(broker_id, error)  # unregistered, or not a refusal: nothing to presume
                return
            await asyncio.sleep(GONE_PROBE_INTERVAL_S)

    def _not_presumed(self, broker_id: int, error: ConnectionError) -> None:
        logger.info("broker not presumed gone (not refused) broker=%d probed_broker=%d error=%s", self._broker_id, broker_id, error)

    def close(self) -> None:
        self._closed = True
        for probe in self._probes.values():
            probe.cancel()
        self._probes.clear()
        for rounds in self._fetch_rounds.values():
            rounds.close()
        self._fetch_rounds.clear()
        for asks in self._epoch_asks.values():
            asks.close()
        self._epoch_asks.clear()
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
