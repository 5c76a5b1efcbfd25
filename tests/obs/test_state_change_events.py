"""The state-change lifecycle ring (its bound, filters and cursor), what the queue's sender and
listener record in it, the StateChangeEvents request that serves it, and how `replog cluster
state-changes` joins events and queued requests into each request's path."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from replog.cli.state_change_reader import RingCursor, join, read_ring
from replog.coord_backends import paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord, StateChangeRequest
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics, EventKind, StateChangeEvents
from replog.replication.state_changes import (
    CLOSE_REPLICA,
    FROM_ADMIN,
    START_REPLICA,
    FollowerStateChangeQueueFull,
    StateChangeListener,
    queued_requests,
    send_state_change,
)
from tests.support.polling import eventually

ME, LEADER, DOWN = 1, 2, 3
WAIT_S = 10


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000

    def __call__(self) -> int:
        self.now_ms += 1
        return self.now_ms


def record(ring: StateChangeEvents, topic: str = "t", partition: int = 0, kind: EventKind = EventKind.RECEIVED):
    return ring.record(kind, START_REPLICA, topic, partition, FROM_ADMIN, ring.broker_id, FROM_ADMIN, "0000000001")


def cursors(events) -> list[int]:
    return [event.cursor for event in events]


# --- the ring ------------------------------------------------------------------------------------


def test_the_ring_keeps_only_the_latest_events_and_says_where_it_starts():
    ring = StateChangeEvents(ME, capacity=3, clock_ms=Clock())
    for _ in range(5):
        record(ring)
    events, next_cursor = ring.since(0, limit=10)
    assert cursors(events) == [3, 4, 5] and next_cursor == 5
    assert (ring.first_cursor, ring.last_cursor) == (3, 5)
    assert all(event.recorded_by == ME for event in events)
    assert [event.timestamp_ms for event in events] == sorted({event.timestamp_ms for event in events})


def test_a_cursor_reads_only_what_is_newer_and_a_limit_pages():
    ring = StateChangeEvents(ME, clock_ms=Clock())
    for _ in range(5):
        record(ring)
    first, cursor = ring.since(0, limit=2)
    assert cursors(first) == [1, 2] and cursor == 2
    rest, cursor = ring.since(cursor, limit=10)
    assert cursors(rest) == [3, 4, 5] and cursor == 5
    assert ring.since(cursor, limit=10) == ([], 5)
    record(ring)
    assert cursors(ring.since(cursor, limit=10)[0]) == [6]


def test_filters_name_a_topic_and_a_partition_and_the_cursor_moves_past_what_they_skip():
    ring = StateChangeEvents(ME, clock_ms=Clock())
    record(ring, "a", 0)
    record(ring, "b", 0)
    record(ring, "a", 1)
    record(ring, "b", 1)
    assert cursors(ring.since(0, 10, topic="a")[0]) == [1, 3]
    assert ring.since(0, 10, topic="a", partition=1) == (ring.since(2, 10, topic="a")[0], 4)
    assert cursors(ring.since(0, 10, partition=0)[0]) == [1, 2]
    assert ring.since(0, 10, topic="c") == ([], 4)


def test_an_empty_ring_and_a_cursor_from_before_what_it_holds():
    ring = StateChangeEvents(ME, capacity=2, clock_ms=Clock())
    assert ring.since(0, 10) == ([], 0) and ring.first_cursor == 1
    for _ in range(4):
        record(ring)
    assert cursors(ring.since(1, 10)[0]) == [3, 4]  # 2 was dropped: first_cursor tells the reader
    with pytest.raises(ValueError):
        StateChangeEvents(ME, capacity=0)


# --- what the queue's sender and listener record -------------------------------------------------


@pytest.fixture
async def store():
    memory = MemoryStore()
    await memory.start()
    yield memory
    await memory.close()


async def test_the_lifecycle_of_requests_completed_ignored_and_failed_is_recorded_where_it_happens(store):
    sender, receiver = StateChangeEvents(LEADER), StateChangeEvents(ME)

    async def start(request: StateChangeRequest) -> None:
        if request.topic == "broken":
            raise OSError("disk gone")

    listener = StateChangeListener(store, ME, start, start, receiver)
    await listener.listen()
    await listener.drain()
    try:
        # A partition led at epoch 4: a start-replica of epoch 3 is stale.
        await store.create(paths.leader("led", 0), LeaderRecord(LEADER, 4).encode(), make_parents=True)
        await store.create(paths.isr("led", 0), IsrRecord((LEADER,), 4).encode(), make_parents=True)
        sent = [await send_state_change(store, START_REPLICA, ME, topic, [0], epoch, LEADER, queue_max_requests=10,
                                        events=sender)
                for topic, epoch in (("new", 1), ("led", 3), ("broken", 1))]

        async def all_done() -> bool:
            return len(receiver.since(0, 100)[0]) == 6

        await eventually(all_done, WAIT_S, "three requests received and acted on")
    finally:
        await listener.close()
    requested, _ = sender.since(0, 100)
    assert [(event.kind, event.topic, event.queue_sequence, event.to_broker) for event in requested] == [
        (EventKind.REQUESTED, topic, name, ME) for topic, name in zip(("new", "led", "broken"), sent)]
    steps = [(event.kind, event.topic, event.queue_sequence, event.epoch) for event in receiver.since(0, 100)[0]]
    assert steps == [(EventKind.RECEIVED, "new", sent[0], 1), (EventKind.COMPLETED, "new", sent[0], 1),
                     (EventKind.RECEIVED, "led", sent[1], 3), (EventKind.IGNORED, "led", sent[1], 3),
                     (EventKind.RECEIVED, "broken", sent[2], 1), (EventKind.FAILED, "broken", sent[2], 1)]
    reasons = {event.topic: event.reason for event in receiver.since(0, 100)[0] if event.reason}
    assert reasons == {"led": "stale: the partition's latest epoch is 4", "broken": "OSError('disk gone')"}


async def test_a_request_that_finds_the_queue_full_is_recorded_failed_by_its_sender(store):
    sender = StateChangeEvents(LEADER)
    await send_state_change(store, CLOSE_REPLICA, DOWN, "t", [0], 1, LEADER, queue_max_requests=1, events=sender)
    with pytest.raises(FollowerStateChangeQueueFull):
        await send_state_change(store, CLOSE_REPLICA, DOWN, "t", [0], 1, LEADER, queue_max_requests=1, events=sender)
    failed = sender.since(0, 100)[0][-1]
    assert (failed.kind, failed.queue_sequence, failed.to_broker) == (EventKind.FAILED, "", DOWN)
    assert "not queued" in failed.reason


# --- served, and joined into paths ---------------------------------------------------------------


async def test_the_ring_and_the_queues_are_served_and_a_restarted_ring_is_read_from_its_start(store):
    ring = StateChangeEvents(ME)
    for partition in range(3):
        record(ring, "t", partition, EventKind.COMPLETED)
    queued = await send_state_change(store, CLOSE_REPLICA, DOWN, "t", [1], FROM_ADMIN, FROM_ADMIN, queue_max_requests=10)
    await send_state_change(store, CLOSE_REPLICA, DOWN, "other", [0], FROM_ADMIN, FROM_ADMIN, queue_max_requests=10)
    services = SimpleNamespace(broker_id=ME, state_change_events=ring, store=store, authorizer=None)
    server = KafkaServer(services, "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=BrokerMetrics())
    await server.start()
    try:
        async with await BrokerConnection.open("127.0.0.1", server.port) as connection:
            async def connect(_broker: int) -> BrokerConnection:
                return connection

            read = await read_ring(connect, ME, RingCursor(), "t", None)
            assert cursors(read.events) == [1, 2, 3] and read.missed == 0
            assert read.cursor == RingCursor(ring.incarnation, 3)
            assert (await read_ring(connect, ME, read.cursor, "t", None)).events == []
            assert cursors((await read_ring(connect, ME, RingCursor(ring.incarnation + 1, 3), "t", 2)).events) == [3]

            answer = await connection.request(ApiKey.STATE_CHANGE_EVENTS, None, {
                "topic": "t", "partition": 1, "max_events": 0, "include_queued": True})
            assert answer.events == ()
            assert [(entry.to_broker, entry.queue_sequence, entry.request_type) for entry in answer.queued] == [
                (DOWN, queued, CLOSE_REPLICA)]
    finally:
        await server.stop()


def test_a_request_is_joined_from_its_senders_and_its_targets_events_and_its_queue():
    sender, target = StateChangeEvents(LEADER, clock_ms=Clock()), StateChangeEvents(ME, clock_ms=Clock())
    sender.record(EventKind.REQUESTED, START_REPLICA, "t", 0, LEADER, ME, 5, "0000000007")
    target.record(EventKind.RECEIVED, START_REPLICA, "t", 0, LEADER, ME, 5, "0000000007")
    target.record(EventKind.COMPLETED, START_REPLICA, "t", 0, LEADER, ME, 5, "0000000007")
    target.record(EventKind.RECEIVED, START_REPLICA, "t", 1, FROM_ADMIN, ME, FROM_ADMIN, "0000000008")
    waiting = (DOWN, "0000000002", StateChangeRequest(CLOSE_REPLICA, "t", (0,), FROM_ADMIN, FROM_ADMIN))
    events = sender.since(0, 10)[0] + target.since(0, 10)[0]
    down, completed, received = join(events, [waiting])  # by topic, partition, epoch
    assert (completed.state, completed.requested.broker, completed.received.broker, completed.outcome_step.broker) == (
        "completed", LEADER, ME, ME)
    assert (down.state, down.to_broker, down.queued, down.received) == ("requested", DOWN, True, None)
    assert down.requested.at_ms is None and down.as_json()["from"] == "admin"
    assert (received.state, received.requested.at_ms, received.outcome) == ("received", None, None)


async def test_queued_requests_are_read_from_every_queue_in_order(store):
    names = [await send_state_change(store, START_REPLICA, broker, "t", [0], FROM_ADMIN, FROM_ADMIN, queue_max_requests=10)
             for broker in (DOWN, ME, DOWN)]
    found = await queued_requests(store, {ME, DOWN, 99})
    assert [(broker, name) for broker, name, _ in found] == [(ME, names[1]), (DOWN, names[0]), (DOWN, names[2])]
