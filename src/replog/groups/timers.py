"""Deadlines of the group coordinator, sans-IO: keyed timers in one heap, fired by whoever
drives them (the coordinator's single timer task, or a test's manual clock).

Scheduling a key again replaces its deadline; cancelled and replaced entries stay in the heap
until popped or until the heap is rebuilt, which happens once it holds more than twice the live
timers, so its size stays bounded by the live ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable

_REBUILD_SLACK = 64


class Timers:
    def __init__(self, on_earlier_deadline: Callable[[], None] = lambda: None):
        """`on_earlier_deadline`: called when a timer is due before every other, so that the
        driver waking at the old earliest deadline wakes sooner."""
        self._deadlines: dict[Hashable, tuple[int, int, Callable[[], None]]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._sequence = itertools.count()
        self._on_earlier_deadline = on_earlier_deadline

    def __len__(self) -> int:
        return len(self._deadlines)

    def schedule(self, key: Hashable, deadline_ms: int, action: Callable[[], None]) -> None:
        earliest = self.next_deadline_ms()
        entry = (deadline_ms, next(self._sequence), action)
        self._deadlines[key] = entry
        heapq.heappush(self._heap, (entry[0], entry[1], key))
        if len(self._heap) > 2 * len(self._deadlines) + _REBUILD_SLACK:
            self._rebuild()
        if earliest is None or deadline_ms < earliest:
            self._on_earlier_deadline()

    def cancel(self, key: Hashable) -> None:
        self._deadlines.pop(key, None)

    def cancel_matching(self, predicate: Callable[[Hashable], bool]) -> None:
        for key in [key for key in self._deadlines if predicate(key)]:  # bounded by the live timers
            del self._deadlines[key]

    def scheduled(self, key: Hashable) -> int | None:
        entry = self._deadlines.get(key)
        return None if entry is None else entry[0]

    def next_deadline_ms(self) -> int | None:
        self._drop_stale_head()
        return self._heap[0][0] if self._heap else None

    def fire_due(self, now_ms: int) -> int:
        """Run every action due at `now_ms`, earliest first (an action may schedule more);
        how many ran."""
        fired = 0
        while (deadline := self.next_deadline_ms()) is not None and deadline <= now_ms:  # each turn pops one
            _, sequence, key = heapq.heappop(self._heap)
            _, _, action = self._deadlines.pop(key)
            action()
            fired += 1
        return fired

    def _drop_stale_head(self) -> None:
        heap = self._heap
        while heap:  # bounded by the heap's size
            deadline, sequence, key = heap[0]
            live = self._deadlines.get(key)
            if live is not None and live[1] == sequence:
                return
            heapq.heappop(heap)

    def _rebuild(self) -> None:
        self._heap = [(deadline, sequence, key) for key, (deadline, sequence, _) in self._deadlines.items()]
        heapq.heapify(self._heap)
