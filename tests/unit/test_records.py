import struct

import pytest

from replog.replica.errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from replog.replica.records import (
    assign_offsets,
    check_client_counts,
    complete_batches_size,
    validate_batches,
    verify_batch,
)
from replica_batches import build_batch

NO_LIMIT = 1 << 30


def test_validate_returns_header_fields_of_concatenated_batches():
    buf = build_batch(record_count=3, payload_bytes=10, max_timestamp=42, attributes=4) + build_batch(payload_bytes=20)
    first, second = validate_batches(buf, NO_LIMIT)
    assert (first.position, first.size_bytes, first.record_count, first.last_offset_delta) == (0, 71, 3, 2)
    assert (first.max_timestamp, first.compression_codec) == (42, 4)
    assert (second.position, second.size_bytes) == (71, 81)


def test_assign_offsets_rewrites_offset_and_epoch_in_place_keeping_crc_valid():
    buf = build_batch(record_count=3) + build_batch(record_count=2)
    headers = assign_offsets(buf, validate_batches(buf, NO_LIMIT), first_offset=100, leader_epoch=7)
    assert [(h.base_offset, h.last_offset) for h in headers] == [(100, 102), (103, 104)]
    reparsed = validate_batches(buf, NO_LIMIT)  # raises if a CRC broke
    assert [(h.base_offset, h.partition_leader_epoch) for h in reparsed] == [(100, 7), (103, 7)]


@pytest.mark.parametrize("cut_bytes", [1, 30, 70])
def test_torn_batch_is_corrupt(cut_bytes):
    buf = build_batch(payload_bytes=20)
    with pytest.raises(CorruptRecordError) as error:
        validate_batches(buf[:-cut_bytes], NO_LIMIT)
    assert error.value.error_code == 2


@pytest.mark.parametrize("position", [17, 21, 30, 60, 70])
def test_flipped_byte_inside_crc_range_or_crc_is_corrupt(position):
    buf = build_batch(payload_bytes=20)
    buf[position] ^= 0x01
    with pytest.raises(CorruptRecordError):
        validate_batches(buf, NO_LIMIT)


def test_trailing_garbage_after_a_valid_batch_is_corrupt():
    with pytest.raises(CorruptRecordError):
        validate_batches(build_batch() + b"\x00" * 11, NO_LIMIT)


def test_zero_filled_buffer_is_corrupt():
    with pytest.raises(CorruptRecordError):
        validate_batches(bytearray(200), NO_LIMIT)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_message_formats_are_invalid_record(magic):
    buf = build_batch()
    buf[16] = magic
    with pytest.raises(InvalidRecordError) as error:
        validate_batches(buf, NO_LIMIT)
    assert error.value.error_code == 87


def test_legacy_v0_message_shorter_than_a_v2_header_is_invalid_record():
    # offset, size 14, crc, magic 0, attributes, key -1, value -1
    message = struct.pack(">qiIbbii", 0, 14, 0, 0, 0, -1, -1)
    with pytest.raises(InvalidRecordError):
        validate_batches(bytearray(message), NO_LIMIT)


def test_unknown_compression_codec_is_invalid_record():
    with pytest.raises(InvalidRecordError):
        validate_batches(build_batch(attributes=7), NO_LIMIT)


def test_batch_over_max_message_bytes_is_too_large():
    buf = build_batch(payload_bytes=100)
    with pytest.raises(RecordTooLargeError) as error:
        validate_batches(buf, len(buf) - 1)
    assert error.value.error_code == 10
    validate_batches(buf, len(buf))


def test_empty_request_is_invalid_record():
    with pytest.raises(InvalidRecordError):
        validate_batches(bytearray(), NO_LIMIT)


@pytest.mark.parametrize("record_count, last_offset_delta", [(0, 0), (2, 0), (1, 3)])
def test_client_batches_must_count_their_offsets(record_count, last_offset_delta):
    headers = validate_batches(build_batch(record_count=record_count, last_offset_delta=last_offset_delta), NO_LIMIT)
    with pytest.raises(InvalidRecordError):
        check_client_counts(headers)


def test_verify_batch_accepts_memoryview_slices():
    buf = build_batch(payload_bytes=5)
    (header,) = validate_batches(memoryview(buf), NO_LIMIT)
    verify_batch(memoryview(buf), header)


def test_complete_batches_size_stops_before_a_partial_batch():
    whole = build_batch() + build_batch(payload_bytes=40)
    assert complete_batches_size(whole + build_batch()[:30]) == len(whole)
    assert complete_batches_size(whole[:5]) == 0
