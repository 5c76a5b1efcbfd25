"""A leader's validation of a producer's batch (records.assign_batches, check_records), rule by rule
as Kafka's LogValidator has them: each refusal's error class, Kafka error code, message and
record, in both implementations (the `codec` fixture), and the two agreeing on any mutation of a
valid batch."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replog.storage.batch_format import (
    CODEC_LZ4,
    CODEC_ZSTD,
    HEADER_SIZE_BYTES,
    NewRecord,
    Scratch,
    encode_batch,
    encode_varint,
    parse_header,
    set_crc,
    verify_batch,
)
from replog.storage.errors import RECORD_ERRORS_MAX, ReplicaError
from replog.storage.records import COMPILED, PURE_PYTHON, AppendRules, check_and_convert
from tests.support.batches import build_batch

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000
NEVER = 2**63 - 1
RULES = AppendRules(1 << 20, NEVER, HOUR_MS, False, 64 << 20)  # Kafka 4's defaults
COMPACTED = RULES._replace(keys_required=True)
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the _fastbatch extension is not built")


def batch_of(records: list[NewRecord], **fields) -> bytearray:
    return encode_batch(records, NOW, **fields)


def with_records(body: bytes, record_count: int, **header) -> bytearray:
    """A batch of record bytes `body` as given (which may be anything), claiming `record_count`."""
    batch = encode_batch([NewRecord(b"k", b"v")], NOW, **header)
    batch[HEADER_SIZE_BYTES:] = body
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">i", batch, 23, record_count - 1)
    struct.pack_into(">i", batch, 57, record_count)
    set_crc(batch)
    return batch


def record(offset_delta: int = 0, key: bytes | None = b"k", value: bytes | None = b"v", timestamp_delta: int = 0,
           headers: list[tuple[bytes, bytes | None]] = (), raw_tail: bytes = b"") -> bytes:
    """One record's bytes, length prefix included; `raw_tail` appended inside the record."""
    fields = b"\x00" + encode_varint(timestamp_delta) + encode_varint(offset_delta)
    for field in (key, value):
        fields += encode_varint(-1) if field is None else encode_varint(len(field)) + field
    fields += encode_varint(len(headers))
    for header_key, header_value in headers:
        fields += encode_varint(len(header_key)) + header_key
        fields += encode_varint(-1) if header_value is None else encode_varint(len(header_value)) + header_value
    fields += raw_tail
    return encode_varint(len(fields)) + fields


def refusal(codec, batch: bytearray, rules: AppendRules = RULES) -> tuple[int, str, int | None]:
    original = bytes(batch)
    with pytest.raises(ReplicaError) as raised:
        codec.assign_batches(batch, rules, 0, 0, NOW)
    assert bytes(batch) == original, "a refused batch must stay as it came"
    return raised.value.error_code, str(raised.value), raised.value.record_index


def rejection(codec, batch: bytearray, rules: AppendRules = RULES) -> tuple[int, str, tuple[tuple[int, str], ...]]:
    """(error code, error_message, record_errors) of Produce's answer to a batch of records
    refused one by one, of topic partition t-0."""
    original = bytes(batch)
    with pytest.raises(ReplicaError) as raised:
        codec.assign_batches(batch, rules, 0, 0, NOW)
    assert bytes(batch) == original, "a refused batch must stay as it came"
    assert raised.value.rejected is not None and raised.value.record_index is None
    return raised.value.error_code, *raised.value.produce_answer("t-0")


def test_a_valid_batch_is_accepted_and_assigned(codec):
    batch = batch_of([NewRecord(b"a", b"1", [("h", b"x"), ("n", None)]), NewRecord(b"b", None, None, NOW + 5)])
    run = codec.assign_batches(batch, COMPACTED, 40, 3, NOW)
    assert run == (1, 41, NOW + 5, 2)
    verify_batch(batch, parse_header(batch, 0))


# -- the batch ------------------------------------------------------------------------------------


def test_exactly_one_batch_per_partition(codec):
    assert refusal(codec, build_batch() + build_batch()) == (
        87, "only one record batch per partition is accepted: 77 bytes follow the first", None)


def test_the_probe_of_2000_batches_of_2000_producers_is_one_refusal(codec):
    batches = b"".join(build_batch(max_timestamp=2**62, producer_id=pid, producer_epoch=0, base_sequence=0)
                       for pid in range(2000))
    assert refusal(codec, bytearray(batches))[0] == 87


@pytest.mark.parametrize("count, last_offset_delta, message", [
    (0, 0, "batch at position 0 claims 0 records but spans 1 offsets"),
    (2, 0, "batch at position 0 claims 2 records but spans 1 offsets"),
])
def test_the_record_count_matches_the_offsets_and_is_not_zero(codec, count, last_offset_delta, message):
    assert refusal(codec, build_batch(record_count=count, last_offset_delta=last_offset_delta)) == (87, message, None)


def test_clients_may_not_write_control_batches(codec):
    assert refusal(codec, build_batch(attributes=0x20)) == (87, "clients may not write control batches", None)


def test_transactional_batches_are_accepted_from_a_producer(codec):
    batch = build_batch(attributes=0x10, producer_id=5, producer_epoch=0, base_sequence=0)
    assert codec.assign_batches(batch, RULES, 7, 0, NOW).last_offset == 7


def test_transactional_batches_need_a_producer_id(codec):
    batch = build_batch(attributes=0x10)
    assert refusal(codec, batch) == (87, "a transactional batch needs a producer id", None)


@pytest.mark.parametrize("producer_id, base_sequence, message", [
    (-2, -1, "producer id -2 is not valid"),
    (7, -1, "invalid sequence number -1 in a batch with producer id 7"),
])
def test_producer_fields_are_sane(codec, producer_id, base_sequence, message):
    batch = build_batch(producer_id=producer_id, producer_epoch=0, base_sequence=base_sequence)
    assert refusal(codec, batch) == (87, message, None)


def test_producers_may_not_claim_log_append_time(codec):
    assert refusal(codec, build_batch(attributes=0x08)) == (
        32, "producers may not set the timestamp type to LogAppendTime", None)


def test_framing_and_crc_come_first(codec):
    batch = build_batch(attributes=0x20)
    batch[-1] ^= 1
    assert refusal(codec, batch)[0] == 2
    assert refusal(codec, build_batch(payload_bytes=200), RULES._replace(max_batch_bytes=100))[0] == 10


# -- the records ----------------------------------------------------------------------------------


def test_the_probe_of_a_header_claiming_2_pow_31_minus_1_records_with_no_body(codec):
    assert refusal(codec, with_records(b"", 2**31 - 1)) == (87, "record 0 of 2147483647 is missing", 0)


def test_the_probe_of_40_bytes_of_garbage_claiming_3_records(codec):
    code, _, index = refusal(codec, with_records(bytes(range(7, 47)), 3))
    assert (code, index) == (87, 0)


@pytest.mark.parametrize("body, count, message", [
    (record() + record(1), 3, "record 2 of 3 is missing"),
    (encode_varint(-1), 1, "record 0: length -1 but 0 bytes remain"),
    (encode_varint(50) + b"\x00" * 10, 1, "record 0: length 50 but 10 bytes remain"),
    (b"\x80", 1, "record 0: length is cut short"),
    (b"\xff\xff\xff\xff\x7f", 1, "record 0: length is not a valid varint"),
    (encode_varint(0), 1, "record 0: attributes is cut short"),
    (encode_varint(11) + b"\x00" + b"\x80" * 10, 1, "record 0: timestamp delta is not a valid varint"),
    (encode_varint(2) + b"\x00\x00", 1, "record 0: offset delta is cut short"),
    (record(1), 1, "record 0: offset delta 1, expected 0"),
    (record() + record(0), 2, "record 1: offset delta 0, expected 1"),
    (record(raw_tail=b"\x00"), 1, "record 0: read 8 bytes of its 9"),
    (record() + b"\x00\x01", 1, "2 bytes follow the batch's last record"),
])
def test_every_record_is_read_whole(codec, body, count, message):
    code, text, _ = refusal(codec, with_records(body, count))
    assert (code, text) == (87, message)


def test_key_and_value_lengths_are_null_or_within_the_record(codec):
    fields = b"\x00\x00\x00" + encode_varint(-2) + encode_varint(1) + b"v" + b"\x00"
    assert refusal(codec, with_records(encode_varint(len(fields)) + fields, 1)) == (87, "record 0: key length -2", 0)
    fields = b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(9) + b"v\x00"
    assert refusal(codec, with_records(encode_varint(len(fields)) + fields, 1)) == (
        87, "record 0: value of 9 bytes runs past the record", 0)


def test_headers_are_counted_and_well_formed(codec):
    def with_headers(tail: bytes) -> bytearray:
        fields = b"\x00\x00\x00" + encode_varint(1) + b"k" + encode_varint(1) + b"v" + tail
        return with_records(encode_varint(len(fields)) + fields, 1)

    assert refusal(codec, with_headers(encode_varint(-1))) == (87, "record 0: header count -1", 0)
    assert refusal(codec, with_headers(encode_varint(5) + b"\x00")) == (87, "record 0: header count 5", 0)
    assert refusal(codec, with_headers(encode_varint(1) + encode_varint(-1) + encode_varint(0))) == (
        87, "record 0: header key length -1", 0)
    assert refusal(codec, with_headers(encode_varint(1) + encode_varint(1) + b"h" + encode_varint(-3))) == (
        87, "record 0: header value length -3", 0)
    assert refusal(codec, with_headers(encode_varint(1) + encode_varint(1) + b"h")) == (
        87, "record 0: header value length is cut short", 0)
    valid = with_headers(encode_varint(2) + encode_varint(1) + b"h" + encode_varint(-1) + encode_varint(0)
                         + encode_varint(0))
    assert codec.assign_batches(valid, RULES, 0, 0, NOW).record_count == 1


NO_KEY = "Compacted topic cannot accept message without key in topic partition t-0"


def test_a_compacted_topic_needs_every_key_and_every_keyless_record_is_named(codec):
    """As Kafka's LogValidator: every record is read, and each without a key is a record error."""
    batch = batch_of([NewRecord(b"a", b"1"), NewRecord(None, b"2"), NewRecord(b"c", b"3"), NewRecord(None, b"4")])
    assert rejection(codec, batch, COMPACTED) == (
        87, "One or more records have been rejected due to 2 record errors in total, and only showing the first "
            f"three errors at most: [RecordError(batchIndex=1, message='{NO_KEY}'), "
            f"RecordError(batchIndex=3, message='{NO_KEY}')]",
        ((1, NO_KEY), (3, NO_KEY)))
    assert codec.assign_batches(batch, RULES, 0, 0, NOW).record_count == 4


def test_the_message_shows_three_record_errors_and_the_list_is_bounded(codec):
    count = RECORD_ERRORS_MAX + 5
    code, message, record_errors = rejection(codec, batch_of([NewRecord(None, b"")] * count), COMPACTED)
    assert code == 87
    assert message == (f"One or more records have been rejected due to {count} record errors in total, and only "
                       "showing the first three errors at most: ["
                       + ", ".join(f"RecordError(batchIndex={index}, message='{NO_KEY}')" for index in range(3)) + "]")
    assert record_errors == tuple((index, NO_KEY) for index in range(RECORD_ERRORS_MAX))


def test_a_structural_fault_after_a_keyless_record_is_the_refusal(codec):
    """Kafka stops at a record it cannot read; the record errors before it are not answered."""
    batch = with_records(record(0, key=None) + record(5), 2)
    assert refusal(codec, batch, COMPACTED) == (87, "record 1: offset delta 5, expected 1", 1)


# -- timestamps (KIP-937's settings, Kafka 4's defaults) -----------------------------------------------


def test_a_record_more_than_the_after_bound_ahead_is_an_invalid_timestamp(codec):
    batch = batch_of([NewRecord(b"a", b"1"), NewRecord(b"b", b"2", None, NOW + HOUR_MS + 1)])
    assert rejection(codec, batch) == (
        32, "One or more records have been rejected due to invalid timestamp",
        ((1, f"Timestamp {NOW + HOUR_MS + 1} of message with offset 1 is out of range. The timestamp should be "
             f"within [{NOW - NEVER}, {NOW + HOUR_MS}]"),))
    assert codec.assign_batches(batch_of([NewRecord(b"b", b"2", None, NOW + HOUR_MS)]), RULES, 0, 0, NOW)


def test_the_probe_of_timestamp_2_pow_62_is_an_invalid_timestamp(codec):
    assert refusal(codec, build_batch(max_timestamp=2**62))[0] == 32


def test_the_before_bound_and_records_without_a_timestamp(codec):
    rules = RULES._replace(timestamp_before_max_ms=1000)
    assert rejection(codec, batch_of([NewRecord(b"a", b"1", None, NOW - 1001)]), rules)[2] == (
        (0, f"Timestamp {NOW - 1001} of message with offset 0 is out of range. The timestamp should be within "
            f"[{NOW - 1000}, {NOW + HOUR_MS}]"),)
    # No timestamp (-1) is not checked, as in Kafka.
    assert codec.assign_batches(build_batch(max_timestamp=-1), rules, 0, 0, NOW).max_timestamp == -1


def test_keyless_records_and_invalid_timestamps_together_are_an_invalid_timestamp(codec):
    """A record without a key is that record's error, whatever its timestamp (Kafka checks the key
    first); one invalid timestamp among the errors makes the batch's INVALID_TIMESTAMP."""
    batch = batch_of([NewRecord(None, b"1", None, NOW + 2 * HOUR_MS), NewRecord(b"b", b"2", None, NOW + 2 * HOUR_MS)])
    struct.pack_into(">q", batch, 0, 10)  # a base offset of the producer's, which the message's offsets count from
    code, message, record_errors = rejection(codec, batch, COMPACTED)
    assert (code, message) == (32, "One or more records have been rejected due to invalid timestamp")
    assert record_errors == ((0, NO_KEY), (1, f"Timestamp {NOW + 2 * HOUR_MS} of message with offset 11 is out of "
                                              f"range. The timestamp should be within [{NOW - NEVER}, {NOW + HOUR_MS}]"))


def test_a_timestamp_delta_past_the_int64_range(codec):
    batch = with_records(record(timestamp_delta=2**63 - 1), 1)
    assert refusal(codec, batch) == (32, f"record 0: timestamp delta {2**63 - 1} takes it out of range", 0)


def test_a_wrong_max_timestamp_is_set_to_the_records_and_the_crc_kept_valid(codec):
    batch = batch_of([NewRecord(b"a", b"1", None, NOW - 10), NewRecord(b"b", b"2", None, NOW - 20)])
    struct.pack_into(">q", batch, 35, 2**62)  # the poisoned max timestamp of the probe
    set_crc(batch)
    assert codec.assign_batches(batch, RULES, 0, 0, NOW).max_timestamp == NOW - 10
    header = parse_header(batch, 0)
    verify_batch(batch, header)
    assert header.max_timestamp == NOW - 10


# -- compressed batches: their records checked first, off the event loop ------------------------------


@pytest.mark.parametrize("compression", [CODEC_LZ4, CODEC_ZSTD])
def test_a_compressed_batch_is_assigned_with_the_max_timestamp_its_check_found(codec, compression):
    batch = batch_of([NewRecord(b"a", b"1" * 100, None, NOW - 5), NewRecord(b"b", b"2" * 100)], codec=compression)
    with pytest.raises(ValueError, match="must be checked first"):
        codec.assign_batches(bytearray(batch), RULES, 0, 0, NOW)
    scratch = Scratch(RULES.uncompressed_bytes_max)
    try:
        checked = check_and_convert(batch, RULES, NOW, scratch).records_max_timestamp
    finally:
        scratch.close()
    assert checked == NOW
    assert codec.assign_batches(batch, RULES, 9, 0, NOW, checked) == (1, 10, NOW, 2)


def test_check_records_reads_a_compressed_batchs_records_from_their_decompressed_bytes(codec):
    records = [NewRecord(None, b"1")]
    batch = batch_of(records, codec=CODEC_ZSTD)
    body = encode_batch(records, NOW)[HEADER_SIZE_BYTES:]
    assert codec.check_records(batch, body, RULES, NOW) == NOW
    with pytest.raises(ReplicaError, match="1 of the batch's records rejected") as raised:
        codec.check_records(batch, body, COMPACTED, NOW)
    assert raised.value.rejected.indexes == (0,)
    with pytest.raises(ReplicaError, match="1 bytes follow the batch's last record"):
        codec.check_records(batch, body + b"\x00", RULES, NOW)


# -- message.timestamp.type=LogAppendTime --------------------------------------------------------

APPEND_TIME = RULES._replace(log_append_time=True)


def test_log_append_time_gives_the_batch_the_append_time_and_type_within_its_crc(codec):
    batch = encode_batch([NewRecord(b"a", b"1", None, NOW - 50), NewRecord(b"b", b"2", None, NOW - 40)], NOW - 50)
    run = codec.assign_batches(batch, APPEND_TIME, 7, 2, NOW)
    assert run == (1, 8, NOW, 2)
    header = parse_header(batch, 0)
    assert (header.attributes, header.max_timestamp) == (0x08, NOW)
    verify_batch(batch, header)
    assert struct.unpack_from(">q", batch, 27)[0] == NOW - 50, "the base timestamp stays the producer's"


@pytest.mark.parametrize("compression", [CODEC_LZ4, CODEC_ZSTD])
def test_log_append_time_takes_over_a_compressed_batchs_checked_max_timestamp(codec, compression):
    batch = batch_of([NewRecord(b"a", b"1" * 100, None, NOW - 5)], codec=compression)
    assert codec.assign_batches(batch, APPEND_TIME, 0, 0, NOW, NOW - 5) == (1, 0, NOW, 1)
    header = parse_header(batch, 0)
    assert (header.attributes, header.max_timestamp) == (0x08 | compression, NOW)
    verify_batch(batch, header)


def test_log_append_time_leaves_the_producers_create_times_unchecked(codec):
    # LogValidator checks a record's timestamp against message.timestamp.*.max.ms for CreateTime only.
    future = batch_of([NewRecord(b"a", b"1", None, NOW + 2 * HOUR_MS)])
    assert refusal(codec, bytearray(future))[0] == 32
    assert codec.check_records(future, future[HEADER_SIZE_BYTES:], APPEND_TIME, NOW) == NOW + 2 * HOUR_MS
    assert codec.assign_batches(future, APPEND_TIME, 0, 0, NOW).max_timestamp == NOW


def test_log_append_time_still_refuses_a_producers_claim_to_it(codec):
    assert refusal(codec, build_batch(attributes=0x08), APPEND_TIME)[:2] == (
        32, "producers may not set the timestamp type to LogAppendTime")


# -- both implementations, one contract -----------------------------------------------------------


def _outcome(function, buf, *args):
    try:
        return function(buf, *args), bytes(buf)
    except ReplicaError as error:
        return type(error), str(error), error.record_index, error.rejected, bytes(buf)
    except ValueError as error:
        return ValueError, str(error)


valid_records = st.lists(st.builds(NewRecord, st.none() | st.binary(max_size=20), st.none() | st.binary(max_size=40),
                                   st.lists(st.tuples(st.text(max_size=3), st.none() | st.binary(max_size=3)),
                                            max_size=2),
                                   st.none() | st.integers(NOW - 2 * HOUR_MS, NOW + 2 * HOUR_MS)),
                         min_size=1, max_size=6)


@needs_compiled
@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=valid_records, attributes=st.sampled_from([0, 0, 0, 0x08, 0x10, 0x20]),
       damage=st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=3),
       crc_fixed=st.booleans(), cut_bytes=st.integers(0, 10), extra=st.binary(max_size=8),
       keys_required=st.booleans(), first_offset=st.sampled_from([0, 2**63 - 3, 2**63 - 1]))
def test_compiled_and_pure_python_agree_on_any_mutation_of_a_batch(records, attributes, damage, crc_fixed, cut_bytes,
                                                                  extra, keys_required, first_offset):
    batch = batch_of(records, attributes=attributes)
    for position, flip in damage:  # may hit lengths, counts, varints, keys, timestamps or the CRC
        batch[position % len(batch)] ^= flip
    batch = batch[:max(len(batch) - cut_bytes, 0)] + extra
    if crc_fixed and len(batch) >= HEADER_SIZE_BYTES:
        set_crc(batch)  # past the CRC, to the record checks
    rules = RULES._replace(keys_required=keys_required)
    assert _outcome(COMPILED.assign_batches, bytearray(batch), rules, first_offset, 5, NOW) == _outcome(
        PURE_PYTHON.assign_batches, bytearray(batch), rules, first_offset, 5, NOW)
    body = bytes(batch[HEADER_SIZE_BYTES:])
    assert _outcome(COMPILED.check_records, bytes(batch), body, rules, NOW) == _outcome(
        PURE_PYTHON.check_records, bytes(batch), body, rules, NOW)
    assert _outcome(COMPILED.validate_batches, bytes(batch), 1 << 20) == _outcome(
        PURE_PYTHON.validate_batches, bytes(batch), 1 << 20)
