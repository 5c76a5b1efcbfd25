"""The fuzzer's cases: what every case has (`Case`), what it attacks (`Target`), and the cases
that are frames (malformed requests, mutations.py; and wide ones). The batch cases are in
batch_cases.py, the slow senders and floods in connection_cases.py, the families a run goes
through in catalog.py.

A case attacks the broker described by a `Target` and returns the problems it saw itself (a
wrong batch accepted, a partition left unreadable, a broker that stopped answering while it
was attacked); whether the broker survived it, answers ApiVersions and logged no internal
error is checked after every case by the runner (arena.py), the same for all.

Hostile connections come from 127.0.0.2 and up, the checks from 127.0.0.1, so that per-IP
connection limits (max.connections.per.ip) stop the attackers, not the checks.
"""

from __future__ import annotations

import dataclasses
import ssl

from .mutations import DEFAULT_MAX_REQUEST_BYTES, Mutant
from .seeds import Names
from .wire import Connection, Ending, api_versions_answered
from .witness import PartitionProbe

CHECK_SOURCE = "127.0.0.1"
FRAME_SOURCE = "127.0.0.2"
SLOW_SOURCE = "127.0.0.3"
FLOOD_ONE_HOST = "127.0.0.4"
FLOOD_MANY_HOSTS = [f"127.0.0.{host}" for host in range(10, 250)]
FRAME_WAIT_S = 3.0  # a seed never waits (seeds.py): an answer or a close comes at once
LIE_WAIT_S = 0.3  # for a mutant that may rightly wait (Mutant.may_wait): not long
LIMIT_CHECK_TIMEOUT_S = 10.0


@dataclasses.dataclass(frozen=True)
class Limits:
    """The connection and memory limits the broker was started with (Kafka's names)."""

    max_connections: int = 200
    max_connections_per_ip: int = 50
    connections_max_idle_ms: int = 2000
    queued_max_request_bytes: int = 128 << 20  # Kafka requires at least socket.request.max.bytes (100 MB)

    def settings(self) -> dict[str, str]:
        return {"max.connections": str(self.max_connections),
                "max.connections.per.ip": str(self.max_connections_per_ip),
                "connections.max.idle.ms": str(self.connections_max_idle_ms),
                "queued.max.request.bytes": str(self.queued_max_request_bytes)}


@dataclasses.dataclass
class Target:
    """The broker under attack and what exists on it."""

    host: str
    port: int
    names: Names
    batch_topic: str  # plain, `batch_partitions` partitions: a batch case writes to one of its own
    compacted_topic: str  # cleanup.policy=compact, `compacted_partitions` partitions
    batch_partitions: int
    compacted_partitions: int
    probe: PartitionProbe | None = None  # None: partitions are not read back (the benchmark)
    limits: Limits | None = None  # None: the broker does not know the settings
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    metrics_address: str | None = None
    tls: ssl.SSLContext | None = None  # an SSL listener's: every connection's bytes go inside TLS

    def answers_api_versions(self, timeout_s: float = LIMIT_CHECK_TIMEOUT_S) -> bool:
        return api_versions_answered(self.host, self.port, timeout_s, source=CHECK_SOURCE, tls=self.tls)


class Case:
    kind: str
    name: str

    def run(self, target: Target) -> list[str]:
        raise NotImplementedError

    def reproducer(self) -> bytes | None:
        """The bytes that reproduce the case on one connection, where that is what it is."""
        return None


@dataclasses.dataclass
class FrameCase(Case):
    """Malformed frames on a connection of their own; the broker may answer or close it, and
    must do one or the other unless the mutant may rightly wait."""

    mutant: Mutant

    @property
    def kind(self) -> str:
        return self.mutant.kind

    @property
    def name(self) -> str:
        return self.mutant.name

    def run(self, target: Target) -> list[str]:
        with Connection(target.host, target.port, source=FRAME_SOURCE, tls=target.tls) as connection:
            wait_s = LIE_WAIT_S if self.mutant.may_wait else FRAME_WAIT_S
            exchange = connection.exchange(self.mutant.frames, len(self.mutant.frames), wait_s)
        if exchange.ending is Ending.SILENT and not self.mutant.may_wait:
            return [f"a complete request was neither answered nor refused within {wait_s:.0f} s"]
        return []

    def reproducer(self) -> bytes:
        return b"".join(self.mutant.frames)


@dataclasses.dataclass
class WideCase(Case):
    """A request naming 100,000 things (mutations.wide_mutants): while the broker works on it,
    another connection's ApiVersions is answered; the request itself is answered or refused."""

    mutant: Mutant
    kind: str = "wide"
    answer_timeout_s: float = 60.0

    @property
    def name(self) -> str:
        return self.mutant.name

    def run(self, target: Target) -> list[str]:
        problems = []
        with Connection(target.host, target.port, source=FRAME_SOURCE, timeout_s=self.answer_timeout_s,
                        tls=target.tls) as connection:
            if not connection.send(b"".join(self.mutant.frames)):
                return []  # refused at once, by a close
            if not target.answers_api_versions():
                problems.append(f"another connection's ApiVersions was not answered within "
                                f"{LIMIT_CHECK_TIMEOUT_S:.0f} s while the broker had this request")
            if connection.read_answers(1, self.answer_timeout_s).ending is Ending.SILENT:
                problems.append(f"neither answered nor refused within {self.answer_timeout_s:.0f} s")
        return problems

    def reproducer(self) -> bytes:
        return b"".join(self.mutant.frames)


