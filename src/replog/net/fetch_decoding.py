"""Fetch responses, versions 4 to 12, read by hand rather than through kio: a follower's fetch
round names every partition it follows from a leader, and kio built an object for each field of
each (a fifth of a follower's CPU while a topic of 10,000 partitions was being created) before
each partition's records were copied again. The reverse of handlers/fetch.py's
FetchBodyEncoder; tests/net/test_fetch_decoding.py checks it against kio for every version."""

from __future__ import annotations

import struct
from typing import NamedTuple

from . import codec

FIRST_FLEXIBLE_VERSION = 12
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihqq")  # partition_index, error_code, high_watermark, last_stable_offset
_I64 = struct.Struct(">q")
_ABORTED_TRANSACTION_BYTES = 16  # producer_id, first_offset


class FetchedPartition(NamedTuple):
    topic: str
    partition: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes


class _Reader:
    def __init__(self, frame: memoryview, flexible: bool):
        self.frame, self.flexible, self.at = frame, flexible, 0

    def unpack(self, layout: struct.Struct) -> tuple:
        values = layout.unpack_from(self.frame, self.at)
        self.at += layout.size
        return values

    def uvarint(self) -> int:
        value = shift = 0
        while True:  # bounded by the frame: each turn reads a byte or raises past its end
            byte = self.frame[self.at]
            self.at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    def length(self, plain: struct.Struct) -> int:
        """An array's or string's length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.unpack(plain)[0]

    def take(self, size: int) -> memoryview:
        if size < 0 or self.at + size > len(self.frame):
            raise IndexError(f"{size} bytes at {self.at} past the end of a {len(self.frame)}-byte frame")
        taken = self.frame[self.at:self.at + size]
        self.at += size
        return taken

    def tagged_fields(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):  # bounded by the frame
                self.uvarint()  # tag
                self.take(self.uvarint())


def decode_fetch_response(api_version: int, frame: memoryview | bytes) -> tuple[int, list[FetchedPartition]]:
    """(the response's own error code, every partition) of a Fetch response frame without its
    size prefix; records are copied out of the frame, whose buffer may be reused at once."""
    try:
        return _decode(api_version, memoryview(frame))
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as error:
        raise codec.FrameError(f"malformed api 1 v{api_version} response: {type(error).__name__}: {error}") from None


def _decode(api_version: int, frame: memoryview) -> tuple[int, list[FetchedPartition]]:
    reader = _Reader(frame, api_version >= FIRST_FLEXIBLE_VERSION)
    reader.unpack(_I32)  # correlation_id, checked by the connection
    reader.tagged_fields()  # the flexible response header's
    reader.unpack(_I32)  # throttle_time_ms
    error_code = reader.unpack(_I16)[0] if api_version >= 7 else 0
    if api_version >= 7:
        reader.unpack(_I32)  # session_id
    partitions = []
    for _ in range(reader.length(_I32)):  # bounded by the frame
        topic = bytes(reader.take(reader.length(_I16))).decode()
        for _ in range(reader.length(_I32)):  # bounded by the frame
            index, partition_error, high_watermark, last_stable_offset = reader.unpack(_PARTITION_HEAD)
            log_start_offset = reader.unpack(_I64)[0] if api_version >= 5 else -1
            aborted = reader.length(_I32)
            for _ in range(max(aborted, 0)):  # bounded by the frame
                reader.take(_ABORTED_TRANSACTION_BYTES)
                reader.tagged_fields()
            if api_version >= 11:
                reader.unpack(_I32)  # preferred_read_replica
            size = reader.length(_I32)
            records = bytes(reader.take(size)) if size > 0 else b""
            reader.tagged_fields()
            partitions.append(FetchedPartition(topic, index, partition_error, high_watermark, last_stable_offset,
                                               log_start_offset, records))
        reader.tagged_fields()
    reader.tagged_fields()
    if reader.at != len(frame):
        raise ValueError(f"{len(frame) - reader.at} bytes after the response")
    return error_code, partitions
