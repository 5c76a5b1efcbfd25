"""Fetch requests, versions 4 to 13, written by hand rather than through kio: a follower's fetch
round names every partition it follows from a leader, and building and writing kio's objects for
each partition took a large share of a follower's event loop while a big topic was created. The request side of fetch_decoding.py;
tests/net/test_fetch_requests.py checks it against kio for every version.

Only what replog's own fetches send: full or incremental fetches of a session (KIP-227,
net/fetch_sessions.py), or full fetches outside any (session 0, epoch -1); no rack. From version
13 on a topic is named by its id (KIP-516), which every spec must then carry.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from replog.replica.partition import NO_LEADER_EPOCH
from replog.replication.fetcher import FetchSpec

from .codec import ApiKey, wire_length, wire_string
from .fetch_decoding import FIRST_FLEXIBLE_VERSION, FIRST_SESSION_VERSION, FIRST_TOPIC_ID_VERSION

# A full fetch request, outside any fetch session (KIP-227).
NO_FETCH_SESSION_ID, FULL_FETCH_SESSION_EPOCH = 0, -1
NO_LOG_START_OFFSET = -1

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_LIMITS = struct.Struct(">iiiib")  # replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
_SESSION = struct.Struct(">ii")  # session_id, session_epoch (v7+)
_I32 = struct.Struct(">i")
# A partition's fields by version: partition, [current_leader_epoch], fetch_offset,
# [last_fetched_epoch], [log_start_offset], partition_max_bytes.
_PARTITION_V4 = struct.Struct(">iqi")
_PARTITION_V5 = struct.Struct(">iqqi")
_PARTITION_V9 = struct.Struct(">iiqqi")
_PARTITION_V12 = struct.Struct(">iiqiqi")
_NO_TAGGED_FIELDS = b"\0"


def named_by_id(specs: Iterable[FetchSpec]) -> bool:
    """Whether every spec's topic id is a uuid (in hex), as version 13 names topics: a log tagged
    before topic ids were uuids, or not at all, is fetched by name. Each topic's id is checked
    once, not once for each of its partitions in every round."""
    return all(_is_uuid_hex(topic_id) for topic_id in {spec.topic_id for spec in specs})


def _is_uuid_hex(topic_id: str | None) -> bool:
    if topic_id is None or len(topic_id) != 32:
        return False
    try:
        bytes.fromhex(topic_id)
    except ValueError:
        return False
    return True


def encode_fetch_request(api_version: int, correlation_id: int, client_id: str | None, *, replica_id: int,
                         max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                         specs: Iterable[FetchSpec], session_id: int = NO_FETCH_SESSION_ID,
                         session_epoch: int = FULL_FETCH_SESSION_EPOCH, forgotten: Iterable[FetchSpec] = ()) -> bytes:
    """The whole request frame, size prefix first, as codec.encode_request writes it; from
    version 13 on, `specs` and `forgotten` must be `named_by_id`. Sessions need version 7."""
    flexible = api_version >= FIRST_FLEXIBLE_VERSION
    # The request header's client id is a plain nullable string even in flexible versions.
    client = wire_string(client_id, flexible=False)
    parts = [b"\0\0\0\0", _HEADER.pack(ApiKey.FETCH, api_version, correlation_id), client]
    if flexible:
        parts.append(_NO_TAGGED_FIELDS)
    parts.append(_LIMITS.pack(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level))
    if api_version >= FIRST_SESSION_VERSION:
        parts.append(_SESSION.pack(session_id, session_epoch))
    by_id = api_version >= FIRST_TOPIC_ID_VERSION
    by_topic = _by_topic(specs, by_id)
    parts.append(wire_length(len(by_topic), flexible, _I32))
    for topic, partitions in by_topic.items():
        parts += _topic(topic, by_id, flexible)
        parts.append(wire_length(len(partitions), flexible, _I32))
        parts += _partitions(api_version, partitions)
        if flexible:
            parts.append(_NO_TAGGED_FIELDS)
    if api_version >= FIRST_SESSION_VERSION:
        forgotten_by_topic = _by_topic(forgotten, by_id)
        parts.append(wire_length(len(forgotten_by_topic), flexible, _I32))
        for topic, partitions in forgotten_by_topic.items():
            parts += _topic(topic, by_id, flexible)
            parts.append(wire_length(len(partitions), flexible, _I32))
            parts += [_I32.pack(spec.partition) for spec in partitions]
            if flexible:
                parts.append(_NO_TAGGED_FIELDS)
    if api_version >= 11:
        parts.append(wire_string("", flexible))  # rack_id
    if flexible:
        parts.append(_NO_TAGGED_FIELDS)
    frame = bytearray().join(parts)
    _SIZE.pack_into(frame, 0, len(frame) - _SIZE.size)
    return bytes(frame)


def _by_topic(specs: Iterable[FetchSpec], by_id: bool) -> dict[str, list[FetchSpec]]:
    by_topic: dict[str, list[FetchSpec]] = {}
    for spec in specs:
        by_topic.setdefault(spec.topic_id if by_id else spec.topic, []).append(spec)
    return by_topic


def _topic(topic: str, by_id: bool, flexible: bool) -> list[bytes]:
    if by_id:
        return [bytes.fromhex(topic)]
    return [wire_string(topic, flexible)]


def _partitions(api_version: int, specs: list[FetchSpec]) -> list[bytes]:
    if api_version >= FIRST_FLEXIBLE_VERSION:
        pack = _PARTITION_V12.pack
        return [pack(spec.partition, spec.current_leader_epoch, spec.fetch_offset, NO_LEADER_EPOCH, NO_LOG_START_OFFSET,
                     spec.max_bytes) + _NO_TAGGED_FIELDS for spec in specs]
    if api_version >= 9:
        pack = _PARTITION_V9.pack
        return [pack(spec.partition, spec.current_leader_epoch, spec.fetch_offset, NO_LOG_START_OFFSET, spec.max_bytes)
                for spec in specs]
    if api_version >= 5:
        pack = _PARTITION_V5.pack
        return [pack(spec.partition, spec.fetch_offset, NO_LOG_START_OFFSET, spec.max_bytes) for spec in specs]
    pack = _PARTITION_V4.pack
    return [pack(spec.partition, spec.fetch_offset, spec.max_bytes) for spec in specs]

