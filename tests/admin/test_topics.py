"""Topic lifecycle on the store, over memory, ZooKeeper and etcd: what each command writes,
what it refuses, and that racing admins cannot leave half a topic."""

from __future__ import annotations

import asyncio

import pytest

from replog.admin import (
    AlterOp,
    ConfigOperation,
    ConfigSource,
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidTopic,
    RequestTimedOut,
    StateChangeLimits,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
    alter_topic_config,
    create_partitions,
    create_topic,
    delete_topic,
    describe_topic,
    describe_topic_config,
    list_topics,
    replace_topic_config,
)
from replog.admin import topics as topics_module
from replog.config import load_broker_config
from replog.coord_backends import TRANSACTION_OPS_MAX, CoordinationUnavailable, Transaction, paths
from replog.coord_backends.base import SetOp
from replog.coord_backends.paths import (
    BrokerRegistration,
    IsrRecord,
    LeaderRecord,
    PartitionReassignment,
    ReplicaAssignment,
    StateChangeRequest,
    TopicConfig,
    TopicId,
)
from replog.replication.state_changes import CLOSE_REPLICA, FROM_ADMIN, START_REPLICA, send_state_change
from tests.support.polling import eventually
from tests.support.recording_listener import recording_listener


async def stored_replicas(store, topic: str) -> dict[int, list[int]]:
    return {
        int(partition): list(ReplicaAssignment.decode((await store.get(paths.replicas(topic, int(partition))))[0]).replicas)
        for partition in await store.children(paths.topic(topic))
    }


async def stored_overrides(store, topic: str) -> dict[str, str]:
    return dict(TopicConfig.decode((await store.get(paths.topic_config(topic)))[0]).configs)


# --- create -----------------------------------------------------------------------------------


async def test_create_writes_assignment_and_config(store, register_brokers):
    await register_brokers({1: None, 2: None, 3: None})
    assignment = await create_topic(store, "orders", 6, 2, {"retention.ms": "60000"})

    assert await stored_replicas(store, "orders") == assignment
    assert sorted(assignment) == list(range(6))
    assert all(len(set(replicas)) == 2 and set(replicas) <= {1, 2, 3} for replicas in assignment.values())
    assert sorted(replicas[0] for replicas in assignment.values()) == [1, 1, 2, 2, 3, 3]
    assert await stored_overrides(store, "orders") == {"retention.ms": "60000"}
    assert await list_topics(store) == ["orders"]
    first_id = TopicId.decode((await store.get(paths.topic("orders")))[0]).topic_id
    assert len(first_id) == 32
    await delete_topic(store, "orders")
    await create_topic(store, "orders", 1, 1)
    assert TopicId.decode((await store.get(paths.topic("orders")))[0]).topic_id != first_id, "a new topic, a new id"


def commit_together(monkeypatch, stores) -> None:
    """Hold each store's first transaction until every store has one ready, so that all of them
    planned against the same, pre-race state and commit at once: a real race, every run."""
    barrier = asyncio.Barrier(len(stores))
    waited: set[int] = set()
    for client in stores:

        async def commit_after_barrier(ops, client=client, commit=client._commit):
            if id(client) not in waited:
                waited.add(id(client))
                await asyncio.wait_for(barrier.wait(), timeout=10)
            return await commit(ops)

        monkeypatch.setattr(client, "_commit", commit_after_barrier)


async def test_concurrent_creates_of_one_topic_have_exactly_one_winner(connect, monkeypatch):
    first, second = await connect(), await connect()
    commit_together(monkeypatch, [first, second])
    outcomes = await asyncio.gather(
        create_topic(first, "race", None, None, {"retention.ms": "1000"}, replica_assignment={0: [1], 1: [1]}),
        create_topic(second, "race", None, None, {"retention.ms": "2000"}, replica_assignment={0: [2], 1: [2], 2: [2]}),
        return_exceptions=True,
    )

    winners = [outcome for outcome in outcomes if isinstance(outcome, dict)]
    losers = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert isinstance(losers[0], TopicAlreadyExists) and losers[0].code == 36
    # All of the winner's writes and none of the loser's.
    assert await stored_replicas(first, "race") == winners[0]
    expected_retention = "1000" if winners[0] == {0: [1], 1: [1]} else "2000"
    assert await stored_overrides(first, "race") == {"retention.ms": expected_retention}


async def test_a_config_left_without_its_topic_is_replaced(store):
    await store.create(paths.topic_config("reborn"), TopicConfig({"retention.ms": "1"}).encode(), make_parents=True)
    await create_topic(store, "reborn", None, None, {"flush.ms": "5"}, replica_assignment={0: [1]})
    assert await stored_overrides(store, "reborn") == {"flush.ms": "5"}


async def test_create_of_an_existing_topic_is_refused(store, register_brokers):
    await register_brokers({1: None})
    await create_topic(store, "once", 1, 1)
    with pytest.raises(TopicAlreadyExists, match="'once'"):
        await create_topic(store, "once", 2, 1)
    assert await stored_replicas(store, "once") == {0: [1]}


async def test_validate_only_plans_but_writes_nothing(store, register_brokers):
    await register_brokers({1: None, 2: None})
    assignment = await create_topic(store, "dry", 4, 2, {"segment.bytes": "1048576"}, validate_only=True)

    assert sorted(assignment) == [0, 1, 2, 3]
    assert await list_topics(store) == []
    assert await store.exists(paths.topic_config("dry")) is None


@pytest.mark.parametrize(
    "name, complaint",
    [
        ("", "can't be empty"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("x" * 250, "longer than 249"),
        ("a/b", "character other than"),
        ("caf\u00e9", "character other than"),
        ("with space", "character other than"),
    ],
)
async def test_invalid_topic_names_are_refused(store, register_brokers, name, complaint):
    await register_brokers({1: None})
    with pytest.raises(InvalidTopic, match=complaint) as caught:
        await create_topic(store, name, 1, 1)
    assert caught.value.code == 17
    assert await list_topics(store) == []


async def test_longest_legal_name_is_accepted(store, register_brokers):
    await register_brokers({1: None})
    name = "a-Z_0." * 41 + "xyz"
    assert len(name) == 249
    await create_topic(store, name, 1, 1)
    assert await list_topics(store) == [name]


async def test_dot_and_underscore_names_collide(store, register_brokers):
    await register_brokers({1: None})
    await create_topic(store, "metrics.cpu", 1, 1)
    with pytest.raises(InvalidTopic, match="collides with existing topic 'metrics.cpu'"):
        await create_topic(store, "metrics_cpu", 1, 1)


@pytest.mark.parametrize(
    "replication_factor, complaint",
    [(4, "replication factor 4 is larger than the 3 available brokers"), (0, "at least 1")],
)
async def test_impossible_replication_factors_are_refused(store, register_brokers, replication_factor, complaint):
    await register_brokers({1: None, 2: None, 3: None})
    with pytest.raises(InvalidReplicationFactor, match=complaint) as caught:
        await create_topic(store, "t", 3, replication_factor)
    assert caught.value.code == 38 and "'t'" in caught.value.message
    assert await list_topics(store) == []


async def test_without_registered_brokers_only_an_explicit_assignment_works(store):
    with pytest.raises(InvalidReplicationFactor, match="no broker is registered"):
        await create_topic(store, "offline", 1, 1)
    await create_topic(store, "offline", None, None, replica_assignment={0: [5, 6], 1: [6, 5]})
    assert await stored_replicas(store, "offline") == {0: [5, 6], 1: [6, 5]}


@pytest.mark.parametrize(
    "assignment, partitions, complaint",
    [
        ({0: [1, 1]}, None, "distinct"),
        ({0: [1], 2: [1]}, None, "partitions 0..1"),
        ({0: [1, 2], 1: [1]}, None, "same, non-zero number"),
        ({0: [1]}, 3, "1 partitions of 1 replicas, not 3"),
    ],
)
async def test_bad_explicit_assignments_are_refused(store, assignment, partitions, complaint):
    with pytest.raises(InvalidReplicaAssignment, match=complaint) as caught:
        await create_topic(store, "t", partitions, None, replica_assignment=assignment)
    assert caught.value.code == 39
    assert await list_topics(store) == []


async def test_mixed_rack_information_is_refused(store, register_brokers):
    await register_brokers({1: "r1", 2: None})
    with pytest.raises(InvalidReplicaAssignment, match=r"brokers \[2\] have none"):
        await create_topic(store, "t", 1, 2)


async def test_racks_are_spread_over(store, register_brokers):
    await register_brokers({1: "r1", 2: "r1", 3: "r2", 4: "r2"})
    assignment = await create_topic(store, "racked", 8, 2)
    rack = {1: "r1", 2: "r1", 3: "r2", 4: "r2"}
    assert all({rack[broker] for broker in replicas} == {"r1", "r2"} for replicas in assignment.values())


@pytest.mark.parametrize(
    "configs, complaint",
    [
        ({"retention.hours": "1"}, "Unknown topic config name: retention.hours"),
        ({"log.retention.ms": "1"}, "broker setting"),
        ({"segment.bytes": "lots"}, "segment.bytes"),
        ({"cleanup.policy": "archive"}, "must be delete, compact or compact,delete"),
    ],
)
async def test_invalid_topic_configs_are_refused(store, register_brokers, configs, complaint):
    await register_brokers({1: None})
    with pytest.raises(InvalidConfig, match=complaint) as caught:
        await create_topic(store, "t", 1, 1, configs)
    assert caught.value.code == 40
    assert await list_topics(store) == []


# --- state-change requests ----------------------------------------------------------------------


def requests_of(consumed: list[StateChangeRequest]) -> list[tuple[str, str, int]]:
    assert all((request.from_broker, request.leader_epoch) == (FROM_ADMIN, FROM_ADMIN) for request in consumed)
    return [(request.kind, request.topic, request.partition) for request in consumed]


async def test_create_starts_every_replica_before_the_partitions_appear(store, register_brokers):
    await register_brokers({1: None, 2: None})
    await create_topic(store, "orders", 2, 2)

    for broker in (1, 2):
        assert requests_of(register_brokers.consumed[broker]) == [(START_REPLICA, "orders", 0), (START_REPLICA, "orders", 1)]
    for path in (paths.reassigned_topic("orders"), paths.topic_change("orders")):
        assert await store.exists(path) is None, path


async def test_a_timed_out_creation_is_cleaned_up_by_the_next_create(store):
    # Broker 1 is registered but does not consume its queue (it is paused, say).
    await store.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9093).encode(), ephemeral=True, make_parents=True)
    with pytest.raises(RequestTimedOut, match=r"brokers \[1\] did not consume") as caught:
        await create_topic(store, "late", None, None, replica_assignment={0: [1]}, limits=StateChangeLimits(timeout_s=0.3))
    assert caught.value.code == 7
    assert await list_topics(store) == []
    assert await store.exists(paths.reassigned_partition("late", 0)) is not None
    assert await store.exists(paths.topic_change("late")) is None

    listener, consumed = await recording_listener(store, 1)  # broker 1 resumes
    try:
        await create_topic(store, "late", None, None, replica_assignment={0: [1]})
    finally:
        await listener.close()
    assert requests_of(consumed) == [(START_REPLICA, "late", 0), (CLOSE_REPLICA, "late", 0), (START_REPLICA, "late", 0)]
    assert await stored_replicas(store, "late") == {0: [1]}
    assert await store.exists(paths.reassigned_topic("late")) is None


async def test_a_topic_too_big_for_one_transaction_is_created_with_one_request_per_broker(store, register_brokers,
                                                                                           monkeypatch):
    await register_brokers({1: None, 2: None})
    sent: list[tuple[int, tuple[int, ...]]] = []

    async def counted(store_, kind, broker, topic, partitions, *args, **kwargs):
        sent.append((broker, tuple(partitions)))
        return await send_state_change(store_, kind, broker, topic, partitions, *args, **kwargs)

    monkeypatch.setattr(topics_module, "send_state_change", counted)
    partitions = 10 * TRANSACTION_OPS_MAX
    assignment = await create_topic(store, "wide", partitions, 2)

    assert sorted(sent) == [(1, tuple(range(partitions))), (2, tuple(range(partitions)))]
    for broker in (1, 2):
        assert requests_of(register_brokers.consumed[broker]) == [(START_REPLICA, "wide", p) for p in range(partitions)]
    assert await stored_replicas(store, "wide") == assignment
    assert [partition.partition for partition in (await describe_topic(store, "wide")).partitions] == list(range(partitions))
    assert TopicId.decode((await store.get(paths.topic("wide")))[0]).partitions == partitions
    await create_partitions(store, "wide", partitions + TRANSACTION_OPS_MAX)
    assert len(await stored_replicas(store, "wide")) == partitions + TRANSACTION_OPS_MAX
    await delete_topic(store, "wide")
    assert await store.exists(paths.topic("wide")) is None


def cut_short_at_the_commit_point(monkeypatch, topic: str) -> None:
    """The admin is gone (its store unreachable) when it would write the topic's count."""
    commit = Transaction.commit

    async def cut_short(transaction):
        if any(isinstance(op, SetOp) and op.path == paths.topic(topic) for op in transaction.ops):
            raise CoordinationUnavailable("the admin lost the store", paths.topic(topic))
        return await commit(transaction)

    monkeypatch.setattr(Transaction, "commit", cut_short)


async def test_a_creation_cut_short_before_its_commit_point_is_never_seen_and_the_next_create_cleans_it(
        store, register_brokers, monkeypatch):
    await register_brokers({1: None, 2: None})
    with monkeypatch.context() as patched:
        cut_short_at_the_commit_point(patched, "half")
        with pytest.raises(CoordinationUnavailable):
            await create_topic(store, "half", None, None, replica_assignment={p: [1] for p in range(3 * TRANSACTION_OPS_MAX)})
    assert len(await store.children(paths.topic("half"))) == 3 * TRANSACTION_OPS_MAX  # written, below no count
    assert await list_topics(store) == []
    with pytest.raises(UnknownTopicOrPartition):
        await describe_topic(store, "half")

    await create_topic(store, "half", None, None, replica_assignment={0: [2], 1: [2]})
    assert await stored_replicas(store, "half") == {0: [2], 1: [2]}
    assert await list_topics(store) == ["half"]

    async def leftovers_closed() -> bool:
        closed = [partition for kind, _, partition in requests_of(register_brokers.consumed[1]) if kind == CLOSE_REPLICA]
        return sorted(closed) == list(range(3 * TRANSACTION_OPS_MAX))  # acted on side by side

    await eventually(leftovers_closed, 10, "the leftover partitions closed on broker 1")


async def test_a_growth_cut_short_before_its_commit_point_leaves_the_topic_as_it_was(store, register_brokers, monkeypatch):
    await register_brokers({1: None})
    await create_topic(store, "grown", None, None, replica_assignment={0: [1]})
    with monkeypatch.context() as patched:
        cut_short_at_the_commit_point(patched, "grown")
        with pytest.raises(CoordinationUnavailable):
            await create_partitions(store, "grown", 2 * TRANSACTION_OPS_MAX)
    assert [partition.partition for partition in (await describe_topic(store, "grown")).partitions] == [0]
    await create_partitions(store, "grown", 3)
    assert await stored_replicas(store, "grown") == {0: [1], 1: [1], 2: [1]}


async def test_a_topic_written_before_partition_counts_grows_with_a_count(store, register_brokers):
    await register_brokers({1: None})
    await store.create(paths.replicas("old", 0), ReplicaAssignment((1,)).encode(), make_parents=True)
    assert await list_topics(store) == ["old"]  # its node is empty: every partition counts
    await create_partitions(store, "old", 2)
    assert TopicId.decode((await store.get(paths.topic("old")))[0]) == TopicId("", 2)
    assert await stored_replicas(store, "old") == {0: [1], 1: [1]}


async def test_delete_queues_close_replica_for_brokers_that_are_down(store, register_brokers):
    await register_brokers({1: None})
    await create_topic(store, "orders", None, None, replica_assignment={0: [1, 5]})  # broker 5 is down

    await delete_topic(store, "orders")

    assert requests_of(register_brokers.consumed[1]) == [(START_REPLICA, "orders", 0), (CLOSE_REPLICA, "orders", 0)]
    waiting = [StateChangeRequest.decode((await store.get(f"{paths.state_queue(5)}/{name}"))[0])
               for name in await store.children(paths.state_queue(5))]
    assert requests_of(waiting) == [(START_REPLICA, "orders", 0), (CLOSE_REPLICA, "orders", 0)]
    assert await list_topics(store) == []


# --- delete -----------------------------------------------------------------------------------


async def test_delete_removes_partitions_leader_state_config_and_reassignment(connect, register_brokers):
    admin, broker = await connect(), await connect()
    await register_brokers({1: None, 2: None}, on=broker)
    await create_topic(admin, "doomed", 2, 2, {"retention.ms": "1"})
    # What a running cluster adds under a topic: a leader (ephemeral, another session's), an ISR,
    # an epoch counter, and a pending reassignment.
    await broker.create(paths.leader("doomed", 0), LeaderRecord(1, 3).encode(), ephemeral=True)
    await broker.create(paths.isr("doomed", 0), IsrRecord((1, 2), 3).encode())
    await broker.create(paths.reassigned_partition("doomed", 1), ReplicaAssignment((2,)).encode(), make_parents=True)
    await create_topic(admin, "kept", 1, 1)

    await delete_topic(admin, "doomed")

    assert await list_topics(admin) == ["kept"]
    for path in (paths.topic("doomed"), paths.topic_config("doomed"), paths.reassigned_topic("doomed")):
        assert await admin.exists(path) is None, path
    assert await stored_replicas(admin, "kept")


async def test_a_deletion_completes_only_once_every_replica_closed_and_hides_the_topic_meanwhile(store, register_brokers):
    await register_brokers({2: None})
    await create_topic(store, "doomed", None, None, replica_assignment={0: [1, 2]})  # broker 1 is down
    # Broker 1 registered but does not consume its queue: paused, say, with the topic's
    # leadership still in its memory.
    await store.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9093).encode(), ephemeral=True)
    late = StateChangeLimits(timeout_s=0.3)

    with pytest.raises(RequestTimedOut, match=r"brokers \[1\] did not consume.*marked for deletion") as caught:
        await delete_topic(store, "doomed", limits=late)
    assert caught.value.code == 7
    assert await store.exists(paths.replicas("doomed", 0)) is not None  # its nodes stay until broker 1 closed it
    assert await list_topics(store) == []
    with pytest.raises(TopicAlreadyExists, match=r"'doomed' is marked for deletion.* brokers \[1\] consume"):
        await create_topic(store, "doomed", 1, 1, limits=late)
    for command in (lambda: describe_topic(store, "doomed"), lambda: create_partitions(store, "doomed", 2, limits=late)):
        with pytest.raises(UnknownTopicOrPartition, match="marked for deletion"):
            await command()
    with pytest.raises(RequestTimedOut):  # a second delete waits again; it sends nothing new
        await delete_topic(store, "doomed", limits=late)
    assert len(await store.children(paths.state_queue(1))) == 2  # the start-replica and one close-replica

    listener, consumed = await recording_listener(store, 1)  # broker 1 resumes
    try:
        async def gone() -> bool:
            return await store.exists(paths.topic("doomed")) is None and await store.exists(paths.topic_deletion("doomed")) is None

        await eventually(gone, 10, "the deletion completed by broker 1's listener")
    finally:
        await listener.close()
    assert requests_of(consumed) == [(START_REPLICA, "doomed", 0), (CLOSE_REPLICA, "doomed", 0)]
    assert await create_topic(store, "doomed", None, None, replica_assignment={0: [2]}) == {0: [2]}


async def test_a_close_replica_of_a_failed_creation_attempt_does_not_close_the_partition_created_since(store, register_brokers):
    await register_brokers({1: None})
    await create_topic(store, "orders", None, None, replica_assignment={0: [1]})
    # What cleanFailedTopicCreationAttempt sent, reaching a broker that is behind only now.
    await send_state_change(store, CLOSE_REPLICA, 1, "orders", [0], FROM_ADMIN, FROM_ADMIN, queue_max_requests=100)

    async def consumed() -> bool:
        return await store.children(paths.state_queue(1)) == []

    await eventually(consumed, 10, "broker 1 to consume its queue")
    assert requests_of(register_brokers.consumed[1]) == [(START_REPLICA, "orders", 0)]


async def test_delete_of_an_unknown_topic_is_refused(store):
    with pytest.raises(UnknownTopicOrPartition, match="'ghost'") as caught:
        await delete_topic(store, "ghost")
    assert caught.value.code == 3


async def test_a_deleted_topic_can_be_created_afresh(store, register_brokers):
    await register_brokers({1: None})
    await create_topic(store, "phoenix", 3, 1, {"retention.ms": "5"})
    await delete_topic(store, "phoenix")
    await create_topic(store, "phoenix", 1, 1)
    assert list(await stored_replicas(store, "phoenix")) == [0]
    assert await stored_overrides(store, "phoenix") == {}


# --- partitions -------------------------------------------------------------------------------


async def test_create_partitions_adds_only_new_partitions(store, register_brokers):
    await register_brokers({1: None, 2: None, 3: None})
    before = await create_topic(store, "grow", None, None, replica_assignment={0: [2, 3], 1: [3, 1]})

    added = await create_partitions(store, "grow", 5)

    assert sorted(added) == [2, 3, 4]
    assert await stored_replicas(store, "grow") == {**before, **added}
    assert all(len(set(replicas)) == 2 for replicas in added.values())
    # Kafka continues the leaders' round-robin from partition 0's leader.
    assert [added[partition][0] for partition in (2, 3, 4)] == [1, 2, 3]


async def test_concurrent_growths_of_one_topic_have_exactly_one_winner(connect, monkeypatch):
    first, second = await connect(), await connect()
    await create_topic(first, "grow", None, None, replica_assignment={0: [1]})
    commit_together(monkeypatch, [first, second])
    outcomes = await asyncio.gather(
        create_partitions(first, "grow", 3, {1: [1], 2: [1]}),
        create_partitions(second, "grow", 3, {1: [2], 2: [2]}),
        return_exceptions=True,
    )

    winners = [outcome for outcome in outcomes if isinstance(outcome, dict)]
    losers = [outcome for outcome in outcomes if isinstance(outcome, Exception)]
    assert len(winners) == 1 and len(losers) == 1, outcomes
    assert isinstance(losers[0], InvalidPartitions) and "has 3 partitions" in losers[0].message
    assert await stored_replicas(first, "grow") == {0: [1], **winners[0]}


async def test_create_partitions_with_an_explicit_assignment(store):
    await create_topic(store, "grow", None, None, replica_assignment={0: [1, 2]})
    assert await create_partitions(store, "grow", 3, {1: [2, 1], 2: [1, 3]}) == {1: [2, 1], 2: [1, 3]}
    assert await stored_replicas(store, "grow") == {0: [1, 2], 1: [2, 1], 2: [1, 3]}
    with pytest.raises(InvalidReplicaAssignment, match="2 replicas each"):
        await create_partitions(store, "grow", 4, {3: [1]})


@pytest.mark.parametrize("new_total", [1, 2])
async def test_create_partitions_must_increase_the_count(store, new_total):
    await create_topic(store, "fixed", None, None, replica_assignment={0: [1], 1: [1]})
    with pytest.raises(InvalidPartitions, match="has 2 partitions") as caught:
        await create_partitions(store, "fixed", new_total)
    assert caught.value.code == 37
    assert sorted(await stored_replicas(store, "fixed")) == [0, 1]


async def test_create_partitions_of_an_unknown_topic_is_refused(store):
    with pytest.raises(UnknownTopicOrPartition):
        await create_partitions(store, "ghost", 3)


# --- describe ---------------------------------------------------------------------------------


async def test_describe_reports_leader_epoch_isr_and_offline_replicas(store, register_brokers):
    await register_brokers({1: None, 2: None})
    await create_topic(store, "seen", None, None, replica_assignment={0: [1, 2], 1: [2, 3]})
    await store.create(paths.leader("seen", 0), LeaderRecord(1, 4).encode(), ephemeral=True)
    await store.create(paths.isr("seen", 0), IsrRecord((1, 2), 4).encode())
    await store.create(paths.isr("seen", 1), IsrRecord((2,), 7).encode())  # its leader is gone

    description = await describe_topic(store, "seen")

    first, second = description.partitions
    assert (first.partition, first.replicas, first.leader, first.leader_epoch, first.isr) == (0, (1, 2), 1, 4, (1, 2))
    assert first.offline_replicas == ()
    assert (second.leader, second.leader_epoch, second.isr, second.offline_replicas) == (None, 7, (2,), (3,))
    with pytest.raises(UnknownTopicOrPartition):
        await describe_topic(store, "ghost")


async def test_describe_reports_the_replicas_a_reassignment_adds_and_removes(store):
    await create_topic(store, "moving", None, None, replica_assignment={0: [1, 2], 1: [2, 1]})
    await store.create(paths.reassigned_partition("moving", 0), ReplicaAssignment((2, 3)).encode(), make_parents=True)

    moving, staying = (await describe_topic(store, "moving")).partitions

    assert (moving.adding_replicas, moving.removing_replicas) == ((3,), (1,))
    assert (staying.adding_replicas, staying.removing_replicas) == ((), ())
    # Once its leader added broker 3 to the assignment, as a move does first.
    await store.set(paths.reassigned_partition("moving", 0), PartitionReassignment((2, 3), original=(1, 2)).encode())
    await store.set(paths.replicas("moving", 0), ReplicaAssignment((2, 3, 1)).encode())
    moving = (await describe_topic(store, "moving")).partitions[0]
    assert (moving.adding_replicas, moving.removing_replicas) == ((3,), (1,))


# --- configs ----------------------------------------------------------------------------------


def entries_by_name(entries):
    return {entry.name: entry for entry in entries}


async def test_alter_configs_round_trip(store):
    await create_topic(store, "tuned", None, None, {"retention.ms": "1000"}, replica_assignment={0: [1]})
    broker_config = load_broker_config(None, {"log.segment.bytes": "1048576"})

    new = await alter_topic_config(
        store,
        "tuned",
        [ConfigOperation("retention.ms", AlterOp.DELETE), ConfigOperation("max.message.bytes", AlterOp.SET, "2000")],
    )
    assert new == await stored_overrides(store, "tuned") == {"max.message.bytes": "2000"}

    entries = entries_by_name(await describe_topic_config(store, "tuned", broker_config))
    assert (entries["max.message.bytes"].value, entries["max.message.bytes"].source) == (
        "2000", ConfigSource.DYNAMIC_TOPIC_CONFIG
    )
    assert (entries["segment.bytes"].value, entries["segment.bytes"].source) == ("1048576", ConfigSource.STATIC_BROKER_CONFIG)
    assert (entries["retention.ms"].value, entries["retention.ms"].is_default) == ("604800000", True)
    assert entries["cleanup.policy"].value == "delete"


@pytest.mark.parametrize(
    "operation, complaint",
    [
        (ConfigOperation("retention.ms", AlterOp.APPEND, "5"), "APPEND applies only to list settings"),
        (ConfigOperation("retention.ms", AlterOp.SUBTRACT, "5"), "SUBTRACT applies only to list settings"),
        (ConfigOperation("cleanup.policy", AlterOp.APPEND, "archive"), "must be delete, compact or compact,delete"),
        (ConfigOperation("cleanup.policy", AlterOp.SUBTRACT, "delete"), "must be delete"),
        (ConfigOperation("no.such.setting", AlterOp.SET, "1"), "Unknown topic config name: no.such.setting"),
        (ConfigOperation("retention.ms", AlterOp.SET, "-2"), "at least -1"),
        (ConfigOperation("retention.ms", AlterOp.SET, None), "needs a value"),
    ],
)
async def test_bad_alterations_change_nothing(store, operation, complaint):
    await create_topic(store, "tuned", None, None, {"retention.ms": "1000"}, replica_assignment={0: [1]})
    later_valid = ConfigOperation("flush.ms", AlterOp.SET, "10")
    with pytest.raises(InvalidConfig, match=complaint) as caught:
        await alter_topic_config(store, "tuned", [later_valid, operation])
    assert caught.value.code == 40 and "'tuned'" in caught.value.message
    assert await stored_overrides(store, "tuned") == {"retention.ms": "1000"}


async def test_segment_bytes_below_the_floor_of_the_broker_asked_is_refused(store, register_brokers):
    """Kafka's 1 MiB away from any broker (replog topics --coord) and on a broker left at its
    defaults; a broker whose operator lowered internal.segment.bytes.min takes down to it."""
    await register_brokers({1: None})
    small = {"segment.bytes": "16384"}
    lowered = load_broker_config(None, {"internal.segment.bytes.min": "1024"})
    for broker_config in (None, load_broker_config(None, {})):
        with pytest.raises(InvalidConfig, match="Value must be at least 1048576") as caught:
            await create_topic(store, "small", 1, 1, small, broker_config=broker_config)
        assert caught.value.code == 40
    assert await list_topics(store) == []
    await create_topic(store, "small", 1, 1, small, broker_config=lowered)

    smaller = [ConfigOperation("segment.bytes", AlterOp.SET, "2048")]
    with pytest.raises(InvalidConfig, match="Value must be at least 1048576"):
        await alter_topic_config(store, "small", smaller)
    with pytest.raises(InvalidConfig, match="Value must be at least 1048576"):
        await replace_topic_config(store, "small", {"segment.bytes": "2048"})
    assert await stored_overrides(store, "small") == small
    assert await alter_topic_config(store, "small", smaller, broker_config=lowered) == {"segment.bytes": "2048"}
    assert await replace_topic_config(store, "small", {"segment.bytes": "4096"}, broker_config=lowered) == {
        "segment.bytes": "4096"}


async def test_append_to_a_list_setting_keeps_known_items_once(store):
    await create_topic(store, "listy", None, None, replica_assignment={0: [1]})
    operation = ConfigOperation("cleanup.policy", AlterOp.APPEND, "delete")
    assert await alter_topic_config(store, "listy", [operation]) == {"cleanup.policy": "delete"}


async def test_validate_only_alteration_writes_nothing(store):
    await create_topic(store, "tuned", None, None, replica_assignment={0: [1]})
    operation = ConfigOperation("retention.ms", AlterOp.SET, "5")
    assert await alter_topic_config(store, "tuned", [operation], validate_only=True) == {"retention.ms": "5"}
    assert await stored_overrides(store, "tuned") == {}


async def test_alter_configs_of_an_unknown_topic_is_refused(store):
    with pytest.raises(UnknownTopicOrPartition):
        await alter_topic_config(store, "ghost", [ConfigOperation("retention.ms", AlterOp.SET, "5")])


async def test_replacing_a_topics_configs_drops_the_overrides_not_named(store):
    """Kafka's legacy AlterConfigs: the request's configs become the topic's whole set."""
    await create_topic(store, "tuned", None, None, {"retention.ms": "1000", "compression.type": "lz4"},
                       replica_assignment={0: [1]})
    assert await replace_topic_config(store, "tuned", {"segment.ms": "5000"}) == {"segment.ms": "5000"}
    assert await stored_overrides(store, "tuned") == {"segment.ms": "5000"}
    assert await replace_topic_config(store, "tuned", {}) == {}
    assert await stored_overrides(store, "tuned") == {}


@pytest.mark.parametrize("configs, complaint", [
    ({"retention.ms": "abc"}, "Invalid value abc for configuration retention.ms"),
    ({"no.such.setting": "1"}, "Unknown topic config name: no.such.setting"),
])
async def test_a_bad_replacement_changes_nothing(store, configs, complaint):
    await create_topic(store, "tuned", None, None, {"retention.ms": "1000"}, replica_assignment={0: [1]})
    with pytest.raises(InvalidConfig, match=complaint):
        await replace_topic_config(store, "tuned", {"flush.ms": "10"} | configs)
    assert await stored_overrides(store, "tuned") == {"retention.ms": "1000"}


async def test_a_validate_only_replacement_writes_nothing(store):
    await create_topic(store, "tuned", None, None, {"retention.ms": "1000"}, replica_assignment={0: [1]})
    assert await replace_topic_config(store, "tuned", {"flush.ms": "10"}, validate_only=True) == {"flush.ms": "10"}
    assert await stored_overrides(store, "tuned") == {"retention.ms": "1000"}


async def test_replacing_the_configs_of_an_unknown_topic_is_refused(store):
    with pytest.raises(UnknownTopicOrPartition):
        await replace_topic_config(store, "ghost", {"retention.ms": "5"})
