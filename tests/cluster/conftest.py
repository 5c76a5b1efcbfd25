"""Clusters of broker processes on 127.0.0.1, over a real ZooKeeper or etcd (or, where it
applies, the embedded store), for the replication tests."""

from __future__ import annotations

import pytest

from tests.support.cluster import LONG_SESSION_TIMEOUT_MS, QUICK_SETTINGS, Cluster, quick_settings
from tests.support.secure_servers import secure_etcd_server, secure_zookeeper_server  # noqa: F401 (fixtures)
from tests.support.servers import unique_root


def _running_cluster(request, base_dir, server_fixtures: dict[str, str], extra_args: tuple[str, ...] = (),
                     settings: tuple[str, ...] = QUICK_SETTINGS, listeners: tuple[str, ...] = ("PLAINTEXT",)):
    server = request.getfixturevalue(server_fixtures[request.param])
    running = Cluster(f"{request.param}://{server.address}{unique_root()}", base_dir, 3, extra_args, settings, listeners)
    running.server = server
    running.start()
    try:
        yield running
    finally:
        running.stop()


SHARED_SERVERS = {"zk": "zookeeper_server", "etcd": "etcd_server"}


@pytest.fixture(params=["zk", "etcd"])
def cluster(request, tmp_path):
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS)


@pytest.fixture(scope="module", params=["zk", "etcd"])
def default_cluster(request, tmp_path_factory):
    """At the broker's own settings (9 s sessions, 30 s replica lag): what an operator gets.
    Shared by a module's tests, since its failovers are slow; a test that kills a broker leaves
    it down, and the next brings it back (failover.restart_stopped); all stop at the end."""
    yield from _running_cluster(request, tmp_path_factory.mktemp(f"default-{request.param}"), SHARED_SERVERS, settings=())


@pytest.fixture(params=["zk", "etcd"])
def private_cluster(request, tmp_path):
    """Over a coordination server of its own, which the test may stop and restart; brokers log
    at INFO, so that their "became leader ... epoch=" lines can be checked."""
    servers = {"zk": "private_zookeeper_server", "etcd": "private_etcd_server"}
    yield from _running_cluster(request, tmp_path, servers, ("--log-level", "INFO"))


@pytest.fixture(params=["zk", "etcd"])
def long_session_cluster(request, tmp_path):
    """Sessions that outlast every wait of a test (WAIT_S): what happens there before a killed
    broker's session expires happened without it."""
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS, settings=quick_settings(LONG_SESSION_TIMEOUT_MS))
