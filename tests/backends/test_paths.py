"""The path layout (docs/design.md §2.2) and the typed values stored at those paths."""

from __future__ import annotations

import json
import pathlib
import re

import pytest

from replog.coord_backends import paths
from replog.coord_backends.paths import (
    BrokerRegistration,
    ClusterId,
    EpochCounter,
    InvalidNodeValue,
    IsrRecord,
    LeaderRecord,
    ReplicaAssignment,
    StateChangeRequest,
    TopicConfig,
    TopicId,
)

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "replog"


def test_paths_follow_the_seed_layout():
    assert paths.broker(3) == "/brokers/ids/3"
    assert paths.topic("orders") == "/brokers/topics/orders"
    assert paths.replicas("orders", 2) == "/brokers/topics/orders/2/replicas"
    assert paths.leader("orders", 2) == "/brokers/topics/orders/2/leader"
    assert paths.isr("orders", 2) == "/brokers/topics/orders/2/ISR"
    assert paths.leader_epoch("orders", 2) == "/brokers/topics/orders/2/leader_epoch"
    assert paths.reassigned_partition("orders", 2) == "/brokers/partitions_reassigned/orders/2"
    assert paths.state_queue(3) == "/brokers/state/3"
    assert paths.state_change_prefix(3) == "/brokers/state/3/"
    assert paths.topic_config("orders") == "/config/topics/orders"


VALUES = [
    BrokerRegistration("127.0.0.1", 9092, "rack-a"),
    BrokerRegistration("127.0.0.1", 9093),
    ReplicaAssignment((2, 0, 1)),
    LeaderRecord(leader=2, leader_epoch=7),
    IsrRecord(isr=(2, 0), leader_epoch=7),
    EpochCounter(epoch=7),
    StateChangeRequest("close-replica", "orders", (1,), from_broker=2, leader_epoch=7),
    StateChangeRequest("start-replica", "orders", (0, 3, 6), from_broker=-1, leader_epoch=-1),
    TopicId("5f0c", partitions=12),
    TopicConfig({"retention.ms": "1000"}),
    ClusterId("abc"),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda value: type(value).__name__)
def test_values_round_trip_through_versioned_json(value):
    encoded = value.encode()
    body = json.loads(encoded)
    assert body["version"] == 1
    assert type(value).decode(encoded) == value


def test_encoding_is_compact_and_stable():
    assert ReplicaAssignment((1, 2)).encode() == b'{"replicas":[1,2],"version":1}'


@pytest.mark.parametrize(
    "raw, complaint",
    [
        (b'{"replicas":[1],"version":2}', "format version 2"),
        (b'{"replicas":[1]}', "format version None"),
        (b"not json", "not JSON"),
        (b"[1,2]", "expected a JSON object"),
        (b'{"version":1}', "missing field 'replicas'"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_unreadable_values_are_rejected_by_name(raw, complaint):
    with pytest.raises(InvalidNodeValue, match="ReplicaAssignment") as caught:
        ReplicaAssignment.decode(raw)
    assert complaint in str(caught.value)


def test_unknown_state_change_kind_is_rejected():
    raw = b'{"from_broker":1,"kind":"explode","leader_epoch":1,"partition":0,"topic":"t","version":1}'
    with pytest.raises(InvalidNodeValue, match="explode"):
        StateChangeRequest.decode(raw)


def test_a_state_change_of_one_partition_written_by_an_earlier_replog_is_read():
    raw = b'{"from_broker":1,"kind":"start-replica","leader_epoch":4,"partition":7,"topic":"t","version":1}'
    assert StateChangeRequest.decode(raw) == StateChangeRequest("start-replica", "t", (7,), 1, 4)


def test_a_topic_written_before_partition_counts_counts_every_partition():
    legacy = TopicId.decode(b'{"topic_id":"5f0c","version":1}')
    assert legacy.partitions is None and legacy.counts(10_000)
    assert [TopicId("5f0c", 2).counts(partition) for partition in (0, 1, 2)] == [True, True, False]


def test_no_module_but_paths_spells_a_coordination_path():
    spelled = re.compile(r"""["'](/brokers|/config/|/cluster/)""")
    offenders = [
        str(source.relative_to(SRC))
        for source in SRC.rglob("*.py")
        if source.name != "paths.py" and spelled.search(source.read_text())
    ]
    assert offenders == []
