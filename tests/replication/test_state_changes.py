"""The state-change queues (docs/design.md §7) over memory, ZooKeeper and etcd: sendStateChange,
its bound and shrink rule, the listener's order and its stale start-replica check."""

from __future__ import annotations

import pytest

from replog.coord_backends import paths
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment, StateChangeRequest
from replog.replication.state_changes import (
    CLOSE_REPLICA,
    FROM_ADMIN,
    START_REPLICA,
    FollowerStateChangeQueueFull,
    send_state_change,
    wait_till_state_change_requests_consumed,
)
from tests.backends.conftest import backend, connect, security, store, url  # noqa: F401  (fixtures)
from tests.support.recording_listener import recording_listener

BROKER = 7
WAIT_S = 10
ROOMY = 10_000


async def send(store, kind: str, topic: str, partition: int, epoch: int, *, queue_max_requests: int = ROOMY,
               to: int = BROKER) -> str:
    return await send_state_change(store, kind, to, topic, [partition], epoch, sender=1, queue_max_requests=queue_max_requests)


async def queued(store, broker: int = BROKER) -> list[tuple[str, str, int, int]]:
    requests = []
    for name in await store.children(paths.state_queue(broker)):
        request = StateChangeRequest.decode((await store.get(f"{paths.state_queue(broker)}/{name}"))[0])
        requests.append((request.kind, request.topic, request.partition, request.leader_epoch))
    return requests


def requests_of(acted: list[StateChangeRequest]) -> list[tuple[str, str, int, int]]:
    return [(request.kind, request.topic, request.partition, request.leader_epoch) for request in acted]


@pytest.fixture
async def listening(store):
    """Start a listener on BROKER's queue that records the requests it acts on, in order."""
    listeners = []

    async def start(on_start=None) -> list[StateChangeRequest]:
        listener, acted = await recording_listener(store, BROKER, on_start)
        listeners.append(listener)
        return acted

    yield start
    for listener in listeners:
        await listener.close()


async def test_a_broker_that_never_started_gets_its_queue_with_the_first_request(store):
    name = await send(store, CLOSE_REPLICA, "orders", 0, FROM_ADMIN, to=42)
    assert await store.children(paths.state_queue(42)) == [name]
    assert await queued(store, 42) == [(CLOSE_REPLICA, "orders", 0, FROM_ADMIN)]


async def test_requests_queued_while_away_are_drained_in_order_then_later_ones_followed(store, listening):
    sent = [(START_REPLICA, "a", 0, FROM_ADMIN), (CLOSE_REPLICA, "b", 3, 4), (START_REPLICA, "a", 1, FROM_ADMIN),
            (CLOSE_REPLICA, "a", 0, FROM_ADMIN)]
    for kind, topic, partition, epoch in sent:
        await send(store, kind, topic, partition, epoch)

    acted = await listening()  # drain returns once everything queued was processed

    assert requests_of(acted) == sent
    assert await store.children(paths.state_queue(BROKER)) == []
    later = await send(store, CLOSE_REPLICA, "c", 0, 2)
    assert await wait_till_state_change_requests_consumed(store, {BROKER: [later]}, WAIT_S) == []
    assert requests_of(acted) == [*sent, (CLOSE_REPLICA, "c", 0, 2)]


async def test_a_request_whose_action_fails_is_consumed_and_the_queue_goes_on(store, listening):
    async def cannot_start(request: StateChangeRequest) -> None:
        raise OSError("disk full")

    await send(store, START_REPLICA, "a", 0, FROM_ADMIN)
    await send(store, CLOSE_REPLICA, "a", 1, FROM_ADMIN)
    acted = await listening(on_start=cannot_start)
    assert requests_of(acted) == [(CLOSE_REPLICA, "a", 1, FROM_ADMIN)]
    assert await store.children(paths.state_queue(BROKER)) == []


async def test_a_stale_start_replica_is_ignored_and_close_replica_acted_on_whatever_its_epoch(store, listening):
    # Partition 0 has a leader at epoch 5; partition 1 has none yet (a new partition).
    await store.create(paths.leader("t", 0), LeaderRecord(1, 5).encode(), make_parents=True)
    await store.create(paths.isr("t", 0), IsrRecord((1, BROKER), 5).encode())
    await send(store, START_REPLICA, "t", 0, 4)  # queued by an earlier leader
    await send(store, START_REPLICA, "t", 0, 5)
    await send(store, START_REPLICA, "t", 1, FROM_ADMIN)
    await send(store, CLOSE_REPLICA, "t", 0, 1)

    acted = await listening()

    assert requests_of(acted) == [(START_REPLICA, "t", 0, 5), (START_REPLICA, "t", 1, FROM_ADMIN), (CLOSE_REPLICA, "t", 0, 1)]
    assert await store.children(paths.state_queue(BROKER)) == []  # the stale one is consumed too


async def test_a_full_queue_keeps_only_the_latest_close_replica_of_each_partition(store):
    names = [await send(store, kind, "t", partition, epoch, queue_max_requests=5)
             for kind, partition, epoch in [(START_REPLICA, 0, 1), (CLOSE_REPLICA, 0, 3), (CLOSE_REPLICA, 0, 2),
                                            (CLOSE_REPLICA, 1, FROM_ADMIN), (CLOSE_REPLICA, 1, FROM_ADMIN)]]
    sixth = await send(store, CLOSE_REPLICA, "t", 2, 0, queue_max_requests=5)

    assert await queued(store) == [(CLOSE_REPLICA, "t", 0, 3), (CLOSE_REPLICA, "t", 1, FROM_ADMIN), (CLOSE_REPLICA, "t", 2, 0)]
    # Of two close-replicas at one epoch, the later one stays.
    assert await store.children(paths.state_queue(BROKER)) == [names[1], names[4], sixth]


async def test_a_queue_still_full_after_shrinking_refuses_the_request(store):
    await send(store, CLOSE_REPLICA, "t", 0, 1, queue_max_requests=2)
    await send(store, CLOSE_REPLICA, "t", 1, 1, queue_max_requests=2)
    with pytest.raises(FollowerStateChangeQueueFull, match="broker 7 holds 2 requests") as refused:
        await send(store, START_REPLICA, "t", 2, 1, queue_max_requests=2)
    assert refused.value.broker_id == BROKER
    assert await queued(store) == [(CLOSE_REPLICA, "t", 0, 1), (CLOSE_REPLICA, "t", 1, 1)]


async def test_waiting_names_the_brokers_that_did_not_consume(store, listening):
    await listening()
    consumed = await send(store, START_REPLICA, "t", 0, FROM_ADMIN)
    unconsumed = await send(store, START_REPLICA, "t", 0, FROM_ADMIN, to=8)  # no listener on broker 8
    assert await wait_till_state_change_requests_consumed(store, {BROKER: [consumed], 8: [unconsumed]}, 0.5) == [8]


async def test_a_leaders_close_replica_overtaken_by_a_move_back_is_ignored(store, listening):
    """A reassignment moved partition 0 off BROKER and a later one moved it back before BROKER
    got to the close-replica (it was down): closing it would leave it closed for good, and the
    move back waiting for it. Partition 1 was moved off and stays off: closed."""
    await store.create(paths.replicas("t", 0), ReplicaAssignment((1, BROKER)).encode(), make_parents=True)
    await store.create(paths.replicas("t", 1), ReplicaAssignment((1, 2)).encode(), make_parents=True)
    await send(store, CLOSE_REPLICA, "t", 0, 3)
    await send(store, CLOSE_REPLICA, "t", 1, 3)

    acted = await listening()

    assert requests_of(acted) == [(CLOSE_REPLICA, "t", 1, 3)]
