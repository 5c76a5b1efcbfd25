"""The fuzzer's cases, and the catalog of them a run goes through.

A case attacks the broker described by a `Target` and returns the problems it saw itself (a
wrong batch accepted, a partition left unreadable, a broker that stopped answering while it
was attacked); whether the broker survived it, answers ApiVersions and logged no internal
error is checked after every case by the runner (arena.py), the same for all.

Families (a case's `kind`):
    count, value, truncate, tail, size,    malformed frames from the seeds (mutations.py)
    version
    forged                                 Fetches posing as a follower
    wide                                   requests naming 100,000 topics, partitions, groups
    random                                 stacked random mutations (the long runs)
    batch                                  Produce with wrong, hostile or valid batches
    bomb                                   decompression bombs, on a plain and a compacted topic
    slow                                   slow-loris senders: size prefixes, trickles, silence
    flood                                  more connections than the broker has descriptors,
                                           from one host and from many, and big requests at once

Hostile connections come from 127.0.0.2 and up, the checks from 127.0.0.1, so that per-IP
connection limits (max.connections.per.ip) stop the attackers, not the checks.
"""

from __future__ import annotations

import dataclasses
import random
import select
import socket
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey

from . import batches
from .batches import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, CONTROL_BIT, GIB, TRANSACTIONAL_BIT
from .mutations import DEFAULT_MAX_REQUEST_BYTES, Mutant, MappedSeed, every_mutant, mapped, random_mutant, wide_mutants
from .seeds import Names, all_seeds, encode, request_values
from .wire import Connection, Ending, api_versions_answered, high_watermark, produce_errors, produce_frame
from .witness import PartitionProbe

CHECK_SOURCE = "127.0.0.1"
FRAME_SOURCE = "127.0.0.2"
SLOW_SOURCE = "127.0.0.3"
FLOOD_ONE_HOST = "127.0.0.4"
FLOOD_MANY_HOSTS = [f"127.0.0.{host}" for host in range(10, 250)]
FRAME_WAIT_S = 3.0  # a seed never waits (seeds.py): an answer or a close comes at once
LIE_WAIT_S = 0.3  # for a mutant that may rightly wait (Mutant.may_wait): not long
BATCH_WAIT_S = 30.0
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

    def answers_api_versions(self, timeout_s: float = LIMIT_CHECK_TIMEOUT_S) -> bool:
        return api_versions_answered(self.host, self.port, timeout_s, source=CHECK_SOURCE)


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
        with Connection(target.host, target.port, source=FRAME_SOURCE) as connection:
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
        with Connection(target.host, target.port, source=FRAME_SOURCE, timeout_s=self.answer_timeout_s) as connection:
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


class Expect(NamedTuple):
    """What Kafka does with a batch: "refused", "accepted", or "either" (only the broker's
    health and the partition's readability are checked); and why."""

    outcome: str
    why: str


REFUSED_LIKE_KAFKA = "Kafka's LogValidator refuses it"


@dataclasses.dataclass
class BatchCase(Case):
    """Produce requests to one partition of the plain or the compacted topic, one for each of
    `records()`; then the partition's high watermark and readability."""

    name: str
    records: Callable[[], list[bytes]]  # one Produce request each
    expect: Expect
    compacted: bool = False
    partition: int = 0
    read_from_start: bool = True  # False: the probe reads from after the case (bombs, which a consumer would inflate)
    kind: str = "batch"
    record_sets: int = 1  # entries for the partition in each request (>1: the same partition named again)

    def topic(self, target: Target) -> str:
        return target.compacted_topic if self.compacted else target.batch_topic

    def frames(self, target: Target) -> list[bytes]:
        topic = self.topic(target)
        return [produce_frame(topic, self.partition, records, record_sets=[records] * self.record_sets)
                for records in self.records()]

    def run(self, target: Target) -> list[str]:
        topic = self.topic(target)
        with Connection(target.host, target.port, source=CHECK_SOURCE) as checks:
            before = high_watermark(checks, topic, self.partition)
            frames = self.frames(target)
            with Connection(target.host, target.port, source=FRAME_SOURCE, timeout_s=BATCH_WAIT_S) as connection:
                exchange = connection.exchange(frames, len(frames), BATCH_WAIT_S)
            after = high_watermark(checks, topic, self.partition)
        problems = []
        errors = [code for answer in exchange.answers for code in produce_errors(answer)]
        accepted = errors.count(0)
        if self.expect.outcome == "refused" and accepted:
            problems.append(f"accepted (error 0 for {accepted} of {len(errors)} answers), yet {self.expect.why}; "
                            f"the high watermark moved from {before} to {after}")
        if self.expect.outcome == "accepted" and (accepted < len(frames) or exchange.ending is not Ending.ANSWERED):
            problems.append(f"a valid batch was not accepted: {exchange.ending.value}, errors "
                            f"{[_error_name(code) for code in errors]}")
        if not accepted and before is not None and after is not None and after != before:
            problems.append(f"refused, yet the high watermark moved from {before} to {after}")
        if exchange.ending is Ending.SILENT:
            problems.append(f"{len(frames) - len(exchange.answers)} of {len(frames)} Produce requests were neither "
                            f"answered nor refused within {BATCH_WAIT_S:.0f} s")
        untouched = not accepted and after == before  # refused, nothing appended: nothing to read
        if target.probe is not None and before is not None and not untouched:
            start = before if self.read_from_start else (after if after is not None else before)
            problems += target.probe.readable(topic, self.partition, start)
        return problems

    def reproducer(self) -> bytes:
        first = self.records()[0]
        return produce_frame("<topic>", self.partition, first, record_sets=[first] * self.record_sets)


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


# Batches -------------------------------------------------------------------------------------

def _records(count: int, *, deltas: list[int] | None = None, timestamp_deltas: list[int] | None = None) -> list[bytes]:
    deltas = list(range(count)) if deltas is None else deltas
    timestamp_deltas = [0] * count if timestamp_deltas is None else timestamp_deltas
    return [batches.record(delta, b"key-%d" % index, b"value-%d" % index, timestamp_delta=timestamp_delta)
            for index, (delta, timestamp_delta) in enumerate(zip(deltas, timestamp_deltas))]


def _one(make: Callable[[], bytes]) -> Callable[[], list[bytes]]:
    return lambda: [bytes(make())]


_CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}


def batch_cases() -> Iterator[BatchCase]:
    """Valid batches first (each codec: the encoder and the broker agree), then wrong ones."""
    three = b"".join(_records(3))
    refused = Expect("refused", REFUSED_LIKE_KAFKA)
    # Kafka reads offset deltas only to rewrite a compressed batch's; replog keeps batches as
    # they came, so a batch whose records contradict their offsets must not be stored at all.
    deltas_refused = Expect("refused", "its offset deltas contradict the offsets replog would store as they came")
    yield BatchCase("valid: 3 records, uncompressed", _one(lambda: batches.batch(_records(3))), Expect("accepted", ""))
    for label, codec in _CODECS.items():
        yield BatchCase(f"valid: 3 records, {label}", _one(lambda codec=codec: batches.batch(
            batches.compressed(codec, three), record_count=3, attributes=codec)), Expect("accepted", ""))
    yield BatchCase("valid: 3 records, snappy in xerial framing", _one(lambda: batches.batch(
        batches.xerial([batches.compressed(CODEC_SNAPPY, three)]), record_count=3, attributes=CODEC_SNAPPY)), Expect("accepted", ""))

    wrong: list[tuple[str, Callable[[], bytes], Expect]] = [
        ("count 2**31-1 with an empty body (61 bytes)", lambda: batches.batch(b"", record_count=2**31 - 1), refused),
        ("40 bytes of garbage claiming 3 records", lambda: batches.batch(bytes(range(40)), record_count=3), refused),
        ("count 0, no records", lambda: batches.batch(b"", record_count=0, last_offset_delta=0), refused),
        ("count 5 over 3 records", lambda: batches.batch(_records(3), record_count=5), refused),
        ("count 1 over 3 records", lambda: batches.batch(_records(3), record_count=1), refused),
        ("last offset delta 100 over 3 records", lambda: batches.batch(_records(3), last_offset_delta=100), refused),
        ("last offset delta -1", lambda: batches.batch(_records(3), last_offset_delta=-1), refused),
        ("offset deltas 0, 0, 0", lambda: batches.batch(_records(3, deltas=[0, 0, 0])), deltas_refused),
        ("offset deltas 0, 2, 1", lambda: batches.batch(_records(3, deltas=[0, 2, 1])), deltas_refused),
        ("offset deltas 0, 1, 5 with last offset delta 2", lambda: batches.batch(_records(3, deltas=[0, 1, 5])), deltas_refused),
        ("offset delta -1", lambda: batches.batch(_records(3, deltas=[-1, 0, 1])), deltas_refused),
        ("timestamp 2**62", lambda: batches.batch(_records(3), base_timestamp=2**62),
         Expect("refused", "log.message.timestamp.after.max.ms (1 hour, Kafka 4's default) refuses it")),
        ("timestamp delta 2**62", lambda: batches.batch(_records(3, timestamp_deltas=[0, 0, 2**62])),
         Expect("refused", "log.message.timestamp.after.max.ms (1 hour) refuses it")),
        ("max timestamp below a record's", lambda: batches.batch(_records(3, timestamp_deltas=[0, 0, 5000]),
                                                                max_timestamp=batches.now_ms() - 1000),
         Expect("either", "Kafka rewrites the max timestamp")),
        ("timestamp -2**62", lambda: batches.batch(_records(3), base_timestamp=-(2**62)), Expect("either", "")),
        ("timestamp -5", lambda: batches.batch(_records(3), base_timestamp=-5), Expect("either", "")),
        ("a record running 100 bytes past its batch", lambda: batches.batch(
            _records(2) + [batches.record(2, b"k", b"v", length=120)]), refused),
        ("16 bytes after the last record", lambda: batches.batch(_records(3) + [b"\x01" * 16]), refused),
        ("a record of negative length", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", length=-7)]), refused),
        ("a key of length -2", lambda: batches.batch(
            _records(2) + [batches.varint(7) + b"\x00\x00\x04" + batches.varint(-2) + batches.varint(1) + b"v\x00"]),
         Expect("refused", "librdkafka stops reading the partition at it (Kafka reads any negative length as null)")),
        ("a value claiming 2**31-1 bytes", lambda: batches.batch(
            _records(2) + [batches.varint(12) + b"\x00\x00\x04" + batches.varint(1) + b"k" + batches.varint(2**31 - 1) + b"v\x00"]),
         refused),
        ("a header count of 2**31-1", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", header_count=2**31 - 1)]), refused),
        ("a header count of -1", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", header_count=-1)]), refused),
        ("a varint 11 bytes long", lambda: batches.batch(_records(2) + [b"\xff" * 11 + b"\x01"]), refused),
        ("control bit from a client", lambda: batches.batch(_records(1), attributes=CONTROL_BIT), refused),
        ("transactional bit, no transaction", lambda: batches.batch(
            _records(1), attributes=TRANSACTIONAL_BIT, producer_id=4242, producer_epoch=0, base_sequence=0),
         Expect("refused", "replog has no transactions, so none was begun")),
        ("producer id without a sequence", lambda: batches.batch(_records(1), producer_id=4243, producer_epoch=0, base_sequence=-1), refused),
        ("producer epoch -2 with a producer id", lambda: batches.batch(_records(1), producer_id=4244, producer_epoch=-2, base_sequence=0),
         Expect("either", "")),
        ("magic 0", lambda: batches.legacy_message(0, b"k", b"v"), Expect("refused", "Produce v3+ carries magic 2 only")),
        ("magic 1", lambda: batches.legacy_message(1, b"k", b"v"), Expect("refused", "Produce v3+ carries magic 2 only")),
        ("magic 3", lambda: batches.batch(_records(1), magic=3), refused),
        ("codec 5", lambda: batches.batch(_records(1), attributes=5), refused),
        ("codec 7", lambda: batches.batch(_records(1), attributes=7), refused),
        ("a wrong CRC", lambda: batches.batch(_records(1), crc=0x12345678), refused),
        ("batch length 1 MB over 100 bytes", lambda: batches.batch(_records(1), batch_length=1 << 20), refused),
        ("batch length 10", lambda: batches.batch(_records(1), batch_length=10), refused),
        ("base offset 12345 and leader epoch 99 from the client",
         lambda: _at_base_offset(batches.batch(_records(2), leader_epoch=99), 12345), Expect("either", "the broker assigns them")),
        ("two batches back to back", lambda: batches.batch(_records(1)) + batches.batch(_records(1)),
         Expect("refused", "Produce v3+ carries one batch per partition")),
        ("2,000 batches, 2,000 producer ids, timestamp 2**62", lambda: b"".join(
            batches.batch(_records(1), producer_id=10_000 + index, producer_epoch=0, base_sequence=0, base_timestamp=2**62)
            for index in range(2000)), Expect("refused", "Produce v3+ carries one batch per partition")),
    ]
    for label, codec in _CODECS.items():
        wrong.append((f"{label} body of garbage", lambda codec=codec: batches.batch(bytes(range(200)), record_count=3,
                                                                                   attributes=codec), refused))
        wrong.append((f"{label} body with count 5 over 3 records", lambda codec=codec: batches.batch(
            batches.compressed(codec, three), record_count=5, attributes=codec), refused))
    for label, make, expect in wrong:
        yield BatchCase(label, _one(make), expect)
    yield BatchCase("the same partition named 200 times in one request", _one(lambda: batches.batch(_records(1))),
                    Expect("either", "Kafka answers each entry"), record_sets=200)
    yield BatchCase("2,000 producer ids, one request each", lambda: [
        bytes(batches.batch(_records(1), producer_id=20_000 + index, producer_epoch=0, base_sequence=0))
        for index in range(2000)], Expect("either", "Kafka accepts idempotent batches of any producer id"))


def _at_base_offset(batch: bytearray, base_offset: int) -> bytearray:
    struct.pack_into(">q", batch, 0, base_offset)  # outside the CRC
    return batch


# Decompression bombs ---------------------------------------------------------------------------

# Each fits in one default max.message.bytes (1 MiB) batch: gzip and zstd inflate past GiBs;
# lz4 (at most 255:1) and snappy (about 21:1) inflate a 1 MiB batch to 250 MB and 20 MB, so
# theirs are also told to announce 4 GiB where their formats announce a size.
_LIE_BYTES = 2**32 - 1


def bomb_bodies() -> Iterator[tuple[str, int, Callable[[], bytes]]]:
    yield "gzip, 1 GiB", CODEC_GZIP, lambda: batches.gzip_bomb(GIB - (8 << 20))
    yield "zstd, 4 GiB", CODEC_ZSTD, lambda: batches.zstd_bomb(4 * GIB)
    yield "lz4 frame, 240 MiB", CODEC_LZ4, lambda: batches.lz4_bomb(240 << 20)
    yield "lz4 frame announcing 4 GiB", CODEC_LZ4, lambda: batches.lz4_bomb(64 << 20, content_size=_LIE_BYTES)
    yield "snappy raw, 20 MiB", CODEC_SNAPPY, lambda: batches.snappy_bomb(20 << 20)
    yield "snappy raw announcing 4 GiB", CODEC_SNAPPY, lambda: batches.snappy_bomb(1 << 20, announced_bytes=_LIE_BYTES)
    yield "snappy xerial, 20 MiB", CODEC_SNAPPY, lambda: batches.xerial([batches.snappy_bomb(20 << 20)])
    yield "snappy xerial announcing 4 GiB", CODEC_SNAPPY, lambda: batches.xerial(
        [batches.snappy_bomb(1 << 20, announced_bytes=_LIE_BYTES)])


def bomb_cases() -> Iterator[BatchCase]:
    for label, codec, body in bomb_bodies():
        for compacted in (False, True):
            yield BatchCase(f"{label} on a {'compacted' if compacted else 'plain'} topic",
                            _one(lambda body=body, codec=codec: batches.batch(body(), record_count=1, attributes=codec)),
                            Expect("either", "a bounded reader may refuse it or take it"), compacted=compacted,
                            read_from_start=False, kind="bomb")


@dataclasses.dataclass
class CleanerPass(Case):
    """Waits for a pass of the log cleaner after the bombs: the cleaner decompresses what the
    compacted topic holds, away from any request. A record appended to each of `partitions`
    (the bombs') after segment.ms rolls their segments, so that there is something to clean."""

    partitions: list[int]
    kind: str = "bomb"
    name: str = "a log cleaner pass over the compacted topic after the bombs"
    timeout_s: float = 30.0

    def run(self, target: Target) -> list[str]:
        if target.metrics_address is None or target.probe is None:
            return []
        before = _cleaner_passes(target.metrics_address)
        problems = []
        with Connection(target.host, target.port, source=CHECK_SOURCE) as checks:
            for partition in self.partitions:
                start = high_watermark(checks, target.compacted_topic, partition)
                problems += target.probe.readable(target.compacted_topic, partition, start or 0)
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:  # bounded by the deadline
            passes = _cleaner_passes(target.metrics_address)
            if passes is None or before is None or passes > before:
                return problems
            time.sleep(0.2)
        return [*problems, f"no log cleaner pass within {self.timeout_s:.0f} s"]


def _cleaner_passes(metrics_address: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("replog_log_cleaner_passes_total"))


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
            sock = socket.create_connection((target.host, target.port), timeout=timeout_s, source_address=(source, 0))
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
        with Connection(target.host, target.port, source=CHECK_SOURCE) as admin:
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
            with Connection(target.host, target.port, source=CHECK_SOURCE) as connection:
                answer = connection.request(ApiKey.METADATA, 9, request_values(ApiKey.METADATA, 9, Names(topic=topic)))
                if answer is not None:
                    found = answer.topics[0]
                    if found.error_code == ErrorCode.unknown_topic_or_partition and not created_again:
                        _create_topic(connection, topic)  # the creation during the flood was refused: ask again
                        created_again = True
                    elif found.error_code == 0 and found.partitions and found.partitions[0].error_code == 0 \
                            and found.partitions[0].leader_id >= 0:
                        return []
                    state = f"topic error {_error_name(found.error_code)}, partitions " + \
                        str([(_error_name(p.error_code), p.leader_id) for p in found.partitions])
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
    """Opens a connection from each source, sends ApiVersions on each, and counts the answers."""
    request = encode(ApiKey.API_VERSIONS, 0, {})
    for source in sources:
        sock = held.open(target, source, timeout_s=1.0)
        if sock is not None:
            try:
                sock.sendall(request)
            except OSError:
                pass
    served = 0
    deadline = time.monotonic() + 3.0
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

    connections: int = 24
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


# The catalog ------------------------------------------------------------------------------------
# Families, each always the same cases in the same order; a run goes through them one by one.

def frame_cases(target: Target) -> list[Case]:
    """Every count, truncation and tail of every seed; size lies, unknown versions, forged fetches."""
    mapped_seeds = mapped(all_seeds(target.names))
    return [FrameCase(mutant) for mutant in every_mutant(mapped_seeds, target.names, target.max_request_bytes)]


def wide_family(target: Target) -> list[Case]:
    """Each API's top-level arrays, at its highest version, 1 MiB long."""
    highest = {mapped_seed.seed.api_key: mapped_seed for mapped_seed in mapped(all_seeds(target.names))}
    return [WideCase(mutant) for mapped_seed in highest.values() for mutant in wide_mutants(mapped_seed)]


def batch_family(target: Target) -> list[Case]:
    """Every batch case on the plain topic and on the compacted one, each on a partition of its own."""
    plain = list(batch_cases())
    return _on_partitions(plain + [dataclasses.replace(case, compacted=True) for case in plain], target)


def bomb_family(target: Target) -> list[Case]:
    bombs = _on_partitions(list(bomb_cases()), target)
    return [*bombs, CleanerPass(sorted({bomb.partition for bomb in bombs if bomb.compacted}))]


def slow_family(target: Target) -> list[Case]:
    return [SlowSenders("24 connections each announcing a frame of socket.request.max.bytes, then silent", 24, None),
            SlowSenders("8 connections sending a 1 MiB frame a byte every 20 ms", 8, 1 << 20, interval_s=0.02)]


def limit_family(target: Target) -> list[Case]:
    """The cases that need the connection and memory limits (Target.limits)."""
    return [IdleHolders(), OneHostFlood(), ManyHostFlood(), QueuedBytesFlood()]


def _on_partitions(cases: list[BatchCase], target: Target) -> list[BatchCase]:
    """Each case on a partition of its own (round robin), so that one poisoned partition does
    not make the next case's checks fail."""
    placed = []
    plain = compacted = 0
    for case in cases:
        if case.compacted:
            placed.append(dataclasses.replace(case, partition=compacted % target.compacted_partitions))
            compacted += 1
        else:
            placed.append(dataclasses.replace(case, partition=plain % target.batch_partitions))
            plain += 1
    return placed


def random_cases(target: Target, seed: int, count: int) -> Iterator[Case]:
    """`count` random frame mutants from `seed`: the same seed, the same cases."""
    rng = random.Random(seed)
    mapped_seeds: list[MappedSeed] = mapped(all_seeds(target.names))
    for _ in range(count):
        yield FrameCase(random_mutant(rng, mapped_seeds))
