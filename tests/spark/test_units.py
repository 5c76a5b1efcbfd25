"""The connector's parts without Spark or brokers: options, offset planning, record batches."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.spark_io.offsets import EARLIEST, LATEST, OffsetRange, TopicPartition, from_json, limit_offsets, ranges_between, to_json
from replog.spark_io.options import OptionError, parse_read_options, parse_write_options
from replog.spark_io.reader import _binary_array
from replog.spark_io import records
from replog.spark_io.records import COMPILED, Columns, OutgoingRecord, _decode_records_py, decode_batches, encode_batch
from replog.spark_io.writer import murmur2
from tests.support.batches import CLIENT_BATCHES_DIR

BOOTSTRAP = {"kafka.bootstrap.servers": "127.0.0.1:9092"}
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="the _fastrecords extension is not built")
A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_offsets_json_has_a_stable_key_order_whatever_the_insertion_order():
    offsets = {TopicPartition("b", 10): 1, TopicPartition("a", 2): 3, TopicPartition("b", 9): 5, TopicPartition("a", 0): 7}
    encoded = json.dumps(to_json(offsets))
    assert encoded == '{"a": {"0": 7, "2": 3}, "b": {"9": 5, "10": 1}}'
    assert json.dumps(to_json(dict(reversed(offsets.items())))) == encoded
    assert from_json(json.loads(encoded)) == offsets


def test_max_offsets_are_shared_by_backlog_and_bound_exactly():
    start = {A0: 0, A1: 100, B0: 5}
    ends = limit_offsets(start, {A0: 1000, A1: 110, B0: 5}, 101)
    assert sum(ends[tp] - start[tp] for tp in start) == 101
    assert ends[B0] == 5 and ends[A1] - 100 >= 1  # a small backlog is not starved
    assert limit_offsets(start, {A0: 10, A1: 110, B0: 5}, 1000) == {A0: 10, A1: 110, B0: 5}


def test_min_partitions_cuts_ranges_in_proportion_and_keeps_every_offset():
    ranges = ranges_between({A0: 0, A1: 0, B0: 7}, {A0: 90, A1: 10, B0: 7}, min_partitions=5)
    assert [piece for piece in ranges if piece.topic_partition == A1] == [OffsetRange(A1, 0, 10)]
    a0 = [piece for piece in ranges if piece.topic_partition == A0]
    assert len(a0) == 4 and a0[0].start == 0 and a0[-1].end == 90
    assert all(left.end == right.start for left, right in zip(a0, a0[1:]))
    assert ranges_between({A0: 0}, {A0: 90}) == [OffsetRange(A0, 0, 90)]


@pytest.mark.parametrize("options, named", [
    ({"subscribe": "t", "subscribePattern": "t.*"}, "'subscribe', 'subscribePattern', 'assign'"),
    ({"subscribe": "t", "minPartitions": "0"}, "'minPartitions'"),
    ({"subscribe": "t", "startingOffsets": "{not json"}, "'startingOffsets'"),
    ({"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "'startingOffsets'"),
    ({"subscribe": "t", "startingTimestamp": "yesterday"}, "'startingTimestamp'"),
    ({"subscribe": "t", "startingOffsetsByTimestampStrategy": "earliest"}, "'startingOffsetsByTimestampStrategy'"),
    ({"subscribe": "t", "includeHeaders": "yes"}, "'includeHeaders'"),
    ({"subscribe": "t", "kafka.fetch.max.bytes": "-1"}, "'kafka.fetch.max.bytes'"),
    ({"subscribe": "t", "kafka.bootstrap.servers": "nohost"}, "'kafka.bootstrap.servers'"),
    ({"subscribe": "t", "kafka.bootstrap.servers": ""}, "'kafka.bootstrap.servers'"),
    ({"subscribe": "t", "colour": "blue"}, "'colour'"),
])
def test_bad_read_options_name_the_option(options, named):
    with pytest.raises(OptionError, match=named):
        parse_read_options(BOOTSTRAP | options, streaming=None)


def test_options_only_one_kind_of_query_refuses():
    with pytest.raises(OptionError, match="'endingOffsets' is not valid in streaming"):
        parse_read_options(BOOTSTRAP | {"subscribe": "t", "endingOffsets": "latest"}, streaming=True)
    with pytest.raises(OptionError, match="'startingOffsets' cannot be 'latest' for batch"):
        parse_read_options(BOOTSTRAP | {"subscribe": "t", "startingOffsets": "latest"}, streaming=False)
    with pytest.raises(OptionError, match="'endingOffsets'.*cannot be earliest"):
        parse_read_options(BOOTSTRAP | {"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'}, streaming=False)


def test_read_options_take_spark_spellings_and_defaults():
    options = parse_read_options({"bootstrap.servers": "h1:1,h2:2", "ASSIGN": '{"t": [1, 0]}', "maxoffsetspertrigger": "7",
                                  "groupIdPrefix": "ignored", "kafka.max.partition.fetch.bytes": "1000"}, streaming=True)
    assert options.client.bootstrap == (("h1", 1), ("h2", 2))
    assert options.subscription.select({"t": 2, "u": 1}) == [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert (options.starting.default, options.max_offsets_per_trigger, options.fail_on_data_loss) == (LATEST, 7, True)
    assert options.client.fetch_bytes == 1000
    batch = parse_read_options(BOOTSTRAP | {"subscribePattern": "t-.*"}, streaming=False)
    assert (batch.starting.default, batch.ending.default) == (EARLIEST, LATEST)
    assert batch.subscription.select({"t-1": 1, "xt-1": 1, "t-": 1}) == [TopicPartition("t-", 0), TopicPartition("t-1", 0)]


def test_write_options_refuse_weaker_acks_and_unknown_codecs():
    with pytest.raises(OptionError, match="'kafka.acks'"):
        parse_write_options(BOOTSTRAP | {"kafka.acks": "1"})
    with pytest.raises(OptionError, match="'kafka.compression.type'"):
        parse_write_options(BOOTSTRAP | {"kafka.compression.type": "brotli"})
    assert parse_write_options(BOOTSTRAP | {"topic": "t", "checkpointLocation": "/tmp/x"}).topic == "t"


@pytest.mark.parametrize("decoder", [pytest.param(COMPILED, id="compiled", marks=needs_compiled),
                                     pytest.param(_decode_records_py, id="python")])
@pytest.mark.parametrize("fixture", sorted(path.name for path in CLIENT_BATCHES_DIR.glob("*.bin")))
def test_batches_of_real_clients_decode_with_every_codec(fixture, decoder, monkeypatch):
    monkeypatch.setattr(records, "decode_records", decoder)
    columns = Columns(with_headers=True)
    next_offset = decode_batches((CLIENT_BATCHES_DIR / fixture).read_bytes(), 0, 2**62, columns)
    assert next_offset == 5
    assert columns.keys == [f"key-{i}".encode() for i in range(5)]
    assert columns.values == [f"value-{i}-".encode() * 40 for i in range(5)]
    assert columns.headers == [[("trace", f"t{i}".encode())] for i in range(5)]
    # The fixtures' producers: librdkafka stamps every record alike, the Python builders one ms apart.
    step = 0 if fixture.startswith("confluent") else 1
    assert columns.timestamps_ms == [1_700_000_000_000 + step * i for i in range(5)]


def test_decoding_keeps_only_the_asked_range_and_skips_a_cut_last_batch():
    batch = encode_batch([OutgoingRecord(None, bytes([i]), None) for i in range(10)], "gzip", timestamp_ms=5)
    columns = Columns(with_headers=True)
    assert decode_batches(batch + batch[:30], 3, 6, columns) == 10
    assert (columns.offsets, columns.keys, columns.headers) == ([3, 4, 5], [None] * 3, [None] * 3)


@pytest.mark.parametrize("data, expected", [  # Kafka's UtilsTest.testMurmur2
    (b"21", -973932308), (b"foobar", -790332482), (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829), (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
])
def test_murmur2_matches_kafka(data, expected):
    assert murmur2(data) == expected & 0xFFFFFFFF


def _decoded(decode, data: bytes, count: int, start: int, end: int, with_headers: bool):
    columns: tuple[list, ...] = ([], [], [], [], [] if with_headers else None)
    try:
        added = decode(data, count, 100, 1_000, -1, start, end, *columns)
    except (ValueError, IndexError):
        return "corrupt"
    return added, columns


record_strategy = st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300),
                            st.none() | st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3))


@needs_compiled
@settings(max_examples=200, deadline=None)
@given(records=st.lists(record_strategy, min_size=1, max_size=20), start=st.integers(95, 125), span=st.integers(0, 30),
       cut=st.none() | st.integers(0, 2000), with_headers=st.booleans())
def test_the_compiled_decoder_matches_the_pure_python_one(records, start, span, cut, with_headers):
    batch = encode_batch([OutgoingRecord(*record) for record in records], "none", timestamp_ms=7)
    data = batch[61:] if cut is None else batch[61:61 + cut]  # whole records, or cut anywhere
    expected = _decoded(_decode_records_py, data, len(records), start, start + span, with_headers)
    assert _decoded(COMPILED, data, len(records), start, start + span, with_headers) == expected


@pytest.mark.parametrize("items", [[b"a", b"", b"ccc"], [b"a", None, b""], [], [None]])
def test_binary_columns_equal_arrows_own_conversion(items):
    assert _binary_array(items).equals(pa.array(items, pa.binary()))
