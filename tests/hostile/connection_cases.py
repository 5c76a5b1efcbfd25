"""Cases about connections rather than their bytes: slow senders (size prefixes and nothing
more, frames a byte at a time, silence) and floods (past the file limit, past the per-IP and
total connection limits, big requests all at once).
"""

from __future__ import annotations

import dataclasses
import select
import socket
import struct
import time

from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey

from .cases import (CHECK_SOURCE, FLOOD_MANY_HOSTS, FLOOD_ONE_HOST, LIMIT_CHECK_TIMEOUT_S, SLOW_SOURCE, Case,
                    Target)
from .mutations import DEFAULT_MAX_REQUEST_BYTES
from .seeds import Names, encode, request_values
from .wire import Connection, connect, error_name

# Slow senders -----------------------------------------------------------------------------------

class _Held:
    """Connections a case opens and holds; all closed on leaving the `with`."""

    def __init__(self) -> None:
        self.sockets: list[socket.socket] = []

    def __enter__(self) -> _Held:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for sock in self.sockets:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def open(self, target: Target, source: str, timeout_s: float = 2.0) -> socket.socket | None:
        try:
            sock = connect(target.host, target.port, source, timeout_s, target.tls)
        except OSError:
            return None
        self.sockets.append(sock)
        return sock


def _still_open(sock: socket.socket) -> bool:
    """Whether the broker has not closed `sock` (nothing it sent is read: it sends nothing unasked)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return True
    try:
        return sock.recv(1 << 16, socket.MSG_PEEK) != b""
    except OSError:
        return False


@dataclasses.dataclass
class SlowSenders(Case):
    """Connections that each send a size prefix announcing `announced_bytes`, then the frame a
    byte every `interval_s` for `duration_s`, or nothing at all (interval_s None): memory
    reserved for bytes that come slowly or never. Another connection is served meanwhile."""

    name: str
    connections: int
    announced_bytes: int | None  # None: socket.request.max.bytes, the largest frame accepted
    interval_s: float | None = None
    duration_s: float = 2.0
    kind: str = "slow"

    def run(self, target: Target) -> list[str]:
        announced = struct.pack(">i", self.announced_bytes or target.max_request_bytes)
        with _Held() as held:
            senders = [sock for sock in (held.open(target, SLOW_SOURCE) for _ in range(self.connections)) if sock]
            for sock in senders:
                sock.sendall(announced)
            deadline = time.monotonic() + self.duration_s
            while self.interval_s is not None and time.monotonic() < deadline:  # bounded by the deadline
                for sock in senders:
                    try:
                        sock.send(b"\x00")
                    except OSError:
                        pass  # closed by the broker: a limit on slow senders is allowed
                time.sleep(self.interval_s)
            if not target.answers_api_versions():
                return [f"ApiVersions was not answered within {LIMIT_CHECK_TIMEOUT_S:.0f} s while they were held"]
        return []

    def reproducer(self) -> bytes:
        return struct.pack(">i", self.announced_bytes or DEFAULT_MAX_REQUEST_BYTES)


@dataclasses.dataclass
class IdleHolders(Case):
    """Connections silent from the start, or after part of a frame: connections.max.idle.ms
    must close them."""

    connections: int = 16
    kind: str = "slow"
    name: str = "16 idle connections, half of them after part of a frame"
    needs_limits: bool = True

    def run(self, target: Target) -> list[str]:
        idle_s = target.limits.connections_max_idle_ms / 1000
        with _Held() as held:
            for index in range(self.connections):
                sock = held.open(target, SLOW_SOURCE)
                if sock is not None and index % 2:
                    sock.sendall(struct.pack(">i", 100) + b"\x00" * 10)
            patience_s = 3 * idle_s + 5
            deadline = time.monotonic() + patience_s
            while (open_count := sum(_still_open(sock) for sock in held.sockets)) and time.monotonic() < deadline:
                time.sleep(0.1)  # bounded by the deadline
        if open_count:
            return [f"{open_count} of {self.connections} idle connections were still open {patience_s:.0f} s later "
                    f"(connections.max.idle.ms={target.limits.connections_max_idle_ms})"]
        return []


# Floods ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class DescriptorFlood(Case):
    """More idle connections than the broker has file descriptors (it runs with RLIMIT_NOFILE
    `descriptors`), from many hosts; a topic created meanwhile must have a leader once the
    flood ends."""

    connections: int = 1100
    kind: str = "flood"
    topic: str = "hostile-flooded"

    @property
    def name(self) -> str:
        return f"{self.connections} idle connections (past the broker's file limit), a topic created meanwhile"

    def run(self, target: Target) -> list[str]:
        with Connection(target.host, target.port, source=CHECK_SOURCE, tls=target.tls) as admin:
            with _Held() as held:
                refused_in_a_row = 0
                for index in range(self.connections):
                    if held.open(target, FLOOD_MANY_HOSTS[index % len(FLOOD_MANY_HOSTS)], timeout_s=1.0) is None:
                        refused_in_a_row += 1
                        if refused_in_a_row >= 3:
                            break
                    else:
                        refused_in_a_row = 0
                _create_topic(admin, self.topic)
            return _topic_gets_a_leader(target, self.topic)


def _create_topic(connection: Connection, topic: str) -> None:
    values = request_values(ApiKey.CREATE_TOPICS, 5, Names(created_topic=topic))
    connection.request(ApiKey.CREATE_TOPICS, 5, values | {"validate_only": False, "timeout": 10_000})


def _topic_gets_a_leader(target: Target, topic: str, timeout_s: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    state = "no answer"
    created_again = False
    while time.monotonic() < deadline:  # bounded by the deadline
        try:
            with Connection(target.host, target.port, source=CHECK_SOURCE, tls=target.tls) as connection:
                answer = connection.request(ApiKey.METADATA, 9, request_values(ApiKey.METADATA, 9, Names(topic=topic)))
                if answer is not None:
                    found = answer.topics[0]
                    if found.error_code == ErrorCode.unknown_topic_or_partition and not created_again:
                        _create_topic(connection, topic)  # the creation during the flood was refused: ask again
                        created_again = True
                    elif found.error_code == 0 and found.partitions and found.partitions[0].error_code == 0 \
                            and found.partitions[0].leader_id >= 0:
                        return []
                    state = f"topic error {error_name(found.error_code)}, partitions " + \
                        str([(error_name(p.error_code), p.leader_id) for p in found.partitions])
        except OSError as error:
            state = f"connection failed: {error}"
        time.sleep(0.2)
    return [f"topic {topic} had no leader {timeout_s:.0f} s after the flood ended ({state})"]


@dataclasses.dataclass
class OneHostFlood(Case):
    """More connections from one host than max.connections.per.ip, each asking ApiVersions:
    at most the limit are served, and another host is served meanwhile."""

    kind: str = "flood"
    name: str = "max.connections.per.ip + 16 connections from one host"
    needs_limits: bool = True

    def run(self, target: Target) -> list[str]:
        limit = target.limits.max_connections_per_ip
        with _Held() as held:
            served = _served(target, held, [FLOOD_ONE_HOST] * (limit + 16))
            problems = [] if target.answers_api_versions() else ["another host was not served during the flood"]
        if served > limit:
            problems.append(f"{served} connections from one host were served (max.connections.per.ip={limit})")
        return problems


@dataclasses.dataclass
class ManyHostFlood(Case):
    """More connections than max.connections, from hosts each under the per-IP limit: at most
    the limit are served, and once they close, a new connection is served again."""

    kind: str = "flood"
    name: str = "max.connections + 32 connections from many hosts"
    needs_limits: bool = True

    def run(self, target: Target) -> list[str]:
        limits = target.limits
        per_host = max(1, limits.max_connections_per_ip - 1)
        count = limits.max_connections + 32
        sources = [FLOOD_MANY_HOSTS[index // per_host % len(FLOOD_MANY_HOSTS)] for index in range(count)]
        with _Held() as held:
            served = _served(target, held, sources)
        problems = []
        if served > limits.max_connections:
            problems.append(f"{served} connections were served (max.connections={limits.max_connections})")
        if not target.answers_api_versions():
            problems.append("a new connection was not served after the flood ended")
        return problems


def _served(target: Target, held: _Held, sources: list[str]) -> int:
    """Opens a connection from each source, sends ApiVersions on each, and counts the answers
    that come before connections.max.idle.ms could close the first answered ones: a slot an
    idle connection gives back serves a waiting one, which is the limit working, not broken."""
    request = encode(ApiKey.API_VERSIONS, 0, {})
    # From the first connection on: the first answered is the first the idle sweep may close.
    deadline = time.monotonic() + min(3.0, 0.9 * target.limits.connections_max_idle_ms / 1000)
    for source in sources:
        sock = held.open(target, source, timeout_s=1.0)
        if sock is not None:
            try:
                sock.sendall(request)
            except OSError:
                pass
    served = 0
    waiting = list(held.sockets)
    while waiting and time.monotonic() < deadline:  # bounded by the deadline
        readable, _, _ = select.select(waiting, [], [], max(0.0, deadline - time.monotonic()))
        for sock in readable:
            waiting.remove(sock)
            try:
                served += len(sock.recv(1 << 16)) > 0
            except OSError:
                pass
    return served


@dataclasses.dataclass
class QueuedBytesFlood(Case):
    """Many connections each sending a 60 MB request at once (a Metadata request with a long
    tail, which Kafka ignores): queued.max.request.bytes bounds what the broker holds."""

    connections: int = 40  # 2.4 GB at once: past the broker's 2 GiB address space unless it bounds them
    frame_bytes: int = 60 << 20
    kind: str = "flood"
    needs_limits: bool = True

    @property
    def name(self) -> str:
        return f"{self.connections} connections each sending a {self.frame_bytes >> 20} MB request at once"

    def run(self, target: Target) -> list[str]:
        request = encode(ApiKey.METADATA, 1, {"topics": []})
        frame = struct.pack(">i", self.frame_bytes - 4) + request[4:] + bytes(self.frame_bytes - len(request))
        with _Held() as held:
            for index in range(self.connections):
                sock = held.open(target, FLOOD_MANY_HOSTS[index % len(FLOOD_MANY_HOSTS)])
                if sock is not None:
                    sock.setblocking(False)
            sent = {sock: 0 for sock in held.sockets}
            deadline = time.monotonic() + 10.0
            view = memoryview(frame)
            while sent and time.monotonic() < deadline:  # bounded by the deadline
                _, writable, _ = select.select([], list(sent), [], 0.1)
                for sock in writable:
                    try:
                        sent[sock] += sock.send(view[sent[sock]:sent[sock] + (1 << 20)])
                    except OSError:
                        del sent[sock]
                        continue
                    if sent[sock] == len(frame):
                        del sent[sock]
            if not target.answers_api_versions():
                return ["ApiVersions was not answered while the big requests were sent"]
        return []


