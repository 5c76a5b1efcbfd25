"""Many partitions on three brokers, over ZooKeeper or etcd: creation, watches, memory, restarts.

    .venv/bin/python bench/scale.py [--partitions 1000,10000] [--store zk|etcd|both]
                                    [--phase-timeout-s 300] [--scratch DIR]

Prints (never asserts), for each store and each partition count N, from a fresh cluster of three
brokers on 127.0.0.1 at the broker's own default settings, over a server of the bench's own
(ZooKeeper as scripts/zookeeper.sh runs it, with the `wchc` and `dump` four-letter commands
allowed as well; etcd as scripts/etcd.sh runs it: a stock etcd, 128 operations per
transaction), for one topic of N partitions with RF=3:

- create: how long confluent-kafka's AdminClient.create_topics took to return (request timeout
  and operation timeout both --phase-timeout-s, so the broker may wait for the leaders as long as
  the bench does; socket.timeout.ms raised to match, at most librdkafka's 300 s), and the error it
  returned, verbatim; and the time from the request until every partition has a leader and all 3
  replicas in its ISR (by the brokers' gauges, below; then by a client's Metadata); and over that
  time, the CPU each broker and the store's server used
  (/proc/<pid>/stat) and the store operations each broker made, by kind (the broker's
  replog_store_operation_seconds_count), which is where a creation's time goes on 2 cores;
- watches, once every partition is in sync (and, for comparison, on the idle cluster before the
  topic): on ZooKeeper the server's total (`mntr` zk_watch_count, data and child watches) and per
  broker the data watches its session holds (`wchc`, which lists data watches only; a session is
  named by its /brokers/ids ephemeral in `dump`); on etcd the server's watchers and watch streams
  (/metrics: etcd_debugging_mvcc_watcher_total, etcd_debugging_mvcc_watch_stream_total), per broker
  as the total / 3; and on both, how many watches went when one broker stopped (the restart below);
- RSS per broker (/proc/<pid>/status VmRSS), once every partition is in sync (and before the topic);
- CPU per broker while idle, in sync (user + system from /proc/<pid>/stat over IDLE_CPU_WINDOW_S,
  as a share of one core): what thousands of partitions cost when nothing is written;
- restart: broker 2 stopped with SIGTERM (a clean shutdown), then started again on the same data
  directory: how long it took to exit, to listen again (a broker listens once it has started
  every replica; the harness's start timeout is raised to --phase-timeout-s), and until every
  partition has it in its ISR again (gauges, then Metadata), from the start and from the signal;
- controlled shutdown: the broker that then leads the most partitions stopped with SIGTERM: the
  time from the signal until no partition names it as leader (Metadata), until every partition
  has a leader again (another broker; gauges, then Metadata), and until the process exited.

When a phase's end is reached is read from the brokers' own gauges on their /metrics, every 0.2 s:
every partition is led when the brokers' replog_leader_partitions add up to the partition count
(the bench's topic is the cluster's only one), and in sync when their
replog_under_replicated_partitions (Kafka's UnderReplicatedPartitions: partitions a broker leads
whose ISR is short of their replicas) add up to 0. Then the same is awaited in a client's view:
one Metadata request (confluent-kafka list_topics of the topic) every 0.2 s, or ten times as long
as the broker took to answer the last one if that is longer (the Metadata of 10,000 partitions
every 0.2 s took a third of a broker's CPU, so the bench slowed what it timed, and the spacing
made that figure up to 10 s late), from whichever live broker librdkafka asks (never the
stopping one in the controlled shutdown, as far as librdkafka allows). Each phase waits at most
--phase-timeout-s and then prints "not within N s" and what it saw last; when the topic is not
created, or not in sync, the later phases of that run are skipped.
A summary table closes the output. Broker logs (INFO) are kept in --scratch DIR if given.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.replication import cpu_seconds  # noqa: E402
from tests.support import broker_process  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.servers import SCRIPTS, ServerProcess, four_letter, unique_root, zookeeper_watch_count  # noqa: E402

TOPIC = "scale"
BROKERS = 3
REPLICATION = 3
RESTARTED = 2  # the broker of the restart phase
ZOOKEEPER_WHITELIST = "4lw.commands.whitelist=ruok,srvr,stat,mntr"
POLL_S = 0.2
POLL_LOAD_FACTOR = 10
METADATA_TIMEOUT_S = 60
METRICS_TIMEOUT_S = 60
SOCKET_TIMEOUT_MAX_S = 300  # librdkafka's most for socket.timeout.ms
IDLE_CPU_WINDOW_S = 10
ABSENT_AFTER_ERROR_S = 10  # how long a topic whose creation returned an error may take to appear


# --- the servers and the cluster --------------------------------------------------------------


def zookeeper_script(scratch: pathlib.Path) -> pathlib.Path:
    """scripts/zookeeper.sh, copied (with _common.sh) into `scratch` with `wchc` and `dump` added
    to the four-letter-word whitelist: the per-session watch list, and which session is which
    broker. The script itself stays as the tests use it."""
    copied = scratch / "scripts"
    copied.mkdir(parents=True, exist_ok=True)
    shutil.copy(SCRIPTS / "_common.sh", copied / "_common.sh")
    text = (SCRIPTS / "zookeeper.sh").read_text()
    if ZOOKEEPER_WHITELIST not in text:
        raise RuntimeError(f"scripts/zookeeper.sh no longer says {ZOOKEEPER_WHITELIST!r}: update bench/scale.py")
    (copied / "zookeeper.sh").write_text(text.replace(ZOOKEEPER_WHITELIST, ZOOKEEPER_WHITELIST + ",wchc,dump"))
    return copied / "zookeeper.sh"


@contextlib.contextmanager
def cluster_over_own_server(store: str, scratch: pathlib.Path):
    """tests/support/cluster.py's cluster_with_own_server, but over the bench's ZooKeeper (see
    zookeeper_script), and with brokers that failed to start stopped too. Yields (server
    address, server pid, cluster); every process is stopped at the end."""
    server = ServerProcess("zookeeper" if store == "zk" else "etcd", scratch / "server")
    if store == "zk":
        server.script = zookeeper_script(scratch)
    server.start()
    try:
        cluster = Cluster(f"{store}://{server.address}{unique_root()}", scratch, BROKERS, settings=())
        try:
            cluster.start()
            yield server.address, int((scratch / "server" / "pid").read_text()), cluster
        finally:
            cluster.stop()
    finally:
        server.stop()


def admin_client(bootstrap: str, socket_timeout_s: float | None = None) -> AdminClient:
    # log_level 0: the refused connections to a stopped broker would only clutter the figures.
    # No auto-creation: a Metadata request for the topic must never create it with defaults.
    # socket.timeout.ms: librdkafka gives up on any request unanswered for this long (60 s by
    # default) whatever the call's own timeouts; 300 s is the most it accepts.
    config = {"bootstrap.servers": bootstrap, "log_level": 0, "allow.auto.create.topics": False}
    if socket_timeout_s is not None:
        config["socket.timeout.ms"] = int(min(SOCKET_TIMEOUT_MAX_S, socket_timeout_s) * 1000)
    return AdminClient(config)


def bootstrap_without(cluster: Cluster, broker_id: int) -> str:
    return ",".join(broker.bootstrap for other, broker in cluster.brokers.items() if other != broker_id and broker.running)


# --- reading the cluster --------------------------------------------------------------------


def describe(admin: AdminClient) -> dict[int, object] | None:
    """The topic's partition metadata by index as one broker answers ({} if it does not know the
    topic), or None if no broker answered."""
    try:
        topic = admin.list_topics(TOPIC, timeout=METADATA_TIMEOUT_S).topics.get(TOPIC)
    except KafkaException:
        return None
    if topic is None or topic.error is not None:
        return {}
    return dict(topic.partitions)


def in_sync(meta) -> bool:
    return meta.leader >= 0 and len(meta.replicas) == REPLICATION and sorted(meta.isrs) == sorted(meta.replicas)


def tally(partitions: dict[int, object] | None) -> str:
    if partitions is None:
        return "no broker answered a Metadata request"
    if not partitions:
        return "the topic is not in the metadata"
    return (f"{len(partitions)} partitions in the metadata, {sum(meta.leader >= 0 for meta in partitions.values())} led, "
            f"{sum(in_sync(meta) for meta in partitions.values())} with a full ISR")


class Poll:
    """Metadata read by `read()` (None while no broker answers) every POLL_S (or, if longer,
    POLL_LOAD_FACTOR times as long as the last answer took: the Metadata of 10,000 partitions
    every 0.2 s took a third of a broker's CPU, so the bench slowed what it timed) until `done`
    holds of it or `timeout_s` passes; `last` is the last answer."""

    def __init__(self, read: Callable[[], Any], timeout_s: float):
        self.read = read
        self.timeout_s = timeout_s
        self.last: Any = None

    def until(self, done, since: float, stop_early=lambda: False) -> float | None:
        """Seconds from `since` to the first answer of which `done(answer)` holds; None if
        none within the timeout (from now) or once `stop_early()` holds."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            asked = time.monotonic()
            self.last = self.read()
            answered = time.monotonic()
            if self.last is not None and done(self.last):
                return answered - since
            if answered >= deadline or stop_early():
                return None
            # An unanswered read may have waited for a broker to listen: no measure of the load.
            time.sleep(POLL_S if self.last is None else max(POLL_S, POLL_LOAD_FACTOR * (answered - asked)))


def all_in_sync(partitions_count: int):
    return lambda partitions: len(partitions) == partitions_count and all(in_sync(meta) for meta in partitions.values())


def rss_mb(pid: int) -> float:
    found = re.search(r"^VmRSS:\s+(\d+) kB", pathlib.Path(f"/proc/{pid}/status").read_text(), re.M)
    return int(found[1]) / 1024


def idle_cpu_by_broker(cluster: Cluster) -> dict[int, float]:
    """Each broker's CPU time over IDLE_CPU_WINDOW_S of nothing being asked, per second."""
    pids = {broker_id: broker.process.pid for broker_id, broker in cluster.brokers.items()}
    before = {broker_id: cpu_seconds(pid) for broker_id, pid in pids.items()}
    time.sleep(IDLE_CPU_WINDOW_S)  # the measuring window itself, not a wait for a condition
    return {broker_id: (cpu_seconds(pid) - before[broker_id]) / IDLE_CPU_WINDOW_S for broker_id, pid in pids.items()}


def scrape(broker) -> str:
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=METRICS_TIMEOUT_S) as answer:
        return answer.read().decode()


def store_operations(broker) -> Counter:
    """The broker's coordination store operations so far, by kind, from its /metrics."""
    text = scrape(broker)
    counts: Counter = Counter()
    for operation, count in re.findall(r'^replog_store_operation_seconds_count\{operation="(\w+)"\} (\S+)$', text, re.M):
        counts[operation] += int(float(count))
    return counts


@dataclass
class Led:
    """The brokers' own gauges, summed over the brokers asked: the partitions they lead, and of
    those, the ones whose ISR is short of their replicas (Kafka's UnderReplicatedPartitions)."""
    led: int
    under_replicated: int

    def all_in_sync(self, partitions_count: int) -> bool:
        return self.led == partitions_count and self.under_replicated == 0


def led_by(brokers: list) -> Led | None:
    """None if a broker did not answer."""
    led = under_replicated = 0
    for broker in brokers:
        try:
            text = scrape(broker)
        except OSError:
            return None
        found = dict(re.findall(r"^(replog_leader_partitions|replog_under_replicated_partitions) (\S+)$", text, re.M))
        led += int(float(found["replog_leader_partitions"]))
        under_replicated += int(float(found["replog_under_replicated_partitions"]))
    return Led(led, under_replicated)


def gauges_until(brokers: list, done, since: float, timeout_s: float, stop_early=lambda: False) -> tuple[float | None, Led | None]:
    """Seconds from `since` until `done(led_by(brokers))` holds, read every POLL_S, or None if
    not within `timeout_s` (from now) or once `stop_early()` holds; and the last reading."""
    deadline = time.monotonic() + timeout_s
    while True:
        last = led_by(brokers)
        answered = time.monotonic()
        if last is not None and done(last):
            return answered - since, last
        if answered >= deadline or stop_early():
            return None, last
        time.sleep(POLL_S)


@dataclass
class Spent:
    """CPU seconds per process and store operations per broker, so far: subtracted, over a phase."""
    cpu: dict[str, float]
    operations: dict[int, Counter]

    @classmethod
    def now(cls, cluster: Cluster, server_pid: int) -> Spent:
        cpu = {f"broker {broker_id}": cpu_seconds(broker.process.pid) for broker_id, broker in sorted(cluster.brokers.items())}
        cpu["store server"] = cpu_seconds(server_pid)
        return cls(cpu, {broker_id: store_operations(broker) for broker_id, broker in sorted(cluster.brokers.items())})

    def __sub__(self, before: Spent) -> Spent:
        return Spent({name: seconds - before.cpu[name] for name, seconds in self.cpu.items()},
                     {broker_id: counts - before.operations[broker_id] for broker_id, counts in self.operations.items()})


def rss_by_broker(cluster: Cluster) -> dict[int, float]:
    return {broker_id: rss_mb(broker.process.pid) for broker_id, broker in cluster.brokers.items() if broker.running}


def by_session(text: str) -> dict[str, list[str]]:
    """`wchc` or the ephemerals part of `dump`: a "0x..." session line, then its paths, tab-indented."""
    sessions: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("0x"):
            current = line.strip().rstrip(":")
            sessions[current] = []
        elif line.startswith("\t") and current is not None:
            sessions[current].append(line.strip())
    return sessions


@dataclass
class Watches:
    total: int | None
    per_broker: dict[int, int] = field(default_factory=dict)
    note: str = ""  # what the figures are

    def __str__(self) -> str:
        if self.total is None:
            return self.note
        per = ", ".join(f"broker {broker}: {count}" for broker, count in sorted(self.per_broker.items(), key=str))
        return f"{self.total} total; per broker {per} ({self.note})"


def zookeeper_watches(address: str, root: str) -> Watches:
    mntr = four_letter(address, "mntr")
    total = zookeeper_watch_count(mntr)
    if total is None:
        return Watches(None, note=f"mntr gave no zk_watch_count: {mntr.strip()[:200]!r}")
    dump = four_letter(address, "dump")
    sessions = by_session(dump.partition("ephemeral nodes dump:")[2])
    brokers = {session: int(match[1]) for session, paths in sessions.items() for path in paths
               if (match := re.fullmatch(re.escape(root) + r"/brokers/ids/(\d+)", path))}
    watched = by_session(four_letter(address, "wchc"))
    if not watched and total:
        return Watches(total, note="mntr zk_watch_count; wchc gave nothing per session")
    per_broker = {brokers.get(session, session): len(paths) for session, paths in watched.items()}
    listed = sum(per_broker.values())
    return Watches(total, per_broker, f"total: mntr zk_watch_count, data and child watches; per broker: wchc, "
                                      f"data watches only, {listed} of the total, so {total - listed} child watches")


def etcd_metrics(address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=60) as answer:
        text = answer.read().decode()
    return {name: float(value) for name, value in re.findall(r"^(etcd_debugging_mvcc_\w+) (\S+)$", text, re.M)}


def etcd_watches(address: str) -> Watches:
    metrics = etcd_metrics(address)
    watchers = int(metrics.get("etcd_debugging_mvcc_watcher_total", -1))
    streams = int(metrics.get("etcd_debugging_mvcc_watch_stream_total", -1))
    return Watches(watchers, {broker: round(watchers / BROKERS) for broker in range(BROKERS)},
                   f"etcd_debugging_mvcc_watcher_total; per broker the total / {BROKERS}, etcd does not count by "
                   f"client; {streams} watch streams (etcd_debugging_mvcc_watch_stream_total), {streams / BROKERS:.0f} per broker")


def watches(store: str, address: str, root: str) -> Watches:
    try:
        return zookeeper_watches(address, root) if store == "zk" else etcd_watches(address)
    except OSError as error:
        return Watches(None, note=f"could not read the watch counts: {error}")


def stream_count(store: str, address: str) -> int | None:
    if store != "etcd":
        return None
    try:
        return int(etcd_metrics(address).get("etcd_debugging_mvcc_watch_stream_total", -1))
    except OSError:
        return None


# --- the run ----------------------------------------------------------------------------------


def seconds(value: float | None, timeout_s: float) -> str:
    return f"not within {timeout_s:g} s" if value is None else f"{value:.1f} s"


def megabytes(rss: dict[int, float]) -> str:
    return ", ".join(f"broker {broker}: {mb:.0f} MB" for broker, mb in sorted(rss.items()))


class Run:
    """One store, one partition count: a fresh cluster, the phases in order, the figures in `row`."""

    def __init__(self, store: str, partitions: int, timeout_s: float, address: str, server_pid: int, cluster: Cluster):
        self.store, self.partitions, self.timeout_s = store, partitions, timeout_s
        self.address, self.server_pid, self.cluster = address, server_pid, cluster
        self.root = cluster.coord_url.split(address, 1)[1]
        self.row: dict[str, str] = {}

    def say(self, line: str) -> None:
        print(f"[{self.store} {self.partitions}] {line}", flush=True)

    def poll(self, bootstrap: str | None = None) -> Poll:
        admin = admin_client(bootstrap or self.cluster.bootstrap)
        return Poll(lambda: describe(admin), self.timeout_s)

    def baseline(self) -> None:
        idle_watches = watches(self.store, self.address, self.root)
        idle_rss = rss_by_broker(self.cluster)
        self.say(f"idle cluster, before the topic: watches {idle_watches}")
        self.say(f"idle cluster, before the topic: RSS {megabytes(idle_rss)}")
        self.row["watches, idle cluster"] = "?" if idle_watches.total is None else str(idle_watches.total)
        self.row["RSS per broker, idle (MB)"] = "/".join(f"{mb:.0f}" for _, mb in sorted(idle_rss.items()))

    def create(self) -> bool:
        """The topic created and every partition in sync; False (phases after it skipped) if not."""
        admin = admin_client(self.cluster.bootstrap, socket_timeout_s=self.timeout_s + 30)
        returned_at: list[float] = []
        before = Spent.now(self.cluster, self.server_pid)
        requested = time.monotonic()
        future = admin.create_topics([NewTopic(TOPIC, self.partitions, REPLICATION)],
                                     request_timeout=self.timeout_s, operation_timeout=self.timeout_s)[TOPIC]
        future.add_done_callback(lambda _: returned_at.append(time.monotonic()))

        def failed_and_absent() -> bool:
            return bool(returned_at and future.exception() is not None
                        and time.monotonic() - returned_at[0] > ABSENT_AFTER_ERROR_S and not describe(admin))

        synced_s, led = gauges_until(list(self.cluster.brokers.values()), lambda led: led.all_in_sync(self.partitions),
                                     requested, self.timeout_s, failed_and_absent)
        spent = Spent.now(self.cluster, self.server_pid) - before
        with contextlib.suppress(Exception):
            future.exception(timeout=max(1.0, requested + self.timeout_s + 30 - time.monotonic()))
        if returned_at:
            error = future.exception()
            call = f"create_topics returned after {returned_at[0] - requested:.1f} s, " + (
                "no error" if error is None else f"error: {error}")
            self.row["create_topics returned"] = f"{returned_at[0] - requested:.1f} s" + ("" if error is None else ", error")
        else:
            call = f"create_topics had not returned {time.monotonic() - requested:.0f} s after the request"
            self.row["create_topics returned"] = "not yet"
        self.say(call)
        if synced_s is None:
            why = ("its creation failed and the topic is not in the metadata "
                   f"{ABSENT_AFTER_ERROR_S} s later" if failed_and_absent() else f"not within {self.timeout_s:g} s")
            self.say(f"every partition led with a full ISR: {why} (last seen: {led}); later phases skipped")
            self.row["led, full ISR, from the request"] = "failed" if failed_and_absent() else seconds(None, self.timeout_s)
            return False
        self.say(f"every partition led with a full ISR {synced_s:.1f} s after the request")
        self.row["led, full ISR, from the request"] = f"{synced_s:.1f} s"
        self.seen_in_metadata("led, full ISR", all_in_sync(self.partitions), requested, self.cluster.bootstrap)
        self.say("creation, until in sync: CPU " + ", ".join(f"{name}: {cpu:.1f} s" for name, cpu in spent.cpu.items()))
        for broker_id, counts in spent.operations.items():
            self.say(f"creation, until in sync: broker {broker_id} made {counts.total()} store operations: "
                     + ", ".join(f"{operation} {count}" for operation, count in counts.most_common()))
        self.row["creation CPU, brokers/server (s)"] = "/".join(f"{cpu:.1f}" for cpu in spent.cpu.values())
        self.row["creation store ops per broker"] = "/".join(str(counts.total()) for counts in spent.operations.values())
        return True

    def in_sync_figures(self) -> None:
        found = watches(self.store, self.address, self.root)
        rss = rss_by_broker(self.cluster)
        hosted = self.partitions * REPLICATION // BROKERS
        self.say(f"in sync: watches {found}; each broker hosts {hosted} replicas")
        self.say(f"in sync: RSS {megabytes(rss)}")
        idle_cpu = idle_cpu_by_broker(self.cluster)
        self.say(f"in sync, idle: CPU per broker over {IDLE_CPU_WINDOW_S:.0f} s " +
                 ", ".join(f"broker {broker_id}: {share:.0%} of a core" for broker_id, share in sorted(idle_cpu.items())))
        self.row["CPU per broker, idle (% of a core)"] = "/".join(f"{share * 100:.0f}" for _, share in sorted(idle_cpu.items()))
        self.row["watches, in sync"] = "?" if found.total is None else str(found.total)
        self.row["watches per broker"] = "/".join(str(count) for _, count in sorted(found.per_broker.items(), key=str)) or "?"
        self.row["hosted replicas per broker"] = str(hosted)
        self.row["RSS per broker, in sync (MB)"] = "/".join(f"{mb:.0f}" for _, mb in sorted(rss.items()))

    def stop(self, broker_id: int, signalled: float, done_s: float) -> tuple[float | None, int | None]:
        """Wait until `done_s` after `signalled` for the signalled broker to exit; SIGKILL it
        if it has not. (seconds from the signal to its exit or None, exit status or None)."""
        broker = self.cluster.brokers[broker_id]
        try:
            status = broker.process.wait(timeout=max(0.0, signalled + done_s - time.monotonic()))
            exited_s = time.monotonic() - signalled
        except subprocess.TimeoutExpired:
            status, exited_s = None, None
            broker.kill()
        broker.stop()  # reaps it and marks it stopped
        return exited_s, status

    def watch_total(self) -> int | None:
        """The server's watch count alone (cheaper than `watches`): mntr's zk_watch_count, or etcd's watchers."""
        try:
            if self.store == "zk":
                return zookeeper_watch_count(four_letter(self.address, "mntr"))
            return int(etcd_metrics(self.address)["etcd_debugging_mvcc_watcher_total"])
        except (OSError, KeyError):
            return None

    def restart(self) -> None:
        broker = self.cluster.brokers[RESTARTED]
        before = self.watch_total()
        streams_before = stream_count(self.store, self.address)
        signalled = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        exited_s, status = self.stop(RESTARTED, signalled, self.timeout_s)
        if exited_s is None:
            self.say(f"restart of broker {RESTARTED}: it had not exited {self.timeout_s:g} s after SIGTERM; SIGKILLed")
        else:
            self.say(f"restart of broker {RESTARTED}: exited {exited_s:.1f} s after SIGTERM, status {status}")
        self.row["restart: exit after SIGTERM"] = seconds(exited_s, self.timeout_s)
        after = self.watch_total()
        streams_after = stream_count(self.store, self.address)
        if before is not None and after is not None:
            streams = ("" if streams_before is None or streams_after is None else
                       f"; watch streams {streams_after}, {streams_before - streams_after} fewer")
            self.say(f"with broker {RESTARTED} stopped: watches {after}, {before - after} fewer than just before{streams}")
            self.row[f"watches gone with broker {RESTARTED}"] = str(before - after)
        started = time.monotonic()
        try:
            broker.restart()
        except RuntimeError as error:
            last = [line for line in str(error).splitlines()[1:] if line.strip()][-1:] or [""]
            self.say(f"restart of broker {RESTARTED}: not listening {broker_process.START_TIMEOUT_S:g} s after the "
                     f"start, SIGKILLed (its last line: {last[0].strip()[:200]})")
            self.row["restart: in every ISR, from the start"] = "did not start"
            return
        listening_s = time.monotonic() - started
        first = describe(admin_client(self.cluster.bootstrap))
        out = None if not first else sum(RESTARTED not in meta.isrs for meta in first.values())
        back_s, led = gauges_until(list(self.cluster.brokers.values()), lambda led: led.all_in_sync(self.partitions),
                                   started, self.timeout_s)
        self.say(f"restart of broker {RESTARTED}: listening {listening_s:.1f} s after the start; "
                 f"out of {'?' if out is None else out} ISRs then; back in every ISR "
                 + ("not within " + f"{self.timeout_s:g} s (last seen: {led})" if back_s is None else
                    f"{back_s:.1f} s after the start, {back_s + started - signalled:.1f} s after the SIGTERM"))
        self.row["restart: listening after start"] = f"{listening_s:.1f} s"
        self.row["restart: in every ISR, from the start"] = seconds(back_s, self.timeout_s)
        if back_s is not None:
            self.seen_in_metadata("restart: in every ISR, from the start", all_in_sync(self.partitions), started, self.cluster.bootstrap)

    def seen_in_metadata(self, measure: str, done, since: float, bootstrap: str) -> None:
        """When a client's Metadata showed what the brokers' gauges had: the brokers' metadata
        caches follow the store a little behind, and the polls of 10,000 partitions are slow."""
        poll = self.poll(bootstrap)
        seen_s = poll.until(done, since)
        self.say(f"{measure}: seen in a client's Metadata "
                 + (f"{seen_s:.1f} s" if seen_s is not None else f"not within {self.timeout_s:g} s (last seen: {tally(poll.last)})"))
        self.row[f"{measure}, in Metadata"] = seconds(seen_s, self.timeout_s)

    def controlled_shutdown(self) -> None:
        partitions = describe(admin_client(self.cluster.bootstrap))
        if not partitions:
            self.say(f"controlled shutdown: skipped, {tally(partitions)}")
            return
        led = Counter(meta.leader for meta in partitions.values() if meta.leader >= 0)
        if not led:
            self.say(f"controlled shutdown: skipped, no partition has a leader ({tally(partitions)})")
            return
        victim, count = led.most_common(1)[0]
        others = [broker for broker_id, broker in self.cluster.brokers.items() if broker_id != victim]
        admin = admin_client(bootstrap_without(self.cluster, victim))
        process = self.cluster.brokers[victim].process
        exited_at: list[float] = []
        moved_at: list[float] = []  # when no partition named it leader any more, in a client's Metadata
        last: dict[int, object] | None = None
        next_metadata_at = 0.0

        def led_by_others(gauges: Led) -> bool:
            # Each turn: the others' gauges, and a Metadata request while the victim is still
            # named somewhere (spaced out as Poll spaces them).
            nonlocal last, next_metadata_at
            now = time.monotonic()
            if not exited_at and process.poll() is not None:
                exited_at.append(now)
            if not moved_at and now >= next_metadata_at:
                last = describe(admin)
                answered = time.monotonic()
                next_metadata_at = answered + max(POLL_S, POLL_LOAD_FACTOR * (answered - now))
                if last and not any(meta.leader == victim for meta in last.values()):
                    moved_at.append(answered)
            return gauges.led == self.partitions

        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        all_led_s, gauged = gauges_until(others, led_by_others, signalled, self.timeout_s)
        if all_led_s is not None and not moved_at:
            moved_at.append(signalled + all_led_s)  # every partition led by the others: none by it
        exited_s, status = self.stop(victim, signalled, self.timeout_s)
        if exited_at:
            exited_s = exited_at[0] - signalled
        moved_s = moved_at[0] - signalled if moved_at else None
        still = "?" if not last else sum(meta.leader == victim for meta in last.values())
        self.say(f"controlled shutdown of broker {victim}, which led {count} partitions: "
                 + (f"no partition names it leader {moved_s:.1f} s after SIGTERM" if moved_s is not None else
                    f"leaders still on it {self.timeout_s:g} s after SIGTERM (last seen: {still} led by it)")
                 + ("; every partition led by another broker "
                    + (f"{all_led_s:.1f} s after SIGTERM" if all_led_s is not None else
                       f"not within {self.timeout_s:g} s (last seen: {gauged})"))
                 + (f"; exited {exited_s:.1f} s after SIGTERM, status {status}" if exited_s is not None else
                    f"; had not exited {self.timeout_s:g} s after SIGTERM, SIGKILLed"))
        self.row["controlled shutdown: leaders off"] = seconds(moved_s, self.timeout_s)
        self.row["controlled shutdown: all led again"] = seconds(all_led_s, self.timeout_s)
        self.row["controlled shutdown: exit"] = seconds(exited_s, self.timeout_s)
        if all_led_s is not None:
            self.seen_in_metadata("controlled shutdown: all led again",
                                  lambda parts: len(parts) == self.partitions and all(meta.leader not in (victim, -1) for meta in parts.values()),
                                  signalled, bootstrap_without(self.cluster, victim))


def measure(store: str, partitions: int, timeout_s: float, scratch: pathlib.Path, keep: bool) -> dict[str, str]:
    print(f"[{store} {partitions}] {partitions} partitions, RF={REPLICATION}, {BROKERS} brokers at their default settings"
          + (", a stock etcd" if store == "etcd" else ""), flush=True)
    run_dir = scratch / f"{store}-{partitions}"
    try:
        with cluster_over_own_server(store, run_dir) as (address, server_pid, cluster):
            run = Run(store, partitions, timeout_s, address, server_pid, cluster)
            try:
                run.baseline()
                if run.create():
                    run.in_sync_figures()
                    run.restart()
                    run.controlled_shutdown()
            except Exception as error:  # a phase's failure ends this run, reported; the cluster is still stopped
                run.say(f"stopped: {type(error).__name__}: {error}")
                run.row["stopped by"] = type(error).__name__
            return run.row
    except RuntimeError as error:  # the server or a broker did not start
        print(f"[{store} {partitions}] could not start the cluster: {error}", flush=True)
        return {"stopped by": "cluster did not start"}
    finally:
        if keep:
            print(f"[{store} {partitions}] broker logs: {run_dir}/broker-*.log", flush=True)


def table(rows: dict[str, dict[str, str]]) -> None:
    measures = list(dict.fromkeys(key for row in rows.values() for key in row))
    width = max(len(measure) for measure in measures)
    columns = {run: max(len(run), *(len(row.get(measure, "-")) for measure in measures)) for run, row in rows.items()}
    print()
    print(" " * width + "  " + "  ".join(run.rjust(columns[run]) for run in rows))
    for measure in measures:
        print(measure.ljust(width) + "  " + "  ".join(rows[run].get(measure, "-").rjust(columns[run]) for run in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", default="1000,10000", help="comma-separated partition counts (default 1000,10000)")
    parser.add_argument("--store", choices=["zk", "etcd", "both"], default="both")
    parser.add_argument("--phase-timeout-s", type=float, default=300, help="how long each phase may take (default 300)")
    parser.add_argument("--scratch", type=pathlib.Path, default=None,
                        help="where servers and brokers keep their data and logs, kept afterwards (default: a temporary directory, removed)")
    args = parser.parse_args()
    counts = [int(count) for count in args.partitions.split(",")]
    # A broker listens only once it has started every replica it hosts: at thousands of
    # partitions that can outlast the harness's 60 s, after which it SIGKILLs the broker.
    broker_process.START_TIMEOUT_S = max(broker_process.START_TIMEOUT_S, args.phase_timeout_s)
    stores = ["zk", "etcd"] if args.store == "both" else [args.store]
    rows: dict[str, dict[str, str]] = {}
    with contextlib.ExitStack() as cleanup:
        if args.scratch is None:
            scratch = pathlib.Path(cleanup.enter_context(tempfile.TemporaryDirectory(prefix="replog-bench-scale-")))
        else:
            scratch = args.scratch.resolve()
            scratch.mkdir(parents=True, exist_ok=True)
        for store in stores:
            for count in counts:
                rows[f"{store} {count}"] = measure(store, count, args.phase_timeout_s, scratch, keep=args.scratch is not None)
        table(rows)


if __name__ == "__main__":
    main()
