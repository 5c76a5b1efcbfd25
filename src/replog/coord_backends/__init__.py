"""The coordination store: one interface (`Store`), three backends chosen by URL.

    memory://                     embedded, in this process; persisted under the broker's data dir
    memory:///path/to/file        embedded, persisted to that sqlite file
    zk://host:port[,host:port...][/chroot]     ZooKeeper
    etcd://host:port[/prefix]     etcd v3
"""

from __future__ import annotations

import os
import urllib.parse

from .base import (
    SESSION_TIMEOUT_MS_DEFAULT,
    TRANSACTION_OPS_MAX,
    BadVersion,
    CoordinationUnavailable,
    Created,
    DataEvent,
    NodeExists,
    NoNode,
    NotEmpty,
    RequestRefused,
    SessionLost,
    SessionState,
    Store,
    StoreError,
    Transaction,
    Watch,
    commit_groups,
    commit_in_batches,
    commit_ops,
)
from .observed import ObservedStore

__all__ = [
    "ACCEPTED_FORMS",
    "BadStoreUrl",
    "BadVersion",
    "CoordinationUnavailable",
    "Created",
    "DataEvent",
    "NodeExists",
    "NoNode",
    "NotEmpty",
    "ObservedStore",
    "RequestRefused",
    "SessionLost",
    "SessionState",
    "Store",
    "StoreError",
    "TRANSACTION_OPS_MAX",
    "Transaction",
    "Watch",
    "commit_groups",
    "commit_in_batches",
    "commit_ops",
    "open_store",
]

ACCEPTED_FORMS = "memory://, memory:///path/to/file, zk://host:port[,host:port...][/chroot], etcd://host:port[/prefix]"
EMBEDDED_FILE_NAME = "coordination.sqlite"


class BadStoreUrl(ValueError):
    def __init__(self, url: str, reason: str):
        super().__init__(f"bad coordination URL {url!r}: {reason}; accepted forms: {ACCEPTED_FORMS}")
        self.reason = reason


def _host_port(url: str, netloc: str) -> tuple[str, int]:
    host, sep, port = netloc.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadStoreUrl(url, f"{netloc!r} is not host:port")
    return host, int(port)


def open_store(url: str, *, data_dir: str | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT) -> Store:
    """A Store for `url`, not yet started (`await store.start()` or `async with`)."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.query or parsed.fragment:
        raise BadStoreUrl(url, "query strings and fragments are not used")
    path = parsed.path.rstrip("/")
    if parsed.scheme == "memory":
        from .memory import MemoryStore

        if parsed.netloc:
            raise BadStoreUrl(url, "the embedded store takes no host; use memory:// or memory:///path")
        if path:
            return MemoryStore(path, session_timeout_ms)
        return MemoryStore(os.path.join(data_dir, EMBEDDED_FILE_NAME) if data_dir else None, session_timeout_ms)
    if parsed.scheme == "zk":
        from .zookeeper import ZooKeeperStore

        if not parsed.netloc:
            raise BadStoreUrl(url, "no ZooKeeper host:port")
        for server in parsed.netloc.split(","):
            _host_port(url, server)
        return ZooKeeperStore(parsed.netloc, path, session_timeout_ms)
    if parsed.scheme == "etcd":
        from .etcd import EtcdStore

        if "," in parsed.netloc:
            raise BadStoreUrl(url, "one etcd endpoint per URL")
        host, port = _host_port(url, parsed.netloc)
        return EtcdStore(host, port, path, session_timeout_ms)
    raise BadStoreUrl(url, f"unknown scheme {parsed.scheme!r}" if parsed.scheme else "no scheme")
