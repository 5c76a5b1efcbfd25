"""The clusters of the side-by-side comparison with Apache Kafka: replog's and Kafka's behind one
interface, to start and stop them, SIGKILL and restart one broker, and read the servers' memory.

replog runs one broker over its embedded store (memory://, in the broker's process: what
`replog broker start` gives an operator), beside Kafka's one JVM that is broker and controller at
once. Three replog brokers run over a ZooKeeper server of their own (scripts/zookeeper.sh),
beside three Kafka brokers and their KRaft controller. Not over the embedded store: it serves only
brokers inside its own process, and here every broker is a process of its own, to be SIGKILLed,
restarted and measured alone, as Kafka's brokers are. ZooKeeper rather than etcd because it is
the store of the replication design replog follows and, like Kafka's controller, a JVM beside
the brokers; it counts among the cluster's servers in `rss_bytes`, as Kafka's controllers do.

Settings: each side's defaults, which bench/peers/kafka/peer.py aligns where Kafka's differ
(1 GiB segments, no forced fsync, replica.lag.time.max.ms 30 s, min.insync.replicas 1, no topic
auto-creation). `settings` adds replog broker settings (`--set key=value`); what differs per run
(min.insync.replicas=2 for RF=3 acks=all) is a topic setting, given at creation to both.

A cluster is a context manager: leaving the block stops every server it started, also on an
exception or Ctrl-C. Data and logs stay in `run_dir` (emptied at start).
"""

from __future__ import annotations

import abc
import contextlib
import pathlib
import shutil
import signal
import sys
import threading

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.peers.kafka import peer  # noqa: E402
from tests.support.broker_process import START_TIMEOUT_S, BrokerProcess  # noqa: E402
from tests.support.servers import ServerProcess  # noqa: E402

ZOOKEEPER_ROOT = "/replog"
PAGE_BYTES = 4096


def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (/proc/<pid>/statm, second field, in pages); 0 once it is gone."""
    try:
        return int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_BYTES
    except FileNotFoundError:
        return 0


class Cluster(abc.ABC):
    """What the comparison's sections use of a cluster; one subclass per kind."""

    kind: str
    brokers: int
    run_dir: pathlib.Path

    @property
    @abc.abstractmethod
    def bootstrap(self) -> str:
        """Every broker's 127.0.0.1:port, running or not (a killed broker keeps its port)."""

    @abc.abstractmethod
    def start(self) -> None:
        """Fresh data in `run_dir`, every server started; returns once every broker serves."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop every server still running (SIGTERM, then SIGKILL if it lingers); logs stay."""

    def broker_ids(self) -> list[int]:
        return list(range(self.brokers))

    @abc.abstractmethod
    def kill(self, broker_id: int) -> None:
        """SIGKILL that broker's process, and wait until it is gone."""

    @abc.abstractmethod
    def stop_broker(self, broker_id: int) -> None:
        """SIGTERM that broker's process, a clean (controlled) shutdown, and wait until it is gone."""

    @abc.abstractmethod
    def restart(self, broker_id: int) -> None:
        """Start a killed or stopped broker again on its data directory and port; returns at once, before
        the broker serves (poll it with a client to time its return)."""

    @abc.abstractmethod
    def server_pids(self) -> list[int]:
        """The cluster's running server processes: brokers, and controllers or ZooKeeper."""

    def rss_bytes(self) -> int:
        """Resident memory of all the cluster's running server processes together."""
        return sum(rss_bytes(pid) for pid in self.server_pids())

    def __enter__(self) -> Cluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class ReplogCluster(Cluster):
    kind = "replog"

    def __init__(self, brokers: int, run_dir: pathlib.Path, settings: dict[str, str] | None = None):
        self.brokers = brokers
        self.run_dir = run_dir
        self.settings = dict(settings or {})
        self.zookeeper = ServerProcess("zookeeper", run_dir / "zookeeper") if brokers > 1 else None
        self.processes: dict[int, BrokerProcess] = {}
        self.restarting: list[threading.Thread] = []

    @property
    def bootstrap(self) -> str:
        return ",".join(process.bootstrap for process in self.processes.values())

    def start(self) -> None:
        shutil.rmtree(self.run_dir, ignore_errors=True)
        self.run_dir.mkdir(parents=True)
        coord_url = "memory://"
        if self.zookeeper is not None:
            self.zookeeper.start()
            coord_url = f"zk://{self.zookeeper.address}{ZOOKEEPER_ROOT}"
        settings = [argument for key, value in self.settings.items() for argument in ("--set", f"{key}={value}")]
        for broker_id in self.broker_ids():
            process = BrokerProcess(self.run_dir / f"broker-{broker_id}", coord_url=coord_url,
                                    extra_args=("--broker-id", str(broker_id), *settings))
            self.processes[broker_id] = process
            process.start()

    def stop(self) -> None:
        """Every broker (SIGTERM), then ZooKeeper; each broker's output goes to broker-N.log."""
        try:
            for thread in self.restarting:
                thread.join(START_TIMEOUT_S)
            for broker_id, process in self.processes.items():
                try:
                    process.stop()
                finally:
                    (self.run_dir / f"broker-{broker_id}.log").write_text("".join(process.output))
        finally:
            if self.zookeeper_pid() is not None:
                self.zookeeper.stop()

    def kill(self, broker_id: int) -> None:
        self.processes[broker_id].kill()

    def stop_broker(self, broker_id: int) -> None:
        self.processes[broker_id].stop()

    def restart(self, broker_id: int) -> None:
        # BrokerProcess.restart returns once the broker listens; a thread keeps this call
        # as immediate as Kafka's.
        thread = threading.Thread(target=self.processes[broker_id].restart, name=f"restart-broker-{broker_id}", daemon=True)
        self.restarting.append(thread)
        thread.start()

    def server_pids(self) -> list[int]:
        pids = [process.process.pid for process in self.processes.values() if process.process is not None]
        return pids if self.zookeeper_pid() is None else [*pids, self.zookeeper_pid()]

    def zookeeper_pid(self) -> int | None:
        """The ZooKeeper server's, while scripts/zookeeper.sh has it running."""
        pid_file = None if self.zookeeper is None else self.zookeeper.state_dir / "pid"
        return int(pid_file.read_text()) if pid_file is not None and pid_file.exists() else None


class KafkaCluster(Cluster):
    kind = "kafka"

    def __init__(self, brokers: int, run_dir: pathlib.Path, controllers: int = 1):
        self.brokers = brokers
        self.controllers = controllers
        self.run_dir = run_dir
        self.nodes: dict[int, peer.Node] = {}  # brokers by id

    @property
    def bootstrap(self) -> str:
        return peer.bootstrap(list(self.nodes.values()))

    def start(self) -> None:
        started = peer.start(self.run_dir, self.brokers, self.controllers)
        self.nodes = {node.node_id: node for node in started if node.broker_port is not None}

    def stop(self) -> None:
        peer.stop(self.run_dir)

    def kill(self, broker_id: int) -> None:
        peer.kill(self.nodes[broker_id])

    def stop_broker(self, broker_id: int) -> None:
        peer.kill(self.nodes[broker_id], signal.SIGTERM, signal.SIGKILL)

    def restart(self, broker_id: int) -> None:
        peer.launch(self.nodes[broker_id])

    def server_pids(self) -> list[int]:
        return [pid for pid in peer.read_pids(self.run_dir) if peer.alive(pid)]


def replog_cluster(brokers: int, run_dir: pathlib.Path, settings: dict[str, str] | None = None) -> Cluster:
    return ReplogCluster(brokers, run_dir, settings)


def kafka_cluster(brokers: int, run_dir: pathlib.Path, controllers: int = 1) -> Cluster:
    return KafkaCluster(brokers, run_dir, controllers)


class Pairs:
    """The comparison's running clusters: one replog and one Kafka cluster of the same number of
    brokers, started when a section first asks for that number and kept for the next section
    that asks for it; a pair of another size stops them first, so that at most one pair runs."""

    def __init__(self, run_dir: pathlib.Path):
        self.run_dir = run_dir
        self.running: tuple[int, list[Cluster]] | None = None

    def get(self, brokers: int) -> list[Cluster]:
        """[replog, kafka], each of `brokers` brokers, running."""
        if self.running is not None and self.running[0] == brokers:
            return self.running[1]
        self.close()
        pair = []
        self.running = (brokers, pair)
        for cluster in (replog_cluster(brokers, self.run_dir / f"replog-{brokers}"),
                        kafka_cluster(brokers, self.run_dir / f"kafka-{brokers}")):
            pair.append(cluster)
            cluster.start()
        return pair

    def close(self) -> None:
        """Stop the running pair, each cluster even if the other fails to stop."""
        if self.running is None:
            return
        pair, self.running = self.running[1], None
        with contextlib.ExitStack() as stopping:
            for cluster in pair:
                stopping.callback(cluster.stop)

    def __enter__(self) -> Pairs:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
