"""A Store that reports how long each operation of another Store took, for the broker's metrics.

One wrapper instead of a timer in each backend: every backend is timed alike, none learns of
metrics, and an operation is reported once as its caller waited for it (a backend's own inner
calls, such as the parents of a `make_parents` create, are part of it).

The observer hears `(operation, duration_s, error)`: `operation` one of OPERATIONS, `error`
None or the StoreError subclass's name. An operation that ends otherwise (cancelled, a bug)
is not reported: it says nothing about the store.

The session is the wrapped store's own (`_session` is shared), so session state and events,
and a test publishing on it, are the backend's.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .base import DataEvent, Store, StoreError, TxnOp, Watch

T = TypeVar("T")

OPERATIONS = ("create", "get", "get_many", "set", "delete", "exists", "children", "transaction", "watch_data", "watch_children")

Observer = Callable[[str, float, str | None], None]


class ObservedStore(Store):
    def __init__(self, inner: Store, observe: Observer):
        super().__init__(inner.session_timeout_ms)
        self.inner = inner
        self.backend = inner.backend
        self.reads_many_at_once = inner.reads_many_at_once
        self._session = inner._session
        self._observe = observe

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started_s = time.perf_counter()
        try:
            result = await call
        except StoreError as error:
            self._observe(operation, time.perf_counter() - started_s, type(error).__name__)
            raise
        self._observe(operation, time.perf_counter() - started_s, None)
        return result

    # lifecycle: the backend's, untimed (a start waits for the server as long as it must)
    async def start(self) -> None:
        await self.inner.start()

    @property
    def start_wait_s(self) -> float:
        return self.inner.start_wait_s

    async def close(self) -> None:
        await self.inner.close()

    async def expire_session(self) -> None:
        await self.inner.expire_session()

    async def server_version(self) -> str | None:
        return await self.inner.server_version()

    # operations, timed
    async def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequential: bool = False,
                     make_parents: bool = False) -> str:
        return await self._timed("create", self.inner.create(
            path, data, ephemeral=ephemeral, sequential=sequential, make_parents=make_parents))

    async def get(self, path: str) -> tuple[bytes, int]:
        return await self._timed("get", self.inner.get(path))

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        return await self._timed("get_many", self.inner.get_many(paths))

    async def set(self, path: str, data: bytes, version: int | None = None) -> int:
        return await self._timed("set", self.inner.set(path, data, version))

    async def delete(self, path: str, version: int | None = None, recursive: bool = False) -> None:
        await self._timed("delete", self.inner.delete(path, version, recursive))

    async def exists(self, path: str) -> int | None:
        return await self._timed("exists", self.inner.exists(path))

    async def children(self, path: str) -> list[str]:
        return await self._timed("children", self.inner.children(path))

    async def _commit(self, ops: list[TxnOp]) -> list[object]:
        return await self._timed("transaction", self.inner._commit(ops))

    async def watch_data(self, path: str) -> Watch[DataEvent]:
        """Timed until the watch is armed and holds the node's first state."""
        return await self._timed("watch_data", self.inner.watch_data(path))

    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        return await self._timed("watch_children", self.inner.watch_children(path))
