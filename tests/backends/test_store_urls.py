"""Coordination URLs (open_store): the accepted forms open their backend as written; anything
else is refused with the reason and the accepted forms, never read as urllib would read it."""

from __future__ import annotations

import pytest

from replog.coord_backends import ACCEPTED_FORMS, BadStoreUrl, open_store


@pytest.mark.parametrize("url, backend, where", [
    ("memory://", "MemoryStore", None),
    ("memory:///var/lib/replog/coord.sqlite", "MemoryStore", "/var/lib/replog/coord.sqlite"),
    ("zk://127.0.0.1:2181", "ZooKeeperStore", ("127.0.0.1:2181", "")),
    ("zk://127.0.0.1:2181,127.0.0.2:2181/replog/", "ZooKeeperStore", ("127.0.0.1:2181,127.0.0.2:2181", "/replog")),
    ("ZK://zk-1.example:2181/a/b", "ZooKeeperStore", ("zk-1.example:2181", "/a/b")),
    ("etcd://127.0.0.1:2379/replog", "EtcdStore", ("127.0.0.1", 2379, "/replog")),
    ("etcd://[::1]:2379", "EtcdStore", ("[::1]", 2379, "")),
])
def test_the_accepted_forms_open_their_backend_as_written(url, backend, where):
    store = open_store(url)
    assert type(store).__name__ == backend
    if backend == "MemoryStore":
        assert store.db_path == where
    elif backend == "ZooKeeperStore":
        assert (store.hosts, store._root) == where
    else:
        assert (store.host, store.port, store._prefix) == where


@pytest.mark.parametrize("url, reason", [
    # Without //: urllib reads the rest as a path, and memory: made it a file relative to the
    # working directory (a file named 127.0.0.1).
    ("memory:127.0.0.1", "memory: must be followed by //"),
    ("memory:", "memory: must be followed by //"),
    ("memory:/var/lib/coord.sqlite", "memory: must be followed by //"),
    ("MEMORY:coord.sqlite", "MEMORY: must be followed by //"),
    ("zk:127.0.0.1:2181", "zk: must be followed by //"),
    ("etcd:127.0.0.1:2379/replog", "etcd: must be followed by //"),
    # A path where the host belongs, and a host where the embedded store takes a path.
    ("zk:///replog", "no ZooKeeper host:port"),
    ("etcd:///replog", "no etcd host:port"),
    ("memory://data/coord.sqlite", "takes no host"),
    # Hosts and ports that would pass for something else.
    ("zk://:2181", "':2181' is not host:port"),
    ("zk://127.0.0.1", "'127.0.0.1' is not host:port"),
    ("zk://127.0.0.1:2181,", "'' is not host:port"),
    ("etcd://127.0.0.1:2379:2379", "'127.0.0.1:2379:2379' is not host:port"),
    ("zk://127.0.0.1:\u0662\u0661\u0668\u0661", "is not host:port"),
    ("etcd://127.0.0.1:0", "is not host:port"),
    ("zk://127.0.0.1:65536", "is not host:port"),
    ("etcd://root:secret@127.0.0.1:2379", "a user or password in the URL is refused"),
    ("zk://admin@127.0.0.1:2181", "a user or password in the URL is refused"),
    ("etcd://root:secret@127.0.0.1:2379,127.0.0.2:2379", "one etcd endpoint per URL"),
    ("etcd://127.0.0.1:2379,127.0.0.2:2379", "one etcd endpoint per URL"),
    # Paths the store would refuse later, with a traceback.
    ("zk://127.0.0.1:2181//replog", "the chroot '//replog' is not /name[/name...]"),
    ("zk://127.0.0.1:2181/replog/../other", "is not /name[/name...]"),
    ("etcd://127.0.0.1:2379/a/./b", "the prefix '/a/./b' is not /name[/name...]"),
    # What urllib drops or keeps silently.
    ("zk://127.0.0.1:2181/rep\tlog", "spaces and control characters are not used"),
    ("memory:///var/lib/coord.sqlite ", "spaces and control characters are not used"),
    ("zk://127.0.0.1:2181/replog\n", "spaces and control characters are not used"),
    ("zk://127.0.0.1:2181?", "query strings and fragments are not used"),
    ("memory://#x", "query strings and fragments are not used"),
    ("kafka://127.0.0.1:9092", "unknown scheme 'kafka'"),
    ("127.0.0.1:2181", "no scheme"),
    ("nonsense", "no scheme"),
])
def test_anything_else_is_refused_naming_the_accepted_forms(url, reason):
    with pytest.raises(BadStoreUrl) as refused:
        open_store(url)
    assert reason in refused.value.reason
    assert str(refused.value).endswith(f"; accepted forms: {ACCEPTED_FORMS}")
    assert "secret" not in str(refused.value)
