"""Record batches as a hostile producer writes them: a small encoder of the v2 format (records
and all, unlike tests/support/batches.py, whose records are filler) that writes whatever it
is told, true or not, and the decompression bombs of every codec.

Encoding (Kafka's DefaultRecordBatch): a 61-byte header, CRC32C over bytes 21 to the end, then
records: length, attributes, timestamp delta, offset delta, key, value, headers; every integer a
zigzag varint, every key, value and header a varint length and its bytes.

Bombs: small bodies that inflate to GiBs, built from their formats' cheapest repeats (never by
compressing GiBs here): gzip members of 16 MiB of zeros, back to back; zstd RLE blocks of
128 KiB; lz4 frame blocks of 4 MiB; snappy copies of 64 bytes (the format's best, about 21:1,
so a snappy bomb inflates a 1 MB batch to 20 MB only). Every codec also gets a lying bomb: a
format whose header announces the decompressed size (snappy's preamble, xerial's chunks, an
lz4 frame's content size) announcing 4 GiB in front of a few bytes. The bytes they inflate to
form one record with a small key and a value of zeros, so that a reader which gets that far
finds a record, not garbage.
"""

from __future__ import annotations

import functools
import gzip
import struct
import time
import zlib

import cramjam
import crc32c
import lz4.block

HEADER = struct.Struct(">qiibIhiqqqhii")  # as storage/records.py reads it
_CRC_START = 21
CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 1, 2, 3, 4
TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT, CONTROL_BIT = 0x08, 0x10, 0x20
GIB = 1 << 30


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def varint(value: int) -> bytes:
    """A zigzag varint of a 64-bit value."""
    raw = (value << 1) ^ (value >> 63)
    return uvarint(raw & (2**64 - 1))


def uvarint(raw: int) -> bytes:
    out = bytearray()
    while raw >= 0x80:
        out.append(raw & 0x7F | 0x80)
        raw >>= 7
    out.append(raw)
    return bytes(out)


def _sized(data: bytes | None) -> bytes:
    return varint(-1) if data is None else varint(len(data)) + data


def record(offset_delta: int, key: bytes | None, value: bytes | None, *, timestamp_delta: int = 0,
           headers: tuple[tuple[bytes, bytes | None], ...] = (), length: int | None = None,
           header_count: int | None = None) -> bytes:
    """One record; `length` and `header_count` lie when given."""
    body = (b"\0" + varint(timestamp_delta) + varint(offset_delta) + _sized(key) + _sized(value)
            + varint(len(headers) if header_count is None else header_count)
            + b"".join(_sized(name) + _sized(header_value) for name, header_value in headers))
    return varint(len(body) if length is None else length) + body


def batch(records: list[bytes] | bytes, *, record_count: int | None = None, last_offset_delta: int | None = None,
          base_timestamp: int | None = None, max_timestamp: int | None = None, attributes: int = 0,
          producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1, magic: int = 2,
          leader_epoch: int = -1, batch_length: int | None = None, crc: int | None = None) -> bytearray:
    """A v2 batch around `records` (a list of records, or a body already encoded or compressed);
    every header field may be told to lie."""
    body = records if isinstance(records, (bytes, bytearray)) else b"".join(records)
    count = (len(records) if isinstance(records, list) else 1) if record_count is None else record_count
    timestamp = now_ms() if base_timestamp is None else base_timestamp
    out = bytearray(HEADER.size) + body
    HEADER.pack_into(out, 0, 0, len(out) - 12 if batch_length is None else batch_length, leader_epoch, magic, 0,
                     attributes, max(count - 1, 0) if last_offset_delta is None else last_offset_delta, timestamp,
                     timestamp if max_timestamp is None else max_timestamp, producer_id, producer_epoch,
                     base_sequence, count)
    struct.pack_into(">I", out, 17, crc32c.crc32c(bytes(out[_CRC_START:])) if crc is None else crc)
    return out


def compressed(codec: int, body: bytes) -> bytes:
    """`body` as a well-behaved client compresses it (snappy as librdkafka: one raw block)."""
    if codec == CODEC_GZIP:
        return gzip.compress(body)
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(body))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(body))
    return bytes(cramjam.zstd.compress(body))


def legacy_message(magic: int, key: bytes, value: bytes) -> bytes:
    """A message of format v0 or v1 (before record batches), offset and size first."""
    timestamp = struct.pack(">q", now_ms()) if magic == 1 else b""
    content = bytes([magic, 0]) + timestamp + struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(content)) + content
    return struct.pack(">qi", 0, len(message)) + message


def consumer_subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0, JoinGroup's protocol metadata from a consumer."""
    encoded = [topic.encode() for topic in topics]
    return (struct.pack(">hi", 0, len(encoded)) + b"".join(struct.pack(">h", len(name)) + name for name in encoded)
            + struct.pack(">i", -1))


# Decompression bombs: each `(codec, body)`, the body inflating to about `inflated_bytes`.

_ZEROS_CHUNK = 16 << 20
_ZSTD_BLOCK = 128 << 10
_LZ4_BLOCK = 4 << 20
_SNAPPY_COPY = 64
_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)


def _zero_value_record(inflated_bytes: int) -> tuple[bytes, bytes]:
    """(what comes before the value's zeros, what comes after) of one record whose value is
    `inflated_bytes` zeros minus the record's own few bytes."""
    value_bytes = inflated_bytes - 64
    head_after_length = b"\0" + varint(0) + varint(0) + _sized(b"bomb") + varint(value_bytes)
    tail = varint(0)  # no headers
    length = len(head_after_length) + value_bytes + len(tail)
    return varint(length) + head_after_length, tail


@functools.cache
def _gzip_zeros_member() -> bytes:
    return gzip.compress(bytes(_ZEROS_CHUNK), compresslevel=9)


def gzip_bomb(inflated_bytes: int) -> bytes:
    """gzip members back to back (a reader must take them all: Kafka's and Python's do)."""
    head, tail = _zero_value_record(inflated_bytes)
    zeros = inflated_bytes - len(head) - len(tail)
    members = [gzip.compress(head)] + [_gzip_zeros_member()] * (zeros // _ZEROS_CHUNK)
    return b"".join(members) + gzip.compress(bytes(zeros % _ZEROS_CHUNK) + tail)


def zstd_bomb(inflated_bytes: int) -> bytes:
    """One zstd frame: a raw block, RLE blocks of zeros (4 bytes each for 128 KiB), a raw block."""
    head, tail = _zero_value_record(inflated_bytes)
    zeros = inflated_bytes - len(head) - len(tail)
    window_descriptor = bytes([(17 - 10) << 3])  # a 128 KiB window: the largest block
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + b"\x00" + window_descriptor
    out += _zstd_block(1 << 0, len(head)) + head  # raw block
    while zeros:  # bounded: each step takes up to a block of the zeros
        size = min(zeros, _ZSTD_BLOCK)
        out += _zstd_block(1 << 1, size) + b"\0"  # RLE block: one byte, `size` times
        zeros -= size
    out += _zstd_block(1 << 0 | 1, len(tail), last=True) + tail
    return bytes(out)


def _zstd_block(block_type_bits: int, size: int, last: bool = False) -> bytes:
    kind = block_type_bits & ~1
    return (last | kind | size << 3).to_bytes(3, "little")


@functools.cache
def _lz4_zeros_block() -> bytes:
    return lz4.block.compress(bytes(_LZ4_BLOCK), store_size=False)


def lz4_bomb(inflated_bytes: int, content_size: int | None = None) -> bytes:
    """One lz4 frame of independent 4 MiB blocks: the record's head stored, then compressed
    blocks of zeros, then its tail; `content_size` is announced in the frame header if given."""
    head, tail = _zero_value_record(inflated_bytes)
    zeros = inflated_bytes - len(head) - len(tail)
    frame_header = _lz4_frame_header(content_size)
    out = bytearray(frame_header)
    out += struct.pack("<I", len(head) | 0x80000000) + head  # an uncompressed block
    zeros_block = _lz4_zeros_block()
    for _ in range(zeros // _LZ4_BLOCK):  # bounded by the bomb's size
        out += struct.pack("<I", len(zeros_block)) + zeros_block
    rest = lz4.block.compress(bytes(zeros % _LZ4_BLOCK) + tail, store_size=False)
    out += struct.pack("<I", len(rest)) + rest
    return bytes(out + struct.pack("<I", 0))  # end mark


def _lz4_frame_header(content_size: int | None) -> bytes:
    """An lz4 frame header: version 1, independent blocks of at most 4 MiB, no checksums, and
    `content_size` announced if given."""
    flags = 0x60 | (0x08 if content_size is not None else 0)
    descriptor = bytes([flags, 0x70]) + (struct.pack("<Q", content_size) if content_size is not None else b"")
    return struct.pack("<I", 0x184D2204) + descriptor + bytes([_lz4_descriptor_checksum(descriptor)])


def _lz4_descriptor_checksum(descriptor: bytes) -> int:
    return (_xxh32(descriptor) >> 8) & 0xFF


def _xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 (the lz4 frame header's checksum), for the few bytes of a frame descriptor."""
    primes = (2654435761, 2246822519, 3266489917, 668265263, 374761393)
    mask = 0xFFFFFFFF

    def rotl(value: int, bits: int) -> int:
        return ((value << bits) | (value >> (32 - bits))) & mask

    position, length = 0, len(data)
    if length >= 16:
        lanes = [(seed + primes[0] + primes[1]) & mask, (seed + primes[1]) & mask, seed, (seed - primes[0]) & mask]
        while position + 16 <= length:  # bounded by the data
            for lane in range(4):
                (word,) = struct.unpack_from("<I", data, position)
                lanes[lane] = (rotl((lanes[lane] + word * primes[1]) & mask, 13) * primes[0]) & mask
                position += 4
        digest = (rotl(lanes[0], 1) + rotl(lanes[1], 7) + rotl(lanes[2], 12) + rotl(lanes[3], 18)) & mask
    else:
        digest = (seed + primes[4]) & mask
    digest = (digest + length) & mask
    while position + 4 <= length:  # bounded by the data
        (word,) = struct.unpack_from("<I", data, position)
        digest = (rotl((digest + word * primes[2]) & mask, 17) * primes[3]) & mask
        position += 4
    while position < length:  # bounded by the data
        digest = (rotl((digest + data[position] * primes[4]) & mask, 11) * primes[0]) & mask
        position += 1
    digest ^= digest >> 15
    digest = (digest * primes[1]) & mask
    digest ^= digest >> 13
    digest = (digest * primes[2]) & mask
    return digest ^ (digest >> 16)


def snappy_bomb(inflated_bytes: int, announced_bytes: int | None = None) -> bytes:
    """One raw snappy block: a literal of the record's head and 64 zeros, then 64-byte copies
    of them, 3 bytes each, then the tail. `announced_bytes` lies in the preamble if given."""
    head, tail = _zero_value_record(inflated_bytes)
    zeros = inflated_bytes - len(head) - len(tail)
    literal = head + bytes(_SNAPPY_COPY)
    copies, rest = divmod(zeros - _SNAPPY_COPY, _SNAPPY_COPY)
    copy = bytes([(_SNAPPY_COPY - 1) << 2 | 2]) + struct.pack("<H", _SNAPPY_COPY)
    body = _snappy_literal(literal) + copy * copies
    if rest:
        body += bytes([(rest - 1) << 2 | 2]) + struct.pack("<H", _SNAPPY_COPY)
    body += _snappy_literal(tail)
    return uvarint(inflated_bytes if announced_bytes is None else announced_bytes) + body


def _snappy_literal(data: bytes) -> bytes:
    size = len(data) - 1
    if size < 60:
        return bytes([size << 2]) + data
    return bytes([61 << 2]) + struct.pack("<H", size) + data  # a 2-byte length (literals below 64 KiB)


def xerial(raw_blocks: list[bytes]) -> bytes:
    """Java clients' snappy framing: a 16-byte header, then length-prefixed raw snappy blocks."""
    return _XERIAL_HEADER + b"".join(struct.pack(">i", len(block)) + block for block in raw_blocks)
