"""The embedded coordination store: replog's zero-setup default for a single host.

The tree lives in this process. Every `MemoryStore` client that names the same file shares one
tree (so several brokers or admin clients in one process see each other's writes and race on
versions exactly as they would on ZooKeeper); each client has its own session and ephemeral
nodes. A store opened without a file is private and volatile.

On disk: one sqlite3 database holding the persistent nodes, table
`nodes(path TEXT PRIMARY KEY, data BLOB, version INTEGER, next_sequence INTEGER)`. Ephemeral
nodes are never written, since they die with the process anyway. Every operation or
transaction is one sqlite transaction, committed before the caller sees the result. The
journal is WAL with synchronous=NORMAL: a committed write survives a crash of this process;
after power loss the newest few writes may be lost, like the log data that Kafka leaves to
the OS to flush. A lock file keeps a second process from opening the same tree, which it
could not share.

Versions count writes per node from 0, as ZooKeeper's do.
"""

from __future__ import annotations

import dataclasses
import fcntl
import itertools
import logging
import os
import sqlite3
from typing import Iterable

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
    SessionState,
    SetOp,
    Store,
    TxnOp,
    SESSION_TIMEOUT_MS_DEFAULT,
    Watch,
    ancestors,
    join,
    parent_of,
    sequential_path,
    validate_path,
)

logger = logging.getLogger(__name__)

_session_ids = itertools.count(1)


@dataclasses.dataclass
class _Node:
    data: bytes
    version: int = 0
    owner_session: int | None = None  # set for ephemeral nodes
    next_sequence: int = 0
    children: set[str] = dataclasses.field(default_factory=set)


class _Rollback:
    """Undo log of one transaction: each entry restores one path to its prior node (or absence)."""

    def __init__(self, tree: MemoryTree):
        self._tree = tree
        self._saved: dict[str, _Node | None] = {}

    def remember(self, path: str) -> None:
        if path not in self._saved:
            node = self._tree.nodes.get(path)
            self._saved[path] = None if node is None else dataclasses.replace(node, children=set(node.children))

    @property
    def touched(self) -> Iterable[str]:
        return self._saved.keys()

    def undo(self) -> None:
        for path, node in self._saved.items():
            if node is None:
                self._tree.nodes.pop(path, None)
            else:
                self._tree.nodes[path] = node


class MemoryTree:
    """One tree and its watches, shared by the clients that opened the same file."""

    def __init__(self, db_path: str | None):
        self.nodes: dict[str, _Node] = {"/": _Node(b"")}
        self.data_watches: dict[str, set[Watch[DataEvent]]] = {}
        self.child_watches: dict[str, set[Watch[tuple[str, ...]]]] = {}
        self.clients = 0
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        if db_path is not None:
            self._open_db(db_path)

    # persistence
    def _open_db(self, db_path: str) -> None:
        lock_fd = os.open(db_path + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock_fd)
            raise CoordinationUnavailable(
                f"embedded store {db_path} is open in another process; "
                "brokers in several processes need zk:// or etcd://"
            ) from None
        self._lock_fd = lock_fd
        db = sqlite3.connect(db_path, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute(
            "CREATE TABLE IF NOT EXISTS nodes (path TEXT PRIMARY KEY, data BLOB NOT NULL,"
            " version INTEGER NOT NULL, next_sequence INTEGER NOT NULL)"
        )
        rows = db.execute("SELECT path, data, version, next_sequence FROM nodes ORDER BY length(path)").fetchall()
        # Shortest paths first, so every parent is in place before its children arrive.
        for path, data, version, next_sequence in rows:
            if path == "/":
                root = self.nodes["/"]
                root.data, root.version, root.next_sequence = bytes(data), version, next_sequence
                continue
            self.nodes[path] = _Node(bytes(data), version, None, next_sequence)
            self.nodes[parent_of(path)].children.add(path.rsplit("/", 1)[1])
        self._db = db
        logger.debug("embedded store opened path=%s nodes=%d", db_path, len(rows))

    def _persist(self, paths: Iterable[str]) -> None:
        if self._db is None:
            return
        upserts, deletes = [], []
        for path in paths:
            node = self.nodes.get(path)
            if node is None:
                deletes.append((path,))
            elif node.owner_session is None:
                upserts.append((path, node.data, node.version, node.next_sequence))
        self._db.execute("BEGIN")
        self._db.executemany("DELETE FROM nodes WHERE path = ?", deletes)
        self._db.executemany(
            "INSERT OR REPLACE INTO nodes (path, data, version, next_sequence) VALUES (?, ?, ?, ?)", upserts
        )
        self._db.execute("COMMIT")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # mutations; each records what it touches in `rollback` so a failed transaction is undone
    def _node(self, path: str) -> _Node:
        node = self.nodes.get(path)
        if node is None:
            raise NoNode(path)
        return node

    def _check_version(self, path: str, version: int | None) -> _Node:
        node = self._node(path)
        if version is not None and node.version != version:
            raise BadVersion(path, version)
        return node

    def _create(self, rollback: _Rollback, path: str, data: bytes, owner: int | None, sequential: bool) -> str:
        parent_path = parent_of(path)
        parent = self.nodes.get(parent_path)
        if parent is None:
            raise NoNode(parent_path)
        rollback.remember(parent_path)
        if sequential:
            path = sequential_path(path, parent.next_sequence)
            parent.next_sequence += 1
        if path in self.nodes:
            raise NodeExists(path)
        rollback.remember(path)
        self.nodes[path] = _Node(data, 0, owner)
        parent.children.add(path.rsplit("/", 1)[1])
        return path

    def _set(self, rollback: _Rollback, path: str, data: bytes, version: int | None) -> int:
        node = self._check_version(path, version)
        rollback.remember(path)
        node.data = data
        node.version += 1
        return node.version

    def _delete(self, rollback: _Rollback, path: str, version: int | None) -> None:
        if path == "/":
            raise ValueError("the root node cannot be deleted")
        node = self._check_version(path, version)
        if node.children:
            raise NotEmpty(path)
        rollback.remember(path)
        rollback.remember(parent_of(path))
        del self.nodes[path]
        self.nodes[parent_of(path)].children.discard(path.rsplit("/", 1)[1])

    def _descendants_deepest_first(self, path: str) -> list[str]:
        found: list[str] = []
        stack = [path]
        while stack:
            current = stack.pop()
            found.append(current)
            stack.extend(join(current, name) for name in self.nodes[current].children)
        return found[::-1]

    def apply(self, session: int, steps: list[tuple]) -> list[object]:
        """Run mutation steps all-or-nothing, then persist and notify watches once."""
        rollback = _Rollback(self)
        results: list[object] = []
        try:
            for step in steps:
                results.append(self._apply_step(rollback, session, step))
        except BaseException:
            rollback.undo()
            raise
        touched = list(rollback.touched)
        self._persist(touched)
        self._notify(touched)
        return results

    def _apply_step(self, rollback: _Rollback, session: int, step: tuple) -> object:
        kind, *args = step
        if kind == "create":
            path, data, ephemeral, sequential, make_parents = args
            if make_parents:
                for ancestor in ancestors(path):
                    if ancestor not in self.nodes:
                        self._create(rollback, ancestor, b"", None, False)
            return Created(self._create(rollback, path, data, session if ephemeral else None, sequential), 0)
        if kind == "set":
            return self._set(rollback, *args)
        if kind == "delete":
            path, version, recursive = args
            if recursive:
                self._check_version(path, version)
                for victim in self._descendants_deepest_first(path):
                    self._delete(rollback, victim, None)
            else:
                self._delete(rollback, path, version)
            return None
        if kind == "check":
            self._check_version(*args)
            return None
        raise AssertionError(f"unknown step {kind}")

    def _notify(self, paths: list[str]) -> None:
        for path in paths:
            node = self.nodes.get(path)
            state = DataEvent(node.data, node.version) if node else DataEvent(None, None)
            for watch in self.data_watches.get(path, ()):
                watch.offer(state)
            names = tuple(sorted(node.children)) if node else ()
            for watch in self.child_watches.get(path, ()):
                watch.offer(names)

    def ephemerals_of(self, session: int) -> list[str]:
        return [path for path, node in self.nodes.items() if node.owner_session == session]


_shared_trees: dict[str, MemoryTree] = {}


def _attach_tree(db_path: str | None) -> MemoryTree:
    if db_path is None:
        tree = MemoryTree(None)
    else:
        key = os.path.realpath(db_path)
        tree = _shared_trees.get(key) or MemoryTree(key)
        _shared_trees[key] = tree
    tree.clients += 1
    return tree


def _detach_tree(tree: MemoryTree) -> None:
    tree.clients -= 1
    if tree.clients == 0:
        tree.close()
        for key, shared in list(_shared_trees.items()):
            if shared is tree:
                del _shared_trees[key]


class MemoryStore(Store):
    backend = "memory"

    def __init__(self, db_path: str | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT):
        super().__init__(session_timeout_ms)
        self.db_path = db_path
        self._tree: MemoryTree | None = None
        self._session_id = 0

    async def start(self) -> None:
        if self._tree is not None:
            return
        self._tree = _attach_tree(self.db_path)
        self._session_id = next(_session_ids)
        self._session.publish(SessionState.CONNECTED)

    async def close(self) -> None:
        if self._tree is None:
            return
        self._drop_ephemerals()
        tree, self._tree = self._tree, None
        _detach_tree(tree)
        self._session.publish(SessionState.LOST)

    async def expire_session(self) -> None:
        self._drop_ephemerals()
        self._session.publish(SessionState.LOST)
        self._session_id = next(_session_ids)
        self._session.publish(SessionState.CONNECTED)

    def _drop_ephemerals(self) -> None:
        tree = self._open_tree()
        # Deepest first, so that an ephemeral node under another one is gone before its parent's
        # recursive delete would meet it.
        doomed = sorted(tree.ephemerals_of(self._session_id), key=lambda path: path.count("/"), reverse=True)
        tree.apply(self._session_id, [("delete", path, None, True) for path in doomed])

    async def server_version(self) -> str | None:
        return f"embedded sqlite {sqlite3.sqlite_version}"

    def _open_tree(self) -> MemoryTree:
        if self._tree is None:
            raise CoordinationUnavailable("the embedded store client is closed")
        return self._tree

    def _apply(self, steps: list[tuple]) -> list[object]:
        return self._open_tree().apply(self._session_id, steps)

    async def create(self, path, data=b"", *, ephemeral=False, sequential=False, make_parents=False) -> str:
        validate_path(path, sequential=sequential)
        if path == "/":
            raise NodeExists(path)
        (created,) = self._apply([("create", path, bytes(data), ephemeral, sequential, make_parents)])
        return created

    async def get(self, path: str) -> tuple[bytes, int]:
        node = self._open_tree()._node(validate_path(path))
        return node.data, node.version

    async def set(self, path: str, data: bytes, version: int | None = None) -> int:
        (new_version,) = self._apply([("set", validate_path(path), bytes(data), version)])
        return new_version

    async def delete(self, path: str, version: int | None = None, recursive: bool = False) -> None:
        self._apply([("delete", validate_path(path), version, recursive)])

    async def exists(self, path: str) -> int | None:
        node = self._open_tree().nodes.get(validate_path(path))
        return None if node is None else node.version

    async def children(self, path: str) -> list[str]:
        return sorted(self._open_tree()._node(validate_path(path)).children)

    async def _commit(self, ops: list[TxnOp]) -> list[object]:
        steps: list[tuple] = []
        for op in ops:
            if isinstance(op, CheckOp):
                steps.append(("check", op.path, op.version))
            elif isinstance(op, CreateOp):
                steps.append(("create", op.path, op.data, op.ephemeral, False, False))
            elif isinstance(op, SetOp):
                steps.append(("set", op.path, op.data, op.version))
            elif isinstance(op, DeleteOp):
                steps.append(("delete", op.path, op.version, False))
        return self._apply(steps)

    async def watch_data(self, path: str) -> Watch[DataEvent]:
        tree = self._open_tree()
        node = tree.nodes.get(validate_path(path))
        return self._register(tree.data_watches, path, DataEvent(node.data, node.version) if node else DataEvent(None, None))

    async def watch_children(self, path: str) -> Watch[tuple[str, ...]]:
        tree = self._open_tree()
        node = tree.nodes.get(validate_path(path))
        return self._register(tree.child_watches, path, tuple(sorted(node.children)) if node else ())

    @staticmethod
    def _register(registry: dict[str, set[Watch]], path: str, initial: object) -> Watch:
        async def unregister() -> None:
            watches = registry.get(path)
            if watches is not None:
                watches.discard(watch)
                if not watches:
                    del registry[path]

        watch: Watch = Watch(unregister)
        watch.offer(initial)
        registry.setdefault(path, set()).add(watch)
        return watch
