"""The client side of `replog cluster state-changes`: each state-change request's path through its lifecycle,
joined from what the brokers recorded and what the store's queues still hold.

The steps of one request are recorded by two brokers (obs/state_change_events.py): its sender
(requested; a leader only, since an admin command runs outside any broker) and its target
(received, then completed, ignored or failed). A request still in its target's queue
(/brokers/state/[broker_id]/[seq]) is requested and not yet received, by whomever sent it;
that is all there is of a request to a broker that is down. A request is known by its target
and its queue sequence; one that never reached a queue (the sender found the queue full) by
what it asked.

Each broker's ring is read from a cursor (`RingCursor`), so that a follower of the events asks
only for new ones; a broker that restarted has a new ring, read from its start.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

from replog.admin.state_change_events import Queued
from replog.coord_backends.paths import StateChangeRequest
from replog.net.client import BrokerConnection, BrokerUnavailable
from replog.net.codec import ApiKey
from replog.net.replog_apis import ALL_PARTITIONS, EVENTS_PER_ANSWER_MAX
from replog.obs.state_change_events import NO_CURSOR, EventKind, StateChangeEvent
from replog.replication.state_changes import FROM_ADMIN

OUTCOMES = (EventKind.COMPLETED, EventKind.IGNORED, EventKind.FAILED)

# The open connection to a broker; BrokerUnavailable if it cannot be reached.
Connect = Callable[[int], Awaitable[BrokerConnection]]


@dataclasses.dataclass(frozen=True)
class RingCursor:
    incarnation: int = 0
    cursor: int = NO_CURSOR


@dataclasses.dataclass(frozen=True)
class RingRead:
    """What one broker's ring gave from a cursor."""

    broker: int
    events: list[StateChangeEvent]
    cursor: RingCursor  # to read from next
    missed: int  # events dropped from the ring after the cursor before they were read


@dataclasses.dataclass(frozen=True)
class Step:
    broker: int  # the broker that recorded it
    at_ms: int | None  # None: not known (a request seen in its queue)
    reason: str | None = None

    def as_json(self) -> dict:
        return {"broker": self.broker, "at_ms": self.at_ms, "reason": self.reason}


@dataclasses.dataclass
class RequestPath:
    request_type: str
    topic: str
    partition: int
    from_broker: int
    to_broker: int
    epoch: int
    queue_sequence: str  # "" if it never reached a queue
    requested: Step | None = None
    received: Step | None = None
    outcome: EventKind | None = None
    outcome_step: Step | None = None
    queued: bool = False  # seen waiting in its queue

    @property
    def state(self) -> str:
        if self.outcome is not None:
            return self.outcome.value
        return EventKind.RECEIVED.value if self.received is not None else EventKind.REQUESTED.value

    def as_json(self) -> dict:
        steps = {"requested": self.requested, "received": self.received, "outcome": self.outcome_step}
        fields = {"type": self.request_type, "topic": self.topic, "partition": self.partition,
                  "from": "admin" if self.from_broker == FROM_ADMIN else self.from_broker, "to": self.to_broker,
                  "epoch": self.epoch, "queue_sequence": self.queue_sequence, "state": self.state, "queued": self.queued}
        return fields | {name: None if step is None else step.as_json() for name, step in steps.items()}


class UnreachableBroker(NamedTuple):
    """A broker of the cluster whose events could not be read: down, or not answering."""

    broker: int
    why: str


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One look at the cluster: each reachable broker's new events, the brokers not reached, and
    the requests waiting in the queues."""

    reads: list[RingRead]
    unreachable: list[UnreachableBroker]
    queued: list[Queued]

    @property
    def events(self) -> list[StateChangeEvent]:
        return [event for read in self.reads for event in read.events]

    def cursors(self) -> dict[int, RingCursor]:
        return {read.broker: read.cursor for read in self.reads}


async def read_ring(connect: Connect, broker: int, since: RingCursor, topic: str | None,
                    partition: int | None) -> RingRead:
    """The events of the broker's ring after `since`, all of them (page by page, so bounded by
    the ring's size); BrokerUnavailable if it does not answer."""
    connection = await connect(broker)
    events: list[StateChangeEvent] = []
    cursor, missed = since, 0
    while True:  # bounded by the ring's size: each page moves the cursor on
        answer = await connection.request(ApiKey.STATE_CHANGE_EVENTS, None, {
            "topic": topic, "partition": ALL_PARTITIONS if partition is None else partition,
            "incarnation": cursor.incarnation, "since_cursor": cursor.cursor, "max_events": EVENTS_PER_ANSWER_MAX})
        restarted = answer.incarnation != cursor.incarnation
        if not restarted and cursor.cursor != NO_CURSOR:
            missed += max(answer.first_cursor - cursor.cursor - 1, 0)
        events += [_event(entry, answer.broker_id) for entry in answer.events]
        full = len(answer.events) == EVENTS_PER_ANSWER_MAX
        cursor = RingCursor(answer.incarnation, answer.next_cursor)
        if not full:
            return RingRead(broker, events, cursor, missed)


def queued_from_answer(answer) -> list[Queued]:
    """The queued requests of a StateChangeEvents answer that included them."""
    return [(entry.to_broker, entry.queue_sequence,
             StateChangeRequest(entry.request_type, entry.topic, (entry.partition,), entry.from_broker, entry.epoch))
            for entry in answer.queued]


def join(events: Iterable[StateChangeEvent], queued: Iterable[Queued]) -> list[RequestPath]:
    """Each request's path, from the events of every broker and the requests still queued."""
    paths: dict[tuple, RequestPath] = {}

    def path_of(request_type: str, topic: str, partition: int, from_broker: int, to_broker: int, epoch: int,
                sequence: str) -> RequestPath:
        # A queued request may name several partitions of its topic, each with a path of its own.
        key = (to_broker, sequence, topic, partition) if sequence else (request_type, topic, partition, from_broker,
                                                                         to_broker, epoch)
        if key not in paths:
            paths[key] = RequestPath(request_type, topic, partition, from_broker, to_broker, epoch, sequence)
        return paths[key]

    for broker, name, request in queued:
        path = path_of(request.kind, request.topic, request.partition, request.from_broker, broker, request.leader_epoch, name)
        path.queued = True
    for event in sorted(events, key=lambda event: event.timestamp_ms):  # bounded by the rings' sizes
        path = path_of(event.request_type, event.topic, event.partition, event.from_broker, event.to_broker, event.epoch,
                       event.queue_sequence)
        step = Step(event.recorded_by, event.timestamp_ms, event.reason)
        if event.kind == EventKind.REQUESTED:
            path.requested = step
        elif event.kind == EventKind.RECEIVED:
            path.received = step
        else:
            path.outcome, path.outcome_step = event.kind, step
    for path in paths.values():
        if path.requested is None and (path.queued or path.received is not None):
            # Its sender recorded nothing (an admin command) or its ring dropped it: requested, when unknown.
            path.requested = Step(path.from_broker, None)
    return sorted(paths.values(), key=lambda path: (path.topic, path.partition, path.epoch, path.request_type,
                                                    path.to_broker, path.queue_sequence))


def state_change_json(paths: Sequence[RequestPath], unreachable: Sequence[UnreachableBroker]) -> dict:
    return {"requests": [path.as_json() for path in paths], "unreachable": [unreachable_json(down) for down in unreachable]}


def unreachable_json(down: UnreachableBroker) -> dict:
    return {"broker": down.broker, "error": down.why}


def _event(entry, broker: int) -> StateChangeEvent:
    return StateChangeEvent(entry.cursor, EventKind(entry.kind), entry.request_type, entry.topic, entry.partition,
                            entry.from_broker, entry.to_broker, entry.epoch, entry.queue_sequence, broker,
                            entry.timestamp_ms, entry.reason)


async def read_rings(connect: Connect, brokers: Mapping[int, bool], cursors: Mapping[int, RingCursor],
                     topic: str | None, partition: int | None) -> tuple[list[RingRead], list[UnreachableBroker]]:
    """The new events of each broker of the cluster (by id: whether it is registered), from its
    cursor; those down or not answering as UnreachableBroker."""
    async def read(broker: int, registered: bool) -> RingRead | UnreachableBroker:
        if not registered:
            return UnreachableBroker(broker, "down: not registered in the store")
        try:
            return await read_ring(connect, broker, cursors.get(broker, RingCursor()), topic, partition)
        except BrokerUnavailable as error:
            return UnreachableBroker(broker, str(error))

    answers = await asyncio.gather(*(read(broker, registered) for broker, registered in sorted(brokers.items())))
    return ([answer for answer in answers if isinstance(answer, RingRead)],
            [answer for answer in answers if isinstance(answer, UnreachableBroker)])


@dataclasses.dataclass(frozen=True)
class Reachable:
    broker: int  # answers again, after it was reported unreachable


@dataclasses.dataclass(frozen=True)
class Missed:
    broker: int
    count: int  # events its ring dropped before they were read: more happened than it keeps


@dataclasses.dataclass(frozen=True)
class QueuedSeen:
    to_broker: int
    queue_sequence: str
    request: StateChangeRequest


Update = StateChangeEvent | QueuedSeen | UnreachableBroker | Reachable | Missed
FOLLOW_POLL_S = 1.0


async def follow(look: Callable[[Mapping[int, RingCursor]], Awaitable[Snapshot]],
                 poll_s: float = FOLLOW_POLL_S) -> AsyncIterator[Update]:
    """Every `poll_s`, until the caller stops: what is new since the last look (`look(cursors)`,
    an Admin's state_changes), each told once, events oldest first. A broker unreachable is told
    when it becomes so and when it answers again; a queued request when it is first seen."""
    cursors: dict[int, RingCursor] = {}
    queued_before: set[tuple[int, str]] = set()
    unreachable_before: set[int] = set()
    while True:  # until the caller stops iterating (Ctrl-C)
        snapshot = await look(cursors)
        for down in snapshot.unreachable:
            if down.broker not in unreachable_before:
                yield down
        for read in snapshot.reads:
            if read.broker in unreachable_before:
                yield Reachable(read.broker)
            if read.missed:
                yield Missed(read.broker, read.missed)
        for broker, name, request in snapshot.queued:
            if (broker, name) not in queued_before:
                yield QueuedSeen(broker, name, request)
        for event in sorted(snapshot.events, key=lambda event: event.timestamp_ms):
            yield event
        # Only what is queued now is remembered: a request leaves its queue once, so this stays bounded.
        queued_before = {(broker, name) for broker, name, _ in snapshot.queued}
        unreachable_before = {down.broker for down in snapshot.unreachable}
        cursors |= snapshot.cursors()
        await asyncio.sleep(poll_s)
