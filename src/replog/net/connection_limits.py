"""Which connections the Kafka listener accepts: Kafka's connection quotas (max.connections,
max.connections.per.ip and its overrides), and a bound Kafka leaves to the operator, file
descriptors. A client meets each as it would meet Kafka's:

- max.connections, broker-wide, over every listener's connections (BrokerConnections), and
  listener.name.<listener>.max.connections, one listener's (max.connections where unset, as
  Kafka's listener quota falls back to it): at either limit the listener stops accepting until
  a connection closes, as Kafka's acceptor blocks; connections that come meanwhile wait in the
  listen backlog (the kernel completes their handshake, and refuses them once the backlog is
  full). The inter-broker listener, when there are others, is exempt from the broker-wide limit
  (Kafka's protected listener): a broker still reaches its peers when clients took every
  connection, and the connection idle longest on another listener is closed to make room.
- max.connections.per.ip, and its overrides by host: a connection past its address's limit is
  closed as soon as it is accepted.
- file descriptors: the soft RLIMIT_NOFILE is raised to the hard limit at start (the JVM does
  so for Kafka), and the server also stops accepting while one more connection would leave
  fewer than `headroom_descriptors` for the broker's own files (log segments, index and
  checkpoint writes, the store, replication, metrics scrapes), so that connections never take
  the descriptors the logs need. When the broker's own files grow into that headroom (a topic
  of many partitions made while connections fill the rest), the connections idle longest are
  closed to give it back. The broker's own are counted (/proc/self/fd) when the listener
  starts and again by the server's sweep, at a pace that keeps the count's cost near a
  percent of one core; an accept that fails for want of descriptors all the same (EMFILE,
  ENFILE) makes them count as exhausted until the next count.

connections.max.idle.ms is the server's sweep (server.py), which asks each connection how long
it has been idle (framing.py). Refusals and pauses are counted (obs/metrics.py) and logged as
warnings whose text stays the same while they repeat, so that the log's repeat filter
(obs/logs.py) writes one line per kind per interval, saying how many it held back.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import logging
import os
import resource
import socket
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from replog.config import HostCount
from replog.obs import BrokerMetrics

if TYPE_CHECKING:
    from .framing import KafkaConnection

logger = logging.getLogger(__name__)

DESCRIPTORS_EXHAUSTED = frozenset({errno.EMFILE, errno.ENFILE})
HEADROOM_DESCRIPTORS_MIN = 64
HEADROOM_SHARE = 10  # a tenth of the descriptor limit is kept for the broker's own files
DESCRIPTOR_COUNT_INTERVAL_MIN_S = 1.0
DESCRIPTOR_COUNT_COST_SHARE = 100  # the next count waits at least this many times the last one took


def raise_descriptor_limit() -> int | None:
    """Raise the soft RLIMIT_NOFILE to the hard limit, if it is finite; the soft limit now
    (None: unlimited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as error:
            logger.warning("file descriptor limit not raised soft=%d hard=%d error=%s", soft, hard, error)
    return None if soft == resource.RLIM_INFINITY else soft


def count_open_descriptors() -> tuple[int, float]:
    """This process's open file descriptors, and the seconds counting them took (OSError where
    /proc cannot say, or with EMFILE when not one is left to list them)."""
    started_s = time.monotonic()
    count = len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    return count, time.monotonic() - started_s


def peer_address(address: str) -> str:
    """An IPv4 peer of a dual-stack listener as its IPv4 address, so that it meets its own limit."""
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(parsed, "ipv4_mapped", None)
    return str(mapped) if mapped is not None else str(parsed)


async def addresses_of(host_counts: Iterable[HostCount]) -> dict[str, int]:
    """max.connections.per.ip.overrides by address: each host as it resolves now (Kafka resolves
    them when it reads the setting). A host that does not resolve is left out, with a warning."""
    loop = asyncio.get_running_loop()
    by_address: dict[str, int] = {}
    for host, count in host_counts:  # bounded by the setting's entries
        try:
            found = await loop.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as error:
            logger.warning("max.connections.per.ip.overrides names a host that does not resolve, left out host=%s "
                           "error=%s", host, error)
            continue
        for *_, address in found:
            by_address[peer_address(address[0])] = count
    return by_address


class BrokerConnections:
    """Every listener's connections, held to the broker-wide max.connections; the inter-broker
    listener's exempt while there are other listeners."""

    def __init__(self, max_connections: int, protected_listener: str | None = None):
        self.max_connections = max_connections
        self.protected_listener = protected_listener
        self.listeners: list[ConnectionLimits] = []
        self.room = asyncio.Event()  # set when a connection closes on any listener, or descriptors were counted

    @property
    def count(self) -> int:
        return sum(len(listener.connections) for listener in self.listeners)  # bounded by the listeners

    def protects(self, listener: str) -> bool:
        return listener == self.protected_listener and len(self.listeners) > 1

    def idlest_unprotected(self, now_s: float) -> KafkaConnection | None:
        """The connection idle longest on a listener the broker-wide limit holds, if any."""
        connections = [connection for listener in self.listeners if not self.protects(listener.listener)
                       for connection in listener.connections]
        return max(connections, key=lambda connection: connection.idle_s(now_s), default=None)


def listener_max_connections(settings: Mapping[str, Any], listener: str) -> tuple[str, int]:
    """(the setting's name, its value) that bounds listener `listener`'s connections."""
    name = f"listener.name.{listener.lower()}.max.connections"
    return (name, settings[name]) if name in settings else ("max.connections", settings["max.connections"])


class ConnectionLimits:
    """One listener's open connections, by address, and whether its server may accept another."""

    def __init__(self, *, max_connections: int, per_ip_max: int, metrics: BrokerMetrics, listener: str = "PLAINTEXT",
                 max_connections_setting: str = "max.connections", broker: BrokerConnections | None = None):
        """`broker`: the connections of the broker's every listener (None: this listener's alone,
        held to `max_connections`)."""
        self.listener = listener
        self.connections: set[KafkaConnection] = set()
        self._by_address: dict[str, int] = {}
        self._max_connections = max_connections
        self._max_connections_setting = max_connections_setting
        self._broker = BrokerConnections(max_connections) if broker is None else broker
        self._broker.listeners.append(self)
        self._per_ip_max = per_ip_max
        self.per_ip_overrides: dict[str, int] = {}  # by address: addresses_of(the setting), once the listener starts
        self._metrics = metrics
        self.descriptor_limit: int | None = None  # None: not watched (before the listener starts, or unlimited)
        self.headroom_descriptors = 0
        self._own_descriptors = 0  # open but not a connection's, as last counted
        self._next_count_s = 0.0

    def watch_descriptors(self, limit: int | None) -> None:
        """Keep connections within `limit` descriptors (None: unlimited), less the headroom."""
        self.descriptor_limit = limit
        self.headroom_descriptors = 0 if limit is None else max(HEADROOM_DESCRIPTORS_MIN, limit // HEADROOM_SHARE)

    # what connections (framing.py) report
    def opened(self, connection: KafkaConnection) -> None:
        self.connections.add(connection)
        address = peer_address(connection.peer_address)
        self._by_address[address] = self._by_address.get(address, 0) + 1
        if self._broker.protects(self.listener) and self._broker.count > self._broker.max_connections:
            self._make_room_for_protected()

    def _make_room_for_protected(self) -> None:
        idlest = self._broker.idlest_unprotected(asyncio.get_running_loop().time())
        if idlest is None:
            return
        idlest.close_idle(f"max.connections={self._broker.max_connections} reached, and the inter-broker listener "
                          f"{self.listener} took a connection: the one idle longest on another listener is closed")
        self._metrics.connection_closed("max.connections")

    def closed(self, connection: KafkaConnection) -> None:
        if connection not in self.connections:
            return  # never counted: closed before connection_made
        self.connections.discard(connection)
        address = peer_address(connection.peer_address)
        left = self._by_address.get(address, 1) - 1
        if left:
            self._by_address[address] = left
        else:
            self._by_address.pop(address, None)
        self._broker.room.set()

    # what the accept loop (server.py) asks
    async def wait_for_room(self) -> None:
        """Return once another connection may be accepted (max.connections, descriptors)."""
        reached = self._limit_reached()
        if reached is None:
            return
        kind, what = reached
        self._metrics.accept_paused(kind)
        logger.warning("not accepting connections until one closes: %s reached, new ones wait in the listen backlog",
                       what)
        while self._limit_reached() is not None:  # each turn waits for a close or a count
            self._broker.room.clear()
            await self._broker.room.wait()

    def admits(self, address: str) -> bool:
        """Whether a connection just accepted from `address` may stay (max.connections.per.ip)."""
        address = peer_address(address)
        limit = self.per_ip_overrides.get(address, self._per_ip_max)
        if self._by_address.get(address, 0) < limit:
            return True
        self._metrics.connection_refused("max.connections.per.ip")
        logger.warning("connection closed as accepted: its address has max.connections.per.ip=%d open", limit)
        return False

    def _limit_reached(self) -> tuple[str, str] | None:
        """The limit another connection would pass, as (kind, what to log), or None."""
        if len(self.connections) >= self._max_connections:
            return "max.connections", f"{self._max_connections_setting}={self._max_connections} on listener {self.listener}"
        if not self._broker.protects(self.listener) and self._broker.count >= self._broker.max_connections:
            return "max.connections", f"max.connections={self._broker.max_connections}, over every listener"
        if (self.descriptor_limit is not None and self._own_descriptors + self._broker.count + 1
                + self.headroom_descriptors > self.descriptor_limit):
            return "descriptors", (f"the file descriptor limit ({self.descriptor_limit}, of which "
                                   f"{self.headroom_descriptors} are kept for the broker's own files)")
        return None

    # descriptors
    def excess_connections(self) -> int:
        """How many connections hold descriptors the broker's own files need: the connections
        idle longest are closed to give them back (as Kafka closes the least recently used
        ones when over max.connections)."""
        if self.descriptor_limit is None:
            return 0
        return max(0, self._own_descriptors + self._broker.count + self.headroom_descriptors - self.descriptor_limit)

    def descriptors_exhausted(self) -> None:
        """An accept failed with EMFILE or ENFILE: every descriptor is taken until a count says otherwise."""
        if self.descriptor_limit is not None:
            self._own_descriptors = max(self._own_descriptors, self.descriptor_limit - self._broker.count)

    async def count_descriptors(self, now_s: float) -> None:
        """Count the broker's own descriptors, if the pace allows it at `now_s` (loop time)."""
        if self.descriptor_limit is None or now_s < self._next_count_s:
            return
        self._next_count_s = now_s + DESCRIPTOR_COUNT_INTERVAL_MIN_S
        try:
            counted, took_s = await asyncio.to_thread(count_open_descriptors)
        except OSError as error:
            if error.errno in DESCRIPTORS_EXHAUSTED:
                self.descriptors_exhausted()
            else:
                logger.warning("file descriptors not counted: connections are bounded by max.connections alone "
                               "error=%s", error)
                self.watch_descriptors(None)
            return
        self._next_count_s = now_s + max(DESCRIPTOR_COUNT_INTERVAL_MIN_S, DESCRIPTOR_COUNT_COST_SHARE * took_s)
        self._own_descriptors = max(0, counted - self._broker.count)
        self._broker.room.set()
