"""Fixtures shared by every test folder: real ZooKeeper and etcd servers on 127.0.0.1, and the
markers that tell in-process tests from cluster tests.

Each server is started once per test run by scripts/ (installed from Debian by the README's
test command) and stopped at the end; tests that restart a server get a private one.

`cluster` marks every test that starts broker processes or real servers (ZooKeeper, etcd, Kafka,
Spark, Prometheus): the tests of CLUSTER_FOLDERS, those that ask for a ZooKeeper or etcd server
(which also get `zk` or `etcd`), and modules that start brokers themselves (a `pytestmark`
there). A test without the marker that starts a BrokerProcess or a ServerProcess fails, so that
`pytest -m "not cluster"` stays the in-process suite.
"""

from __future__ import annotations

import pathlib

import pytest

from replog.storage import log as log_module
from replog.storage import segment as segment_module
from replog.storage.records import COMPILED, PURE_PYTHON
from tests.support.broker_process import BrokerProcess
from tests.support.servers import ServerProcess, stop_side_by_side

TESTS = pathlib.Path(__file__).resolve().parent
# Every test in these folders runs broker processes, real clients against them, or Spark/Kafka.
CLUSTER_FOLDERS = {"chaos", "clients", "cluster", "differential", "spark", "tools"}
STORE_SERVERS = {"zk": "zookeeper", "etcd": "etcd"}  # marker: what the server fixtures' names hold


def _store_servers(item: pytest.Item) -> set[str]:
    """The real coordination servers `item` runs against: by the server fixtures it asks for, or
    by a backend parameter ("zk", "etcd") whose fixture asks for one at run time."""
    params = getattr(item, "callspec", None)
    values = list(params.params.values()) if params else []
    return {marker for marker, name in STORE_SERVERS.items()
            if marker in values or any(name in fixture for fixture in item.fixturenames)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        servers = _store_servers(item)
        for marker in servers:
            item.add_marker(marker)
        if servers or item.path.relative_to(TESTS).parts[0] in CLUSTER_FOLDERS:
            item.add_marker("cluster")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    """An in-process test (and the fixtures it sets up, of any scope) starts no broker process and
    no server: one that does lacks its `cluster` marker."""
    if item.get_closest_marker("cluster"):
        yield
        return

    def refuse(process, *args, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a {type(process).__name__} without the cluster marker")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BrokerProcess, "start", refuse)
        patch.setattr(ServerProcess, "start", refuse)
        yield


def _server(kind: str, tmp_path_factory: pytest.TempPathFactory):
    server = ServerProcess(kind, tmp_path_factory.mktemp(kind))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def shared_servers():
    """The servers the whole run shares (append each once started), stopped side by side when
    the run ends: set up before them, this fixture is torn down after them."""
    servers: list[ServerProcess] = []
    try:
        yield servers
    finally:
        stop_side_by_side(servers)


def _shared_server(kind: str, tmp_path_factory: pytest.TempPathFactory, shared_servers: list[ServerProcess]):
    server = ServerProcess(kind, tmp_path_factory.mktemp(kind))
    server.start()
    shared_servers.append(server)
    return server


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory, shared_servers):
    return _shared_server("zookeeper", tmp_path_factory, shared_servers)


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory, shared_servers):
    return _shared_server("etcd", tmp_path_factory, shared_servers)


@pytest.fixture
def private_zookeeper_server(tmp_path_factory):
    yield from _server("zookeeper", tmp_path_factory)


@pytest.fixture
def private_etcd_server(tmp_path_factory):
    yield from _server("etcd", tmp_path_factory)


# Every implementation of the append-path and recovery scans that this installation has: the same
# tests hold for each.
CODECS = [codec for codec in (PURE_PYTHON, COMPILED) if codec is not None]


@pytest.fixture(params=CODECS, ids=lambda codec: codec.name)
def codec(request):
    return request.param


@pytest.fixture(params=CODECS, ids=lambda codec: f"log-{codec.name}")
def log_codec(request, monkeypatch):
    """Every Log of the test appends and recovers through this codec, so that the log-level tests
    cover the pure-Python fallback end to end and not only the compiled default."""
    monkeypatch.setattr(log_module, "assign_batches", request.param.assign_batches)
    monkeypatch.setattr(log_module, "validate_batches", request.param.validate_batches)
    monkeypatch.setattr(segment_module, "scan_segment", request.param.scan_segment)
    return request.param
