"""A broker's client of the shared in-process store, with the faults a real coordination service
shows, all drawn from the simulation's seeded generator.

Every operation waits a drawn delay before it reaches the tree and another before its answer
comes back. While `flaky`, a write may fail before applying, or apply and then lose its reply:
the caller sees CoordinationUnavailable, what the ZooKeeper backend raises for ConnectionLoss,
though the write is in the tree (so an ISR write can apply, lose its reply and leave its leader
fenced under a leader node that still names it, docs/design.md §4.5). While the session is
suspended every operation fails the same way, as a disconnected ZooKeeper client's do.

Session faults: `suspend()` publishes SUSPENDED, `reconnect()` CONNECTED again; an expiry is
MemoryStore's own `expire_session` (ephemeral nodes go, LOST then CONNECTED).

The watch registries of the tree are made insertion-ordered (`make_watch_order_deterministic`):
the embedded store keeps watches in sets ordered by object address, which would make the order
in which brokers hear of a change, and so the schedule, differ from run to run.
"""

from __future__ import annotations

import asyncio
import random

from replog.coord_backends import CoordinationUnavailable, SessionState
from replog.coord_backends.memory import MemoryStore, MemoryTree

DELAY_MAX_S = 0.02
FAIL_BEFORE_P = 0.03
LOST_REPLY_P = 0.05


class SimStore(MemoryStore):
    def __init__(self, db_path: str, session_timeout_ms: int, rng: random.Random, name: str):
        super().__init__(db_path, session_timeout_ms)
        self._rng = rng
        self.name = name
        self.flaky = False  # set by the nemesis for a while
        self.faults_on = True  # off once the simulation heals everything

    # -- session faults ---------------------------------------------------------------------------

    def suspend(self) -> None:
        self._session.publish(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        if self.session_state is SessionState.SUSPENDED:
            self._session.publish(SessionState.CONNECTED)

    # -- operations, each through the faults ------------------------------------------------------

    async def _through_faults(self, write: bool, operation):
        await self._delay()
        if self.session_state is not SessionState.CONNECTED:
            raise CoordinationUnavailable(f"injected: {self.name} is disconnected from the store")
        if write and self._drawn(FAIL_BEFORE_P):
            raise CoordinationUnavailable(f"injected: {self.name}'s write failed before applying")
        result = await operation()
        await self._delay()
        if write and self._drawn(LOST_REPLY_P):
            raise CoordinationUnavailable(f"injected: {self.name}'s write applied, its reply was lost")
        return result

    def _drawn(self, probability: float) -> bool:
        return self.flaky and self.faults_on and self._rng.random() < probability

    async def _delay(self) -> None:
        if self.faults_on:
            await asyncio.sleep(self._rng.uniform(0, DELAY_MAX_S))

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        return await self._through_faults(True, lambda: MemoryStore.create(
            self, path, data, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents))

    async def get(self, path):
        return await self._through_faults(False, lambda: MemoryStore.get(self, path))

    async def set(self, path, data, version=None):
        return await self._through_faults(True, lambda: MemoryStore.set(self, path, data, version))

    async def delete(self, path, version=None, recursive=False):
        return await self._through_faults(True, lambda: MemoryStore.delete(self, path, version, recursive))

    async def exists(self, path):
        return await self._through_faults(False, lambda: MemoryStore.exists(self, path))

    async def children(self, path):
        return await self._through_faults(False, lambda: MemoryStore.children(self, path))

    async def _commit(self, ops):
        return await self._through_faults(True, lambda: MemoryStore._commit(self, ops))


class _OrderedWatches(dict):
    """A set of watches that iterates in insertion order (dict keys), as the tree uses it."""

    def add(self, watch) -> None:
        self[watch] = None

    def discard(self, watch) -> None:
        self.pop(watch, None)


class _OrderedRegistry(dict):
    def setdefault(self, path, default=None):
        if path not in self:
            self[path] = _OrderedWatches()
        return self[path]


def make_watch_order_deterministic(tree: MemoryTree) -> None:
    """Call before any watch is registered on `tree`."""
    tree.data_watches = _OrderedRegistry()
    tree.child_watches = _OrderedRegistry()
