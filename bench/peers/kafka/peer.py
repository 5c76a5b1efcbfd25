"""Apache Kafka itself, beside replog on this machine: a KRaft cluster on 127.0.0.1 from Kafka's
own jars, for benchmarks and differential tests to measure replog against. This module starts,
kills, restarts and stops its servers (bench/compare/clusters.py drives it); `kafka` beside it is
the command line over it.

The jars of the release pinned in pom.xml (kafka.version) are resolved from Maven Central with
`mvn dependency:copy-dependencies` into .jars/ beside this module, once; later runs reuse them.
Nothing is vendored. Needs Java 17 or later and Maven, which it installs from Debian when
missing (default-jre-headless, maven; with sudo unless root).

`start` formats fresh storage under a run directory (anything of an earlier cluster there is
deleted) and starts the servers on free ports: one broker that is also the cluster's controller
(one JVM), or N brokers with M controllers of their own. It returns once every broker logged
that it started (a KRaft broker does once the controller let it in). `kill` SIGKILLs one server
and `launch` starts it again on its data and ports; `stop` stops them all (SIGTERM, then SIGKILL
after STOP_TIMEOUT_S) and keeps their logs in the run directory. Each running server's pid is
in <run dir>/<node>/pid, so that another process can stop what this one started.

The settings are replog's defaults where Kafka's differ, so that the two are compared on the same
terms: no fsync per message or interval (log.flush.interval.* unset: the OS flushes, as replog
by default), 1 GiB segments, replica.lag.time.max.ms 30 s, min.insync.replicas 1, no topic
auto-creation, and internal topics of min(3, brokers) replicas.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

HERE = pathlib.Path(__file__).resolve().parent
JARS = HERE / ".jars"
HEAP = "-Xmx1g"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 30.0
STARTED_LINE = "Kafka Server started"
TOOLS = {"producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
         "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance"}
CONTROLLER_ID_BASE = 1000  # brokers are 0..N-1, as replog's; controllers get ids of their own
# replog's defaults where Kafka's differ, and what a cluster of few brokers needs.
SHARED_SETTINGS = {
    "log.segment.bytes": "1073741824",
    "replica.lag.time.max.ms": "30000",
    "min.insync.replicas": "1",
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "3000",
    "num.partitions": "1",
    "default.replication.factor": "1",
}


def ensure_tools() -> None:
    """Java and Maven from Debian, if missing (as scripts/install-test-deps.sh installs Java)."""
    needed = [package for tool, package in (("java", "default-jre-headless"), ("mvn", "maven")) if shutil.which(tool) is None]
    if not needed:
        return
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    environment = os.environ | {"DEBIAN_FRONTEND": "noninteractive"}
    # Their output goes to stderr: `kafka classpath` prints nothing but the classpath on stdout.
    subprocess.run([*sudo, "apt-get", "update", "-q"], check=True, env=environment, stdout=sys.stderr)
    subprocess.run([*sudo, "apt-get", "install", "-y", "-q", "--no-install-recommends", *needed], check=True,
                   env=environment, stdout=sys.stderr)


def ensure_jars() -> None:
    """Kafka's jars in .jars/, resolved once; a resolution cut short leaves no marker and is redone."""
    marker = JARS / ".resolved"
    pom = HERE / "pom.xml"
    if marker.exists() and marker.read_text() == pom.read_text():
        return
    ensure_tools()
    shutil.rmtree(JARS, ignore_errors=True)
    # Even with -q, Maven writes terminal resets to stdout, which `kafka classpath` keeps for the path.
    subprocess.run(["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
                    f"-DoutputDirectory={JARS}", "-DincludeScope=runtime"], check=True, stdout=sys.stderr)
    marker.write_text(pom.read_text())


def java(main_class: str, *args: str, logs_dir: pathlib.Path | None = None) -> list[str]:
    """A JVM running `main_class`; a server's log goes to `logs_dir`, a tool's errors to stderr
    (log4j's default)."""
    command = ["java", HEAP, "-XX:+UseG1GC", "-Djava.awt.headless=true"]
    if logs_dir is not None:
        command += [f"-Dlog4j2.configurationFile={HERE / 'log4j2.properties'}", f"-Dkafka.logs.dir={logs_dir}"]
    return [*command, "-cp", f"{JARS}/*", main_class, *args]


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 now: each bound at once, so no two are the same."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for each in sockets:
            each.bind(("127.0.0.1", 0))
        return [each.getsockname()[1] for each in sockets]
    finally:
        for each in sockets:
            each.close()


def server_properties(node_id: int, roles: str, voters: str, controller_port: int | None, broker_port: int | None,
                      data_dir: pathlib.Path, brokers: int) -> str:
    listeners, advertised = [], []
    if broker_port is not None:
        listeners.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
        advertised.append(f"PLAINTEXT://127.0.0.1:{broker_port}")
    if controller_port is not None:
        listeners.append(f"CONTROLLER://127.0.0.1:{controller_port}")
    internal_replicas = str(min(3, brokers))
    settings = {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(data_dir),
        "offsets.topic.replication.factor": internal_replicas,
        "transaction.state.log.replication.factor": internal_replicas,
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": internal_replicas,
        "share.coordinator.state.topic.min.isr": "1",
        **SHARED_SETTINGS,
    }
    if advertised:
        settings["advertised.listeners"] = ",".join(advertised)
        settings["inter.broker.listener.name"] = "PLAINTEXT"
    return "".join(f"{key}={value}\n" for key, value in settings.items())


@dataclass(frozen=True)
class Node:
    """One server of a cluster: a broker, a controller, or (one broker alone) both in one JVM.
    Its directory holds server.properties, data/, logs/ and, while it runs, its pid."""

    name: str
    node_id: int
    roles: str
    controller_port: int | None
    broker_port: int | None
    directory: pathlib.Path

    @property
    def pid_file(self) -> pathlib.Path:
        return self.directory / "pid"


class PeerError(Exception):
    """The cluster did not come up; its servers are stopped and their logs kept."""


def plan(run_dir: pathlib.Path, brokers: int, controllers: int) -> list[Node]:
    """The servers of a cluster, on free ports: controllers first, then brokers 0..N-1."""
    combined = brokers == 1 and controllers == 1
    broker_ports = free_ports(brokers)
    controller_ports = free_ports(controllers)
    if combined:
        return [Node("broker-0", 0, "broker,controller", controller_ports[0], broker_ports[0], run_dir / "broker-0")]
    controller_ids = [CONTROLLER_ID_BASE + index for index in range(controllers)]
    return ([Node(f"controller-{node}", node, "controller", port, None, run_dir / f"controller-{node}")
             for node, port in zip(controller_ids, controller_ports)]
            + [Node(f"broker-{index}", index, "broker", None, port, run_dir / f"broker-{index}")
               for index, port in enumerate(broker_ports)])


def bootstrap(nodes: list[Node]) -> str:
    return ",".join(f"127.0.0.1:{node.broker_port}" for node in nodes if node.broker_port is not None)


def start(run_dir: pathlib.Path, brokers: int, controllers: int) -> list[Node]:
    """Fresh storage under `run_dir` (an earlier cluster there is stopped and deleted) and every
    server started; returns once every broker logged that it started."""
    ensure_jars()
    if read_pids(run_dir):
        stop(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    nodes = plan(run_dir, brokers, controllers)
    voters = ",".join(f"{node.node_id}@127.0.0.1:{node.controller_port}" for node in nodes if node.controller_port is not None)
    cluster_id = subprocess.run(java("kafka.tools.StorageTool", "random-uuid"), check=True, capture_output=True,
                                text=True).stdout.strip() or uuid.uuid4().hex
    for node in nodes:
        (node.directory / "logs").mkdir(parents=True)
        properties = node.directory / "server.properties"
        properties.write_text(server_properties(node.node_id, node.roles, voters, node.controller_port, node.broker_port,
                                                node.directory / "data", brokers))
        subprocess.run(java("kafka.tools.StorageTool", "format", "--cluster-id", cluster_id, "--config", str(properties),
                            logs_dir=node.directory / "logs"), check=True, stdout=subprocess.DEVNULL)
        launch(node)
    wait_started(run_dir, [node for node in nodes if node.broker_port is not None])
    return nodes


def launch(node: Node) -> None:
    """Start the server of a formatted node (again, after a kill: same data, same ports), in a
    session of its own so that a terminal's Ctrl-C reaches only whoever stops it."""
    with (node.directory / "logs" / "stdout.log").open("a") as output:
        process = subprocess.Popen(java("kafka.Kafka", str(node.directory / "server.properties"), logs_dir=node.directory / "logs"),
                                   stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
    node.pid_file.write_text(f"{process.pid}\n")


def kill(node: Node, *signals: signal.Signals) -> None:
    """SIGKILL the node's server (or send it `signals`, each in turn while it lives, as
    signal_and_wait does) and wait until it is gone."""
    pid = int(node.pid_file.read_text())
    node.pid_file.unlink()
    signal_and_wait([pid], *(signals or (signal.SIGKILL,)))


def wait_started(run_dir: pathlib.Path, broker_nodes: list[Node]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    waiting = {node.name for node in broker_nodes}
    while waiting and time.monotonic() < deadline:  # bounded by the deadline
        for name in list(waiting):
            log = run_dir / name / "logs" / "server.log"
            if log.exists() and STARTED_LINE in log.read_text(errors="replace"):
                waiting.discard(name)
        if any(not alive(pid) for pid in read_pids(run_dir)):
            break
        time.sleep(0.2)
    if waiting:
        stop(run_dir)
        raise PeerError(f"kafka: {', '.join(sorted(waiting))} did not start within {START_TIMEOUT_S:.0f} s; "
                        f"see {run_dir}/*/logs")


def read_pids(run_dir: pathlib.Path) -> list[int]:
    """The servers started in `run_dir` and not stopped or killed since."""
    return [int(pid_file.read_text()) for pid_file in sorted(run_dir.glob("*/pid"))]


def alive(pid: int) -> bool:
    """Running, and not a zombie: a server killed by the process that started it stays one
    until that process reaps it."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def signal_and_wait(pids: list[int], *signals: signal.Signals) -> None:
    """Each signal in turn, to the servers still alive, until none is (STOP_TIMEOUT_S each)."""
    for sig in signals:
        for pid in pids:
            if alive(pid):
                os.kill(pid, sig)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:  # bounded by the deadline
            time.sleep(0.1)
        if not any(alive(pid) for pid in pids):
            return


def stop(run_dir: pathlib.Path) -> int:
    """SIGTERM, then SIGKILL after STOP_TIMEOUT_S, to every server of `run_dir`; their logs stay.
    Returns how many there were."""
    pids = read_pids(run_dir)
    signal_and_wait(pids, signal.SIGTERM, signal.SIGKILL)
    for pid_file in run_dir.glob("*/pid"):
        pid_file.unlink()
    return len(pids)


def kafka_version() -> str:
    found = sorted(JARS.glob("kafka-clients-*.jar"))
    return found[0].stem.removeprefix("kafka-clients-") if found else "?"
