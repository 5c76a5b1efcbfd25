"""Clusters of broker processes on 127.0.0.1, over a real ZooKeeper or etcd (or, where it
applies, the embedded store), for the replication tests."""

from __future__ import annotations

import contextlib
import pathlib

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.servers import ServerProcess, unique_root

SESSION_TIMEOUT_MS = 4000
REPLICA_LAG_TIME_MAX_MS = 2000  # short, so ISR changes happen within a test's patience
LONG_SESSION_TIMEOUT_MS = 120_000
QUICK_SETTINGS = (
    "--set", f"coord.session.timeout.ms={SESSION_TIMEOUT_MS}",
    "--set", f"replica.lag.time.max.ms={REPLICA_LAG_TIME_MAX_MS}",
    "--set", "leader.imbalance.check.interval.seconds=1",
)


class Cluster:
    def __init__(self, coord_url: str, base_dir, size: int, extra_args: tuple[str, ...] = (),
                 settings: tuple[str, ...] = QUICK_SETTINGS):
        self.coord_url = coord_url
        self.base_dir = base_dir
        self.server = None  # the ServerProcess behind coord_url
        self.brokers = {
            broker_id: BrokerProcess(
                base_dir / f"broker-{broker_id}",
                coord_url=coord_url,
                extra_args=(
                    "--broker-id", str(broker_id),
                    *settings,
                    *extra_args,
                ),
            )
            for broker_id in range(size)
        }

    @property
    def bootstrap(self) -> str:
        return ",".join(broker.bootstrap for broker in self.brokers.values() if broker.running)

    def start(self) -> None:
        for broker in self.brokers.values():
            broker.start()

    def stop(self) -> None:
        for broker_id, broker in self.brokers.items():
            broker.stop()
            # Kept beside the data dirs (pytest keeps the last runs' tmp_path) to read after a failure.
            (self.base_dir / f"broker-{broker_id}.log").write_text("".join(broker.output))


@contextlib.contextmanager
def cluster_with_own_server(kind: str, scratch: pathlib.Path, size: int = 3, settings: tuple[str, ...] = ()):
    """For the benchmarks: a ZooKeeper or etcd server ("zk" | "etcd") of its own in `scratch`,
    and `size` brokers over it (at the broker's own settings unless `settings`); both stopped
    at the end."""
    server = ServerProcess("zookeeper" if kind == "zk" else "etcd", scratch / kind)
    server.start()
    try:
        cluster = Cluster(f"{kind}://{server.address}{unique_root()}", scratch, size, settings=settings)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.stop()
    finally:
        server.stop()


def _running_cluster(request, base_dir, server_fixtures: dict[str, str], extra_args: tuple[str, ...] = (),
                     settings: tuple[str, ...] = QUICK_SETTINGS):
    server = request.getfixturevalue(server_fixtures[request.param])
    running = Cluster(f"{request.param}://{server.address}{unique_root()}", base_dir, 3, extra_args, settings)
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
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS, ("--set", f"coord.session.timeout.ms={LONG_SESSION_TIMEOUT_MS}"))
