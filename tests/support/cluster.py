"""A cluster of broker processes on 127.0.0.1 over one coordination store, for the cluster tests,
the CLI tests and the benchmarks."""

from __future__ import annotations

import contextlib
import pathlib

from tests.support.broker_process import BrokerProcess
from tests.support.harness import SecuredBootstrap
from tests.support.servers import ServerProcess, unique_root

SESSION_TIMEOUT_MS = 4000
REPLICA_LAG_TIME_MAX_MS = 2000  # short, so ISR changes happen within a test's patience
LONG_SESSION_TIMEOUT_MS = 120_000


def quick_settings(session_timeout_ms: int = SESSION_TIMEOUT_MS) -> tuple[str, ...]:
    """Short sessions, replica lag and leader-balance checks, so that a test sees them act; a
    setting may be given only once, so a different session is asked for here."""
    return (
        "--set", f"coord.session.timeout.ms={session_timeout_ms}",
        "--set", f"replica.lag.time.max.ms={REPLICA_LAG_TIME_MAX_MS}",
        "--set", "leader.imbalance.check.interval.seconds=1",
    )


QUICK_SETTINGS = quick_settings()


class Cluster:
    def __init__(self, coord_url: str, base_dir, size: int, extra_args: tuple[str, ...] = (),
                 settings: tuple[str, ...] = QUICK_SETTINGS, listeners: tuple[str, ...] = ("PLAINTEXT",),
                 client_security: dict[str, str] | None = None):
        """`listeners`: each broker's (BrokerProcess); clients bootstrap from the first, with
        librdkafka's `client_security` settings if given (harness.SecuredBootstrap)."""
        self.client_security = client_security
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
                listeners=listeners,
            )
            for broker_id in range(size)
        }

    @property
    def bootstrap(self) -> str:
        servers = ",".join(broker.bootstrap for broker in self.brokers.values() if broker.running)
        return servers if self.client_security is None else SecuredBootstrap(servers, self.client_security)

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
