"""Builds v2 record batches for tests: real records (a leader reads every one) around filler values.

`payload_bytes` is the size of the records, before compression: exact where records of that
size can be made (each record takes at least 7 bytes), else as small as they can be. The
records carry no key, `fill` bytes as values and the batch's timestamp; the codec bits of
`attributes` compress them.
"""

import zlib

import cramjam

from replog.storage.batch_format import CODEC_MASK, CODEC_NAMES, HEADER, compress, encode_varint, set_crc


def _record(offset_delta: int, value_bytes: int, fill: int) -> bytes:
    fields = b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(-1)
    fields += encode_varint(value_bytes) + bytes([fill]) * value_bytes + encode_varint(0)
    return encode_varint(len(fields)) + fields


def _value_sizes(record_count: int, payload_bytes: int) -> list[int]:
    """Value sizes that make `record_count` records take `payload_bytes` (or as few as they can).
    A varint's growth makes some sizes of one record unreachable; a byte moved to another record
    reaches them."""
    sizes = [0] * record_count
    extra = payload_bytes - sum(len(_record(i, 0, 0)) for i in range(record_count))
    if extra <= 0 or record_count == 0:
        return sizes
    last = record_count - 1
    for moved in range(min(3, last) + 1):  # bounded: a varint grows by one byte at a time
        base = len(_record(last, 0, 0))
        target = base + extra - moved
        for value_bytes in range(max(extra - moved - 6, 0), extra - moved + 1):
            if len(_record(last, value_bytes, 0)) == target:
                sizes[last] = value_bytes
                for i in range(moved):
                    sizes[i] = 1
                return sizes
    sizes[last] = extra
    return sizes


def build_batch(
    record_count: int = 1,
    payload_bytes: int = 16,
    max_timestamp: int = 0,
    base_offset: int = 0,
    leader_epoch: int = 0,
    attributes: int = 0,
    last_offset_delta: int | None = None,
    fill: int = 0x61,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytearray:
    last_offset_delta = record_count - 1 if last_offset_delta is None else last_offset_delta
    records = b"".join(_record(i, size, fill) for i, size in enumerate(_value_sizes(record_count, payload_bytes)))
    payload = compress(attributes & CODEC_MASK, records)
    batch = bytearray(HEADER.size + len(payload))
    batch[HEADER.size:] = payload
    HEADER.pack_into(batch, 0, base_offset, len(batch) - 12, leader_epoch, 2, 0, attributes, last_offset_delta,
                     max_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, record_count)
    set_crc(batch)
    return batch


def recrc(batch: bytearray) -> bytearray:
    """`batch` with its CRC made right again after a test changed a byte the CRC covers."""
    set_crc(batch)
    return batch



def bomb(codec: int, inflated_bytes: int, record_count: int = 1) -> bytearray:
    """A batch whose records are `inflated_bytes` zeros compressed by `codec`: a decompression bomb
    (zeros are not records either). Built in 16 MiB steps, as its size may be GiBs; snappy, whose
    ratio stays near 21:1, in one piece."""
    chunk = bytes(16 << 20)
    name = CODEC_NAMES[codec]
    if name == "gzip":
        deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        payload = b"".join(deflate.compress(chunk) for _ in range(inflated_bytes // len(chunk))) + deflate.flush()
    elif name == "snappy":
        payload = bytes(cramjam.snappy.compress_raw(bytes(inflated_bytes)))
    else:
        compressor = {"lz4": cramjam.lz4.Compressor, "zstd": cramjam.zstd.Compressor}[name]()
        for _ in range(inflated_bytes // len(chunk)):
            compressor.compress(chunk)
        payload = bytes(compressor.finish())
    batch = bytearray(HEADER.size) + payload
    HEADER.pack_into(batch, 0, 0, len(batch) - 12, -1, 2, 0, codec, record_count - 1, 0, 0, -1, -1, -1, record_count)
    set_crc(batch)
    return batch


# What each codec's bomb inflates to while it fits Kafka's default max.message.bytes (1 MiB)
# compressed: past the 64 MiB a batch's records may inflate to but for snappy, which cannot pass
# ~21 MiB from 1 MiB and whose bomb is refused as records that do not parse.
BOMB_BYTES = {"zstd": 1 << 30, "gzip": 256 << 20, "lz4": 192 << 20, "snappy": 20 << 20}
