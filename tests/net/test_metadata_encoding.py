"""The hand-written Metadata response is, byte for byte, what kio writes for the same answer."""

from __future__ import annotations

import asyncio
import types
import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.coord_backends.paths import BrokerRegistration
from replog.groups import OFFSETS_TOPIC
from replog.replication.metadata_cache import PartitionView
from replog.net import codec
from replog.net.codec import SUPPORTED_VERSIONS, ApiKey
from replog.net.handlers.metadata import metadata

METADATA_VERSIONS = range(SUPPORTED_VERSIONS[ApiKey.METADATA][0], SUPPORTED_VERSIONS[ApiKey.METADATA][1] + 1)
LIVE = {1: ("127.0.0.1", 9092, None), 2: ("127.0.0.1", 9093, "rack-b")}  # broker 3 is not live
TOPICS = {
    "orders": {
        0: PartitionView(replicas=(1, 2, 3), leader=1, leader_epoch=4, isr=(1, 2)),
        1: PartitionView(replicas=(2, 3, 1), leader=3, leader_epoch=9, isr=(3,)),  # its leader is gone
        2: PartitionView(replicas=(2,), leader=2, leader_epoch=0, isr=(2,)),
    },
    "é-topic": {0: PartitionView(replicas=tuple(range(1, 6)), leader=2, leader_epoch=1, isr=tuple(range(1, 6)))},
    OFFSETS_TOPIC: {0: PartitionView(replicas=(1,), leader=1, leader_epoch=0, isr=(1,))},
}
# As the store keeps them; "é-topic" was written before topics had ids.
TOPIC_IDS = {"orders": uuid.uuid4().hex, OFFSETS_TOPIC: uuid.uuid4().hex}


def services(cluster_id: str | None, presumed_gone: frozenset[int] = frozenset(), not_served: frozenset = frozenset()):
    return types.SimpleNamespace(
        metadata=types.SimpleNamespace(
            topics=TOPICS,
            topic_id=TOPIC_IDS.get,
            topic_of_id={topic_id: name for name, topic_id in TOPIC_IDS.items()}.get,
            brokers={broker_id: BrokerRegistration(host, port, rack) for broker_id, (host, port, rack) in LIVE.items()}),
        leader_connections=types.SimpleNamespace(presumed_gone=presumed_gone.__contains__),
        authorizer=None,
        serving=lambda topic, partition: (topic, partition) not in not_served,
        # A refused name's error is a plain int code, as the broker's refusals give it.
        topic_missing=lambda name, allow_auto_create: _answer(ErrorCode.invalid_topic_exception.value if " " in name
                                                              else ErrorCode.unknown_topic_or_partition),
        cluster_id=cluster_id,
        broker_id=2,
    )


async def _answer(error: ErrorCode) -> ErrorCode:
    return error


def request(version: int, names: list[str | uuid.UUID | None] | None):
    """`names`: a name, or an id to ask by id alone (None: the null id)."""
    schema = codec.request_schema(ApiKey.METADATA, version)
    body = codec.build(schema, {"topics": None if names is None else [
                                    {"name": None, "topic_id": name} if name is None or isinstance(name, uuid.UUID)
                                    else {"name": name, "topic_id": None} for name in names],
                                "allow_auto_topic_creation": False, "include_topic_authorized_operations": False,
                                "include_cluster_authorized_operations": False})
    return codec.decode_request(memoryview(codec.encode_request(ApiKey.METADATA, version, 7, "test", body))[4:])


def kio_answer(version: int, names: list[str | uuid.UUID | None], cluster_id: str | None, nameless: str | None = None,
               unavailable: frozenset = frozenset()) -> bytes:
    """What the handler means, written by kio; `names` as `request` takes them; `nameless`: the
    name written for a topic asked by an id no topic has; `unavailable`: the partitions of a live
    leader to be answered LEADER_NOT_AVAILABLE."""
    def partition(topic: str, index: int, view: PartitionView) -> dict:
        available = view.leader in LIVE and (topic, index) not in unavailable
        return {"error_code": ErrorCode.none if available else ErrorCode.leader_not_available, "partition_index": index,
                "leader_id": view.leader if available else -1, "leader_epoch": view.leader_epoch,
                "replica_nodes": view.replicas, "isr_nodes": view.isr,
                "offline_replicas": tuple(replica for replica in view.replicas if replica not in LIVE)}

    def topic(asked: str | uuid.UUID | None) -> dict:
        name = {topic_id: name for name, topic_id in TOPIC_IDS.items()}.get(asked.hex) if isinstance(asked, uuid.UUID) else asked
        if name is None:
            return {"error_code": ErrorCode.unknown_topic_id, "name": nameless, "topic_id": asked, "is_internal": False,
                    "partitions": []}
        error = (ErrorCode.none if name in TOPICS else
                 ErrorCode.invalid_topic_exception if " " in name else ErrorCode.unknown_topic_or_partition)
        topic_id = uuid.UUID(hex=TOPIC_IDS[name]) if error == ErrorCode.none and name in TOPIC_IDS else None
        return {"error_code": error, "name": name, "topic_id": topic_id, "is_internal": name == OFFSETS_TOPIC,
                "partitions": [partition(name, index, view) for index, view in sorted(TOPICS[name].items())] if error == ErrorCode.none else []}

    entity = codec.build(codec.response_schema(ApiKey.METADATA, version), {
        "throttle_time": 0,
        "brokers": [{"node_id": broker_id, "host": host, "port": port, "rack": rack} for broker_id, (host, port, rack) in LIVE.items()],
        "cluster_id": cluster_id, "controller_id": 2, "topics": [topic(name) for name in names]})
    return b"".join(codec.encode_response(ApiKey.METADATA, version, 7, entity))


def answer(version: int, names: list[str | None] | None, cluster_id: str | None, **conditions) -> bytes:
    body = asyncio.run(metadata(services(cluster_id, **conditions), request(version, names)))
    return b"".join(codec.encode_response(ApiKey.METADATA, version, 7, body))


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_every_topic_is_written_as_kio_writes_it(version):
    everything = None if version > 0 else []  # version 0 asks for every topic with an empty list
    assert answer(version, everything, "cluster-a") == kio_answer(version, sorted(TOPICS), "cluster-a")


@pytest.mark.parametrize("version", METADATA_VERSIONS)
def test_named_and_unknown_topics_are_written_as_kio_writes_them(version):
    names = ["orders", "missing", "not a name", OFFSETS_TOPIC]
    assert answer(version, names, None) == kio_answer(version, names, None)


@pytest.mark.parametrize("version", [version for version in METADATA_VERSIONS if version >= 10])
def test_a_topic_asked_by_an_unknown_id_is_answered_unknown_with_a_name_its_version_allows(version):
    """Its name is null from version 12 on, where the name may be null, and empty before (kio
    refuses to write a null one, which closed the client's connection); the id is the one asked."""
    asked = [None, uuid.uuid4(), "orders"]
    expected = kio_answer(version, asked, "cluster-a", nameless="" if version < 12 else None)
    assert answer(version, asked, "cluster-a") == expected


@pytest.mark.parametrize("version", [version for version in METADATA_VERSIONS if version >= 10])
def test_topics_are_answered_with_their_ids_and_found_by_them(version):
    asked = [uuid.UUID(hex=TOPIC_IDS["orders"]), "é-topic", OFFSETS_TOPIC]
    body = answer(version, asked, "cluster-a")
    assert body == kio_answer(version, asked, "cluster-a")
    _, decoded = codec.decode_response(ApiKey.METADATA, version, body[4:])
    assert [(topic.name, topic.topic_id) for topic in decoded.topics] == [
        ("orders", uuid.UUID(hex=TOPIC_IDS["orders"])), ("é-topic", None), (OFFSETS_TOPIC, uuid.UUID(hex=TOPIC_IDS[OFFSETS_TOPIC]))]


@pytest.mark.parametrize("version", [0, 9, 12])
def test_a_leader_presumed_gone_or_a_replica_still_opening_is_not_named(version):
    names = ["orders", "é-topic"]
    expected = kio_answer(version, names, "cluster-a", unavailable=frozenset({("orders", 2), ("é-topic", 0), ("orders", 0)}))
    assert answer(version, names, "cluster-a", presumed_gone=frozenset({2}), not_served=frozenset({("orders", 0)})) == expected
