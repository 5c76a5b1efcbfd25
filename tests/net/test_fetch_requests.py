"""The hand-written Fetch request encoding (net/fetch_requests.py) writes what kio writes, byte
for byte, for every version, and what the broker's request decoding reads back."""

from __future__ import annotations

import uuid

import pytest

from replog.net import codec
from replog.net.codec import ApiKey, SUPPORTED_VERSIONS
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION
from replog.net.fetch_requests import encode_fetch_request, named_by_id
from replog.replication.fetcher import FetchSpec

FETCH_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.FETCH][0], SUPPORTED_VERSIONS[ApiKey.FETCH][1] + 1)
ORDERS_ID, OTHER_ID = uuid.uuid4(), uuid.uuid4()  # named so from version 13 on
SPECS = [FetchSpec("orders", 0, 120, 7, 1 << 20, 500, ORDERS_ID.hex), FetchSpec("é-topic", 3, 5, -1, 4096, 500, OTHER_ID.hex),
         FetchSpec("orders", 2, 1 << 40, 9, 1 << 20, 500, ORDERS_ID.hex)]


def named(version: int, name: str, topic_id: uuid.UUID) -> dict:
    return {"topic_id": topic_id} if version >= FIRST_TOPIC_ID_VERSION else {"topic": name}


# (session id, epoch, forgotten): a full fetch outside any session, and an incremental one (KIP-227)
SESSIONS = [(0, -1, []), (123456, 7, [FetchSpec("orders", 5, 0, 0, 1, 500, ORDERS_ID.hex), FetchSpec("old", 1, 0, 0, 1, 500, OTHER_ID.hex),
                                     FetchSpec("orders", 6, 0, 0, 1, 500, ORDERS_ID.hex)])]


def kio_request(version: int, client_id: str | None, session=SESSIONS[0]) -> bytes:
    session_id, epoch, _ = session if version >= 7 else SESSIONS[0]
    forgotten = [{**named(version, "orders", ORDERS_ID), "partitions": [5, 6]}, {**named(version, "old", OTHER_ID), "partitions": [1]}]
    body = codec.build(codec.request_schema(ApiKey.FETCH, version), {
        "replica_id": 2, "max_wait": 500, "min_bytes": 1, "max_bytes": 10 << 20, "isolation_level": 0,
        "session_id": session_id, "session_epoch": epoch,
        "topics": [{**named(version, "orders", ORDERS_ID), "partitions": [
                        {"partition": 0, "current_leader_epoch": 7, "fetch_offset": 120, "last_fetched_epoch": -1,
                         "log_start_offset": -1, "partition_max_bytes": 1 << 20},
                        {"partition": 2, "current_leader_epoch": 9, "fetch_offset": 1 << 40, "last_fetched_epoch": -1,
                         "log_start_offset": -1, "partition_max_bytes": 1 << 20}]},
                   {**named(version, "é-topic", OTHER_ID), "partitions": [
                        {"partition": 3, "current_leader_epoch": -1, "fetch_offset": 5, "last_fetched_epoch": -1,
                         "log_start_offset": -1, "partition_max_bytes": 4096}]}],
        "forgotten_topics_data": forgotten if session_id and version >= 7 else [], "rack_id": "",
    })
    return codec.encode_request(ApiKey.FETCH, version, 42, client_id, body)


def by_hand(version: int, client_id: str | None, session=SESSIONS[0]) -> bytes:
    session_id, epoch, forgotten = session if version >= 7 else SESSIONS[0]
    return encode_fetch_request(version, 42, client_id, replica_id=2, max_wait_ms=500, min_bytes=1,
                                max_bytes=10 << 20, isolation_level=0, specs=SPECS, session_id=session_id,
                                session_epoch=epoch, forgotten=forgotten)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
@pytest.mark.parametrize("client_id", ["replog-follower-2", None])
@pytest.mark.parametrize("session", SESSIONS, ids=["sessionless", "incremental"])
def test_encoding_writes_what_kio_writes_for_every_version(version, client_id, session):
    assert by_hand(version, client_id, session) == kio_request(version, client_id, session)


@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_the_broker_reads_every_partition_back(version):
    request = codec.decode_request(memoryview(by_hand(version, "follower"))[4:])
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (ApiKey.FETCH, version, 42, "follower")
    asked = [(getattr(topic, "topic_id", None) or topic.topic, partition.partition, partition.fetch_offset,
              partition.partition_max_bytes) for topic in request.body.topics for partition in topic.partitions]
    orders, other = (ORDERS_ID, OTHER_ID) if version >= FIRST_TOPIC_ID_VERSION else ("orders", "é-topic")
    assert asked == [(orders, 0, 120, 1 << 20), (orders, 2, 1 << 40, 1 << 20), (other, 3, 5, 4096)]


@pytest.mark.parametrize("topic_id", [None, "second", ORDERS_ID.hex.upper()[:31]])
def test_only_specs_whose_topic_ids_are_uuids_are_named_by_id(topic_id):
    assert named_by_id(SPECS)
    assert not named_by_id([*SPECS, SPECS[0]._replace(partition=9, topic_id=topic_id)])
