"""Replication costs and failover, on this machine: three brokers over ZooKeeper or etcd.

    .venv/bin/python bench/replication.py [--records N] [--store zk|etcd|both] [--kills N]
                                          [--failover-only | --throughput-only]
                                          [--session-timeout-ms MS] [--e2e-mb-per-s R] [--e2e-seconds S]

Prints (never asserts), for each store, from one cluster of three brokers at the broker's own
default settings (coord.session.timeout.ms 9000, replica.lag.time.max.ms 30000; only
--session-timeout-ms, if given, is passed on to the brokers):
- produce throughput with `replog perf produce`, 1 KB records: RF=1 acks=1 against RF=3
  acks=all (min.insync.replicas=2), same tool, same record size, the latter both idempotent
  (the tool's default for acks=all; librdkafka then keeps one Produce in flight per partition,
  so the run is bound by the replication round trip) and not (`--no-idempotence`: pipelined),
  with the leader's CPU time (user + system, from /proc) per MB it replicated.
  Skipped with --failover-only.
- end-to-end latency with `replog perf end-to-end` at --e2e-mb-per-s (default 50) MB/s of 1 KB
  records, RF=3 acks=all (idempotent), 3 partitions led one per broker: each record's time from
  produce() to a consumer's poll() returning it, p50/p99/p99.9. Skipped with --failover-only.
- failover (skipped with --throughput-only), under the producer of tests/support/failover.py (idempotent, acks=all, a numbered
  record every 5 ms, round robin over the 3 partitions of a topic with RF=3 and
  min.insync.replicas=2), after it has had an acknowledgement on every partition:
  - SIGKILL of the leader of partition 0, --kills times (default 5): the time from the kill to
    the first acknowledgement of a record sent after it, on partition 0 and on the last
    partition to get one (the partitions it only followed wait too, until their leaders shrink
    it out of the ISR), p50 and max over the kills; and the longest gap. Between kills the
    killed broker is restarted, and the next kill waits until it is back in every ISR;
  - SIGKILL of a follower (of a topic whose partitions it only follows): the longest gap between
    consecutive acknowledgements, i.e. how long acks=all waited for it to leave the ISR;
  - SIGTERM (controlled shutdown) of the leader of partition 0, --kills times: the time to the
    first acknowledgement on partition 0 of a record sent after the signal (the stopping leader
    still acknowledges records that reach it before it hands over, so this is often a few ms),
    and the longest gap between acknowledgements, which is the stall a producer sees; p50 and
    max over the stops.
  "The longest gap" is over every partition, from a second before the signal.

The producer keeps librdkafka's defaults for finding a new leader (retry.backoff.ms 100,
retry.backoff.max.ms 1000, metadata refreshed at once on NOT_LEADER_OR_FOLLOWER or a lost
connection, leaders of unavailable partitions re-queried every second); only linger.ms is 0 and
message.timeout.ms is 90 s, the longest failover it waits for.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import re
import signal
import statistics
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from replog.config import SETTINGS  # noqa: E402
from tests.support.cluster import Cluster, cluster_with_own_server  # noqa: E402
from tests.support.failover import (  # noqa: E402
    FOLLOWED_ONLY_BY_2,
    PARTITIONS,
    Failover,
    create_topic,
    follower_only,
    signal_under_writes,
    wait_until_in_sync,
)

RECORD_BYTES = 1024
DEFAULT_SETTINGS = (f"coord.session.timeout.ms {SETTINGS['coord.session.timeout.ms'].default}, "
                    f"replica.lag.time.max.ms {SETTINGS['replica.lag.time.max.ms'].default}")


def create(admin: AdminClient, name: str, replication: int) -> None:
    admin.create_topics([NewTopic(name, 1, replication, config={"min.insync.replicas": str(min(2, replication))})])[name].result(timeout=60)


def perf(servers: str, topic: str, records: int, acks: str, *options: str, tool: str = "produce") -> str:
    done = subprocess.run([sys.executable, "-m", "replog", "perf", tool, "--bootstrap-server", servers, "--topic", topic,
                           "--num-records", str(records), "--record-size", str(RECORD_BYTES), "--acks", acks, *options],
                          capture_output=True, text=True, timeout=600)
    # The summary is the last line; progress lines come before it.
    return (done.stdout.strip() or done.stderr.strip()).rpartition("\n")[2]


def rate(summary: str) -> float:
    """records/sec from a `replog perf produce` summary; NaN if it failed."""
    found = re.search(r"([\d.]+) records/sec", summary)
    return float(found[1]) if found else float("nan")


def throughput(store: str, cluster: Cluster, records: int) -> None:
    servers = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": servers})
    create(admin, "rf1", 1)
    single = perf(servers, "rf1", records, "1")
    print(f"[{store}] RF=1 acks=1:                           {single}")
    for label, topic, option in (("idempotent", "rf3-idempotent", "--idempotence"), ("not idempotent", "rf3-pipelined", "--no-idempotence")):
        create(admin, topic, 3)
        leader = cluster.brokers[admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader].process.pid
        cpu_before_s = cpu_seconds(leader)
        replicated = perf(servers, topic, records, "all", option)
        leader_ms_per_mb = (cpu_seconds(leader) - cpu_before_s) * 1000 / (records * RECORD_BYTES / 2**20)
        print(f"[{store}] RF=3 acks=all {label + ':':16} {replicated}")
        print(f"[{store}] RF=3 acks=all {label} / RF=1 acks=1: {rate(replicated) / rate(single):.0%} of the records/sec; "
              f"leader CPU {leader_ms_per_mb:.2f} ms per MB replicated")


def end_to_end(store: str, cluster: Cluster, mb_per_s: float, seconds: float) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("e2e", PARTITIONS, 3, config={"min.insync.replicas": "2"})])["e2e"].result(timeout=60)
    wait_until_in_sync(cluster.bootstrap, "e2e")
    records_per_s = mb_per_s * 2**20 / RECORD_BYTES
    summary = perf(cluster.bootstrap, "e2e", int(records_per_s * seconds), "all", "--throughput", str(records_per_s), tool="end-to-end")
    print(f"[{store}] end-to-end, RF=3 acks=all, {PARTITIONS} partitions, {mb_per_s:g} MB/s: {summary}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` so far (/proc/<pid>/stat, fields 14 and 15)."""
    fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spread(seconds: list[float]) -> str:
    return f"p50 {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"


def stop_and_restart(cluster: Cluster, topic: str, victim: int, signum: int) -> Failover:
    """signal_under_writes, then the victim back in every ISR, so that the next stop finds the
    cluster whole."""
    failover = signal_under_writes(cluster, topic, victim, signum)
    cluster.brokers[victim].restart()
    wait_until_in_sync(cluster.bootstrap)
    return failover


def leader_kills(store: str, cluster: Cluster, kills: int) -> None:
    led, slowest, gaps = [], [], []
    for _ in range(kills):
        leaders = {index: meta.leader for index, meta in wait_until_in_sync(cluster.bootstrap, "failover").items()}
        failover = stop_and_restart(cluster, "failover", leaders[0], signal.SIGKILL)
        led.append(failover.first_acknowledged_s[0])
        slowest.append(max(failover.first_acknowledged_s.values()))
        gaps.append(failover.longest_gap_s)
    print(f"[{store}] SIGKILL of a leader, {kills} kills: first acknowledgement of a record sent after the kill, "
          f"on partition 0, which it led: {spread(led)}")
    print(f"[{store}] SIGKILL of a leader, {kills} kills: first acknowledgement of a record sent after the kill, "
          f"on the last of the {PARTITIONS} partitions: {spread(slowest)}")
    print(f"[{store}] SIGKILL of a leader, {kills} kills: longest gap between acknowledgements: {spread(gaps)}")


def follower_kill(store: str, cluster: Cluster) -> None:
    create_topic(cluster.bootstrap, "follower-killed", PARTITIONS, FOLLOWED_ONLY_BY_2)
    victim = follower_only(wait_until_in_sync(cluster.bootstrap, "follower-killed"))
    failover = stop_and_restart(cluster, "follower-killed", victim, signal.SIGKILL)
    print(f"[{store}] SIGKILL of a follower: longest acks=all stall (gap between acknowledgements) "
          f"{failover.longest_gap_s:.2f} s; first acknowledgement of a record sent after the kill, on the last "
          f"of the {PARTITIONS} partitions: {max(failover.first_acknowledged_s.values()):.2f} s")


def leader_terminations(store: str, cluster: Cluster, stops: int) -> None:
    led, gaps = [], []
    for _ in range(stops):
        leaders = {index: meta.leader for index, meta in wait_until_in_sync(cluster.bootstrap, "failover").items()}
        failover = stop_and_restart(cluster, "failover", leaders[0], signal.SIGTERM)
        led.append(failover.first_acknowledged_s[0])
        gaps.append(failover.longest_gap_s)
    print(f"[{store}] SIGTERM (controlled shutdown) of a leader, {stops} stops: first acknowledgement of a record sent "
          f"after the signal, on partition 0, which it led: {spread(led)}")
    print(f"[{store}] SIGTERM (controlled shutdown) of a leader, {stops} stops: longest gap between acknowledgements: "
          f"{spread(gaps)}")


def measure(store: str, records: int, kills: int, session_timeout_ms: int | None, failover_only: bool,
            throughput_only: bool, e2e_mb_per_s: float, e2e_seconds: float) -> None:
    settings = () if session_timeout_ms is None else ("--set", f"coord.session.timeout.ms={session_timeout_ms}")
    print(f"[{store}] brokers at their default settings ({DEFAULT_SETTINGS})" if session_timeout_ms is None else
          f"[{store}] brokers at their default settings but coord.session.timeout.ms {session_timeout_ms}")
    with tempfile.TemporaryDirectory(prefix="replog-bench-repl-") as scratch:
        with cluster_with_own_server(store, pathlib.Path(scratch), settings=settings) as cluster:
            if not failover_only:
                throughput(store, cluster, records)
                end_to_end(store, cluster, e2e_mb_per_s, e2e_seconds)
            if throughput_only:
                return
            create_topic(cluster.bootstrap, "failover", PARTITIONS)
            leader_kills(store, cluster, kills)
            follower_kill(store, cluster)
            leader_terminations(store, cluster, kills)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000, help="records per throughput run")
    parser.add_argument("--store", choices=["zk", "etcd", "both"], default="both")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs (and SIGTERMs) of a leader to take the p50 and max over")
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--failover-only", action="store_true", help="skip the throughput runs")
    only.add_argument("--throughput-only", action="store_true", help="skip the failover runs")
    parser.add_argument("--session-timeout-ms", type=int, default=None,
                        help="coord.session.timeout.ms for the brokers (default: not passed, the broker's own default)")
    parser.add_argument("--e2e-mb-per-s", type=float, default=50, help="rate of the end-to-end latency run")
    parser.add_argument("--e2e-seconds", type=float, default=20, help="length of the end-to-end latency run")
    args = parser.parse_args()
    for store in (["zk", "etcd"] if args.store == "both" else [args.store]):
        measure(store, args.records, args.kills, args.session_timeout_ms, args.failover_only, args.throughput_only,
                args.e2e_mb_per_s, args.e2e_seconds)


if __name__ == "__main__":
    main()
