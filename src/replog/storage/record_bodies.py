"""What a v2 batch holds after its 61-byte header: its records, possibly compressed.

The append path never looks here (records.py reads headers only). The log cleaner, the group
coordinator and the Spark connector do: they share the codecs and the record walk below.

Record layout (each field a zigzag varint unless noted; lengths of -1 are nulls):

    length, attributes (int8), timestampDelta, offsetDelta, keyLength, key, valueLength, value,
    headerCount, headers...

Codecs: none and gzip always; snappy, lz4 and zstd through `cramjam`, with an error naming it if
it is missing. Snappy is read in both framings (xerial's, from Java clients, and librdkafka's
raw block) and written as one raw block, which both read.
"""

from __future__ import annotations

import gzip
import struct
from collections.abc import Iterator
from typing import NamedTuple

CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_CHUNK = struct.Struct(">i")


class RecordBodyError(ValueError):
    """A batch's records cannot be read: an unknown or unavailable codec, or bytes that do not
    parse as records."""


def decompress(codec: int, data: bytes, base_offset: int) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    name = CODEC_NAMES.get(codec)
    if name is None:
        raise RecordBodyError(f"batch at offset {base_offset} uses unknown compression codec {codec}")
    cramjam = _cramjam(name, base_offset)
    if name == "snappy":
        return _unsnappy(cramjam, data)
    if name == "lz4":
        return bytes(cramjam.lz4.decompress(data))
    return bytes(cramjam.zstd.decompress(data))


def compress(codec: int, data: bytes, base_offset: int) -> bytes:
    """`data` in `codec`, in a form every client reads (see the module docstring)."""
    if codec == 0:
        return data
    if codec == 1:
        return gzip.compress(data, compresslevel=6)
    name = CODEC_NAMES.get(codec)
    if name is None:
        raise RecordBodyError(f"batch at offset {base_offset} uses unknown compression codec {codec}")
    cramjam = _cramjam(name, base_offset)
    if name == "snappy":
        return bytes(cramjam.snappy.compress_raw(data))
    if name == "lz4":
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def _cramjam(name: str, base_offset: int):
    try:
        import cramjam
    except ImportError:
        raise RecordBodyError(f"batch at offset {base_offset} is {name}-compressed: reading it needs cramjam "
                              "(pip install cramjam)") from None
    return cramjam


def _unsnappy(cramjam, data: bytes) -> bytes:
    """Java clients frame snappy in xerial's chunks (16-byte header, then length-prefixed raw
    snappy blocks); librdkafka writes one raw block."""
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    position = 16
    while position < len(data):  # bounded: each step consumes one chunk
        (chunk_bytes,) = _XERIAL_CHUNK.unpack_from(data, position)
        position += _XERIAL_CHUNK.size
        out += cramjam.snappy.decompress_raw(data[position:position + chunk_bytes])
        position += chunk_bytes
    return bytes(out)


class RecordSpan(NamedTuple):
    """One record of a decompressed body: its fields and where its bytes lie in the body."""

    offset_delta: int
    key: bytes | None
    value: bytes | None
    start: int
    end: int


def records_of(body: bytes, count: int, base_offset: int) -> Iterator[RecordSpan]:
    """The `count` records of a decompressed batch body, in order."""
    position = 0
    for _ in range(count):  # bounded by the batch's record count
        start = position
        length, position = zigzag_varint(body, position)
        end = position + length
        _, position = zigzag_varint(body, position + 1)  # the attributes byte, then timestamp delta
        offset_delta, position = zigzag_varint(body, position)
        key, position = _nullable(body, position)
        value, position = _nullable(body, position)
        if end > len(body) or position > end:
            raise RecordBodyError(f"record at offset {base_offset + offset_delta} runs past its batch")
        yield RecordSpan(offset_delta, key, value, start, end)
        position = end


def _nullable(data: bytes, position: int) -> tuple[bytes | None, int]:
    length, position = zigzag_varint(data, position)
    if length < 0:
        return None, position
    return bytes(data[position:position + length]), position + length


def zigzag_varint(data: bytes, position: int) -> tuple[int, int]:
    """The zigzag varint at `position`: (value, position after it)."""
    shift = raw = 0
    for _ in range(10):  # a 64-bit varint has at most 10 bytes
        if position >= len(data):
            raise RecordBodyError("varint runs past the end")
        byte = data[position]
        raw |= (byte & 0x7F) << shift
        position += 1
        if not byte & 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
    raise RecordBodyError("varint longer than 10 bytes")
