"""compression.type on a topic: a leader re-encodes a producer's batch in the topic's codec where it
names another than the batch's (Kafka's LogValidator.validateMessagesAndAssignOffsetsCompressed),
bounded as decompression is; the batch's header fields and records stay the producer's."""

import pytest

from replog.storage.batch_format import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_PRODUCER,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    HEADER_SIZE_BYTES,
    NewRecord,
    Scratch,
    decompress,
    encode_batch,
    parse_header,
    records_of,
    verify_batch,
)
from replog.storage.errors import RecordTooLargeError
from replog.storage.log import LogConfig
from replog.storage.records import AppendRules, check_and_convert, checked_first, validate_batches
from tests.support.log_fixtures import ManualClock, open_log, read_all

NOW = 1_700_000_000_000
RULES = AppendRules(1 << 20, 2**63 - 1, 3_600_000, False, 64 << 20)
RECORDS = [NewRecord(b"k%d" % i, b"value %d " % i * 20, [("h", b"x")], NOW - 10 + i) for i in range(5)]


def converted(batch: bytearray, topic_codec: int, rules: AppendRules = RULES):
    scratch = Scratch(rules.uncompressed_bytes_max)
    try:
        return check_and_convert(batch, rules._replace(topic_codec=topic_codec), NOW, scratch)
    finally:
        scratch.close()


def records_in(batch) -> list[tuple]:
    header = parse_header(batch, 0)
    body = decompress(header.compression_codec, memoryview(batch)[HEADER_SIZE_BYTES:header.size_bytes], 1 << 20)
    return [(r.offset_delta, r.timestamp_delta, r.key, r.value, r.headers) for r in records_of(body, header.record_count)]


@pytest.mark.parametrize("produced, topic", [(CODEC_NONE, CODEC_ZSTD), (CODEC_LZ4, CODEC_ZSTD),
                                             (CODEC_ZSTD, CODEC_NONE), (CODEC_SNAPPY, CODEC_GZIP),
                                             (CODEC_GZIP, CODEC_LZ4)])
def test_a_batch_is_re_encoded_in_the_topics_codec_with_its_header_and_records(codec, produced, topic):
    batch = encode_batch(RECORDS, NOW - 10, produced, producer_id=7, producer_epoch=1, base_sequence=3)
    assert checked_first(batch, RULES._replace(topic_codec=topic))
    checked = converted(batch, topic)
    assert checked.records_max_timestamp == NOW - 6
    new, old = parse_header(checked.batch, 0), parse_header(batch, 0)
    assert new.compression_codec == topic
    assert (new.record_count, new.last_offset_delta, new.max_timestamp) == (old.record_count, old.last_offset_delta,
                                                                           old.max_timestamp)
    assert checked.batch[23:HEADER_SIZE_BYTES] == batch[23:HEADER_SIZE_BYTES], "producer fields and timestamps kept"
    verify_batch(checked.batch, new)
    assert records_in(checked.batch) == records_in(batch)
    run = codec.assign_batches(checked.batch, RULES._replace(topic_codec=topic), 4, 1, NOW,
                               checked.records_max_timestamp)
    assert run == (1, 8, NOW - 6, 5)
    assert [h.compression_codec for h in validate_batches(checked.batch, 1 << 20)] == [topic]


@pytest.mark.parametrize("produced, topic", [(CODEC_LZ4, CODEC_PRODUCER), (CODEC_ZSTD, CODEC_ZSTD),
                                             (CODEC_NONE, CODEC_NONE)])
def test_a_batch_already_in_the_topics_codec_or_on_a_producer_topic_stays_as_it_came(produced, topic):
    batch = encode_batch(RECORDS, NOW - 10, produced)
    assert checked_first(batch, RULES._replace(topic_codec=topic)) == (produced != CODEC_NONE)
    if produced != CODEC_NONE:
        assert converted(batch, topic).batch is batch


def test_a_batch_that_inflates_past_max_message_bytes_uncompressed_is_refused(codec):
    # Kafka re-validates the size of a re-encoded batch (RecordTooLargeException): here assign does.
    rules = RULES._replace(max_batch_bytes=2048, topic_codec=CODEC_NONE)
    batch = encode_batch([NewRecord(b"k", b"a" * 10_000)], NOW, CODEC_ZSTD)
    assert len(batch) < 2048
    checked = converted(batch, CODEC_NONE, rules)
    with pytest.raises(RecordTooLargeError, match="exceeds max.message.bytes 2048"):
        codec.assign_batches(checked.batch, rules, 0, 0, NOW, checked.records_max_timestamp)


@pytest.mark.usefixtures("log_codec")
@pytest.mark.parametrize("compression_type, stored", [("zstd", CODEC_ZSTD), ("uncompressed", CODEC_NONE),
                                                      ("producer", CODEC_LZ4)])
def test_a_log_stores_batches_in_its_compression_type(tmp_path, compression_type, stored):
    log = open_log(tmp_path / "t-0", ManualClock(NOW), compression_type=compression_type)
    assert log.append(encode_batch(RECORDS, NOW - 10, CODEC_LZ4), leader_epoch=0) == (0, 4)
    assert log.append(encode_batch(RECORDS[:1], NOW - 10, CODEC_LZ4), leader_epoch=0) == (5, 5)
    headers = validate_batches(read_all(log, 0), 1 << 20)
    assert [(h.base_offset, h.compression_codec) for h in headers] == [(0, stored), (5, stored)]


@pytest.mark.usefixtures("log_codec")
def test_a_changed_compression_type_applies_from_the_next_append(tmp_path):
    log = open_log(tmp_path / "t-0", ManualClock(NOW))
    log.append(encode_batch(RECORDS, NOW - 10), leader_epoch=0)
    log.update_config(LogConfig(compression_type="gzip"))
    log.append(encode_batch(RECORDS, NOW - 10), leader_epoch=0)
    assert [h.compression_codec for h in validate_batches(read_all(log, 0), 1 << 20)] == [CODEC_NONE, CODEC_GZIP]


def test_an_unknown_compression_type_is_refused(tmp_path):
    with pytest.raises(ValueError, match="compression_type must be one of producer, uncompressed"):
        open_log(tmp_path / "t-0", compression_type="brotli")


@pytest.mark.parametrize("compression_type, levels", [("zstd", {"compression_zstd_level": (1, 19)}),
                                                      ("lz4", {"compression_lz4_level": (1, 17)}),
                                                      ("gzip", {"compression_gzip_level": (1, 9)})])
def test_a_log_re_encodes_at_its_codecs_level(tmp_path, compression_type, levels):
    [(name, (fast, small))] = levels.items()
    words = b" ".join(b"%x" % (i * 7919 % 4093) for i in range(20_000))
    stored = {}
    for level in (fast, small):
        log = open_log(tmp_path / f"t-{level}", ManualClock(NOW), compression_type=compression_type, **{name: level})
        log.append(encode_batch([NewRecord(b"k", words)], NOW), leader_epoch=0)
        batch = read_all(log, 0)
        assert records_in(batch) == records_in(encode_batch([NewRecord(b"k", words)], NOW))
        stored[level] = len(batch)
    assert stored[small] < stored[fast]
