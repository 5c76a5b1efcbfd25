import os
import random
import shutil
import struct
import sysconfig
from pathlib import Path

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.storage.batch_format import build_batch as framed_batch
from replog.storage.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError, ReplicaError
from replog.storage.records import (
    COMPILED,
    PURE_PYTHON,
    SCAN_BUFFER_BYTES,
    AppendRules,
    batch_headers,
    complete_batches_size,
    run_of,
    verify_batch,
)
from tests.support.batches import build_batch, recrc

NO_LIMIT = 1 << 30
NEVER = 2**63 - 1
RULES = AppendRules(NO_LIMIT, NEVER, NEVER, False, 64 << 20)  # checks of the framing and records only
NOW = 1_000_000
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the _fastbatch extension is not built")


def test_compiled_fast_path_is_loaded_where_it_could_be_built():
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    python_h = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which(compiler) is None or not python_h.exists():
        pytest.skip("no C compiler or Python headers: the pure-Python path is the one expected")
    assert COMPILED is not None, "a C toolchain is here but replog.storage._fastbatch was not built"


def test_validate_returns_header_fields_of_concatenated_batches(codec):
    first_batch = build_batch(record_count=3, payload_bytes=30, max_timestamp=42, attributes=4, base_offset=7,
                              leader_epoch=2)
    buf = first_batch + build_batch(payload_bytes=20, base_offset=10, max_timestamp=41)
    first, second = codec.validate_batches(buf, NO_LIMIT)
    size = len(first_batch)
    assert (first.position, first.size_bytes, first.record_count, first.last_offset_delta) == (0, size, 3, 2)
    assert (first.base_offset, first.partition_leader_epoch, first.max_timestamp, first.compression_codec) == (7, 2, 42, 4)
    assert (second.position, second.size_bytes, second.base_offset) == (size, 81, 10)
    assert first.crc == struct.unpack_from(">I", buf, 17)[0]
    assert run_of([first, second]) == (2, 10, 42, 4)


def test_validate_accepts_read_only_buffers_and_memoryview_slices(codec):
    buf = build_batch(payload_bytes=5)
    assert codec.validate_batches(bytes(buf), NO_LIMIT)[0].record_count == 1
    padded = b"xx" + bytes(buf)
    (header,) = codec.validate_batches(memoryview(padded)[2:], NO_LIMIT)
    verify_batch(memoryview(buf), header)


def test_batches_without_timestamps_have_no_max_timestamp(codec):
    buf = build_batch(max_timestamp=-1)
    assert codec.validate_batches(buf, NO_LIMIT)[0].max_timestamp == -1
    assert codec.assign_batches(buf, RULES, 0, 0, NOW).max_timestamp == -1


def test_assign_batches_rewrites_offset_and_epoch_in_place_keeping_crc_valid(codec):
    buf = build_batch(record_count=3, max_timestamp=50)
    assert codec.assign_batches(buf, RULES, 100, 7, NOW) == (1, 102, 50, 3)
    (reparsed,) = codec.validate_batches(buf, NO_LIMIT)  # raises if the CRC broke
    assert (reparsed.base_offset, reparsed.last_offset, reparsed.partition_leader_epoch) == (100, 102, 7)


def test_batch_headers_of_a_validated_buffer_are_the_validated_headers(codec):
    buf = build_batch(record_count=3, max_timestamp=5) + build_batch(payload_bytes=40) + build_batch(record_count=2)
    assert batch_headers(buf) == codec.validate_batches(buf, NO_LIMIT)


def test_refused_assign_leaves_the_buffer_as_it_came(codec):
    buf = build_batch(record_count=3, max_timestamp=5)
    buf[-1] = 0x7F  # the last record's header count: past its end
    recrc(buf)
    original = bytes(buf)
    with pytest.raises(InvalidRecordError):
        codec.assign_batches(buf, RULES, 100, 7, NOW)
    assert buf == original


def test_assign_refuses_offsets_past_the_largest(codec):
    with pytest.raises(InvalidRecordError):
        codec.assign_batches(build_batch(record_count=2), RULES, 2**63 - 2, 0, NOW)
    assert codec.assign_batches(build_batch(record_count=2), RULES, 2**63 - 3, 0, NOW).last_offset == 2**63 - 2


@pytest.mark.parametrize("first_offset, leader_epoch", [(-1, 0), (0, 2**31), (0, -(2**31) - 1)])
def test_assign_refuses_arguments_out_of_range(codec, first_offset, leader_epoch):
    with pytest.raises(ValueError):
        codec.assign_batches(build_batch(), RULES, first_offset, leader_epoch, NOW)


@pytest.mark.parametrize("cut_bytes", [1, 30, 70])
def test_torn_batch_is_corrupt(codec, cut_bytes):
    buf = build_batch(payload_bytes=20)
    with pytest.raises(CorruptRecordError) as error:
        codec.validate_batches(buf[:-cut_bytes], NO_LIMIT)
    assert error.value.error_code == 2


@pytest.mark.parametrize("position", [17, 21, 30, 60, 70])
def test_flipped_byte_inside_crc_range_or_crc_is_corrupt(codec, position):
    buf = build_batch(payload_bytes=20)
    buf[position] ^= 0x01
    with pytest.raises(CorruptRecordError):
        codec.validate_batches(buf, NO_LIMIT)


def test_trailing_garbage_after_a_valid_batch_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        codec.validate_batches(build_batch() + b"\x00" * 11, NO_LIMIT)


def test_zero_filled_buffer_is_corrupt(codec):
    with pytest.raises(CorruptRecordError):
        codec.validate_batches(bytearray(200), NO_LIMIT)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_formats_are_invalid_record(codec, magic):
    buf = build_batch()
    buf[16] = magic
    with pytest.raises(InvalidRecordError) as error:
        codec.validate_batches(buf, NO_LIMIT)
    assert error.value.error_code == 87


def test_legacy_v0_message_shorter_than_a_v2_header_is_invalid_record(codec):
    # offset, size 14, crc, magic 0, attributes, key -1, value -1
    message = struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, -1)
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(bytearray(message), NO_LIMIT)


def test_unknown_compression_codec_is_invalid_record(codec):
    buf = build_batch()
    buf[22] |= 7
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(recrc(buf), NO_LIMIT)


def test_batch_over_max_message_bytes_is_too_large(codec):
    buf = build_batch(payload_bytes=100)
    with pytest.raises(RecordTooLargeError) as error:
        codec.validate_batches(buf, len(buf) - 1)
    assert error.value.error_code == 10
    codec.validate_batches(buf, len(buf))


def test_empty_request_is_invalid_record(codec):
    with pytest.raises(InvalidRecordError):
        codec.validate_batches(bytearray(), NO_LIMIT)


@pytest.mark.parametrize("record_count, last_offset_delta", [(0, 0), (2, 0), (1, 3)])
def test_client_batches_must_count_their_offsets(codec, record_count, last_offset_delta):
    buf = build_batch(record_count=record_count, last_offset_delta=last_offset_delta)
    codec.validate_batches(buf, NO_LIMIT)  # a follower copies such batches as they are
    with pytest.raises(InvalidRecordError):
        codec.assign_batches(buf, RULES, 0, 0, NOW)


def test_complete_batches_size_stops_before_a_partial_batch():
    whole = build_batch() + build_batch(payload_bytes=40)
    assert complete_batches_size(whole + build_batch()[:30]) == len(whole)
    assert complete_batches_size(whole[:5]) == 0


# -- scan_segment: crash recovery's scan of a segment file -------------------------------------------


def _segment_file(tmp_path, content: bytes) -> int:
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(content)
    return os.open(path, os.O_RDONLY)


def _scan_whole(codec, fd: int, size_bytes: int, next_offset: int = 0, index_interval_bytes: int = 4096,
                producers_from_offset: int = 0):
    return codec.scan_segment(fd, 0, size_bytes, next_offset, 0, index_interval_bytes, index_interval_bytes, -1,
                              producers_from_offset)


def _batches_of(sizes: list[int], epochs: list[int] | None = None) -> bytes:
    """Batches of exactly `sizes` claiming two records each, of producer 7 at `epochs` (one each)
    if given. Their records are filler: recovery reads headers and CRCs only."""
    buf = bytearray()
    offset = 0
    for i, size in enumerate(sizes):
        producer = () if epochs is None else (7, epochs[i], 2 * i)
        batch = framed_batch(bytes([i + 1]) * (size - 61), 2, 100 + i, 100 + i, 0, *producer)
        struct.pack_into(">q", batch, 0, offset)
        buf += batch
        offset += 2
    return bytes(buf)


# Around the scan buffer's edge: a header cut by it, a batch ending on it, batches larger than it.
@pytest.mark.parametrize("sizes", [
    [SCAN_BUFFER_BYTES - 30, 200, 5000],
    [SCAN_BUFFER_BYTES - 61, 61, 61],
    [SCAN_BUFFER_BYTES, 100],
    [100, 3 * SCAN_BUFFER_BYTES + 7, 2 * SCAN_BUFFER_BYTES, 61],
])
def test_scan_keeps_every_batch_wherever_it_lies_against_the_read_buffer(codec, tmp_path, sizes):
    content = _batches_of(sizes)
    fd = _segment_file(tmp_path, content)
    try:
        scan = _scan_whole(codec, fd, len(content))
    finally:
        os.close(fd)
    positions = [sum(sizes[:i]) for i in range(len(sizes))]
    assert scan.refusal is None
    assert (scan.end_position, scan.next_offset, scan.max_timestamp) == (len(content), 2 * len(sizes), 99 + len(sizes))
    indexed = []  # segment.py's rule: the first batch past the due position, then 4096 bytes on
    due_position = 4096
    for i, position in enumerate(positions):
        if position > due_position:
            indexed.append(i)
            due_position = position + 4096
    assert scan.index_positions == [positions[i] for i in indexed]
    assert scan.index_offsets == [2 * i for i in indexed]
    assert scan.index_timestamps == [99 + i for i in indexed]


@pytest.mark.parametrize("cut_bytes, reason", [
    (1, "batch at position {second} needs {size} bytes, {remain} remain"),
    (SCAN_BUFFER_BYTES, "header at position {second} is cut after 20 bytes"),
])
def test_scan_refusals_name_file_positions(codec, tmp_path, cut_bytes, reason):
    sizes = [SCAN_BUFFER_BYTES + 100, SCAN_BUFFER_BYTES + 20]
    content = _batches_of(sizes)[:sum(sizes) - cut_bytes]
    fd = _segment_file(tmp_path, content)
    try:
        scan = _scan_whole(codec, fd, len(content))
    finally:
        os.close(fd)
    second = sizes[0]
    assert (scan.end_position, scan.next_offset) == (second, 2)
    assert scan.refusal == reason.format(second=second, size=sizes[1], remain=sizes[1] - cut_bytes)


def test_scan_refuses_offsets_going_back_or_out_of_the_segment(codec, tmp_path):
    content = _batches_of([100, 100])
    fd = _segment_file(tmp_path, content)
    try:
        assert _scan_whole(codec, fd, len(content), next_offset=1).refusal == "base offset 0 is below next offset 1"
        scan = codec.scan_segment(fd, 0, len(content), 0, -(2**31), 0, 0, -1, 0)
        assert scan.refusal == f"offset 1 is out of range of segment {-(2**31)}"
    finally:
        os.close(fd)


def _runs_of(codec, tmp_path, content: bytes, producers_from_offset: int = 0):
    fd = _segment_file(tmp_path, content)
    try:
        return _scan_whole(codec, fd, len(content), producers_from_offset=producers_from_offset).producer_runs
    finally:
        os.close(fd)


def _run_batch(i: int) -> tuple[int, int, int, int]:
    """What a producer run holds of _batches_of's batch `i`."""
    return 2 * i, 1, 100 + i, 2 * i


@pytest.mark.parametrize("epochs, from_offset, expected", [
    ([0] * 7, 0, [(7, 0, False, tuple(_run_batch(i) for i in range(2, 7)))]),  # the last 5
    ([0, 0, 1, 1], 0, [(7, 1, True, (_run_batch(2), _run_batch(3)))]),  # a new epoch starts afresh
    ([0, 0, 1, 1], 4, [(7, 1, False, (_run_batch(2), _run_batch(3)))]),  # ...unless it starts the range
    ([3, 3], 4, []),
])
def test_scan_sums_up_each_producer_as_replaying_its_batches_would(codec, tmp_path, epochs, from_offset, expected):
    assert _runs_of(codec, tmp_path, _batches_of([100] * len(epochs), epochs), from_offset) == expected


def test_scan_runs_leave_out_batches_without_a_producer_and_control_batches(codec, tmp_path):
    content = _batches_of([100, 100]) + build_batch(record_count=2, base_offset=4, attributes=0x20, producer_id=9,
                                                    producer_epoch=0, base_sequence=0)
    assert _runs_of(codec, tmp_path, content) == []


@pytest.mark.parametrize("attributes", [0x10, 0x30])  # a transactional batch, a transaction marker
@pytest.mark.parametrize("from_offset, summed_up", [(0, False), (5, True)])
def test_scan_runs_cannot_sum_up_transactions(codec, tmp_path, attributes, from_offset, summed_up):
    # Runs know nothing of open transactions and markers: the producer state must read those headers.
    content = _batches_of([100, 100]) + build_batch(record_count=1, base_offset=4, attributes=attributes,
                                                    producer_id=9, producer_epoch=0, base_sequence=0)
    runs = _runs_of(codec, tmp_path, content, from_offset)
    assert (runs is not None) is summed_up


@pytest.mark.parametrize("sizes", [[100, 200], [SCAN_BUFFER_BYTES + 100, SCAN_BUFFER_BYTES, 61]])
def test_a_file_shorter_than_the_scan_was_told_is_refused_where_its_data_ends(codec, tmp_path, sizes):
    content = _batches_of(sizes)
    fd = _segment_file(tmp_path, content)
    try:
        scan = codec.scan_segment(fd, 0, len(content) + 5000, 0, 0, 4096, 4096, -1, 0)
    finally:
        os.close(fd)
    assert (scan.end_position, scan.next_offset) == (len(content), 2 * len(sizes))
    assert scan.refusal == f"0 bytes at position {len(content)} cannot hold a batch"


def test_scan_read_error_is_an_os_error(codec):
    with pytest.raises(OSError):
        codec.scan_segment(-1, 0, 1000, 0, 0, 0, 0, -1, 0)


@needs_compiled
@settings(max_examples=60, deadline=None)
@given(
    sizes_and_epochs=st.lists(st.tuples(st.integers(61, 3 * SCAN_BUFFER_BYTES), st.integers(0, 2)), min_size=1,
                              max_size=8),
    damage=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=2),
    cut_bytes=st.integers(min_value=0, max_value=100),
    index_interval_bytes=st.sampled_from([0, 4096, SCAN_BUFFER_BYTES]),
    producers_from_offset=st.integers(0, 16),
)
def test_compiled_and_pure_python_scans_agree_on_any_file(tmp_path_factory, sizes_and_epochs, damage, cut_bytes,
                                                          index_interval_bytes, producers_from_offset):
    sizes, epochs = zip(*sizes_and_epochs)
    content = bytearray(_batches_of(list(sizes), list(epochs)))
    for position, flip in damage:  # may hit offsets, lengths, magic, counts, CRC or records
        content[position % len(content)] ^= flip
    content = content[:max(len(content) - cut_bytes, 0)]
    fd = _segment_file(tmp_path_factory.mktemp("scan"), bytes(content))
    try:
        assert _scan_whole(COMPILED, fd, len(content), 0, index_interval_bytes, producers_from_offset) == _scan_whole(
            PURE_PYTHON, fd, len(content), 0, index_interval_bytes, producers_from_offset)
    finally:
        os.close(fd)


def _assert_every_compiled_crc32c_agrees(view):
    from replog.storage import _fastbatch

    expected = crc32c.crc32c(view)
    assert _fastbatch.crc32c(view) == expected
    for implementation in _fastbatch.CRC32C_IMPLEMENTATIONS:
        assert _fastbatch.crc32c(view, implementation) == expected, (implementation, len(view))


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=20000), start=st.integers(min_value=0, max_value=15))
def test_every_compiled_crc32c_agrees_with_the_crc32c_package(data, start):
    # Unaligned starts and lengths around the interleaved and folded block sizes take every path
    # of each implementation this CPU can run (the fastest is the one batches are checked with).
    _assert_every_compiled_crc32c_agrees(memoryview(data)[min(start, len(data)):])


def _lengths_around_every_step():
    # Hypothesis rarely lands exactly on a step boundary, where an off-by-one hides: here every
    # length up to past three 256-byte steps, then every length within 17 bytes of several
    # multiples of each step: the 16-, 64- and 256-byte folds, and sse4.2's three interleaved
    # 256- and 2048-byte blocks.
    lengths = set(range(1100))
    for step in (16, 64, 256, 3 * 256, 3 * 2048):
        for multiple in (1, 2, 3, 5, 8):
            lengths.update(range(step * multiple - 17, step * multiple + 18))
    return sorted(length for length in lengths if length >= 0)


@needs_compiled
@pytest.mark.parametrize("start", range(16))
def test_every_compiled_crc32c_agrees_on_every_tail_length(start):
    lengths = _lengths_around_every_step()
    data = memoryview(random.Random(start).randbytes(start + lengths[-1]))
    for length in lengths:
        _assert_every_compiled_crc32c_agrees(data[start:start + length])


@needs_compiled
@pytest.mark.parametrize("extra_bytes", [0, 1, 15, 63, 255, 4097])
def test_every_compiled_crc32c_agrees_on_mebibyte_buffers(extra_bytes):
    data = memoryview(random.Random(extra_bytes).randbytes(3 + (1 << 20) + extra_bytes))
    _assert_every_compiled_crc32c_agrees(data[3:])
