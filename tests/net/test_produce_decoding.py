"""The Produce body decoder reads exactly what kio reads, with records as writable copies."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.serial import entity_reader, entity_writer

from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.handlers.produce import decode_produce_body

VERSIONS = range(3, 13)

topic_names = st.text(alphabet="abcxyz._-é", min_size=1, max_size=12)
partitions = st.lists(st.tuples(st.integers(-5, 1000), st.one_of(st.none(), st.binary(max_size=300))), max_size=4)
bodies = st.fixed_dictionaries({
    "transactional_id": st.one_of(st.none(), st.text(max_size=8)),
    "acks": st.sampled_from([-1, 0, 1]),
    "timeout": st.integers(0, 60_000),
    "topic_data": st.lists(st.tuples(topic_names, partitions), max_size=3),
})


def encode_body(version: int, body: dict) -> bytes:
    schema = load_request_schema(ApiKey.PRODUCE, version)
    values = dict(body, topic_data=[{"name": name, "partition_data": [{"index": index, "records": records} for index, records in parts]}
                                    for name, parts in body["topic_data"]])
    out = io.BytesIO()
    entity_writer(schema)(out, codec.build(schema, values))
    return out.getvalue()


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(VERSIONS), body=bodies)
def test_decoder_agrees_with_kio(version, body):
    raw = encode_body(version, body)
    expected, _ = entity_reader(load_request_schema(ApiKey.PRODUCE, version))(raw, 0)
    decoded = decode_produce_body(memoryview(bytearray(raw)), 0, version)
    assert decoded.transactional_id == expected.transactional_id
    assert (decoded.acks, decoded.timeout_ms) == (expected.acks, round(expected.timeout.total_seconds() * 1000))
    assert [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in decoded.topic_data] == [
        (t.name, [(p.index, None if p.records is None else bytearray(p.records)) for p in t.partition_data]) for t in expected.topic_data
    ]
    assert all(isinstance(p.records, bytearray) for t in decoded.topic_data for p in t.partition_data if p.records is not None)


@pytest.mark.parametrize("version", [3, 9])
def test_truncated_bodies_are_malformed_frames(version):
    raw = encode_body(version, {"transactional_id": None, "acks": 1, "timeout": 5, "topic_data": [("t", [(0, b"x" * 50)])]})
    for cut in range(len(raw) - 1):
        with pytest.raises((ValueError, IndexError, struct_error())):
            decode_produce_body(raw[:cut], 0, version)


def struct_error():
    import struct

    return struct.error
