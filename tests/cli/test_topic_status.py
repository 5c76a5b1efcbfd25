"""Partition flags and the describe document, the operator's text forms, and Kafka error codes
mapped to the admin errors: pure functions, no store."""

from __future__ import annotations

import pytest

from replog.admin import InvalidConfig, PartitionDescription, UnknownTopicOrPartition
from replog.admin.errors import AdminError, error_for_code
from replog.cli.arguments import key_values, replica_assignment
from replog.cli.topic_status import PartitionFlag, TopicStatus, partition_flags


def partition(leader: int | None, isr: tuple[int, ...], replicas=(1, 2, 3), offline=()) -> PartitionDescription:
    return PartitionDescription(0, replicas, leader, 4, isr, offline)


@pytest.mark.parametrize("described, min_isr, flags", [
    (partition(1, (1, 2, 3)), 2, ()),
    (partition(1, (1, 2)), 2, (PartitionFlag.UNDER_REPLICATED,)),
    (partition(1, (1,)), 2, (PartitionFlag.UNDER_REPLICATED, PartitionFlag.UNDER_MIN_ISR)),
    (partition(2, (1, 2, 3)), 1, (PartitionFlag.UNPREFERRED_LEADER,)),
    (partition(None, (1, 2, 3)), 1, (PartitionFlag.OFFLINE,)),
    # a leader node whose broker is gone (its session not yet expired) serves nobody
    (partition(2, (1, 2, 3), offline=(2,)), 1, (PartitionFlag.OFFLINE, PartitionFlag.UNPREFERRED_LEADER)),
])
def test_flags(described, min_isr, flags):
    assert partition_flags(described, min_isr) == flags


def test_a_filter_keeps_the_flagged_partitions_and_the_topic_counts():
    healthy, lagging = partition(1, (1, 2, 3)), partition(1, (1, 2))
    status = TopicStatus.of("t", (healthy, lagging), {"retention.ms": "1"}, 2)
    assert status.having_any(()) is status
    assert status.having_any({PartitionFlag.OFFLINE}) is None
    kept = status.having_any({PartitionFlag.UNDER_REPLICATED, PartitionFlag.OFFLINE})
    assert kept.partitions == (lagging,)
    document = kept.as_json()
    assert (document["partition_count"], document["replication_factor"]) == (2, 3)
    assert document["partitions"][0]["flags"] == ["under-replicated"]


def test_json_says_null_where_the_door_cannot_tell():
    unknown = PartitionDescription(0, (1,), 1, None, (1,), (), adding_replicas=None, removing_replicas=None)
    entry = TopicStatus.of("t", (unknown,), {}, 1).as_json()["partitions"][0]
    assert (entry["leader_epoch"], entry["adding_replicas"], entry["removing_replicas"]) == (None, None, None)


def test_key_values():
    assert key_values(["retention.ms=1000", " cleanup.policy =delete", "empty="]) == {
        "retention.ms": "1000", "cleanup.policy": "delete", "empty": ""}
    for bad, complaint in ((["retention.ms"], "key=value"), (["=1"], "key=value"), (["a=1", "a=2"], "twice")):
        with pytest.raises(ValueError, match=complaint):
            key_values(bad)


def test_replica_assignment():
    assert replica_assignment("0:1:2,1:2:0") == {0: [0, 1, 2], 1: [1, 2, 0]}
    assert replica_assignment("3") == {0: [3]}
    with pytest.raises(ValueError, match="partition 1: '2:x' is not broker ids"):
        replica_assignment("0:1,2:x")


def test_error_codes_become_the_admin_errors():
    assert isinstance(error_for_code(3, "gone"), UnknownTopicOrPartition)
    assert isinstance(error_for_code(40, "bad"), InvalidConfig)
    unmapped = error_for_code(-185, "timed out")
    assert type(unmapped) is AdminError and unmapped.code == -185
