"""Reassignment planner: worked examples, properties over random layouts, and optimality against
exhaustive search on layouts small enough to enumerate."""

from __future__ import annotations

import collections
import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replog.admin import (
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    assign_replicas,
    check_assignment,
    moves_lower_bound,
    plan_balance,
)


def topic_assignment(topic: str, brokers, partitions: int, replication_factor: int) -> dict:
    created = assign_replicas(brokers, partitions, replication_factor, start_index=0)
    return {(topic, partition): replicas for partition, replicas in created.items()}


def replica_counts(assignment, targets) -> collections.Counter:
    counts = collections.Counter({broker: 0 for broker in targets})
    counts.update(broker for replicas in assignment.values() for broker in replicas)
    return counts


def leader_counts(assignment, targets) -> collections.Counter:
    counts = collections.Counter({broker: 0 for broker in targets})
    counts.update(replicas[0] for replicas in assignment.values())
    return counts


def within_one(counts: collections.Counter) -> bool:
    return max(counts.values()) - min(counts.values()) <= 1


def rack_deficit(assignment, rack_of) -> int:
    """Racks a partition could span and does not, summed: 0 when every partition spans min(rf, racks)."""
    rack_count = len(set(rack_of.values()))
    return sum(min(len(replicas), rack_count) - len({rack_of[b] for b in replicas}) for replicas in assignment.values())


def by_topic(assignment) -> dict[str, dict[int, list[int]]]:
    topics: dict[str, dict[int, list[int]]] = collections.defaultdict(dict)
    for (topic, partition), replicas in assignment.items():
        topics[topic][partition] = list(replicas)
    return topics


# --- worked examples ------------------------------------------------------------------------------

TWO_RACKS = [(1, "a"), (2, "a"), (3, "b"), (4, "b")]


def test_a_fifth_broker_takes_exactly_the_lower_bound():
    current = topic_assignment("orders", TWO_RACKS, 12, 3)
    brokers = [*TWO_RACKS, (5, "a")]
    plan = plan_balance(current, brokers)

    # 36 replicas on 5 brokers: one broker keeps 8, three give up 2 and one gives up 1.
    assert plan.lower_bound == 7
    assert plan.replicas_moved == 7
    assert replica_counts(plan.assignment, range(1, 6))[5] == 7
    assert within_one(replica_counts(plan.assignment, range(1, 6)))
    assert within_one(leader_counts(plan.assignment, range(1, 6)))
    assert rack_deficit(plan.assignment, dict(brokers)) == 0
    assert all(len(move.added) <= 1 for move in plan.moves)
    assert check_assignment(by_topic(plan.assignment)["orders"])


def test_removing_a_broker_moves_exactly_its_replicas():
    current = topic_assignment("orders", TWO_RACKS, 12, 2)
    plan = plan_balance(current, TWO_RACKS, remove=[4])

    assert all(4 not in replicas for replicas in plan.assignment.values())
    assert plan.replicas_moved == plan.lower_bound == replica_counts(current, [4])[4]
    assert within_one(replica_counts(plan.assignment, [1, 2, 3]))
    assert within_one(leader_counts(plan.assignment, [1, 2, 3]))
    # Rack b keeps broker 3 alone, whom balance allows 8 of the 24 replicas: 4 of the 12
    # partitions cannot keep a replica in rack b, and no more than 4 lose it.
    assert rack_deficit(plan.assignment, dict(TWO_RACKS)) == 4


def test_removing_below_the_replication_factor_is_refused():
    current = {**topic_assignment("orders", TWO_RACKS, 4, 2), **topic_assignment("foo", TWO_RACKS, 4, 3)}
    with pytest.raises(InvalidReplicationFactor) as refused:
        plan_balance(current, TWO_RACKS, remove=[3, 4])
    assert str(refused.value) == "cannot remove brokers 3, 4: topic 'foo' needs 3 replicas and only 2 brokers would remain"


def test_too_few_given_brokers_are_refused():
    current = topic_assignment("foo", TWO_RACKS, 4, 3)
    with pytest.raises(InvalidReplicationFactor, match=r"topic 'foo' needs 3 replicas and only 2 brokers are given \(5, 6\)"):
        plan_balance(current, [(5, None), (6, None)])


def test_a_broker_neither_registered_nor_holding_replicas_cannot_be_removed():
    with pytest.raises(InvalidReplicaAssignment, match="cannot remove brokers 9: they are not registered"):
        plan_balance(topic_assignment("foo", TWO_RACKS, 4, 2), TWO_RACKS, remove=[9])


def test_replicas_on_an_unregistered_broker_are_moved_off_it():
    current = {("foo", 0): [7, 1], ("foo", 1): [2, 7]}
    plan = plan_balance(current, [(1, None), (2, None)], remove=[7])
    assert plan.assignment == {("foo", 0): (1, 2), ("foo", 1): (2, 1)}
    assert plan.replicas_moved == plan.lower_bound == 2


@pytest.mark.parametrize(
    "current, complaint",
    [
        ({("foo", 0): [1, 1]}, r"topic 'foo' partition 0: replicas \[1, 1\] must be distinct"),
        ({("foo", 3): []}, r"topic 'foo' partition 3: replicas \[\] must be distinct"),
        ({("foo", 0): [-1, 2]}, "non-negative"),
    ],
)
def test_invalid_current_assignments_are_refused(current, complaint):
    with pytest.raises(InvalidReplicaAssignment, match=complaint):
        plan_balance(current, [(1, None), (2, None)])


def test_brokers_with_and_without_racks_are_refused():
    with pytest.raises(InvalidReplicaAssignment, match="not all brokers have rack information"):
        plan_balance({("foo", 0): [1]}, [(1, "a"), (2, None)])


def test_the_smaller_partitions_move():
    current = {("foo", partition): [1 + partition % 2] for partition in range(6)}
    size_bytes = {("foo", 0): 900, ("foo", 2): 5, ("foo", 4): 300, ("foo", 1): 7, ("foo", 3): 800, ("foo", 5): 600}
    plan = plan_balance(current, [(1, None), (2, None), (3, None)], size_bytes=size_bytes)

    assert [(move.partition, move.new_replicas) for move in plan.moves] == [(1, (3,)), (2, (3,))]
    assert plan.bytes_moved == 12


def test_leadership_is_balanced_by_reordering_alone():
    current = {("foo", partition): [1, 2, 3] for partition in range(6)}
    plan = plan_balance(current, [(1, None), (2, None), (3, None)])

    assert plan.replicas_moved == plan.bytes_moved == 0
    assert leader_counts(plan.assignment, [1, 2, 3]) == {1: 2, 2: 2, 3: 2}
    assert all(not move.added and not move.removed for move in plan.moves)
    assert len(plan.moves) == 4  # two partitions keep broker 1 as their preferred leader


def test_a_balanced_cluster_is_left_alone():
    current = topic_assignment("orders", TWO_RACKS, 12, 3)
    assert plan_balance(current, TWO_RACKS).moves == ()


def test_the_lower_bound_is_out_of_reach_when_a_removed_replica_fits_only_where_its_partition_is():
    # Broker 3's replica of partition 0 can only go to 2 or 4, each already at its target of 2:
    # it takes a second move to make room, though balance alone counts one.
    current = {("foo", 0): [1, 3], ("foo", 1): [2, 4], ("foo", 2): [4, 2]}
    plan = plan_balance(current, [(1, None), (2, None), (3, None), (4, None)], remove=[3])
    assert plan.lower_bound == 1
    assert plan.replicas_moved == 2


def test_uneven_racks_give_up_the_least_spread_that_balance_needs():
    # Rack b has one broker; balance within one lets it hold 2 of 6 replicas, so one of the
    # three partitions must stay within rack a.
    brokers = [(1, "a"), (2, "a"), (3, "b")]
    current = {("foo", partition): [1, 2] for partition in range(3)}
    plan = plan_balance(current, brokers)
    assert rack_deficit(plan.assignment, dict(brokers)) == 1
    assert within_one(replica_counts(plan.assignment, [1, 2, 3]))


def test_no_partitions_make_an_empty_plan():
    assert plan_balance({}, [], remove=[]) == plan_balance({}, [(1, None)], remove=[1])
    assert plan_balance({}, [(1, None)]).moves == ()


def test_the_plan_does_not_depend_on_the_order_of_its_input():
    current = topic_assignment("orders", TWO_RACKS, 12, 3)
    shuffled = list(current.items())
    random.Random(7).shuffle(shuffled)
    brokers = [*TWO_RACKS, (5, "b")]
    assert plan_balance(dict(shuffled), list(reversed(brokers))) == plan_balance(current, brokers)


def test_lower_bound_gives_the_ceil_to_the_fullest_brokers():
    current = {("foo", 0): [1, 2], ("foo", 1): [1, 2], ("foo", 2): [1, 3]}
    # 6 replicas on 4 brokers: targets 2, 2, 1, 1; broker 1 (3) keeps 2 and gives 1, broker 2 keeps 2.
    assert moves_lower_bound(current, [1, 2, 3, 4]) == 1
    assert moves_lower_bound(current, [2, 3, 4]) == 3
    assert moves_lower_bound({}, [1]) == 0


# --- properties over random layouts ------------------------------------------------------------------


@st.composite
def layouts(draw, *, max_brokers: int = 7, max_partitions: int = 8):
    """A cluster before and after a change: brokers (some added empty, some to remove), racks or
    none, and topics whose partitions sit anywhere on the old brokers (balanced or not)."""
    racked = draw(st.booleans())
    broker_ids = draw(st.lists(st.integers(0, 30), min_size=2, max_size=max_brokers, unique=True))
    rack_names = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)) if racked else [None]
    brokers = [(broker, draw(st.sampled_from(rack_names))) for broker in broker_ids]
    added = draw(st.integers(0, min(2, len(brokers) - 1)))
    old = broker_ids[added:]
    removed = draw(st.lists(st.sampled_from(old), max_size=min(2, len(broker_ids) - 1), unique=True))
    remaining = len(broker_ids) - len(removed)
    uniform_rf = draw(st.booleans())
    first_rf = draw(st.integers(1, min(3, len(old), remaining)))
    current = {}
    for topic in ["t0", "t1", "t2"][: draw(st.integers(1, 3))]:
        rf = first_rf if uniform_rf else draw(st.integers(1, min(3, len(old), remaining)))
        for partition in range(draw(st.integers(1, max_partitions))):
            current[topic, partition] = draw(st.permutations(old))[:rf]
    size_bytes = draw(st.none() | st.fixed_dictionaries({key: st.integers(0, 1000) for key in current}))
    return current, brokers, removed, size_bytes, added


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_plans_are_valid_balanced_and_minimal(layout):
    current, brokers, removed, size_bytes, added = layout
    plan = plan_balance(current, brokers, removed, size_bytes)
    rack_of = dict(brokers)
    targets = sorted(set(rack_of) - set(removed))

    assert sorted(plan.assignment) == sorted(current)
    for key, replicas in plan.assignment.items():
        assert len(replicas) == len(current[key]) == len(set(replicas))
        assert set(replicas) <= set(targets)
    for replicas_by_partition in by_topic(plan.assignment).values():
        check_assignment(replicas_by_partition)

    assert within_one(replica_counts(plan.assignment, targets))
    if len({len(replicas) for replicas in current.values()}) == 1:
        assert within_one(leader_counts(plan.assignment, targets))

    assert plan.replicas_moved >= plan.lower_bound
    if not removed and rack_of[targets[0]] is None:
        assert plan.replicas_moved == plan.lower_bound
    assert rack_deficit(plan.assignment, rack_of) <= rack_deficit(round_robin(current, brokers, removed), rack_of)

    assert [(move.topic, move.partition) for move in plan.moves] == sorted(
        key for key in current if tuple(current[key]) != plan.assignment[key]
    )
    assert plan.replicas_moved == sum(len(set(plan.assignment[key]) - set(current[key])) for key in current)
    assert plan_balance(dict(reversed(current.items())), brokers[::-1], removed, size_bytes) == plan


@settings(max_examples=200, deadline=None)
@given(layouts(max_brokers=4, max_partitions=2))
def test_plans_match_exhaustive_search(layout):
    current, brokers, removed, size_bytes, _ = layout
    plan = plan_balance(current, brokers, removed, size_bytes)
    rack_of = dict(brokers)
    targets = sorted(set(rack_of) - set(removed))
    size_bytes = size_bytes or {}

    def costs(assignment) -> tuple[int, int, int]:
        added = {key: set(assignment[key]) - set(current[key]) for key in current}
        moved_bytes = sum(size_bytes.get(key, 0) * len(brokers_added) for key, brokers_added in added.items())
        return rack_deficit(assignment, rack_of), sum(map(len, added.values())), moved_bytes

    best = min(costs(candidate) for candidate in balanced_assignments(current, targets))
    assert costs(plan.assignment) == best
    assert plan.bytes_moved == best[2]


def balanced_assignments(current, targets):
    keys = sorted(current)
    choices = [itertools.combinations(targets, len(current[key])) for key in keys]
    for chosen in itertools.product(*choices):
        candidate = dict(zip(keys, chosen))
        if within_one(replica_counts(candidate, targets)):
            yield candidate


def round_robin(current, brokers, removed):
    """A balanced witness: partitions fill the brokers in turn, in rack-alternating order."""
    by_rack = collections.defaultdict(list)
    for broker, rack in sorted(brokers, key=lambda broker_rack: broker_rack[0]):
        if broker not in removed:
            by_rack[rack].append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack, key=str)]
    order = [queue[row] for row in range(max(map(len, queues))) for queue in queues if row < len(queue)]
    filled, position = {}, 0
    for key in sorted(current):
        filled[key] = [order[(position + offset) % len(order)] for offset in range(len(current[key]))]
        position += len(current[key])
    return filled
