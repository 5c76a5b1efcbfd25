"""Fetch responses, versions 4 to 13, read by hand rather than through kio: a follower's fetch
round names every partition it follows from a leader, and kio built an object for each field of
each (a fifth of a follower's CPU while a topic of 10,000 partitions was being created) before
each partition's records were copied again. The reverse of handlers/fetch.py's
FetchBodyEncoder, which shares this module's layout; tests/net/test_fetch_decoding.py checks it
against kio for every version."""

from __future__ import annotations

import struct
from typing import NamedTuple

from . import frame_check
from .codec import ApiKey, FrameError, WireReader, response_program

FIRST_SESSION_VERSION = 7  # fetch sessions (KIP-227)
FIRST_FLEXIBLE_VERSION = 12
FIRST_TOPIC_ID_VERSION = 13  # topics named by id (KIP-516), in requests and responses
PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_ABORTED_TRANSACTION_BYTES = 16  # producer_id, first_offset
TOPIC_ID_BYTES = 16  # a uuid


class FetchedPartition(NamedTuple):
    topic: str  # from version 13 on, the topic's id in hex
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes


def decode_fetch_response(api_version: int, frame: memoryview | bytes) -> tuple[int, int, list[FetchedPartition]]:
    """(the response's own error code, its session id, every partition) of a Fetch response
    frame without its size prefix; records are copied out of the frame, whose buffer may be
    reused at once. Checked first as a request is, against the same budget of items."""
    try:
        frame_check.check(response_program(ApiKey.FETCH, api_version), frame, 0, frame_check.ITEMS_MAX)
        return _decode(api_version, frame)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as error:
        raise FrameError(f"malformed api 1 v{api_version} response: {type(error).__name__}: {error}") from None


def _decode(api_version: int, frame: memoryview | bytes) -> tuple[int, int, list[FetchedPartition]]:
    reader = WireReader(frame, 0, api_version >= FIRST_FLEXIBLE_VERSION)
    reader.fixed(_I32)  # correlation_id, checked by the connection
    reader.tagged_fields()  # the flexible response header's
    reader.fixed(_I32)  # throttle_time_ms
    error_code = reader.fixed(_I16) if api_version >= FIRST_SESSION_VERSION else 0
    session_id = reader.fixed(_I32) if api_version >= FIRST_SESSION_VERSION else 0
    partitions = []
    by_id = api_version >= FIRST_TOPIC_ID_VERSION
    for _ in range(max(0, reader.length(_I32))):
        topic = reader.chunk(TOPIC_ID_BYTES).hex() if by_id else reader.string()
        if topic is None:
            raise ValueError("null topic name")
        for _ in range(max(0, reader.length(_I32))):
            index, partition_error, high_watermark, last_stable_offset = reader.fields(PARTITION_HEAD)
            log_start_offset = reader.fixed(_I64) if api_version >= 5 else -1
            for _ in range(max(0, reader.length(_I32))):  # aborted transactions
                reader.chunk(_ABORTED_TRANSACTION_BYTES)
                reader.tagged_fields()
            if api_version >= 11:
                reader.fixed(_I32)  # preferred_read_replica
            size = reader.length(_I32)
            records = bytes(reader.chunk(size)) if size > 0 else b""
            reader.tagged_fields()
            partitions.append(FetchedPartition(topic, index, partition_error, high_watermark, last_stable_offset,
                                               log_start_offset, records))
        reader.tagged_fields()
    reader.tagged_fields()
    if reader.position != len(frame):
        raise ValueError(f"{len(frame) - reader.position} bytes after the response")
    return error_code, session_id, partitions
