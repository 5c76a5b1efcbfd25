"""The state-change lifecycle of one broker, as structured events in a bounded ring, so that
the whole lifecycle of a state change can be followed (docs/design.md §7.4).

Each request of a state-change queue (replication/state_changes.py) is `requested` by its sender
(a leader; an admin command runs outside any broker and records nothing), then `received`,
and `completed`, `ignored` or `failed` by the broker it was sent to; a sender whose request
could not be queued records it `failed` too. Every event names the request (its type, topic,
partition, sender, target, epoch and queue sequence), the broker that recorded it and when.

The ring keeps the latest `capacity` events (state.change.events.max); older ones are dropped
silently, as a log rotates. Each event gets a cursor, one more than the one before: a reader
asks for the events after the last cursor it saw, and the ring's incarnation (random, drawn
when the ring is made) tells it when a restarted broker's cursors began again.

Thread-safety: none needed; the broker's event loop is the only writer and reader.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import itertools
import secrets
import time
from collections.abc import Callable

EVENTS_MAX_DEFAULT = 10_000
# Cursors of a ring start after this: a reader that saw nothing yet asks for the events after it.
NO_CURSOR = 0


class EventKind(enum.StrEnum):
    REQUESTED = "requested"
    RECEIVED = "received"
    COMPLETED = "completed"
    IGNORED = "ignored"
    FAILED = "failed"


@dataclasses.dataclass(frozen=True, slots=True)
class StateChangeEvent:
    cursor: int
    kind: EventKind
    request_type: str  # start-replica | close-replica
    topic: str
    partition: int
    from_broker: int  # -1: an admin command
    to_broker: int
    epoch: int  # -1: an admin command's request
    queue_sequence: str  # the request's node name in the target's queue; "" if it was never queued
    recorded_by: int
    timestamp_ms: int  # wall clock
    reason: str | None = None  # why it failed or was ignored


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class StateChangeEvents:
    """The ring of one broker."""

    def __init__(self, broker_id: int, capacity: int = EVENTS_MAX_DEFAULT, clock_ms: Callable[[], int] = wall_clock_ms):
        if capacity < 1:
            raise ValueError(f"a state-change event ring holds at least one event, not {capacity}")
        self.broker_id = broker_id
        self.incarnation = secrets.randbits(62)
        self._events: collections.deque[StateChangeEvent] = collections.deque(maxlen=capacity)
        self._clock_ms = clock_ms
        self._last_cursor = NO_CURSOR

    @property
    def last_cursor(self) -> int:
        return self._last_cursor

    @property
    def first_cursor(self) -> int:
        """The oldest event's cursor still held (last_cursor + 1 when none is): a reader whose
        cursor is below this one less missed events."""
        return self._events[0].cursor if self._events else self._last_cursor + 1

    def record(self, kind: EventKind, request_type: str, topic: str, partition: int, from_broker: int, to_broker: int,
               epoch: int, queue_sequence: str, reason: str | None = None) -> StateChangeEvent:
        self._last_cursor += 1
        event = StateChangeEvent(self._last_cursor, kind, request_type, topic, partition, from_broker, to_broker, epoch,
                                 queue_sequence, self.broker_id, self._clock_ms(), reason)
        self._events.append(event)
        return event

    def since(self, cursor: int, limit: int, topic: str | None = None,
              partition: int | None = None) -> tuple[list[StateChangeEvent], int]:
        """Up to `limit` events after `cursor` of the topic (all: None) and partition (all:
        None), oldest first; with the cursor to ask from next, past the events looked at."""
        # Cursors are consecutive, so the first event after `cursor` is found by arithmetic.
        start = min(max(cursor + 1 - self.first_cursor, 0), len(self._events))
        found: list[StateChangeEvent] = []
        last_seen = min(cursor, self._last_cursor)
        for event in itertools.islice(self._events, start, None):  # bounded by the capacity
            if len(found) == limit:
                break
            last_seen = event.cursor
            if (topic is None or event.topic == topic) and (partition is None or event.partition == partition):
                found.append(event)
        return found, last_seen
