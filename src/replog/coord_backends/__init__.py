"""The coordination store: one interface (`Store`), three backends chosen by URL.

    memory://                     embedded, in this process; persisted under the broker's data dir
    memory:///path/to/file        embedded, persisted to that sqlite file
    zk://host:port[,host:port...][/chroot]     ZooKeeper
    etcd://host:port[/prefix]     etcd v3

A URL carries no user or password (it is shown in logs and commands' output): they come as a
StoreSecurity, from settings and files (replog.coord_settings).
"""

from __future__ import annotations

import os
import re
import urllib.parse

from .base import (
    SESSION_TIMEOUT_MS_DEFAULT,
    AccessDenied,
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
    children_or_empty,
    commit_groups,
    commit_in_batches,
    commit_ops,
    get_all,
    validate_path,
)
from .observed import ObservedStore
from .security import NO_SECURITY, StoreSecurity

__all__ = [
    "ACCEPTED_FORMS",
    "AccessDenied",
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
    "StoreSecurity",
    "TRANSACTION_OPS_MAX",
    "Transaction",
    "Watch",
    "children_or_empty",
    "commit_groups",
    "commit_in_batches",
    "commit_ops",
    "get_all",
    "hide_credentials",
    "open_store",
]

ACCEPTED_FORMS = "memory://, memory:///path/to/file, zk://host:port[,host:port...][/chroot], etcd://host:port[/prefix]"
EMBEDDED_FILE_NAME = "coordination.sqlite"


class BadStoreUrl(ValueError):
    def __init__(self, url: str, reason: str):
        super().__init__(f"bad coordination URL {hide_credentials(url)!r}: {reason}; accepted forms: {ACCEPTED_FORMS}")
        self.reason = reason


_USER_INFO = re.compile(r"(?<=//)[^/@]*@")


def hide_credentials(url: str) -> str:
    """`url` as it may be shown: a user or password in it (refused, but written by someone) hidden."""
    return _USER_INFO.sub("[hidden]@", url)


# host:port, the host a name or address, or an IPv6 address in brackets; ASCII digits only
# (str.isdigit() takes other scripts' digits, which int() reads).
_ADDRESS = re.compile(r"(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")
_SCHEMES = ("memory", "zk", "etcd")


def _host_port(url: str, netloc: str) -> tuple[str, int]:
    if "@" in netloc:
        raise BadStoreUrl(url, "a user or password in the URL is refused (URLs are shown in logs); give them as "
                               "coord.username and coord.password.file")
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


def open_store(url: str, *, data_dir: str | None = None, session_timeout_ms: int = SESSION_TIMEOUT_MS_DEFAULT,
               security: StoreSecurity = NO_SECURITY) -> Store:
    """A Store for `url`, not yet started (`await store.start()` or `async with`), connecting
    with `security` (the embedded store, inside the broker's process, takes none).

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
        if security != NO_SECURITY:
            raise BadStoreUrl(url, "the embedded store takes no user, ACLs or TLS: it is inside the broker's process")
        if path:
            return MemoryStore(path, session_timeout_ms)
        return MemoryStore(os.path.join(data_dir, EMBEDDED_FILE_NAME) if data_dir else None, session_timeout_ms)
    if parsed.scheme == "zk":
        from .zookeeper import ZooKeeperStore

        if not parsed.netloc:
            raise BadStoreUrl(url, "no ZooKeeper host:port")
        for server in parsed.netloc.split(","):
            _host_port(url, server)
        return ZooKeeperStore(parsed.netloc, _store_path(url, path, "chroot"), session_timeout_ms, security)
    if parsed.scheme == "etcd":
        from .etcd import EtcdStore

        if not parsed.netloc:
            raise BadStoreUrl(url, "no etcd host:port")
        if "," in parsed.netloc:
            raise BadStoreUrl(url, "one etcd endpoint per URL")
        host, port = _host_port(url, parsed.netloc)
        if security.set_acl:
            raise BadStoreUrl(url, "zookeeper.set.acl applies to ZooKeeper; etcd's permissions are its users' roles "
                                   "(etcdctl role grant-permission)")
        return EtcdStore(host, port, _store_path(url, path, "prefix"), session_timeout_ms, security)
    raise BadStoreUrl(url, f"unknown scheme {parsed.scheme!r}" if parsed.scheme else "no scheme")
