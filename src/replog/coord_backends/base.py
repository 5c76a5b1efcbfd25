"""The coordination store interface every backend implements.

The store is ZooKeeper-shaped: a tree of nodes addressed by absolute paths, each with bytes of
data and a version that changes on every write. Nodes are persistent or ephemeral (tied to the
client's session), names may get a sequence suffix, writes may be compare-and-set on a
version, and several writes may be applied all-or-nothing in a transaction.

Watches are async iterators. A watch yields the node's state at the moment it was opened and
then every later state, in order; a consumer that falls more than `WATCH_BACKLOG_MAX` states
behind sees the oldest ones dropped (coalesced towards the latest), never reordered. Because
the first state comes from the same atomic read that arms the watch, a change made between a
caller's read and its watch cannot be missed.

Versions are opaque integers: pass them back to `set`/`delete`/`check`, compare them for
equality, never do arithmetic on them (ZooKeeper counts per node, etcd uses the global
revision).

Concurrency: all methods are coroutines for one asyncio event loop; a Store is not shared
between loops or threads.
"""

from __future__ import annotations

import abc
import asyncio
import collections
import dataclasses
import enum
from typing import AsyncIterator, Awaitable, Callable, Generic, TypeVar

import anyio

from replog.tasks import first_failure

SEQUENCE_DIGITS = 10
WATCH_BACKLOG_MAX = 256
# KRaft's broker.session.timeout.ms: a dead process is known sooner (peers see its port refuse),
# so this bounds failover only for hosts that vanish, partitions and stalls; see README.
SESSION_TIMEOUT_MS_DEFAULT = 9_000
# Half a stock etcd's --max-txn-ops (128), which bounds a transaction's compares too: the etcd
# backend guards each operation's key and its parent (a create) or its children (a delete) with
# one compare each. Every backend refuses larger transactions, so that what works on ZooKeeper or
# the embedded store works on an etcd nobody reconfigured; ZooKeeper's own bound is
# jute.maxbuffer (1 MB a request), which this many operations on replog's small nodes stay far
# below. A change too big for one transaction is made atomic by a commit point of its own
# (admin/topics.py: a topic's partition count).
TRANSACTION_OPS_MAX = 64
COMMITS_IN_FLIGHT_MAX = 8  # commit_groups'


class StoreError(Exception):
    """Base of every coordination-store error; backends raise only these."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path


class NodeExists(StoreError):
    def __init__(self, path: str):
        super().__init__(f"node already exists: {path}", path)


class NoNode(StoreError):
    def __init__(self, path: str):
        super().__init__(f"no such node: {path}", path)


class BadVersion(StoreError):
    def __init__(self, path: str, expected: int | None = None):
        detail = f" (expected version {expected})" if expected is not None else ""
        super().__init__(f"version mismatch on {path}{detail}", path)


class NotEmpty(StoreError):
    def __init__(self, path: str):
        super().__init__(f"node has children: {path}", path)


class SessionLost(StoreError):
    def __init__(self, detail: str = "the coordination session expired"):
        super().__init__(detail)


class CoordinationUnavailable(StoreError):
    def __init__(self, detail: str, path: str | None = None):
        super().__init__(f"coordination store unavailable: {detail}" + (f" ({path})" if path else ""), path)


class RequestRefused(StoreError):
    """The store refused a request as larger than it accepts (etcd's --max-txn-ops and request
    size limit): retrying it cannot help."""

    def __init__(self, detail: str, path: str | None = None):
        super().__init__(f"coordination store refused the request: {detail}" + (f" ({path})" if path else ""), path)


class AccessDenied(StoreError):
    """The store refused this client's credentials, or the operation to its user: retrying with
    the same credentials cannot help."""

    def __init__(self, detail: str, path: str | None = None):
        super().__init__(f"coordination store denied access: {detail}" + (f" ({path})" if path else ""), path)
        self.detail = detail


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost; the session may still be alive on the server
    LOST = "lost"  # the session is gone, with its ephemeral nodes; a new one follows


@dataclasses.dataclass(frozen=True)
class DataEvent:
    """A node's state as a data watch sees it; `data is None` means the node does not exist."""

    data: bytes | None
    version: int | None

    @property
    def exists(self) -> bool:
        return self.data is not None


# Transaction operations. A transaction is a list of these, applied all-or-nothing.
@dataclasses.dataclass(frozen=True)
class CheckOp:
    path: str
    version: int


@dataclasses.dataclass(frozen=True)
class CreateOp:
    path: str
    data: bytes = b""
    ephemeral: bool = False


@dataclasses.dataclass(frozen=True)
class SetOp:
    path: str
    data: bytes
    version: int | None = None


@dataclasses.dataclass(frozen=True)
class DeleteOp:
    path: str
    version: int | None = None


TxnOp = CheckOp | CreateOp | SetOp | DeleteOp


class Created(str):
    """A create's result: the node's path, carrying the version the node was created at (0 on
    ZooKeeper and the embedded store, the writing transaction's revision on etcd), which a
    later compare-and-set on the node must name."""

    version: int

    def __new__(cls, path: str, version: int) -> Created:
        created = super().__new__(cls, path)
        created.version = version
        return created


class Transaction:
    """Collects operations; `commit()` applies all of them or none and raises the first failure.

    `commit()` returns one result per operation: the path for a create (a `Created`), the new
    version for a set, None for a check or a delete. More than TRANSACTION_OPS_MAX operations
    are refused (RequestRefused) before any reaches the store.
    """

    def __init__(self, apply: Callable[[list[TxnOp]], Awaitable[list[object]]]):
        self._apply = apply
        self.ops: list[TxnOp] = []

    def check(self, path: str, version: int) -> Transaction:
        self.ops.append(CheckOp(validate_path(path), version))
        return self

    def create(self, path: str, data: bytes = b"", *, ephemeral: bool = False) -> Transaction:
        self.ops.append(CreateOp(validate_path(path), bytes(data), ephemeral))
        return self

    def set(self, path: str, data: bytes, version: int | None = None) -> Transaction:
        self.ops.append(SetOp(validate_path(path), bytes(data), version))
        return self

    def delete(self, path: str, version: int | None = None) -> Transaction:
        self.ops.append(DeleteOp(validate_path(path), version))
        return self

    async def commit(self) -> list[object]:
        if not self.ops:
            return []
        if len(self.ops) > TRANSACTION_OPS_MAX:
            raise RequestRefused(f"a transaction of {len(self.ops)} operations is over the limit of"
                                 f" {TRANSACTION_OPS_MAX}", self.ops[0].path)
        return await self._apply(list(self.ops))


async def children_or_empty(store: Store, path: str) -> list[str]:
    """`store.children(path)`, none for a node that does not exist."""
    try:
        return await store.children(path)
    except NoNode:
        return []


async def get_all(store: Store, paths: list[str]) -> list[tuple[bytes, int] | None]:
    """`store.get_many` of any number of paths: in batches of TRANSACTION_OPS_MAX, in turn."""
    answers: list[tuple[bytes, int] | None] = []
    for start in range(0, len(paths), TRANSACTION_OPS_MAX):  # bounded by the paths asked for
        answers += await store.get_many(paths[start:start + TRANSACTION_OPS_MAX])
    return answers


async def commit_ops(store: Store, ops: list[TxnOp]) -> list[object]:
    """`ops` built elsewhere, committed in one transaction (Transaction.commit's results)."""
    transaction = store.transaction()
    transaction.ops.extend(ops)
    return await transaction.commit()


async def commit_in_batches(store: Store, ops: list[TxnOp]) -> None:
    """Apply `ops` in order, in transactions of at most TRANSACTION_OPS_MAX: all-or-nothing per
    batch only, so the caller's own commit point must come after them (or their leftovers be
    harmless and cleaned up by whoever comes next)."""
    for start in range(0, len(ops), TRANSACTION_OPS_MAX):
        await commit_ops(store, ops[start:start + TRANSACTION_OPS_MAX])


async def commit_groups(store: Store, groups: list[list[TxnOp]]) -> None:
    """Apply `groups` of operations, each group whole in one transaction of at most
    TRANSACTION_OPS_MAX operations with others, up to COMMITS_IN_FLIGHT_MAX transactions at once:
    for groups none of which needs another's writes first (a parent node, a deletion before a
    creation). One store round trip after another was most of a large topic's creation time on
    ZooKeeper (bench/scale.py); a store takes the transactions sent together in
    one go (ZooKeeper syncs its log once for those that arrive together). As commit_in_batches,
    the caller's own commit point must come after them. A failure cancels the transactions not
    yet answered (each may still take effect) and is raised once they ended."""
    batches: list[list[TxnOp]] = [[]]
    for group in groups:  # bounded by the groups
        if batches[-1] and len(batches[-1]) + len(group) > TRANSACTION_OPS_MAX:
            batches.append([])
        batches[-1].extend(group)
    in_flight = asyncio.Semaphore(COMMITS_IN_FLIGHT_MAX)

    async def commit(batch: list[TxnOp]) -> None:
        async with in_flight:
            await commit_ops(store, batch)

    with first_failure():
        async with anyio.create_task_group() as group:
            for batch in batches:  # bounded by the groups
                if batch:
                    group.start_soon(commit, batch)


T = TypeVar("T")
_NOTHING = object()


class Watch(Generic[T], AsyncIterator[T]):
    """An async iterator over successive states, fed by a backend through `offer`.

    Consecutive equal states are delivered once. Use as `async with await store.watch_data(p) as w`
    or call `close()`; closing stops the backend's work for this watch.
    """

    def __init__(self, on_close: Callable[[], Awaitable[None]] | None = None):
        self._pending: collections.deque[T] = collections.deque(maxlen=WATCH_BACKLOG_MAX)
        self._last_offered: object = _NOTHING
        self._wakeup = asyncio.Event()
        self._closed = False
        self._on_close = on_close

    @property
    def closed(self) -> bool:
        return self._closed

    def offer(self, state: T) -> None:
        """Queue a state for the consumer. Must be called on the event loop's thread."""
        if self._closed or state == self._last_offered:
            return
        self._last_offered = state
        self._pending.append(state)
        self._wakeup.set()

    def __aiter__(self) -> Watch[T]:
        return self

    async def __anext__(self) -> T:
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._pending.popleft()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        if self._on_close is not None:
            await self._on_close()

    async def __aenter__(self) -> Watch[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class SessionEvents:
    """Fans session-state changes out to every open `session_events()` watch."""

    def __init__(self) -> None:
        self.state = SessionState.SUSPENDED
        # A dict, not a set: subscribers hear of a state in the order they subscribed, the same
        # in every run (a set of objects iterates by address).
        self._watches: dict[Watch[SessionState], None] = {}

    def open(self) -> Watch[SessionState]:
        watch: Watch[SessionState] = Watch()
        watch._on_close = self._forget(watch)
        watch.offer(self.state)
        self._watches[watch] = None
        return watch

    def _forget(self, watch: Watch[SessionState]) -> Callable[[], Awaitable[None]]:
        async def forget() -> None:
            self._watches.pop(watch, None)

        return forget

    def publish(self, state: SessionState) -> None:
        self.state = state
        for watch in self._watches:
            watch.offer(state)


def validate_path(path: str, *, sequential: bool = False) -> str:
    """Paths are absolute, '/'-separated, with no empty, '.' or '..' components.

    A sequential create may end in '/': its node is then named by the sequence number alone,
    as the state-change queues' `/brokers/state/[broker_id]/[seq]` nodes are.
    """
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"coordination path must be absolute: {path!r}")
    if path == "/":
        return path
    # Every component framed by slashes, so that an empty, '.' or '..' one shows as a
    # substring: checked for every watch and read, tens of thousands while a large topic is
    # created, where splitting each path showed in a broker's event loop.
    framed = (path.removesuffix("/") if sequential else path) + "/"
    if "//" in framed or "/./" in framed or "/../" in framed or "\x00" in path:
        raise ValueError(f"invalid coordination path: {path!r}")
    return path


def parent_of(path: str) -> str:
    head = path.rsplit("/", 1)[0]
    return head or "/"


def join(parent: str, name: str) -> str:
    return f"/{name}" if parent == "/" else f"{parent}/{name}"


def ancestors(path: str) -> list[str]:
    """Proper ancestors of `path` below the root, outermost first (of a sequential prefix
    ending in '/', every node it names)."""
    parts = path[1:].split("/")
    return ["/" + "/".join(parts[:depth]) for depth in range(1, len(parts))]


def sequential_path(path: str, sequence: int) -> str:
    return f"{path}{sequence:0{SEQUENCE_DIGITS}d}"


class Store(abc.ABC):
    """A client of one coordination store, with one session at a time."""

    backend: str

    def __init__(self, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT):
        self.session_timeout_ms = session_timeout_ms
        self._session = SessionEvents()

    # lifecycle
    @abc.abstractmethod
    async def start(self) -> None:
        """Connect and open a session; returns once the session is CONNECTED."""

    @property
    def start_wait_s(self) -> float:
        """How long `start` may wait for a server that does not answer before it fails; 0 when
        it fails at once, so that a caller knows whether to say it is waiting."""
        return 0.0

    @abc.abstractmethod
    async def close(self) -> None:
        """End the session (its ephemeral nodes vanish at once) and release resources."""

    async def __aenter__(self) -> Store:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def session_state(self) -> SessionState:
        return self._session.state

    def session_events(self) -> Watch[SessionState]:
        """Current session state, then every change: CONNECTED, SUSPENDED, LOST."""
        return self._session.open()

    @abc.abstractmethod
    async def expire_session(self) -> None:
        """End the current session as the server would after a timeout, then open a new one.

        Its ephemeral nodes vanish and LOST is published before CONNECTED. Tests use this to
        simulate a broker whose session expired while it was paused.
        """

    @abc.abstractmethod
    async def server_version(self) -> str | None:
        """The server's version string, if the backend can tell."""

    # operations
    @abc.abstractmethod
    async def create(
        self,
        path: str,
        data: bytes = b"",
        *,
        ephemeral: bool = False,
        sequential: bool = False,
        make_parents: bool = False,
    ) -> str:
        """Create a node and return its path (with the sequence suffix when `sequential`).

        Raises NodeExists, or NoNode when the parent is missing and `make_parents` is false.
        Parents made by `make_parents` are persistent and empty.
        """

    @abc.abstractmethod
    async def get(self, path: str) -> tuple[bytes, int]:
        """(data, version); raises NoNode."""

    async def get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """Each node's (data, version), None for an absent one: at most TRANSACTION_OPS_MAX
        paths, as a transaction's operations (RequestRefused past it)."""
        if len(paths) > TRANSACTION_OPS_MAX:
            raise RequestRefused(f"a read of {len(paths)} nodes is over the limit of {TRANSACTION_OPS_MAX}", paths[0])
        return await self._get_many([validate_path(path) for path in paths])

    # Whether get_many reads its nodes in one request (etcd), rather than one each: only then
    # do reads asked for one by one gain by being joined (joined.py).
    reads_many_at_once = False

    async def _get_many(self, paths: list[str]) -> list[tuple[bytes, int] | None]:
        """One read per path, all in flight at once; a backend that reads many nodes in one
        request overrides it, and says so in `reads_many_at_once`."""
        answers = await asyncio.gather(*(self.get(path) for path in paths), return_exceptions=True)
        failed = next((answer for answer in answers if isinstance(answer, BaseException) and not isinstance(answer, NoNode)), None)
        if failed is not None:
            raise failed
        return [None if isinstance(answer, NoNode) else answer for answer in answers]

    @abc.abstractmethod
    async def set(self, path: str, data: bytes, version: int | None = None) -> int:
        """Replace the data, compare-and-set when `version` is given; returns the new version."""

    @abc.abstractmethod
    async def delete(self, path: str, version: int | None = None, recursive: bool = False) -> None:
        """Delete a node; NotEmpty if it has children unless `recursive`; BadVersion on mismatch."""

    @abc.abstractmethod
    async def exists(self, path: str) -> int | None:
        """The node's version, or None when it does not exist."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of the direct children, sorted; raises NoNode."""

    def transaction(self) -> Transaction:
        return Transaction(self._commit)

    @abc.abstractmethod
    async def _commit(self, ops: list[TxnOp]) -> list[object]:
        """Apply `ops` atomically; raise the first failing operation's error."""

    @abc.abstractmethod
    async def watch_data(self, path: str) -> Watch[DataEvent]:
        """Watch one node: its state now, then after every create, set and delete."""

    @abc.abstractmethod
    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        """Watch a node's sorted child names: now, then after every change (empty if absent)."""
