"""The ZooKeeper backend, on kazoo.

kazoo runs its own threads. Every kazoo call here is its `*_async` form, and its completion is
handed to the event loop with `call_soon_threadsafe`; watch triggers and session-state changes
cross the same way, so nothing here blocks the loop except `start`/`close`/`expire_session`,
which run kazoo's blocking calls in the default executor.

The chroot is applied here rather than by kazoo, because kazoo cannot create a missing chroot
through a chrooted client; every path crossing to kazoo gets `self._root` in front.

Watches: ZooKeeper watches fire once. Each watched node (and kind of watch) has one re-arming
reader task, shared by every replog watch of it: a trigger (or a reconnect, after which
ZooKeeper may have dropped the watch with the session) wakes it, and it re-reads the node with a
fresh watch, so the state it offers is always read together with the watch that will report the
next change.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import select
from typing import Awaitable, Callable

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import SequentialThreadingHandler

from .base import (
    BadVersion,
    CheckOp,
    CoordinationUnavailable,
    CreateOp,
    Created,
    DataEvent,
    DeleteOp,
    NodeExists,
    NoNode,
    NotEmpty,
    SESSION_TIMEOUT_MS_DEFAULT,
    SessionLost,
    SessionState,
    SetOp,
    Store,
    StoreError,
    TxnOp,
    Watch,
    join,
    parent_of,
    validate_path,
)

logger = logging.getLogger(__name__)

_KAZOO_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}
RECONNECT_DELAY_MAX_S = 1.0


def translate_error(error: BaseException, path: str | None, missing_path: str | None = None) -> BaseException:
    """kazoo's exception -> replog's, naming the path the operation was about.

    `missing_path` is what NoNode names when it differs from `path`: for a create, ZooKeeper's
    NoNode means the parent is missing.
    """
    if isinstance(error, kz.NodeExistsError):
        return NodeExists(path or "?")
    if isinstance(error, kz.NoNodeError):
        return NoNode(missing_path or path or "?")
    if isinstance(error, kz.BadVersionError):
        return BadVersion(path or "?")
    if isinstance(error, kz.NotEmptyError):
        return NotEmpty(path or "?")
    if isinstance(error, kz.SessionExpiredError):
        return SessionLost(f"ZooKeeper session expired during an operation on {path}")
    if isinstance(error, (kz.ConnectionLoss, kz.ConnectionClosedError, kz.OperationTimeoutError, kz.KazooException)):
        return CoordinationUnavailable(f"ZooKeeper: {type(error).__name__}", path)
    return error


class PollingHandler(SequentialThreadingHandler):
    """kazoo's threading handler, with a `select` that costs one poll(2) call.

    kazoo's connection thread selects before every request it sends and before every read of a
    reply, and kazoo's own `select` builds an epoll selector, registers the sockets and closes it
    again each time. Creating 1,000 partitions on three brokers spent most of that thread's CPU
    there, and every store operation of the broker waits in that thread's queue. poll(2), unlike
    select(2), takes descriptors above 1024, which a broker with many open logs has."""

    def select(self, rlist, wlist, xlist, timeout=None):
        masks: dict[int, int] = collections.defaultdict(int)
        for fileobj in rlist:
            masks[_descriptor(fileobj)] |= select.POLLIN
        for fileobj in wlist:
            masks[_descriptor(fileobj)] |= select.POLLOUT
        poller = select.poll()
        for descriptor, mask in masks.items():
            poller.register(descriptor, mask)
        ready = dict(poller.poll(None if timeout is None else math.ceil(timeout * 1000)))
        # As select(2): an error or hang-up makes a descriptor ready for whichever direction was
        # asked, so that the read or write that follows raises it.
        return ([fileobj for fileobj in rlist if ready.get(_descriptor(fileobj), 0) & ~select.POLLOUT],
                [fileobj for fileobj in wlist if ready.get(_descriptor(fileobj), 0) & ~select.POLLIN],
                [])


def _descriptor(fileobj) -> int:
    return fileobj if isinstance(fileobj, int) else fileobj.fileno()


class ZooKeeperStore(Store):
    backend = "zk"

    def __init__(self, hosts: str, chroot: str = "", session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT):
        super().__init__(session_timeout_ms)
        self.hosts = hosts
        self._root = "" if chroot in ("", "/") else validate_path(chroot)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: KazooClient | None = None
        # One reader per node and kind of watch, shared by every replog watch of it (see _Rearming).
        self._readers: dict[tuple[str, str], _Rearming] = {}
        self._last_state = SessionState.SUSPENDED

    # lifecycle and session
    @property
    def start_wait_s(self) -> float:
        # kazoo retries the connection, refused or not, for start's whole timeout.
        return self.session_timeout_ms / 1000

    async def start(self) -> None:
        if self._client is not None:
            return
        self._loop = asyncio.get_running_loop()
        client = KazooClient(
            hosts=self.hosts,
            handler=PollingHandler(),
            timeout=self.session_timeout_ms / 1000,
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": RECONNECT_DELAY_MAX_S},
            command_retry=None,
        )
        client.add_listener(self._on_kazoo_state)
        try:
            await self._loop.run_in_executor(None, client.start, self.start_wait_s)
        except Exception as error:
            await self._loop.run_in_executor(None, client.close)
            raise CoordinationUnavailable(f"cannot reach ZooKeeper at {self.hosts} within {self.start_wait_s:g} s: {error}") from None
        self._client = client
        if self._root:
            await self._ensure_root()
        self._publish(SessionState.CONNECTED)

    async def _ensure_root(self) -> None:
        path = ""
        for part in self._root.strip("/").split("/"):
            path += "/" + part
            try:
                await self._call(self._kazoo().create_async(path, b""), path)
            except NodeExists:
                pass

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        for reader in list(self._readers.values()):
            await reader.close()
        client.remove_listener(self._on_kazoo_state)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, client.stop)
        await loop.run_in_executor(None, client.close)
        self._publish(SessionState.LOST)

    def _on_kazoo_state(self, state: str) -> None:
        # kazoo's thread: hand over and return at once, as kazoo requires of listeners.
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._publish, _KAZOO_STATES[state])

    def _publish(self, state: SessionState) -> None:
        previous, self._last_state = self._last_state, state
        if previous == state:
            return
        logger.info("zookeeper session state=%s hosts=%s", state.value, self.hosts)
        self._session.publish(state)
        if state == SessionState.CONNECTED:
            # After a reconnect the server may have dropped our watches (always, if the session
            # was lost); re-reading re-arms them and reports anything changed meanwhile.
            for reader in self._readers.values():
                reader.trigger()

    async def expire_session(self) -> None:
        client = self._kazoo()
        session_id, password = client.client_id
        lost = self.session_events()
        try:
            # ZooKeeper's own way to expire a session on purpose: a second client attaches to it
            # and closes it; the server then expires it for the first.
            impostor = KazooClient(hosts=self.hosts, client_id=(session_id, password), timeout=self.session_timeout_ms / 1000)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, impostor.start)
            await loop.run_in_executor(None, impostor.stop)
            await loop.run_in_executor(None, impostor.close)
            async with asyncio.timeout(self.session_timeout_ms / 1000 * 3):
                seen_lost = False
                async for state in lost:
                    seen_lost = seen_lost or state == SessionState.LOST
                    if seen_lost and state == SessionState.CONNECTED:
                        break
        finally:
            await lost.close()

    async def server_version(self) -> str | None:
        """From the `srvr` four-letter command, when the server allows it."""
        host, _, port = self.hosts.split(",")[0].rpartition(":")
        try:
            async with asyncio.timeout(2):
                reader, writer = await asyncio.open_connection(host or "127.0.0.1", int(port))
                writer.write(b"srvr")
                reply = await reader.read(4096)
                writer.close()
        except (OSError, TimeoutError, ValueError):
            return None
        for line in reply.decode(errors="replace").splitlines():
            if line.startswith("Zookeeper version:"):
                return line.split(":", 1)[1].strip().split(",")[0]
        return None

    # plumbing
    def _kazoo(self) -> KazooClient:
        if self._client is None:
            raise CoordinationUnavailable("the ZooKeeper client is closed")
        return self._client

    def _full(self, path: str) -> str:
        return self._root + path if path != "/" else (self._root or "/")

    def _relative(self, full_path: str) -> str:
        return full_path[len(self._root):] or "/"

    async def _call(self, async_result, path: str | None, missing_path: str | None = None):
        """Await a kazoo IAsyncResult on the loop, translating its error."""
        loop = self._loop
        future = loop.create_future()

        def settle(result) -> None:
            if future.done():
                return
            if result.successful():
                future.set_result(result.value)
            else:
                future.set_exception(translate_error(result.exception, path, missing_path))

        async_result.rawlink(lambda result: loop.call_soon_threadsafe(settle, result))
        try:
            async with asyncio.timeout(self.session_timeout_ms / 1000):
                return await future
        except TimeoutError:
            raise CoordinationUnavailable("ZooKeeper did not answer within the session timeout", path) from None

    # operations
    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        validate_path(path, sequential=sequential)
        if path == "/":
            raise NodeExists(path)
        request = self._kazoo().create_async(
            self._full(path), bytes(data), ephemeral=ephemeral, sequence=sequential, makepath=make_parents
        )
        return self._relative(await self._call(request, path, missing_path=parent_of(path)))

    async def get(self, path: str) -> tuple[bytes, int]:
        data, stat = await self._call(self._kazoo().get_async(self._full(validate_path(path))), path)
        return data, stat.version

    async def set(self, path: str, data: bytes, version: int | None = None) -> int:
        request = self._kazoo().set_async(self._full(validate_path(path)), bytes(data), -1 if version is None else version)
        stat = await self._call(request, path)
        return stat.version

    async def delete(self, path: str, version: int | None = None, recursive: bool = False) -> None:
        validate_path(path)
        if recursive:
            current = await self.exists(path)
            if current is None:
                raise NoNode(path)
            if version is not None and current != version:
                raise BadVersion(path, version)
            await self._delete_subtree(path)
            return
        await self._call(self._kazoo().delete_async(self._full(path), -1 if version is None else version), path)

    async def _delete_subtree(self, path: str) -> None:
        # Not atomic, as in kazoo and ZooKeeper's own tools: children first, then the node;
        # nodes already gone (deleted concurrently) are fine.
        try:
            names = await self.children(path)
        except NoNode:
            return
        for name in names:
            await self._delete_subtree(join(path, name))
        try:
            await self._call(self._kazoo().delete_async(self._full(path)), path)
        except NoNode:
            pass

    async def exists(self, path: str) -> int | None:
        stat = await self._call(self._kazoo().exists_async(self._full(validate_path(path))), path)
        return None if stat is None else stat.version

    async def children(self, path: str) -> list[str]:
        return sorted(await self._call(self._kazoo().get_children_async(self._full(validate_path(path))), path))

    async def _commit(self, ops: list[TxnOp]) -> list[object]:
        txn = self._kazoo().transaction()
        for op in ops:
            full = self._full(op.path)
            if isinstance(op, CheckOp):
                txn.check(full, op.version)
            elif isinstance(op, CreateOp):
                txn.create(full, op.data, ephemeral=op.ephemeral)
            elif isinstance(op, SetOp):
                txn.set_data(full, op.data, -1 if op.version is None else op.version)
            elif isinstance(op, DeleteOp):
                txn.delete(full, -1 if op.version is None else op.version)
        results = await self._call(txn.commit_async(), None)
        for op, result in zip(ops, results):
            if isinstance(result, Exception) and not isinstance(result, (kz.RolledBackError, kz.RuntimeInconsistency)):
                missing = parent_of(op.path) if isinstance(op, CreateOp) else None
                raise translate_error(result, op.path, missing)
        if any(isinstance(result, Exception) for result in results):
            raise CoordinationUnavailable("ZooKeeper rolled the transaction back without naming a cause")
        return [
            Created(self._relative(result), 0) if isinstance(op, CreateOp) else result.version if isinstance(op, SetOp) else None
            for op, result in zip(ops, results)
        ]

    # watches
    async def watch_data(self, path: str) -> Watch[DataEvent]:
        full = self._full(validate_path(path))

        async def read(on_change: Callable | None) -> DataEvent:
            client = self._kazoo()
            while True:
                try:
                    data, stat = await self._call(client.get_async(full, watch=on_change), path)
                    return DataEvent(data, stat.version)
                except NoNode:
                    # An exists() watch also fires on creation, which get() cannot watch for.
                    if on_change is None or await self._call(client.exists_async(full, watch=on_change), path) is None:
                        return DataEvent(None, None)

        return await self._open_watch(("data", full), read)

    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        full = self._full(validate_path(path))

        async def read(on_change: Callable | None) -> tuple[str, ...]:
            client = self._kazoo()
            while True:
                try:
                    return tuple(sorted(await self._call(client.get_children_async(full, watch=on_change), path)))
                except NoNode:
                    if on_change is None or await self._call(client.exists_async(full, watch=on_change), path) is None:
                        return ()

        return await self._open_watch(("children", full), read)

    async def _open_watch(self, key: tuple[str, str], read: Callable[[Callable | None], Awaitable[object]]) -> Watch:
        while True:  # again only if the reader found stopped meanwhile: then this opener starts one
            reader = self._readers.get(key)
            if reader is None:
                reader = self._readers[key] = _Rearming(self, key, read)
                return reader.subscribe(await reader.start())
            await reader.started.wait()
            # A read of its own, without a watch: the reader's last state may predate a write
            # this caller made just before (its trigger not yet handed over by kazoo), and a
            # watch starts from the state as it is when opened. Every later change reaches it
            # through the reader, whose reads after this one are answered after it.
            state = await read(None)
            if self._readers.get(key) is reader:
                return reader.subscribe(state)


class _Rearming:
    """A ZooKeeper node's watch of one kind, shared by every replog watch of it: a task re-reads
    the node with a fresh watch after each trigger and offers the state to each.

    Shared because a broker watches many nodes several times over (a partition's leader node by
    the metadata cache, the partition's driver and an election waiting out the preferred
    replica's head start): each would cost its own reads at every change."""

    def __init__(self, store: ZooKeeperStore, key: tuple[str, str], read: Callable[[Callable], Awaitable[object]]):
        self._store = store
        self._key = key
        self._read = read
        self._loop = asyncio.get_running_loop()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._watches: dict[Watch, None] = {}
        self.started = asyncio.Event()  # set once the first read ended, read or failed

    def _on_zookeeper_event(self, _event) -> None:
        # kazoo's thread.
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.trigger)

    def trigger(self) -> None:
        self._changed.set()

    async def start(self) -> object:
        """The first state, read with the watch armed."""
        try:
            state = await self._read(self._on_zookeeper_event)
        except BaseException:
            self._forget()
            raise
        finally:
            self.started.set()
        self._task = asyncio.create_task(self._run())
        return state

    def subscribe(self, state: object) -> Watch:
        """A watch starting from `state`, read by its opener."""
        watch: Watch = Watch()
        watch._on_close = lambda: self._unsubscribe(watch)
        watch.offer(state)
        self._watches[watch] = None
        return watch

    async def _unsubscribe(self, watch: Watch) -> None:
        self._watches.pop(watch, None)
        if not self._watches:
            await self._stop()

    async def close(self) -> None:
        for watch in list(self._watches):
            await watch.close()

    def _forget(self) -> None:
        if self._store._readers.get(self._key) is self:
            del self._store._readers[self._key]

    async def _run(self) -> None:
        delay_s = 0.05
        while True:  # until the last watch closes
            await self._changed.wait()
            self._changed.clear()
            try:
                state = await self._read(self._on_zookeeper_event)
                delay_s = 0.05
            except StoreError:
                # Disconnected: the reconnect will trigger us again; until then retry gently.
                self._changed.set()
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RECONNECT_DELAY_MAX_S)
                continue
            for watch in list(self._watches):
                watch.offer(state)

    async def _stop(self) -> None:
        self._forget()
        if self._task is not None:
            self._task.cancel()
            # Not `except CancelledError` around an await of the task: that would swallow the
            # cancellation of the caller too (the fetcher had this bug, found by the simulator).
            await asyncio.gather(self._task, return_exceptions=True)
