"""The backend parametrisation: every test here runs against memory, ZooKeeper and etcd."""

from __future__ import annotations

import pytest

from replog.coord_backends import Store, StoreSecurity, open_store
from tests.support.secure_servers import secure_etcd_server, secure_zookeeper_server  # noqa: F401 (fixtures)
from tests.support.servers import unique_root

BACKENDS = ["memory", "zk", "etcd"]
SESSION_TIMEOUT_MS = 2000  # short, so expiry tests finish quickly; both servers allow it


def store_url(backend: str, server_address: str | None, tmp_path) -> str:
    """A URL naming a fresh, empty tree: a new file, or a new chroot/prefix on a shared server."""
    if backend == "memory":
        return f"memory://{tmp_path}/coordination.sqlite"
    return f"{backend}://{server_address}{unique_root()}"


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def url(backend, request, tmp_path) -> str:
    if backend == "memory":
        return store_url(backend, None, tmp_path)
    server = request.getfixturevalue("zookeeper_server" if backend == "zk" else "etcd_server")
    return store_url(backend, server.address, tmp_path)


@pytest.fixture
def security() -> StoreSecurity:
    """What `connect`'s clients sign in with: nothing, unless a module says otherwise."""
    return StoreSecurity()


@pytest.fixture
async def connect(url, security):
    """Factory for started clients of the same store; all are closed at teardown."""
    opened: list[Store] = []

    async def make(session_timeout_ms: int = SESSION_TIMEOUT_MS) -> Store:
        store = open_store(url, session_timeout_ms=session_timeout_ms, security=security)
        await store.start()
        opened.append(store)
        return store

    yield make
    for store in opened:
        await store.close()


@pytest.fixture
async def store(connect) -> Store:
    return await connect()


def counting_transactions(store) -> list[int]:
    """The size of each transaction `store` commits from now on, in order."""
    committed: list[int] = []
    begin = store.transaction

    def transaction():
        started = begin()
        commit = started.commit

        async def counted():
            committed.append(len(started.ops))
            return await commit()

        started.commit = counted
        return started

    store.transaction = transaction
    return committed

