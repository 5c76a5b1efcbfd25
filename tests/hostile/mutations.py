"""Malformed frames made from valid seeds: every length and count of every seed set to each value
a hostile client would try, truncations at every field, garbage tails, lying size prefixes,
unknown versions and API keys; and, for the long runs, random stacks of such mutations.

The values a length takes (the count a reader decodes, before a compact length's +1):

    int16     -2, -1 where not nullable, 0x7FFF, bytes left + 1
    int32     -2, -1 where not nullable, 2**31 - 1, -2**31, bytes left + 1
    uvarint   null (0) where not nullable, 0xFFFFFFFF, 2**31, bytes left + 1, and a uvarint six
              bytes long (past an int32); a tagged-field count or size takes the same but null

A seed's frame is valid (seeds.py), so each mutant differs from a request the broker handles in
exactly the field named, and its size prefix tells the truth unless the case is about the size.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from typing import NamedTuple

from replog.net import codec
from replog.net.codec import ApiKey

from .batches import uvarint
from .frame_map import SIZE_PREFIX_BYTES, FrameMap, Length, Value, map_frame
from .seeds import Names, Seed, encode, request_values

_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_VERSION_OFFSET = 6  # size prefix, api key, then the version
DEFAULT_MAX_REQUEST_BYTES = 104_857_600  # socket.request.max.bytes's default
UNKNOWN_API_KEYS = (-32768, -1, 4, 100, 0x7FFF, 32001)  # 4 is LeaderAndIsr: Kafka's, not a client's
# APIs whose values a random mutation must not touch: UnregisterBroker of a flipped id could
# name the broker under test, which would be an operator's act, not a malformed request.
_VALUES_LEFT_ALONE = frozenset({ApiKey.UNREGISTER_BROKER})


class Mutant(NamedTuple):
    kind: str  # the family: "count", "value", "truncate", "tail", "size", "version", "forged", "random"
    name: str  # what was done, to which seed: a failure report names it
    frames: tuple[bytes, ...]  # sent back to back on one connection
    # The broker may rightly answer late or never: a size prefix promising more than is sent, a
    # wait or a timeout set to the largest value, acks=0, a random mutant.
    may_wait: bool = False


class MappedSeed(NamedTuple):
    seed: Seed
    map: FrameMap


def mapped(seeds: list[Seed]) -> list[MappedSeed]:
    return [MappedSeed(seed, map_frame(seed.api_key, seed.version, seed.frame)) for seed in seeds]


def with_true_size(body: bytes | bytearray) -> bytes:
    """`body` (a frame without its size prefix) behind a size prefix that tells the truth."""
    return _I32.pack(len(body)) + bytes(body)


def hostile_lengths(length: Length, bytes_left: int) -> Iterator[tuple[str, bytes]]:
    """(label, encoding) of each hostile value of `length`; `bytes_left`: after the field."""
    if length.form == "int16":
        values = [-2, 0x7FFF, bytes_left + 1] + ([] if length.nullable else [-1])
        yield from ((f"{value}", _I16.pack(value)) for value in values if -(2**15) <= value < 2**15)
        return
    if length.form == "int32":
        values = [-2, 2**31 - 1, -(2**31), bytes_left + 1] + ([] if length.nullable else [-1])
        yield from ((f"{value}", _I32.pack(value)) for value in values)
        return
    raws = [("0xFFFFFFFF", 0xFFFFFFFF), ("2**31", 2**31), ("left+1", bytes_left + 1 + length.bias),
            ("six-byte uvarint", 2**35)]
    if length.bias and not length.nullable:
        raws.append(("null", 0))
    yield from ((f"uvarint {label}", uvarint(raw)) for label, raw in raws)


def _replace(frame: bytes, length: Length, encoding: bytes) -> bytes:
    body = frame[SIZE_PREFIX_BYTES:length.offset] + encoding + frame[length.offset + length.width:]
    return with_true_size(body)


def count_mutants(mapped_seed: MappedSeed) -> Iterator[Mutant]:
    seed, frame_map = mapped_seed
    for length in frame_map.lengths:
        bytes_left = len(seed.frame) - length.offset - length.width
        for label, encoding in hostile_lengths(length, bytes_left):
            yield Mutant("count", f"{seed.label} {length.path} ({length.form}) = {label}",
                         (_replace(seed.frame, length, encoding),))


_EXTREMES = {1: (-1, -(2**7), 2**7 - 1), 2: (-1, -(2**15), 2**15 - 1), 4: (-1, -(2**31), 2**31 - 1),
             8: (-1, -(2**63), 2**63 - 1)}
# Fields whose extreme values make a request wait rightly (a long poll, a timeout) or go
# unanswered (acks=0).
_WAITING_FIELDS = frozenset({"max_wait", "timeout", "session_timeout", "rebalance_timeout", "transaction_timeout",
                             "acks"})


def hostile_values(value: Value) -> Iterator[tuple[str, bytes]]:
    """(label, bytes of the same width) of each hostile value of `value`."""
    if value.kafka_type == "bool":
        yield from (("2", b"\x02"), ("0xFF", b"\xff"))
    elif value.kafka_type == "string":
        yield from (("invalid UTF-8", b"\xff" * value.width), ("'/' throughout", b"/" * value.width))
    elif value.kafka_type in ("bytes", "records"):
        yield "0xFF throughout", b"\xff" * value.width
    elif value.kafka_type != "uuid":
        for extreme in _EXTREMES[value.width]:
            yield str(extreme), extreme.to_bytes(value.width, "big", signed=True)


def value_mutants(mapped_seed: MappedSeed) -> Iterator[Mutant]:
    seed, frame_map = mapped_seed
    for value in frame_map.values:
        may_wait = value.path.rsplit(".", 1)[-1] in _WAITING_FIELDS
        for label, encoding in hostile_values(value):
            body = seed.frame[SIZE_PREFIX_BYTES:value.offset] + encoding + seed.frame[value.offset + value.width:]
            yield Mutant("value", f"{seed.label} {value.path} ({value.kafka_type}) = {label}", (with_true_size(body),),
                         may_wait=may_wait)


WIDE_REQUEST_BYTES = 1 << 20
WIDE_ELEMENTS_MAX = 1_000_000


def wide_mutants(mapped_seed: MappedSeed, request_bytes: int = WIDE_REQUEST_BYTES) -> Iterator[Mutant]:
    """Each top-level array's one element repeated to fill `request_bytes` (at most
    WIDE_ELEMENTS_MAX times): a request naming 100,000 topics, partitions or groups, which a
    broker must answer without holding everyone else up."""
    seed, frame_map = mapped_seed
    for array in frame_map.arrays:
        count = array.count
        if array.elements != 1 or "." in count.path or "[" in count.path:
            continue
        element = seed.frame[count.offset + count.width:array.end]
        repeats = min(WIDE_ELEMENTS_MAX, request_bytes // len(element))
        encoded = _I32.pack(repeats) if count.form == "int32" else uvarint(repeats + count.bias)
        body = seed.frame[SIZE_PREFIX_BYTES:count.offset] + encoded + element * repeats + seed.frame[array.end:]
        yield Mutant("wide", f"{seed.label} {count.path} x{repeats:,}", (with_true_size(body),), may_wait=True)


def truncation_mutants(mapped_seed: MappedSeed) -> Iterator[Mutant]:
    """The frame cut before each length, inside each multi-byte one, and inside the header."""
    seed, frame_map = mapped_seed
    cuts = {SIZE_PREFIX_BYTES + 1, SIZE_PREFIX_BYTES + 7, len(seed.frame) - 1}
    for length in frame_map.lengths:
        cuts.update((length.offset, length.offset + 1))
    for cut in sorted(cut for cut in cuts if SIZE_PREFIX_BYTES < cut < len(seed.frame)):
        yield Mutant("truncate", f"{seed.label} cut to {cut - SIZE_PREFIX_BYTES} of {len(seed.frame) - SIZE_PREFIX_BYTES} bytes",
                     (with_true_size(seed.frame[SIZE_PREFIX_BYTES:cut]),))


def tail_mutants(seed: Seed) -> Iterator[Mutant]:
    body = seed.frame[SIZE_PREFIX_BYTES:]
    for label, tail in (("1 byte", b"\x01"), ("64 bytes of 0xFF", b"\xff" * 64), ("a second request", body)):
        yield Mutant("tail", f"{seed.label} followed by {label}", (with_true_size(body + tail),))


def size_mutants(seed: Seed, max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Iterator[Mutant]:
    """Size prefixes that lie: the bytes sent are the seed's body."""
    body = seed.frame[SIZE_PREFIX_BYTES:]
    lies = {"one byte more than sent": len(body) + 1, "one byte less": len(body) - 1, "zero": 0, "-1": -1,
            "-2**31": -(2**31), "2**31-1": 2**31 - 1, "socket.request.max.bytes + 1": max_request_bytes + 1,
            "socket.request.max.bytes": max_request_bytes}
    for label, size in lies.items():
        yield Mutant("size", f"{seed.label} size prefix {label}", (_I32.pack(size) + body,),
                     may_wait=size > len(body))
    yield Mutant("size", f"{seed.label} size prefix alone", (_I32.pack(len(body)),), may_wait=True)
    yield Mutant("size", f"{seed.label} twice in one write", (seed.frame + seed.frame,))


def version_mutants(seed: Seed) -> Iterator[Mutant]:
    """The seed (of an API's lowest version) at versions replog does not speak."""
    low, high = codec.SUPPORTED_VERSIONS[seed.api_key]
    for version in sorted({low - 1, high + 1, -1, 0x7FFF, -(2**15)} - set(range(low, high + 1))):
        frame = bytearray(seed.frame)
        _I16.pack_into(frame, _VERSION_OFFSET, version)
        yield Mutant("version", f"{ApiKey(seed.api_key).name} at unknown version {version}", (bytes(frame),))


def unknown_api_mutants(seed: Seed) -> Iterator[Mutant]:
    for api_key in UNKNOWN_API_KEYS:
        frame = bytearray(seed.frame)
        _I16.pack_into(frame, SIZE_PREFIX_BYTES, api_key)
        yield Mutant("version", f"unknown api key {api_key}", (bytes(frame),))


# Size prefixes are read before the API is known: a few APIs' seeds stand for all of them.
_SIZE_LIE_APIS = (ApiKey.API_VERSIONS, ApiKey.METADATA, ApiKey.PRODUCE)


def forged_fetch_mutants(names: Names) -> Iterator[Mutant]:
    """Fetches from a plain client posing as a follower: this broker's own id, an id no broker
    has, and the largest; at the log start and far past the end."""
    low, high = codec.SUPPORTED_VERSIONS[ApiKey.FETCH]
    for version in range(low, high + 1):
        for replica_id in (0, 7, 2**31 - 1):
            for fetch_offset in (0, 2**62):
                values = request_values(ApiKey.FETCH, version, names)
                values["replica_id"] = replica_id
                values["topics"][0]["partitions"][0]["fetch_offset"] = fetch_offset
                yield Mutant("forged", f"FETCH v{version} replica_id={replica_id} fetch_offset={fetch_offset} "
                             "from a plain client", (encode(ApiKey.FETCH, version, values),))


def every_mutant(mapped_seeds: list[MappedSeed], names: Names,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> Iterator[Mutant]:
    """The fixed catalog: every count, value, truncation and tail of every seed; unknown versions
    of every API (its lowest version's seed); size lies on a few; forged follower fetches."""
    lowest: dict[int, Seed] = {}
    for mapped_seed in mapped_seeds:
        lowest.setdefault(mapped_seed.seed.api_key, mapped_seed.seed)
        yield from count_mutants(mapped_seed)
        yield from value_mutants(mapped_seed)
        yield from truncation_mutants(mapped_seed)
        yield from tail_mutants(mapped_seed.seed)
    for seed in lowest.values():
        yield from version_mutants(seed)
    for api_key in _SIZE_LIE_APIS:
        yield from size_mutants(lowest[api_key], max_request_bytes)
    yield from unknown_api_mutants(lowest[ApiKey.METADATA])
    yield from forged_fetch_mutants(names)



def random_mutant(rng: random.Random, mapped_seeds: list[MappedSeed]) -> Mutant:
    """One to four mutations stacked on a random seed: lengths set to hostile values, bytes
    flipped, int32 0x7FFFFFFF or uvarint 0xFFFFFFFF written at random positions, runs of 0xFF,
    truncations, garbage tails, other versions. The size prefix tells the truth."""
    seed, frame_map = rng.choice(mapped_seeds)
    lengths = frame_map.lengths
    body = bytearray(seed.frame[SIZE_PREFIX_BYTES:])
    steps = []
    values_free = seed.api_key not in _VALUES_LEFT_ALONE
    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["length", "length", "flip", "int32", "uvarint", "ff-run", "truncate", "tail", "version"])
        if kind == "length" and lengths:
            length = rng.choice(lengths)
            where = length.offset - SIZE_PREFIX_BYTES
            if where + length.width <= len(body):
                label, encoding = rng.choice(list(hostile_lengths(length, len(body) - where - length.width)))
                body[where:where + length.width] = encoding
                steps.append(f"{length.path}={label}")
        elif kind in ("flip", "int32", "uvarint", "ff-run") and values_free and len(body) > 8:
            where = rng.randrange(8, len(body))
            if kind == "flip":
                body[where] ^= rng.randrange(1, 256)
            else:
                patch = {"int32": _I32.pack(2**31 - 1), "uvarint": uvarint(0xFFFFFFFF),
                         "ff-run": b"\xff" * rng.randint(2, 16)}[kind]
                body[where:where + len(patch)] = patch
            steps.append(f"{kind}@{where}")
        elif kind == "truncate" and len(body) > 2:
            cut = rng.randrange(1, len(body))
            del body[cut:]
            steps.append(f"cut@{cut}")
        elif kind == "tail":
            body += rng.randbytes(rng.randint(1, 64))
            steps.append("tail")
        elif kind == "version" and len(body) >= 4:
            version = rng.randint(-1, 20)
            _I16.pack_into(body, 2, version)
            steps.append(f"v{version}")
    return Mutant("random", f"{seed.label} {' '.join(steps) or 'unchanged'}", (with_true_size(body),), may_wait=True)
