"""The etcd v3 backend, on aetcd (the maintained asyncio fork of python-etcd3).

Mapping of the ZooKeeper-shaped interface onto etcd's flat, revisioned key space:

- A node `/a/b` is the key `<prefix>/a/b`. Parents are not implicit: creating `/a/b` requires
  the key `<prefix>/a` to exist, as ZooKeeper requires. Children of `/a` are the keys in
  `[<prefix>/a/, <prefix>/a0)` without a further '/'.
- Version = the key's mod_revision (a global revision, so a recreated node never reuses one).
- Session = a lease with TTL = the session timeout, refreshed every third of it from a thread of
  its own, over a client of its own (`_LeaseKeeper`), as kazoo pings ZooKeeper from its own
  thread: a broker's event loop held for seconds (10,000 partitions starting) let the lease
  expire, and every ephemeral node of the broker, its leaders' too, went with it. Ephemeral
  nodes are put with the lease. Unreachable etcd -> SUSPENDED, for as long as it lasts; etcd
  saying the lease is gone -> LOST, and a new lease is granted (after revoking the old one,
  whose keys may otherwise linger) -> CONNECTED. As with ZooKeeper, only the server decides that
  a session expired: etcd renews every lease when it restarts, so a client that gave its lease
  up by its own clock after an outage would drop ephemeral nodes (leaders!) that had survived. A
  broker fences its leaders while SUSPENDED, so waiting costs no safety.
- Sequential names come from a counter key per parent, `<prefix>\\x01seq<parent>`, incremented
  in the same transaction as the create; it lies outside every children range.
- Every write is an optimistic transaction: one read-only transaction fetches every key the
  operations depend on at revision R; the operations are checked against that snapshot (giving
  exact NoNode / NodeExists / BadVersion / NotEmpty errors as of R); the write transaction then
  asserts that none of those keys changed after R. If one did, the whole attempt is repeated,
  at most `TXN_ATTEMPTS_MAX` times.
- Watches share one etcd watch of every key under the prefix (`_SharedStream`): each reads the
  current state at revision R and takes the changes after R, so nothing is missed; after a
  stream error (etcd restarted) the stream resumes from the last revision seen, and after a
  compaction every watch re-reads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import math
import threading
from typing import Callable

import aetcd
from aetcd import exceptions as etcd_errors
from aetcd import rpc

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
    RequestRefused,
    SESSION_TIMEOUT_MS_DEFAULT,
    TRANSACTION_OPS_MAX,
    SessionLost,
    SessionState,
    SetOp,
    Store,
    StoreError,
    TxnOp,
    WATCH_BACKLOG_MAX,
    Watch,
    ancestors,
    parent_of,
    sequential_path,
    validate_path,
)
from .etcd_client import ACCESS_REFUSALS, EtcdClient, error_details
from .joined import JoinedRequests
from .security import NO_SECURITY, StoreSecurity

logger = logging.getLogger(__name__)

TXN_ATTEMPTS_MAX = 32
RECONNECT_DELAY_MAX_S = 1.0
CANCEL_ATTEMPTS_MAX = 50  # with CANCEL_RETRY_S: a task that ignores cancellation for 5 s is reported
CANCEL_RETRY_S = 0.1
LEASE_TTL_MIN_S = 2  # etcd raises shorter TTLs to its own minimum (about 2 s) anyway
_CHANNEL_OPTIONS = {
    # gRPC's default reconnect backoff grows to 120 s; a coordination client must come back fast.
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
}


# What etcd answers a transaction beyond --max-txn-ops or a request beyond --max-request-bytes
# (INVALID_ARGUMENT), and what its gRPC server answers a request well beyond the latter
# (RESOURCE_EXHAUSTED, before etcd sees it).
_SIZE_REFUSALS = {
    rpc.StatusCode.INVALID_ARGUMENT: ("too many operations in txn request", "request is too large"),
    rpc.StatusCode.RESOURCE_EXHAUSTED: ("received message larger than max",),
}


def _prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with `prefix` (`prefix` ends in '/')."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def translate_error(error: BaseException, path: str | None = None) -> BaseException:
    if isinstance(error, StoreError):
        return error
    if isinstance(error, (rpc.AioRpcError, etcd_errors.ClientError)):
        details = error_details(error)
        if any(refusal in details for refusal in ACCESS_REFUSALS):
            return AccessDenied(f"etcd: {details}", path)
    if isinstance(error, rpc.AioRpcError):
        details = error.details() or ""
        if "lease not found" in details:
            return SessionLost(f"etcd lease expired during an operation on {path}")
        if any(limit in details for limit in _SIZE_REFUSALS.get(error.code(), ())):
            return RequestRefused(f"etcd {details}", path)
        return CoordinationUnavailable(f"etcd {error.code().name}: {details}", path)
    if isinstance(error, (etcd_errors.ClientError, OSError, TimeoutError)):
        return CoordinationUnavailable(f"etcd: {type(error).__name__} {error}", path)
    return error


def _compare(key: bytes, target: str, result: str, **value) -> rpc.Compare:
    return rpc.Compare(key=key, target=getattr(rpc.Compare, target), result=getattr(rpc.Compare, result), **value)


@dataclasses.dataclass
class _Snapshot:
    """Keys read at one revision: mod_revision per key (0 = absent), child names per parent."""

    revision: int
    mod_revisions: dict[bytes, int]
    values: dict[bytes, bytes]
    children: dict[bytes, set[str]]


class EtcdStore(Store):
    backend = "etcd"
    reads_many_at_once = True

    def __init__(self, host: str, port: int, prefix: str = "", session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
                 security: StoreSecurity = NO_SECURITY):
        super().__init__(session_timeout_ms)
        self.host, self.port = host, port
        self.security = security
        self._prefix = "" if prefix in ("", "/") else validate_path(prefix)
        self._client: EtcdClient | None = None
        self._lease_id: int | None = None  # set by the keeper's thread after start()
        self._lease_ttl_s = max(LEASE_TTL_MIN_S, math.ceil(session_timeout_ms / 1000))
        self._keeper: _LeaseKeeper | None = None
        self._watches = _SharedStream(self)

    # keys
    def _key(self, path: str) -> bytes:
        return (self._prefix + path).encode()

    def _children_prefix(self, path: str) -> bytes:
        return (self._prefix + ("" if path == "/" else path) + "/").encode()

    def _counter_key(self, parent: str) -> bytes:
        return (self._prefix + "\x01seq" + parent).encode()

    @property
    def _op_timeout_s(self) -> float:
        return self.session_timeout_ms / 1000

    # lifecycle and session
    async def start(self) -> None:
        if self._client is not None:
            return
        client = self._new_client()
        keeper = _LeaseKeeper(self, asyncio.get_running_loop())
        try:
            await client.connect()
            await keeper.start()
        except Exception as error:
            await keeper.stop()
            await client.close()
            translated = translate_error(error)
            if isinstance(translated, AccessDenied):
                raise AccessDenied(f"etcd at {self.host}:{self.port} as user {self.security.username}: "
                                   f"{error_details(error)}") from None
            raise CoordinationUnavailable(f"cannot reach etcd at {self.host}:{self.port}: {error_details(error)}") from None
        self._client, self._keeper = client, keeper

    def _new_client(self) -> EtcdClient:
        return EtcdClient(self.host, self.port, self.security, timeout=self._op_timeout_s, options=_CHANNEL_OPTIONS)

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        keeper, self._keeper = self._keeper, None
        await keeper.stop()
        for subscription in self._watches.subscriptions():
            await subscription.watch.close()
        await self._watches.stop()
        if self._lease_id is not None:
            try:
                await client.refreshing_token(lambda: client.revoke_lease(self._lease_id))
            except Exception as error:  # the lease then expires by itself after its TTL
                logger.warning("etcd lease revoke on close failed lease=%x error=%s", self._lease_id, error)
        await client.close()
        self._session.publish(SessionState.LOST)

    async def expire_session(self) -> None:
        if self._keeper is None:
            raise CoordinationUnavailable("the etcd client is closed")
        await self._keeper.expire()

    async def server_version(self) -> str | None:
        status = await self._rpc(lambda client: client.maintenancestub.Status, rpc.StatusRequest(), None)
        return status.version

    def _etcd(self) -> EtcdClient:
        if self._client is None:
            raise CoordinationUnavailable("the etcd client is closed")
        return self._client

    # reads
    async def _rpc(self, method: Callable[[EtcdClient], Callable], request, path: str | None):
        """`method(client)(request)`, the gRPC method of the store's client, with its token."""
        client = self._etcd()
        try:
            return await client.refreshing_token(
                lambda: method(client)(request, timeout=self._op_timeout_s, metadata=client.metadata))
        except Exception as error:
            raise translate_error(error, path) from None

    async def _read(self, keys: set[bytes], children_of: set[bytes]) -> _Snapshot:
        """Read `keys` and the direct children under each of `children_of`, at one revision."""
        keys_list, parents_list = sorted(keys), sorted(children_of)
        ops = [rpc.RequestOp(request_range=rpc.RangeRequest(key=key)) for key in keys_list]
        ops += [
            rpc.RequestOp(request_range=rpc.RangeRequest(key=prefix, range_end=_prefix_end(prefix), keys_only=True))
            for prefix in parents_list
        ]
        reply = await self._rpc(_txn_method, rpc.TxnRequest(success=ops), None)
        snapshot = _Snapshot(reply.header.revision, {}, {}, {})
        for key, response in zip(keys_list, reply.responses[: len(keys_list)]):
            kvs = response.response_range.kvs
            snapshot.mod_revisions[key] = kvs[0].mod_revision if kvs else 0
            if kvs:
                snapshot.values[key] = kvs[0].value
        for prefix, response in zip(parents_list, reply.responses[len(keys_list):]):
            names = (kv.key[len(prefix):].decode() for kv in response.response_range.kvs)
            snapshot.children[prefix] = {name for name in names if "/" not in name}
        return snapshot

    async def get(self, path: str) -> tuple[bytes, int]:
        if validate_path(path) == "/":
            return b"", 0
        key = self._key(path)
        snapshot = await self._read({key}, set())
        if not snapshot.mod_revisions[key]:
            raise NoNode(path)
        return snapshot.values[key], snapshot.mod_revisions[key]

    async def _get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """All in one request, at one revision."""
        keys = [self._key(path) for path in paths]
        snapshot = await self._read(set(keys) - {self._key("/")}, set())
        return [(b"", 0) if path == "/" else (snapshot.values[key], snapshot.mod_revisions[key]) if snapshot.mod_revisions[key] else None
                for path, key in zip(paths, keys)]

    async def exists(self, path: str) -> int | None:
        try:
            return (await self.get(path))[1]
        except NoNode:
            return None

    async def children(self, path: str) -> list[str]:
        validate_path(path)
        key, prefix = self._key(path), self._children_prefix(path)
        snapshot = await self._read(set() if path == "/" else {key}, {prefix})
        if path != "/" and not snapshot.mod_revisions[key]:
            raise NoNode(path)
        return sorted(snapshot.children[prefix])

    # writes
    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        validate_path(path, sequential=sequential)
        if path == "/":
            raise NodeExists(path)
        (created,) = await self._write([CreateOp(path, bytes(data), ephemeral)], sequential=sequential, make_parents=make_parents)
        return created

    async def set(self, path: str, data: bytes, version: int | None = None) -> int:
        (new_version,) = await self._write([SetOp(validate_path(path), bytes(data), version)])
        return new_version

    async def delete(self, path: str, version: int | None = None, recursive: bool = False) -> None:
        if validate_path(path) == "/":
            raise ValueError("the root node cannot be deleted")
        await self._write([DeleteOp(path, version)], recursive=recursive)

    async def _commit(self, ops: list[TxnOp]) -> list[object]:
        return await self._write(ops)

    async def _write(self, ops: list[TxnOp], *, sequential=False, make_parents=False, recursive=False) -> list[object]:
        for _attempt in range(TXN_ATTEMPTS_MAX):
            plan = _WritePlan(self, ops, sequential=sequential, make_parents=make_parents, recursive=recursive)
            snapshot = await self._read(plan.keys_to_read(), plan.children_to_read())
            compares, requests, results = plan.build(snapshot)
            reply = await self._rpc(_txn_method, rpc.TxnRequest(compare=compares, success=requests), ops[0].path)
            if reply.succeeded:
                revision = reply.header.revision
                return [revision if result is _NEW_VERSION else Created(result, revision) if isinstance(result, _NewNode) else result
                        for result in results]
        raise CoordinationUnavailable(f"etcd: gave up after {TXN_ATTEMPTS_MAX} conflicting attempts", ops[0].path)

    # watches
    async def watch_data(self, path: str) -> Watch[DataEvent]:
        return await _Subscription(self._watches, self._key(validate_path(path)), False).start()

    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        return await _Subscription(self._watches, self._children_prefix(validate_path(path)), True).start()


def _txn_method(client: EtcdClient) -> Callable:
    return client.kvstub.Txn


_NEW_VERSION = object()  # placeholder result: the write transaction's revision


class _NewNode(str):
    """Placeholder result of a create: its path, whose version is the transaction's revision."""


class _WritePlan:
    """Checks operations against a snapshot and turns them into one guarded etcd transaction."""

    def __init__(self, store: EtcdStore, ops: list[TxnOp], *, sequential: bool, make_parents: bool, recursive: bool):
        self.store, self.ops = store, ops
        self.sequential, self.make_parents, self.recursive = sequential, make_parents, recursive

    def keys_to_read(self) -> set[bytes]:
        keys: set[bytes] = set()
        for op in self.ops:
            keys.add(self.store._key(op.path))
            if isinstance(op, CreateOp):
                parent = parent_of(op.path)
                lineage = ancestors(op.path) if self.make_parents else ([] if parent == "/" else [parent])
                keys.update(self.store._key(path) for path in lineage)
                if self.sequential:
                    keys.add(self.store._counter_key(parent))
        return keys

    def children_to_read(self) -> set[bytes]:
        if self.recursive:
            return set()
        return {self.store._children_prefix(op.path) for op in self.ops if isinstance(op, DeleteOp)}

    def build(self, snapshot: _Snapshot) -> tuple[list, list, list]:
        """Compares, requests and per-op results, or the error the operations meet at the snapshot."""
        store = self.store
        exists: dict[str, bool] = {}  # path -> exists, as changed by earlier ops of this transaction
        added_children: dict[str, set[str]] = {}
        removed_children: dict[str, set[str]] = {}

        def present(path: str) -> bool:
            if path == "/":
                return True
            return exists.get(path, bool(snapshot.mod_revisions.get(store._key(path))))

        def current_version(path: str) -> int | None:
            """The version a check compares with; None once this transaction rewrote the node,
            since its new version (the transaction's revision) cannot be known in advance."""
            return None if path in exists else snapshot.mod_revisions.get(store._key(path), 0)

        def record(path: str, now_exists: bool) -> None:
            exists[path] = now_exists
            name = path.rsplit("/", 1)[1]
            (added_children if now_exists else removed_children).setdefault(parent_of(path), set()).add(name)
            (removed_children if now_exists else added_children).get(parent_of(path), set()).discard(name)

        # etcd refuses a transaction that writes one key twice, which ZooKeeper allows; so only
        # each key's last write is sent (dicts keep first-insertion order).
        final_writes: dict[bytes, rpc.RequestOp] = {}
        created_leases: dict[bytes, int] = {}  # keys created by this transaction -> their lease
        results: list[object] = []
        counters: dict[str, int] = {}
        for op in self.ops:
            key = store._key(op.path)
            if isinstance(op, CheckOp):
                self._check_version(op.path, op.version, present(op.path), current_version(op.path))
                results.append(None)
            elif isinstance(op, CreateOp):
                path = op.path
                if self.make_parents:
                    for ancestor in ancestors(path):
                        if not present(ancestor):
                            final_writes[store._key(ancestor)] = rpc.RequestOp(request_put=rpc.PutRequest(key=store._key(ancestor)))
                            record(ancestor, True)
                parent = parent_of(path)
                if not present(parent):
                    raise NoNode(parent)
                if self.sequential:
                    counter_key = store._counter_key(parent)
                    sequence = counters.get(parent, int(snapshot.values.get(counter_key, b"0")))
                    counters[parent] = sequence + 1
                    final_writes[counter_key] = rpc.RequestOp(request_put=rpc.PutRequest(key=counter_key, value=str(sequence + 1).encode()))
                    path = sequential_path(path, sequence)
                    key = store._key(path)
                    snapshot.mod_revisions.setdefault(key, 0)  # unread: guard it as absent in the compares
                if present(path):
                    raise NodeExists(path)
                lease = store._lease_id if op.ephemeral else 0
                created_leases[key] = lease
                final_writes[key] = rpc.RequestOp(request_put=rpc.PutRequest(key=key, value=op.data, lease=lease))
                record(path, True)
                results.append(_NewNode(path))
            elif isinstance(op, SetOp):
                self._check_version(op.path, op.version, present(op.path), current_version(op.path))
                # A set keeps the node's lease: an ephemeral node stays ephemeral.
                put = (
                    rpc.PutRequest(key=key, value=op.data, lease=created_leases[key])
                    if key in created_leases
                    else rpc.PutRequest(key=key, value=op.data, ignore_lease=True)
                )
                final_writes[key] = rpc.RequestOp(request_put=put)
                exists[op.path] = True
                results.append(_NEW_VERSION)
            elif isinstance(op, DeleteOp):
                self._check_version(op.path, op.version, present(op.path), current_version(op.path))
                prefix = store._children_prefix(op.path)
                if self.recursive:
                    final_writes[prefix] = rpc.RequestOp(
                        request_delete_range=rpc.DeleteRangeRequest(key=prefix, range_end=_prefix_end(prefix))
                    )
                else:
                    remaining = (snapshot.children.get(prefix, set()) | added_children.get(op.path, set())) - removed_children.get(op.path, set())
                    if remaining:
                        raise NotEmpty(op.path)
                final_writes[key] = rpc.RequestOp(request_delete_range=rpc.DeleteRangeRequest(key=key))
                created_leases.pop(key, None)
                record(op.path, False)
                results.append(None)
        compares = [_compare(key, "MOD", "EQUAL", mod_revision=revision) for key, revision in snapshot.mod_revisions.items()]
        # No child appeared under a node being deleted since the snapshot.
        compares += [
            _compare(prefix, "MOD", "LESS", mod_revision=snapshot.revision + 1, range_end=_prefix_end(prefix))
            for prefix in snapshot.children
        ]
        return compares, list(final_writes.values()), results

    @staticmethod
    def _check_version(path: str, version: int | None, is_present: bool, mod_revision: int | None) -> None:
        if not is_present:
            raise NoNode(path)
        if version is not None and mod_revision != version:
            raise BadVersion(path, version)


class _LeaseKeeper:
    """The session's lease, granted and kept alive every third of its TTL from a thread of its
    own, over an etcd client of its own (module docstring). Only the keeper sets the store's
    `_lease_id`; the session states it sees go to the store's event loop."""

    def __init__(self, store: EtcdStore, store_loop: asyncio.AbstractEventLoop):
        self._store = store
        self._store_loop = store_loop
        self._thread: threading.Thread | None = None
        # On the thread's own loop, once started:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: EtcdClient | None = None
        self._stopping: asyncio.Event | None = None
        self._lease_changes: asyncio.Lock | None = None  # a refresh, a replacement, an expiry: one at a time
        self._published: SessionState | None = None

    async def start(self) -> None:
        """Grant the first lease and keep it alive from now on; raises what granting raised."""
        started: concurrent.futures.Future = concurrent.futures.Future()
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(started),), name="etcd-lease-keeper", daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)

    async def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stopping is not None:
            with contextlib.suppress(RuntimeError):  # its loop already ended (see _run)
                self._loop.call_soon_threadsafe(self._stopping.set)
        await asyncio.to_thread(self._thread.join)
        self._thread = None

    async def expire(self) -> None:
        """Give the lease up and take a new one: what etcd does to a client it lost (tests)."""
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._expire(), self._loop))

    async def _run(self, started: concurrent.futures.Future) -> None:
        self._loop = asyncio.get_running_loop()
        self._client = self._store._new_client()
        try:
            try:
                await self._client.connect()
                await self._grant()
            except BaseException as error:
                started.set_exception(error)
                return
            self._stopping, self._lease_changes = asyncio.Event(), asyncio.Lock()
            self._publish(SessionState.CONNECTED)  # on the store's loop before start() returns: sent first
            started.set_result(None)
            keeping = asyncio.create_task(self._keep_alive())
            stopping = asyncio.create_task(self._stopping.wait())
            await asyncio.wait((keeping, stopping), return_when=asyncio.FIRST_COMPLETED)
            if keeping.done() and not keeping.cancelled():
                # A bug: the lease expires, and the broker's session with it.
                logger.error("etcd lease keeper failed lease=%x", self._store._lease_id, exc_info=keeping.exception())
            await _cancelled(keeping)
            await _cancelled(stopping)
        finally:
            await self._client.close()

    async def _keep_alive(self) -> None:
        """Refresh the lease every third of its TTL; report SUSPENDED, LOST and CONNECTED."""
        lease_lost = False
        while True:  # until stop()
            await asyncio.sleep(self._store._lease_ttl_s / 3)
            async with self._lease_changes:
                try:
                    if not lease_lost:
                        reply = await self._client.refreshing_token(lambda: self._client.refresh_lease(self._store._lease_id))
                        lease_lost = reply is None or reply.TTL <= 0
                        if lease_lost:
                            self._publish(SessionState.LOST)
                    if lease_lost:
                        await self._replace()
                        lease_lost = False
                    self._publish(SessionState.CONNECTED)
                except Exception as error:
                    translated = translate_error(error)
                    if not isinstance(translated, StoreError):
                        raise
                    if isinstance(translated, SessionLost) and not lease_lost:
                        lease_lost = True
                        self._publish(SessionState.LOST)
                    elif self._published == SessionState.CONNECTED:
                        self._publish(SessionState.SUSPENDED)

    async def _grant(self) -> None:
        lease = await self._client.refreshing_token(lambda: self._client.lease(self._store._lease_ttl_s))
        self._store._lease_id = lease.id
        logger.info("etcd session lease=%x ttl_s=%d", lease.id, lease.ttl)

    async def _replace(self) -> None:
        """Revoke the lost lease (its keys may otherwise linger) and grant the next."""
        try:
            await self._client.refreshing_token(lambda: self._client.revoke_lease(self._store._lease_id))
        except etcd_errors.ClientError:
            pass  # already expired; that is what we wanted
        await self._grant()

    async def _expire(self) -> None:
        async with self._lease_changes:
            await self._client.refreshing_token(lambda: self._client.revoke_lease(self._store._lease_id))
            self._publish(SessionState.LOST)
            await self._grant()
            self._publish(SessionState.CONNECTED)

    def _publish(self, state: SessionState) -> None:
        if state == self._published:
            return
        self._published = state
        try:
            self._store_loop.call_soon_threadsafe(self._store._session.publish, state)
        except RuntimeError:  # the store's loop ended without closing the store: nobody to tell
            self._stopping.set()


async def _cancelled(task: asyncio.Task) -> None:
    """Cancel `task` and wait until it has ended. aetcd awaits inside asyncio.wait_for, which on
    Python 3.11 can swallow a cancellation that arrives as the awaited call completes; the task
    then runs on (into a watch stream that never ends), so cancel again until it stops."""
    for _ in range(CANCEL_ATTEMPTS_MAX):
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=CANCEL_RETRY_S)
        if done:
            return
    logger.error("etcd task did not end after %d cancellations: %r", CANCEL_ATTEMPTS_MAX, task)


class _SharedStream:
    """The store's one etcd watch, over every key under its prefix, feeding every replog watch
    (a `_Subscription`): thousands of watches per broker cost etcd one watcher and one stream,
    not one each (aetcd creates each watch on its stream in turn, waiting for etcd to confirm
    it, and that alone kept a broker of 500 new partitions from following them for a minute).

    It starts from a revision read when the first watch opens, resumes after a stream error
    from the last revision seen, and after a compaction re-reads every watch's state."""

    def __init__(self, store: EtcdStore):
        self.store = store
        self._root = store._children_prefix("/")
        self._data: dict[bytes, set[_Subscription]] = {}
        self._children: dict[bytes, set[_Subscription]] = {}
        # Reads the revision the stream starts after, then starts it: one start, which every
        # watch opened meanwhile waits for (two would leave a stream nobody stops).
        self._starting: asyncio.Future | None = None
        self._task: asyncio.Task | None = None
        self._stream = None
        self.first_reads = _FirstReads(store)

    def subscriptions(self) -> list[_Subscription]:
        return [*(sub for subs in self._data.values() for sub in subs), *(sub for subs in self._children.values() for sub in subs)]

    async def subscribe(self, subscription: _Subscription) -> None:
        """Once the stream runs from a revision no later than any read of `subscription`."""
        starting = self._starting
        if starting is None or (starting.done() and (starting.cancelled() or starting.exception() is not None)):
            self._starting = starting = asyncio.ensure_future(self._start())
        await asyncio.shield(starting)
        registry = self._children if subscription.is_children else self._data
        registry.setdefault(subscription.key, set()).add(subscription)

    async def _start(self) -> None:
        revision = (await self.store._read(set(), set())).revision
        self._task = asyncio.create_task(self._run(revision), name="etcd-watch-stream")
        self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Task) -> None:
        """The stream ends with stop(); anything else is a bug, logged, and every watch stops
        hearing of changes: the next watch opened starts a stream again."""
        if not task.cancelled() and task.exception() is not None:
            logger.error("etcd watch stream ended", exc_info=task.exception())
            self._starting = None

    def unsubscribe(self, subscription: _Subscription) -> None:
        registry = self._children if subscription.is_children else self._data
        subscribers = registry.get(subscription.key)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del registry[subscription.key]

    async def _run(self, revision: int) -> None:
        delay_s = 0.05
        while True:  # until stop() cancels it
            try:
                await self._fresh_token()
                self._stream = await self.store._etcd().watch(self._root, range_end=_prefix_end(self._root),
                                                              start_revision=revision + 1)
                async for event in self._stream:
                    revision = max(revision, event.kv.mod_revision)
                    self._dispatch(event)
                    delay_s = 0.05
            except etcd_errors.RevisionCompactedError:
                revision = (await self.store._read(set(), set())).revision
                for subscription in self.subscriptions():
                    await subscription.resync()
            except Exception as error:
                if not isinstance(translate_error(error), StoreError):
                    raise
                await asyncio.sleep(delay_s)  # etcd unreachable: back off, then resume from `revision`
                delay_s = min(delay_s * 2, RECONNECT_DELAY_MAX_S)

    async def _fresh_token(self) -> None:
        """etcd cancels a watch created with a token it no longer takes (one forgotten by a
        restart, or idle past its TTL) in a reply aetcd does not read, leaving the stream open
        and silent: so each stream opens with a token just issued."""
        if self.store.security.username is not None:
            await self.store._etcd().authenticate()

    def _dispatch(self, event) -> None:
        key = event.kv.key
        for subscription in list(self._data.get(key, ())):
            subscription.apply(event)
        parent = key[:key.rindex(b"/") + 1]
        for subscription in list(self._children.get(parent, ())):
            subscription.apply(event)

    async def stop(self) -> None:
        await self.first_reads.close()
        if self._starting is not None:
            await _cancelled(self._starting)
        if self._task is not None:
            await _cancelled(self._task)
        if self._stream is not None:
            try:
                # aetcd's cancel queues a request behind a lock shared by every watch of the
                # client and has no timeout of its own: a wedged stream must not hang close().
                async with asyncio.timeout(self.store._op_timeout_s):
                    await self._stream.cancel()
            except Exception:  # the stream may already be dead with the connection
                pass


class _FirstReads(JoinedRequests[bytes, tuple[int, bytes | None, int]]):
    """Data watches' reads of their node, joined (joined.py): a topic's creation opens three
    watches per partition on every broker hosting it, and a read each was most of the requests
    etcd served then."""

    def __init__(self, store: EtcdStore):
        super().__init__(store, TRANSACTION_OPS_MAX)

    async def read(self, key: bytes) -> tuple[int, bytes | None, int]:
        """The revision read at, and the key's value and mod_revision there (None, 0: absent)."""
        return await self._ask(key, 1)

    async def _send(self, batch: list[bytes]) -> list[tuple[int, bytes | None, int]]:
        snapshot = await self._store._read(set(batch), set())
        return [(snapshot.revision, snapshot.values.get(key), snapshot.mod_revisions[key]) for key in batch]


class _Subscription:
    """One replog watch on etcd, fed by the shared stream: the node's state (or its children's
    names) read at revision R, then every change after R. It subscribes before it reads, so a
    change is either in the read or comes after it; changes that come while it reads wait, at
    most WATCH_BACKLOG_MAX of them (more, and it reads again)."""

    def __init__(self, stream: _SharedStream, key: bytes, is_children: bool):
        self._stream = stream
        self.key, self.is_children = key, is_children
        self._children: set[str] = set()
        self._floor: int | None = None  # the revision read; None while reading
        self._waiting: list = []
        self._overflowed = False
        self._children_offer_due = False
        self.watch: Watch = Watch(self._stop)

    async def start(self) -> Watch:
        await self._stream.subscribe(self)
        try:
            await self.resync()
        except BaseException:
            self._stream.unsubscribe(self)
            raise
        return self.watch

    async def resync(self) -> None:
        """Offer the current state; apply what changed since."""
        store = self._stream.store
        while True:  # again only if more changes came during a read than it may hold
            self._floor, self._waiting, self._overflowed = None, [], False
            if self.is_children:
                snapshot = await store._read(set(), {self.key})
                self._children = set(snapshot.children[self.key])
                self.watch.offer(tuple(sorted(self._children)))
                read_at = snapshot.revision
            else:
                read_at, data, revision = await self._stream.first_reads.read(self.key)
                self.watch.offer(DataEvent(data, revision) if revision else DataEvent(None, None))
            if not self._overflowed:
                break
        self._floor = read_at
        waiting, self._waiting = self._waiting, []
        for event in waiting:
            self.apply(event)

    def apply(self, event) -> None:
        if self._floor is None:
            if len(self._waiting) < WATCH_BACKLOG_MAX:
                self._waiting.append(event)
            else:
                self._overflowed = True
            return
        if event.kv.mod_revision <= self._floor:
            return  # in the state read
        deleted = event.kind == "DELETE"
        if not self.is_children:
            self.watch.offer(DataEvent(None, None) if deleted else DataEvent(event.kv.value, event.kv.mod_revision))
            return
        name = event.kv.key[len(self.key):].decode()
        if deleted:
            self._children.discard(name)
        else:
            self._children.add(name)
        # Offered once the stream's events at hand are applied, not after each: a topic of
        # 10,000 partitions adds its children an event each, and sorting all the names for every
        # one (and the metadata cache applying each list) was a third of a broker's event loop.
        # The watch may coalesce states (base.py); this one still comes after every event applied.
        if not self._children_offer_due:
            self._children_offer_due = True
            asyncio.get_running_loop().call_soon(self._offer_children)

    def _offer_children(self) -> None:
        self._children_offer_due = False
        self.watch.offer(tuple(sorted(self._children)))

    async def _stop(self) -> None:
        self._stream.unsubscribe(self)
