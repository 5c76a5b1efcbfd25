"""The hand-written Fetch response encoding decodes, with kio, to exactly what was meant."""

from __future__ import annotations

import uuid

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from replog.net.codec import ApiKey, SUPPORTED_VERSIONS
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION
from replog.net.handlers.fetch import FetchBodyEncoder

FETCH_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FETCH][0], SUPPORTED_VERSIONS[ApiKey.FETCH][1] + 1)
ORDERS_ID, OTHER_ID = uuid.uuid4(), uuid.uuid4()  # named so from version 13 on


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_encoding_matches_kio_for_every_version(version):
    orders, other = (ORDERS_ID, OTHER_ID) if version >= FIRST_TOPIC_ID_VERSION else ("orders", "é-topic")
    encoder = FetchBodyEncoder(version)
    encoder.begin(2)
    encoder.topic(orders, 2)
    encoder.partition(0, 0, 120, 120, 7, [b"batch-one", b"batch-two"])
    encoder.partition(3, 1, -1, -1, -1, [])
    encoder.end_topic()
    encoder.topic(other, 1)
    encoder.partition(1, 0, 5, 5, 0, [b"x" * 300])
    encoder.end_topic()
    body = b"".join(encoder.finish().parts)

    schema = load_response_schema(ApiKey.FETCH, version)
    decoded, size = entity_reader(schema)(body, 0)
    assert size == len(body)
    topics = [(getattr(topic, "topic_id", None) or topic.topic, [(p.partition_index, p.error_code.value, p.high_watermark, p.records) for p in topic.partitions])
              for topic in decoded.responses]
    assert topics == [
        (orders, [(0, 0, 120, b"batch-onebatch-two"), (3, 1, -1, b"")]),
        (other, [(1, 0, 5, b"x" * 300)]),
    ]
    first = decoded.responses[0].partitions[0]
    if version >= 5:
        assert first.log_start_offset == 7
    assert first.last_stable_offset == 120
    if version >= 7:
        assert decoded.session_id == 0


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_aborted_transactions_are_written_for_read_committed(version):
    topic = ORDERS_ID if version >= FIRST_TOPIC_ID_VERSION else "orders"
    encoder = FetchBodyEncoder(version)
    encoder.begin(1)
    encoder.topic(topic, 3)
    encoder.partition(0, 0, 120, 90, 7, [b"batch"], ((4000, 90), (4001, 112)))
    encoder.partition(1, 0, 50, 50, 0, [b"other"], ())
    encoder.partition(2, 0, 60, 60, 0, [])
    encoder.end_topic()
    body = b"".join(encoder.finish().parts)

    decoded, size = entity_reader(load_response_schema(ApiKey.FETCH, version))(body, 0)
    assert size == len(body)
    aborted, none_aborted, uncommitted = decoded.responses[0].partitions
    assert [(each.producer_id, each.first_offset) for each in aborted.aborted_transactions] == [(4000, 90), (4001, 112)]
    assert (aborted.last_stable_offset, aborted.high_watermark, aborted.records) == (90, 120, b"batch")
    assert (none_aborted.aborted_transactions, none_aborted.records) == ((), b"other")
    assert uncommitted.aborted_transactions == (), "read_uncommitted's answer is unchanged"


def test_builder_fills_nullable_arrays_of_entities():
    from replog.net import codec

    schema = load_request_schema(ApiKey.METADATA, 12)
    built = codec.build(schema, {"topics": [{"name": "t", "topic_id": None}], "allow_auto_topic_creation": False,
                                 "include_topic_authorized_operations": False})
    assert built.topics[0].name == "t"
    assert codec.build(schema, {"topics": None, "allow_auto_topic_creation": False,
                                "include_topic_authorized_operations": False}).topics is None
