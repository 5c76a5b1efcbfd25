"""Records the client tests send and the checks on what comes back, shared by every client."""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Iterable

# Client error codes are compared as Kafka's numbers: each adapter maps its client's exception to one.
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
TOPIC_ALREADY_EXISTS = 36
INVALID_REPLICATION_FACTOR = 38

COMPRESSIONS = ("gzip", "zstd", "lz4", "snappy")


@dataclasses.dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp_ms: int | None = None  # None: the producer stamps it (kcat cannot set one)
    offset: int | None = None  # set on records read back


def records(count: int, *, text: bool = False, headers: tuple[tuple[str, bytes], ...] | None = None,
            start_ms: int | None = None, seed: int = 7) -> list[Record]:
    """`count` distinct records: binary keys and values (NUL, 0xff, empty, a null key), zero to three
    headers (a repeated name, an empty value), and strictly increasing timestamps an hour back.
    `text=True` keeps keys and values to printable ASCII without delimiters; `headers` fixes one
    header set for all; a `start_ms` of -1 leaves timestamps to the producer (kcat)."""
    rng = random.Random(seed)
    base_ms = int(time.time() * 1000) - 3_600_000 if start_ms is None else start_ms
    result = []
    for i in range(count):
        if text:
            key, value = f"k{i}".encode(), f"v{i}-{rng.randrange(10**9)}-{'x' * rng.randrange(200)}".encode()
        else:
            key = None if i % 7 == 3 else bytes([i % 256, 0, 255]) + rng.randbytes(rng.randrange(20))
            value = b"" if i % 11 == 5 else rng.randbytes(rng.randrange(1, 600)) + b"\x00\n\r\xff"
        record_headers = headers if headers is not None else (
            (("trace", f"id-{i}".encode()), ("trace", b""), ("bin", bytes([i % 256, 0])))[: i % 4])
        result.append(Record(key, value, record_headers, None if start_ms == -1 else base_ms + i * 10))
    return result


def assert_same(sent: list[Record], got: list[Record], *, first_offset: int = 0,
                produced_between: tuple[int, int] | None = None) -> None:
    """`got` holds exactly `sent`, byte for byte, at consecutive offsets from `first_offset`. Records
    sent without a timestamp must carry one stamped within `produced_between` (ms, inclusive)."""
    assert len(got) == len(sent), f"sent {len(sent)} records, read {len(got)}"
    for i, (want, have) in enumerate(zip(sent, got)):
        assert have.offset == first_offset + i, f"record {i} at offset {have.offset}"
        assert (have.key, have.value) == (want.key, want.value), f"record {i} differs"
        assert have.headers == want.headers, f"record {i} headers {have.headers} != {want.headers}"
        if want.timestamp_ms is None:
            low, high = produced_between
            assert low <= have.timestamp_ms <= high, f"record {i} stamped {have.timestamp_ms}, not in {produced_between}"
        else:
            assert have.timestamp_ms == want.timestamp_ms, f"record {i} timestamp {have.timestamp_ms}"


def now_ms() -> int:
    return int(time.time() * 1000)


def collect(poll: Callable[[], Iterable[Record]], count: int, timeout_s: float = 30) -> list[Record]:
    """What `poll()` (one bounded client poll) returns, until there are `count` records or the
    deadline passes: the caller's assertions then say what is missing."""
    got: list[Record] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(poll())
    return got
