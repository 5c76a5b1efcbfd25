"""Replica assignment (Kafka's assignReplicasToBrokers): worked examples and properties."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replog.admin import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor, assign_replicas
from replog.admin.assignment import PARTITIONS_MAX


def test_matches_kafkas_documented_example():
    # AdminUtils' scaladoc: 5 brokers, 10 partitions, replication factor 3, start index 0.
    brokers = [(broker, None) for broker in range(5)]
    assert assign_replicas(brokers, 10, 3, start_index=0) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2],
    }  # fmt: skip


def test_rack_alternated_order_puts_neighbours_on_other_racks():
    brokers = [(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c"), (5, "c")]
    leaders = [replicas[0] for replicas in assign_replicas(brokers, 6, 1, start_index=0).values()]
    assert leaders == [0, 2, 4, 1, 3, 5]


@pytest.mark.parametrize(
    "brokers, replication_factor, error, complaint",
    [
        ([], 1, InvalidReplicationFactor, "no broker is registered"),
        ([(1, None)], 2, InvalidReplicationFactor, "larger than the 1 available brokers"),
        ([(1, None)], 0, InvalidReplicationFactor, "at least 1"),
        ([(1, "a"), (2, None)], 1, InvalidReplicaAssignment, "not all brokers have rack information"),
        ([(1, "a"), (1, "b")], 1, InvalidReplicaAssignment, "not unique"),
    ],
)
def test_impossible_requests_are_refused(brokers, replication_factor, error, complaint):
    with pytest.raises(error, match=complaint):
        assign_replicas(brokers, 3, replication_factor)


def test_a_partition_count_past_the_bound_is_refused_before_planning():
    with pytest.raises(InvalidPartitions, match=f"at most {PARTITIONS_MAX} partitions"):
        assign_replicas([(1, None)], 2**31 - 1, 1)
    with pytest.raises(InvalidPartitions, match=f"asked for {PARTITIONS_MAX + 1}"):
        assign_replicas([(1, None)], 2, 1, first_partition_id=PARTITIONS_MAX - 1)


@st.composite
def clusters(draw, racked: bool):
    broker_ids = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12, unique=True))
    rack_names = draw(st.lists(st.sampled_from("abcdef"), min_size=1, max_size=4, unique=True)) if racked else [None]
    brokers = [(broker, draw(st.sampled_from(rack_names))) for broker in broker_ids]
    replication_factor = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 40))
    start_index = draw(st.none() | st.integers(0, len(brokers) - 1))
    return brokers, partitions, replication_factor, start_index


@given(st.booleans().flatmap(lambda racked: clusters(racked)))
def test_every_partition_gets_distinct_registered_brokers(cluster):
    brokers, partitions, replication_factor, start_index = cluster
    assignment = assign_replicas(brokers, partitions, replication_factor, start_index=start_index)
    assert sorted(assignment) == list(range(partitions))
    registered = {broker for broker, _ in brokers}
    for replicas in assignment.values():
        assert len(replicas) == replication_factor == len(set(replicas))
        assert set(replicas) <= registered


@given(st.booleans().flatmap(lambda racked: clusters(racked)), st.integers(1, 5))
def test_leaders_spread_evenly(cluster, rounds):
    brokers, _, replication_factor, start_index = cluster
    partitions = rounds * len(brokers)
    assignment = assign_replicas(brokers, partitions, replication_factor, start_index=start_index)
    led = collections.Counter(replicas[0] for replicas in assignment.values())
    assert set(led) == {broker for broker, _ in brokers}
    assert max(led.values()) - min(led.values()) <= 1


@given(clusters(racked=True))
def test_each_partition_spans_as_many_racks_as_it_can(cluster):
    brokers, partitions, replication_factor, start_index = cluster
    rack_of = dict(brokers)
    rack_count = len(set(rack_of.values()))
    for replicas in assign_replicas(brokers, partitions, replication_factor, start_index=start_index).values():
        assert len({rack_of[broker] for broker in replicas}) == min(replication_factor, rack_count)


@given(clusters(racked=False), st.integers(1, 20))
def test_added_partitions_continue_the_leaders_round_robin(cluster, added):
    # What create_partitions relies on. Followers may differ: as in Kafka, the follower shift
    # restarts at the start index rather than replaying the earlier partitions' increments.
    brokers, partitions, replication_factor, _ = cluster
    whole = assign_replicas(brokers, partitions + added, replication_factor, start_index=0)
    tail = assign_replicas(brokers, added, replication_factor, start_index=0, first_partition_id=partitions)
    assert {partition: replicas[0] for partition, replicas in tail.items()} == {
        partition: whole[partition][0] for partition in range(partitions, partitions + added)
    }
