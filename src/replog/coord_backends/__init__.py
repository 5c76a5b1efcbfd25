"""The coordination store: one interface (`Store`), three backends chosen by URL.

    memory://                     embedded, in this process; persisted under the broker's data dir
    memory:///path/to/file        embedded, persisted to that sqlite file
    zk://host:port[,host:port...][/chroot]     ZooKeeper
    etcd://host:port[/prefix]     etcd v3
"""

from __future__ import annotations

import os
import re
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
    validate_path,
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


# host:port, the host a name or address, or an IPv6 address in brackets; ASCII digits only
# (str.isdigit() takes other scripts' digits, which int() reads).
_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")
_SCHEMES = ("memory", "zk", "etcd")


def _host_port(url: str, netloc: str) -> tuple[str, int]:
    if "@" in netloc:
        raise BadStoreUrl(url, "a user or password in the URL is not used")
    address = _ADDRESS.fullmatch(netloc)
    if address is None or not 0 < int(address["port"]) < 65536:
        raise BadStoreUrl(url, f"{netloc!r} is not host:port")
    return address["host"], int(address["port"])


def _store_path(url: str, path: str, what: str) -> str:
    """`path` (a chroot, a prefix), "" for none; names between single slashes, none "." or ".."."""
    try:
        return validate_path(path) if path else path
    except ValueError:
        raise BadStoreUrl(url, f"the {what} {path!r} is not /name[/name...]") from None


def open_store(url: str, *, data_dir: str | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT) -> Store:
    """A Store for `url`, not yet started (`await store.start()` or `async with`).

    Anything but the accepted forms is refused, rather than read as urllib would: `memory:host`
    would be a relative file path, a tab or a newline would vanish from the URL, and a user or a
    second port would pass for part of the host."""
    if any(character.isspace() or not character.isprintable() for character in url):
        raise BadStoreUrl(url, "spaces and control characters are not used")
    if "?" in url or "#" in url:
        raise BadStoreUrl(url, "query strings and fragments are not used")
    scheme, colon, rest = url.partition(":")
    if scheme.lower() in _SCHEMES and colon and not rest.startswith("//"):
        raise BadStoreUrl(url, f"{scheme}: must be followed by //")
    parsed = urllib.parse.urlsplit(url)
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
        return ZooKeeperStore(parsed.netloc, _store_path(url, path, "chroot"), session_timeout_ms)
    if parsed.scheme == "etcd":
        from .etcd import EtcdStore

        if not parsed.netloc:
            raise BadStoreUrl(url, "no etcd host:port")
        if "," in parsed.netloc:
            raise BadStoreUrl(url, "one etcd endpoint per URL")
        host, port = _host_port(url, parsed.netloc)
        return EtcdStore(host, port, _store_path(url, path, "prefix"), session_timeout_ms)
    raise BadStoreUrl(url, f"unknown scheme {parsed.scheme!r}" if parsed.scheme else "no scheme")
