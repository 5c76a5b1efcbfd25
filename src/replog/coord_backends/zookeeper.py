"""The ZooKeeper backend, on kazoo.

kazoo runs its own threads. Every kazoo call here is its `*_async` form, and its completion is
handed to the event loop with `call_soon_threadsafe`; watch triggers and session-state changes
cross the same way, so nothing here blocks the loop except `start`/`close`/`expire_session`,
which run kazoo's blocking calls in the default executor.

The chroot is applied here rather than by kazoo, because kazoo cannot create a missing chroot
through a chrooted client; every path crossing to kazoo gets `self._root` in front.

Watches: one persistent recursive watch on the root (ZooKeeper 3.6's addWatch) reports every
change of every node under it, so a broker holds one watch on the server however many nodes it
follows; one-shot watches cost a server-side watch per node and kind, three per partition in the
metadata cache alone. Each watched node (and kind: its data, or its children) has one reader
task, shared by every replog watch of it, that re-reads the node after each change reported;
the readers' reads, like other reads of many nodes, go out together in multiRead requests
(ZooKeeper 3.6). After a reconnect the server has forgotten the watch (it belongs to the
connection), so it is added again and every node re-read.
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
from kazoo.security import make_acl
from kazoo.protocol.serialization import (Watch as ZooKeeperEvent, ZnodeStat, bool_struct, int_struct, multiheader_struct,
                                          read_buffer, stat_struct, write_string)

from replog.tasks import cancel_and_wait, logging_failure

from .base import (
    AccessDenied,
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
from .joined import JoinedReads
from .security import NO_SECURITY, StoreSecurity

logger = logging.getLogger(__name__)

_KAZOO_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}
RECONNECT_DELAY_MAX_S = 1.0
# multiRead requests of watched nodes in flight at once: one at a time, a restarted broker of
# 10,000 partitions read its 30,000 watched nodes in 2-3 s, and a topic's creation in 5-25 s.
NODE_READS_IN_FLIGHT_MAX = 4
# The server's event types (kazoo.protocol.connection's private constants).
NODE_CREATED, NODE_DELETED, NODE_DATA_CHANGED = 1, 2, 3


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
    if isinstance(error, kz.AuthFailedError):
        return AccessDenied("ZooKeeper refused this client's SASL credentials (a wrong password, or no such user)", path)
    if isinstance(error, kz.NoAuthError):
        return AccessDenied("the node's ACL does not let this client's user do that", path)
    if isinstance(error, kz.SessionExpiredError):
        return SessionLost(f"ZooKeeper session expired during an operation on {path}")
    if isinstance(error, kz.UnimplementedError):
        return CoordinationUnavailable("the ZooKeeper server does not implement the request; replog needs ZooKeeper 3.6 "
                                       "or newer (persistent watches, multiRead)", path)
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


class AddWatch(collections.namedtuple("AddWatch", "path mode")):
    """ZooKeeper 3.6's addWatch request, which kazoo 2.11 does not have."""

    type = 106
    PERSISTENT_RECURSIVE = 1

    def serialize(self) -> bytes:
        return bytes(write_string(self.path)) + int_struct.pack(self.mode)

    @classmethod
    def deserialize(cls, _buffer, _offset) -> bool:
        return True  # the reply has no body


class MultiRead(collections.namedtuple("MultiRead", "paths")):
    """ZooKeeper 3.6's multiRead request, which kazoo 2.11 does not have: many nodes' data in one
    request. Each node is read on its own, not as a transaction: a missing node is its own
    NoNodeError, and the others are read all the same."""

    type = 22
    GET_DATA = 4  # the operation's type, as in a getData request
    ERROR = -1

    def serialize(self) -> bytes:
        get_data = multiheader_struct.pack(self.GET_DATA, False, -1)
        return (b"".join(get_data + bytes(write_string(path)) + bool_struct.pack(False) for path in self.paths)
                + multiheader_struct.pack(-1, True, -1))

    @classmethod
    def deserialize(cls, buffer, offset) -> list[tuple[bytes, int] | kz.KazooException]:
        """Each node's (data, version), or the error reading it, in the request's order."""
        nodes: list[tuple[bytes, int] | kz.KazooException] = []
        while True:  # bounded by the reply: the server ends it with a header marked done
            kind, done, _ = multiheader_struct.unpack_from(buffer, offset)
            offset += multiheader_struct.size
            if done:
                return nodes
            if kind == cls.GET_DATA:
                data, offset = read_buffer(buffer, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buffer, offset))
                offset += stat_struct.size
                nodes.append((data, stat.version))
            elif kind == cls.ERROR:
                code = int_struct.unpack_from(buffer, offset)[0]
                offset += int_struct.size
                nodes.append(kz.EXCEPTIONS[code]())
            else:
                raise ValueError(f"a multiRead reply with an operation of type {kind}")


class ZooKeeperStore(Store):
    backend = "zk"
    reads_many_at_once = True  # multiRead

    def __init__(self, hosts: str, chroot: str = "", session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
                 security: StoreSecurity = NO_SECURITY):
        super().__init__(session_timeout_ms)
        self.hosts = hosts
        self.security = security
        self._root = "" if chroot in ("", "/") else validate_path(chroot)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: KazooClient | None = None
        # One reader per node and kind of watch, shared by every replog watch of it (see _NodeReader).
        self._readers: dict[tuple[str, str], _NodeReader] = {}
        # Their reads, joined into multiRead requests: a topic's creation, or a broker's start,
        # opens three watches per partition, and then each change of a node is read again by
        # every broker that watches it.
        self._node_reads = JoinedReads(self, in_flight_max=NODE_READS_IN_FLIGHT_MAX)
        self._rewatch: asyncio.Task | None = None
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
        client = self._new_client(
            handler=PollingHandler(),
            connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": RECONNECT_DELAY_MAX_S},
            command_retry=None,
        )
        client.add_listener(self._on_kazoo_state)
        self._hear_node_events(client)
        try:
            await self._loop.run_in_executor(None, client.start, self.start_wait_s)
        except Exception as error:
            await self._loop.run_in_executor(None, client.close)
            raise CoordinationUnavailable(f"cannot reach ZooKeeper at {self.hosts} within {self.start_wait_s:g} s: {error}") from None
        self._client = client
        try:
            if self._root:
                await self._ensure_root()
            if self.security.set_acl:
                await self._check_root_acl()
            await self._watch_everything()
        except AccessDenied as error:
            await self.close()
            raise AccessDenied(f"ZooKeeper at {self.hosts} as user {self.security.username}: {error.detail}",
                               error.path) from None
        except BaseException:
            await self.close()
            raise
        self._publish(SessionState.CONNECTED)

    async def _ensure_root(self) -> None:
        path = ""
        for part in self._root.strip("/").split("/"):
            path += "/" + part
            try:
                await self._call(self._kazoo().create_async(path, b""), path)
            except NodeExists:
                pass

    def _new_client(self, **options) -> KazooClient:
        """A kazoo client of this store's servers, over TLS if asked (ZooKeeper's secureClientPort,
        checking that the server's certificate names the host), signing in with its user (SASL
        DIGEST-MD5, as Kafka's brokers do) and, with zookeeper.set.acl, creating nodes only that
        user may use."""
        security = self.security
        if security.tls:
            options.update(use_ssl=True, verify_certs=True, check_hostname=True, ca=security.truststore_location,
                           # One PEM file holds the key and its chain (KIP-651's keystore).
                           certfile=security.keystore_location, keyfile=security.keystore_location)
        if security.username is not None:
            options["sasl_options"] = {"mechanism": "DIGEST-MD5", "username": security.username,
                                       "password": str.__str__(security.password)}
        if security.set_acl:
            options["default_acl"] = [make_acl("sasl", security.username, all=True)]
        return KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000, **options)

    async def _check_root_acl(self) -> None:
        """Nodes made before zookeeper.set.acl was on keep the ACL they were made with, open to
        anyone: said at start rather than found out later."""
        acl, _ = await self._call(self._kazoo().get_acls_async(self._root or "/"), "/")
        if any(entry.id.scheme == "world" for entry in acl):
            logger.warning("zookeeper.set.acl is on but the store's root %s is open to every client: it was made "
                           "without ACLs, and the nodes under it keep theirs; `replog coord secure` closes them",
                           self._root or "/")

    async def secure_existing_nodes(self) -> int:
        """Give the root and every node under it the ACL that zookeeper.set.acl gives new nodes
        (Kafka's zookeeper-security-migration), for a store made before the ACLs were on; how
        many nodes it set. Each node is closed before its children are listed, so that a child
        made meanwhile is either listed or made under the closed parent by a broker, with the
        ACL already."""
        if not self.security.set_acl:
            raise ValueError("zookeeper.set.acl is off: there is no ACL to set")
        acl = self._kazoo().default_acl
        pending, done = ["/"], 0
        while pending:  # bounded by the tree, each node once
            path = pending.pop()
            await self._call(self._kazoo().set_acls_async(self._full(path), acl), path)
            done += 1
            pending.extend(join(path, name) for name in await self.children(path))
        return done

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if self._rewatch is not None:
            await cancel_and_wait(self._rewatch)
        for reader in list(self._readers.values()):
            await reader.close()
        await self._node_reads.close()
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
        if state == SessionState.CONNECTED and self._client is not None:
            if self._rewatch is not None:
                self._rewatch.cancel()
            self._rewatch = asyncio.create_task(self._watch_again(), name="zookeeper-rewatch")
            self._rewatch.add_done_callback(logging_failure("zookeeper watch restore"))

    async def expire_session(self) -> None:
        client = self._kazoo()
        session_id, password = client.client_id
        lost = self.session_events()
        try:
            # ZooKeeper's own way to expire a session on purpose: a second client attaches to it
            # and closes it; the server then expires it for the first.
            impostor = self._new_client(client_id=(session_id, password))
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

    # the root's watch
    def _hear_node_events(self, client: KazooClient) -> None:
        """Hand every event the server sends to `_on_node_event`. kazoo reports an event only to
        the one-shot watches set on its node, and knows nothing of persistent ones."""
        connection = client._connection
        read_watch_event = connection._read_watch_event
        loop = self._loop

        def read_event(buffer, offset):
            # kazoo's connection thread. Events reach the loop ahead of the replies read after
            # them: those cross through kazoo's completion thread first.
            event, _ = ZooKeeperEvent.deserialize(buffer, offset)
            if not loop.is_closed():
                loop.call_soon_threadsafe(self._on_node_event, event.type, event.path)
            return read_watch_event(buffer, offset)

        connection._read_watch_event = read_event

    async def _watch_everything(self) -> None:
        client = self._kazoo()
        result = client.handler.async_result()
        client._call(AddWatch(self._root or "/", AddWatch.PERSISTENT_RECURSIVE), result)
        await self._call(result, "/")

    async def _watch_again(self) -> None:
        """After a reconnect: the watch again, then every watched node read again, for whatever
        changed while it was gone."""
        delay_s = 0.05
        while True:  # until the watch is back, or a later reconnect or close() cancels this
            try:
                await self._watch_everything()
                break
            except StoreError as error:
                logger.info("zookeeper watch not yet restored error=%s", error)
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RECONNECT_DELAY_MAX_S)
        for reader in self._readers.values():
            reader.trigger()

    def _on_node_event(self, kind: int, full_path: str) -> None:
        if not self._readers:
            return
        keys = [] if kind == NODE_DELETED else [("data", full_path)]
        if kind in (NODE_CREATED, NODE_DELETED):
            keys.append(("children", full_path.rpartition("/")[0] or "/"))
        if kind == NODE_DELETED:
            keys.append(("children", full_path))  # a deleted node has no children left
            data_reader = self._readers.get(("data", full_path))
            if data_reader is not None:
                data_reader.deleted(DataEvent(None, None))
        for key in keys:
            reader = self._readers.get(key)
            if reader is not None:
                reader.trigger()

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

    async def _get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """All in one multiRead request."""
        if not paths:
            return []
        client = self._kazoo()
        result = client.handler.async_result()
        client._call(MultiRead([self._full(path) for path in paths]), result)
        nodes = await self._call(result, paths[0] if len(paths) == 1 else None)
        for path, node in zip(paths, nodes):
            if isinstance(node, Exception) and not isinstance(node, kz.NoNodeError):
                raise translate_error(node, path)
        return [None if isinstance(node, Exception) else node for node in nodes]

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

        async def read() -> DataEvent:
            try:
                data, version = await self._node_reads.get(path)
            except NoNode:
                return DataEvent(None, None)
            return DataEvent(data, version)

        return await self._open_watch(("data", full), read)

    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        full = self._full(validate_path(path))

        async def read() -> tuple[str, ...]:
            try:
                return tuple(sorted(await self._call(self._kazoo().get_children_async(full), path)))
            except NoNode:
                return ()

        return await self._open_watch(("children", full), read)

    async def _open_watch(self, key: tuple[str, str], read: Callable[[], Awaitable[object]]) -> Watch:
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = _NodeReader(self, key, read)
        return await reader.open()


class _NodeReader:
    """A node's data or children, read again after each change the root's watch reports (but
    for a node's deletion, which says its data without a read), and offered to every replog
    watch of it.

    Shared because a broker watches many nodes several times over (a partition's leader node by
    the metadata cache, the partition's driver and an election waiting out the preferred
    replica's head start): each would cost its own reads at every change.

    A watch opened on it starts from a state read after every event the loop has seen, so
    after every write whose reply its opener has seen: ZooKeeper sends a change's event before
    any reply that follows the change, and the store hands events to the loop ahead of the
    replies read after them. A reader with no event since its last read offers that read at
    once; one with an event pending, or a read in flight, offers the first read sent after it.
    """

    def __init__(self, store: ZooKeeperStore, key: tuple[str, str], read: Callable[[], Awaitable[object]]):
        self._store = store
        self._key = key
        self._read = read
        self._changed = asyncio.Event()
        self._changed.set()  # nothing read yet
        self._last: object = _UNREAD
        self._reads_sent = 0
        self._reading = False
        # Openers waiting for a state: each for the first successful read numbered at least this.
        self._waiting: dict[asyncio.Future, int] = {}
        self._watches: dict[Watch, None] = {}
        self._task = asyncio.create_task(self._run(), name=f"zookeeper-reader:{key[0]}:{key[1]}")
        self._task.add_done_callback(logging_failure(f"zookeeper node reader key={key}"))

    def trigger(self) -> None:
        self._changed.set()

    def deleted(self, absent: object) -> None:
        """The node was deleted: its absence is its state as of the event, offered without a
        read (a controlled shutdown deletes thousands of leader nodes, and each broker read
        every one of them again). Not while a read is pending or in flight: sent before the
        event, its answer may reach the loop after it, so a read sent after it must come last."""
        if self._changed.is_set() or self._reading:
            self._changed.set()
            return
        self._last = absent
        for watch in list(self._watches):
            watch.offer(absent)

    async def open(self) -> Watch:
        if not self._changed.is_set() and not self._reading:
            state = self._last
        else:
            # The read in flight was sent after every event seen so far, unless one came since.
            needed = self._reads_sent + (1 if self._changed.is_set() else 0)
            future = asyncio.get_running_loop().create_future()
            self._waiting[future] = needed
            try:
                async with asyncio.timeout(self._store.session_timeout_ms / 1000):
                    state = await future
            except BaseException as error:
                del self._waiting[future]
                if not self._watches and not self._waiting:
                    self._discard()
                if isinstance(error, TimeoutError):
                    raise CoordinationUnavailable("ZooKeeper did not answer within the session timeout",
                                                  self._store._relative(self._key[1])) from None
                raise
            del self._waiting[future]
        watch: Watch = Watch()
        watch._on_close = lambda: self._unsubscribe(watch)
        watch.offer(state)
        self._watches[watch] = None
        return watch

    async def _unsubscribe(self, watch: Watch) -> None:
        self._watches.pop(watch, None)
        if not self._watches and not self._waiting:
            await self._stop()

    async def close(self) -> None:
        for watch in list(self._watches):
            await watch.close()
        await self._stop()

    async def _run(self) -> None:
        delay_s = 0.05
        while True:  # until the last watch closes
            await self._changed.wait()
            self._changed.clear()
            self._reads_sent += 1
            sent = self._reads_sent
            self._reading = True
            try:
                state = await self._read()
                delay_s = 0.05
            except StoreError:
                # Disconnected: the reconnect will trigger us again; until then retry gently.
                self._changed.set()
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RECONNECT_DELAY_MAX_S)
                continue
            finally:
                self._reading = False
            self._last = state
            for watch in list(self._watches):
                watch.offer(state)
            for future, needed in list(self._waiting.items()):
                if needed <= sent and not future.done():
                    future.set_result(state)

    def _discard(self) -> None:
        if self._store._readers.get(self._key) is self:
            del self._store._readers[self._key]
        self._task.cancel()
        for future in self._waiting:
            if not future.done():
                future.set_exception(CoordinationUnavailable("the ZooKeeper client is closed"))

    async def _stop(self) -> None:
        self._discard()
        await cancel_and_wait(self._task)


_UNREAD = object()
