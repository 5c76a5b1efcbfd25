"""The record-batch format module: records encoded and decoded, varints, and decompression bounded
for every codec, bombs included (in a process of their own under an address-space limit)."""

import json
import resource
import subprocess
import sys

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.storage.batch_format import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    HEADER_SIZE_BYTES,
    NewRecord,
    Scratch,
    VarintError,
    compress,
    decompress,
    encode_batch,
    encode_varint,
    parse_header,
    read_varint,
    records_of,
    uncompressed_bytes_max,
    verify_batch,
)
from replog.storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from tests.support.batches import BOMB_BYTES, bomb

CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}
MIB = 1 << 20


def test_the_uncompressed_limit_is_64_times_max_message_bytes_up_to_a_ceiling():
    assert uncompressed_bytes_max(1024 * 1024 + 12) == 64 * (1024 * 1024 + 12)
    assert uncompressed_bytes_max(100 * MIB) == 256 * MIB


@given(value=st.integers(-(2**63), 2**63 - 1))
def test_varints_round_trip(value):
    encoded = encode_varint(value)
    assert read_varint(encoded, 0, len(encoded)) == (value, len(encoded))
    if -(2**31) <= value < 2**31:
        assert read_varint(encoded, 0, len(encoded), 32) == (value, len(encoded))


@pytest.mark.parametrize("data, bits, cut", [
    (b"\x80\x80", 64, True),  # runs past the end
    (b"\x80" * 10 + b"\x01", 64, False),  # 11 bytes
    (b"\xff" * 9 + b"\x03", 64, False),  # 10 bytes, but past 64 bits
    (b"\x80" * 5 + b"\x01", 32, False),  # 6 bytes
    (b"\xff\xff\xff\xff\x1f", 32, False),  # 5 bytes, but past 32 bits
])
def test_varints_longer_or_larger_than_their_type_are_refused(data, bits, cut):
    with pytest.raises(VarintError) as error:
        read_varint(data, 0, len(data), bits)
    assert error.value.cut is cut


records_strategy = st.lists(st.builds(NewRecord, st.none() | st.binary(max_size=50), st.none() | st.binary(max_size=200),
                                      st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
                                      st.none() | st.integers(0, 2**40)), min_size=1, max_size=10)


@settings(max_examples=100, deadline=None)
@given(records=records_strategy, codec=st.sampled_from([CODEC_NONE, *CODECS.values()]))
def test_encoded_batches_decode_to_their_records_with_every_codec(records, codec):
    batch = encode_batch(records, 1_000, codec)
    header = parse_header(batch, 0)
    verify_batch(batch, header)
    assert (header.record_count, header.compression_codec) == (len(records), codec)
    body = decompress(codec, memoryview(batch)[HEADER_SIZE_BYTES:], MIB)
    decoded = list(records_of(body, len(records)))
    assert [(r.offset_delta, r.key, r.value) for r in decoded] == [(i, r.key, r.value) for i, r in enumerate(records)]
    assert [r.headers for r in decoded] == [tuple((k.encode(), v) for k, v in r.headers) for r in records]
    assert [1_000 + r.timestamp_delta for r in decoded] == [1_000 if r.timestamp_ms is None else r.timestamp_ms
                                                           for r in records]
    assert header.max_timestamp == max(1_000 if r.timestamp_ms is None else r.timestamp_ms for r in records)


def test_records_that_do_not_parse_are_invalid_records():
    body = encode_batch([NewRecord(b"k", b"v")], 0)[HEADER_SIZE_BYTES:]
    with pytest.raises(InvalidRecordError, match="record 1"):
        list(records_of(body, 2))
    with pytest.raises(InvalidRecordError, match="record 0"):
        list(records_of(body[:-3], 1))


def xerial(data: bytes, chunk_bytes: int) -> bytes:
    """`data` in xerial's snappy framing, as Java clients write it."""
    out = bytearray(b"\x82SNAPPY\x00" + (1).to_bytes(4, "big") + (1).to_bytes(4, "big"))
    for start in range(0, len(data), chunk_bytes):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + chunk_bytes]))
        out += len(block).to_bytes(4, "big") + block
    return bytes(out)


def test_snappy_is_read_in_both_framings():
    data = bytes(range(256)) * 1000
    assert decompress(CODEC_SNAPPY, bytes(cramjam.snappy.compress_raw(data)), MIB) == data
    assert decompress(CODEC_SNAPPY, xerial(data, 32 << 10), MIB) == data
    with pytest.raises(RecordTooLargeError):
        decompress(CODEC_SNAPPY, xerial(data, 32 << 10), len(data) - 1)
    with pytest.raises(CorruptRecordError):
        decompress(CODEC_SNAPPY, xerial(data, 32 << 10)[:-5], MIB)


@pytest.mark.parametrize("name", CODECS)
def test_each_codec_decompresses_up_to_its_limit_exactly(name):
    data = bytes(range(256)) * 4096
    compressed = compress(CODECS[name], data)
    assert decompress(CODECS[name], compressed, len(data)) == data
    with pytest.raises(RecordTooLargeError, match=f"inflate past {len(data) - 1} bytes"):
        decompress(CODECS[name], compressed, len(data) - 1)


@pytest.mark.parametrize("name", CODECS)
def test_bytes_that_are_not_the_codecs_are_corrupt(name):
    with pytest.raises(CorruptRecordError, match=f"not {name} data"):
        decompress(CODECS[name], b"\x00\x01garbage" * 50, MIB)


def test_a_scratch_gives_back_what_a_large_batch_filled():
    scratch = Scratch(64 * MIB)
    try:
        with scratch.decompress(CODEC_ZSTD, compress(CODEC_ZSTD, bytes(48 * MIB))) as body:
            assert len(body) == 48 * MIB
        resident_mib = _resident_mib()
        scratch.give_back_beyond(4 * MIB)
        assert resident_mib - _resident_mib() >= 40
        with scratch.decompress(CODEC_ZSTD, compress(CODEC_ZSTD, b"again" * 100)) as body:
            assert bytes(body) == b"again" * 100
    finally:
        scratch.close()


def _resident_mib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize() // MIB


# -- bombs: a process of their own, under an address-space limit ------------------------------------

ADDRESS_SPACE_BYTES = 1 << 30
BOMB_CHECK = r"""
import json, sys, time
from replog.storage.batch_format import Scratch, uncompressed_bytes_max
from replog.storage.errors import ReplicaError
from replog.storage.records import AppendRules, check_and_convert
rules = AppendRules(1024 * 1024 + 12, 2**63 - 1, 3_600_000, True, uncompressed_bytes_max(1024 * 1024 + 12))
scratch = Scratch(rules.uncompressed_bytes_max)
batch = open(sys.argv[1], "rb").read()
started = time.perf_counter()
try:
    check_and_convert(batch, rules, 0, scratch)
    outcome = "accepted"
except ReplicaError as error:
    outcome = f"{error.error_code} {error}"
# VmHWM is this process image's peak; getrusage's ru_maxrss outlives exec and so can report the
# parent's size at fork (a long test run's pytest).
peak_kib = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"outcome": outcome, "seconds": time.perf_counter() - started, "max_rss_mib": peak_kib // 1024}))
"""


@pytest.mark.parametrize("name", CODECS)
def test_a_bomb_is_refused_in_bounded_memory(name, tmp_path):
    batch = bomb(CODECS[name], BOMB_BYTES[name])
    assert len(batch) <= 1024 * 1024 + 12, "the bomb must fit a default max.message.bytes"
    path = tmp_path / f"{name}.bomb"
    path.write_bytes(batch)
    done = subprocess.run([sys.executable, "-c", BOMB_CHECK, str(path)], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_BYTES,) * 2))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    print(name, result)  # the time it took, for the record: tests assert no timing
    expected = "87 record 0: attributes is cut short" if name == "snappy" else "10 records inflate past"
    assert result["outcome"].startswith(expected)
    assert result["max_rss_mib"] < 64 + 128  # the limit's worth of scratch at most, and the interpreter
