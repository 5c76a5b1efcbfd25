"""Replication costs and failover, on this machine: three brokers over ZooKeeper or etcd.

    .venv/bin/python bench/replication.py [--records N] [--store zk|etcd|both] [--session-timeout-ms MS]

Prints (never asserts):
- produce throughput with `replog perf produce`, 1 KB records: RF=1 acks=1 against RF=3
  acks=all (min.insync.replicas=2), same tool, same record size, the latter both idempotent
  (the tool's default for acks=all; librdkafka then keeps one Produce in flight per partition,
  so the run is bound by the replication round trip) and not (`--no-idempotence`: pipelined);
- failover time: an idempotent acks=all producer sends a record every 5 ms; once it has had a
  second of acknowledgements, the leader is killed with SIGKILL; the figures are the time from
  the kill to the first acknowledgement from the new leader, and the longest gap between
  consecutive acknowledgements around the kill (the partition's unavailability), with the
  session timeout used;
- controlled shutdown: the same with SIGTERM instead of SIGKILL;
- a follower stopped (SIGKILL, then SIGTERM): the longest gap between acknowledgements around
  the signal, which is how long acks=all waited for the follower to leave the ISR.

`--session-timeout-ms` sets coord.session.timeout.ms (default 4000; the broker's own default is
18000), replica.lag.time.max.ms keeps the broker's default (30000).

The producer keeps librdkafka's defaults for finding a new leader (retry.backoff.ms 100,
retry.backoff.max.ms 1000, metadata refreshed at once on NOT_LEADER_OR_FOLLOWER or a lost
connection, leaders of unavailable partitions re-queried every second); only linger.ms is 0.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import NamedTuple

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402
from tests.conftest import ServerProcess  # noqa: E402

SESSION_TIMEOUT_MS = 4000  # the default of --session-timeout-ms
SEND_INTERVAL_S = 0.005
FAILOVER_WAIT_S = 60
# Record values telling whether a record was sent before or after the signal: only an
# acknowledgement of one sent after it proves that the partition took writes again.
BEFORE_STOP, AFTER_STOP = b"b", b"a"


def start_cluster(coord_url: str, base: pathlib.Path, session_timeout_ms: int) -> dict[int, BrokerProcess]:
    brokers = {
        broker_id: BrokerProcess(base / f"broker-{broker_id}", coord_url=coord_url, extra_args=(
            "--broker-id", str(broker_id), "--set", f"coord.session.timeout.ms={session_timeout_ms}"))
        for broker_id in range(3)
    }
    for broker in brokers.values():
        broker.start()
    return brokers


def bootstrap(brokers: dict[int, BrokerProcess]) -> str:
    return ",".join(broker.bootstrap for broker in brokers.values() if broker.process is not None)


def create(admin: AdminClient, name: str, replication: int) -> None:
    admin.create_topics([NewTopic(name, 1, replication, config={"min.insync.replicas": str(min(2, replication))})])[name].result(timeout=60)


def perf(servers: str, topic: str, records: int, acks: str, *options: str) -> str:
    done = subprocess.run([sys.executable, "-m", "replog", "perf", "produce", "--bootstrap-server", servers, "--topic", topic,
                           "--num-records", str(records), "--record-size", "1024", "--acks", acks, *options],
                          capture_output=True, text=True, timeout=600)
    return done.stdout.strip() or done.stderr.strip()


def rate(summary: str) -> float:
    """records/sec from a `replog perf produce` summary; NaN if it failed."""
    found = re.search(r"([\d.]+) records/sec", summary)
    return float(found[1]) if found else float("nan")


class Unavailability(NamedTuple):
    # From the signal to the acknowledgement that ended the longest gap: the first one the new
    # leader gave (callbacks of acknowledgements the old leader sent just before may run just
    # after the signal, so "the first acknowledgement after the signal" would mislead).
    recovered_after_s: float
    longest_gap_s: float  # between consecutive acknowledgements, from a second before the signal


def unavailability(brokers: dict[int, BrokerProcess], topic: str, signum: int, stop_leader: bool = True) -> Unavailability:
    """Stop the partition's leader (or a follower) with `signum` under a steady acks=all producer."""
    admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
    deadline = time.monotonic() + FAILOVER_WAIT_S
    leader = -1
    while leader < 0 and time.monotonic() < deadline:  # a broker's metadata may lag the creation
        leader = admin.list_topics(topic, timeout=30).topics[topic].partitions[0].leader
    producer = Producer({"bootstrap.servers": bootstrap(brokers), "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": FAILOVER_WAIT_S * 1000, "linger.ms": 0,
                         "log_level": 0})  # librdkafka would print every refused reconnect
    acknowledged_at: list[float] = []
    acknowledged_sent_after_stop: list[bytes] = []

    def delivered(error, message) -> None:
        if error is None:
            acknowledged_at.append(time.monotonic())
            if message.value() == AFTER_STOP:
                acknowledged_sent_after_stop.append(message.value())

    def send_for(seconds: float, value: bytes) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            producer.produce(topic, value=value, on_delivery=delivered)
            producer.poll(SEND_INTERVAL_S)

    # A second of acknowledged traffic before the stop (the producer's id comes first).
    while not acknowledged_at and time.monotonic() < deadline:
        send_for(0.1, BEFORE_STOP)
    send_for(1.0, BEFORE_STOP)
    stopped = leader if stop_leader else min(broker_id for broker_id in brokers if broker_id != leader)
    stopped_at = time.monotonic()
    brokers[stopped].process.send_signal(signum)  # not waiting for it to exit: the producer keeps going
    deadline = stopped_at + FAILOVER_WAIT_S
    while not acknowledged_sent_after_stop and time.monotonic() < deadline:
        send_for(0.1, AFTER_STOP)
    send_for(1.0, AFTER_STOP)  # and a second after the first acknowledgement past the stop
    producer.flush(10)
    brokers[stopped].stop()  # reap it
    around = [moment for moment in acknowledged_at if moment > stopped_at - 1.0]
    gaps = [(later - earlier, later) for earlier, later in zip(around, around[1:])]
    if not gaps:
        return Unavailability(float("nan"), float("nan"))
    longest, ended_at = max(gaps)
    return Unavailability(ended_at - stopped_at, longest)


def throughput(store: str, admin: AdminClient, servers: str, records: int) -> None:
    create(admin, "rf1", 1)
    single = perf(servers, "rf1", records, "1")
    print(f"[{store}] RF=1 acks=1:                           {single}")
    for label, topic, option in (("idempotent", "rf3-idempotent", "--idempotence"), ("not idempotent", "rf3-pipelined", "--no-idempotence")):
        create(admin, topic, 3)
        replicated = perf(servers, topic, records, "all", option)
        print(f"[{store}] RF=3 acks=all {label + ':':16} {replicated}")
        print(f"[{store}] RF=3 acks=all {label} / RF=1 acks=1: {rate(replicated) / rate(single):.0%} of the records/sec")


def measure(store: str, records: int, session_timeout_ms: int) -> None:
    with tempfile.TemporaryDirectory(prefix="replog-bench-repl-") as scratch:
        server = ServerProcess("zookeeper" if store == "zk" else "etcd", pathlib.Path(scratch) / store)
        server.start()
        address = server.address
        try:
            for stop_name, signum in (("SIGKILL", signal.SIGKILL), ("SIGTERM (controlled shutdown)", signal.SIGTERM)):
                for role in ("leader", "follower"):
                    base = pathlib.Path(scratch) / f"{stop_name[:4]}-{role}"
                    brokers = start_cluster(f"{store}://{address}/bench-{uuid.uuid4().hex[:8]}", base, session_timeout_ms)
                    try:
                        admin = AdminClient({"bootstrap.servers": bootstrap(brokers)})
                        if signum == signal.SIGKILL and role == "leader":
                            throughput(store, admin, bootstrap(brokers), records)
                        create(admin, "failover", 3)
                        found = unavailability(brokers, "failover", signum, stop_leader=role == "leader")
                        first = (f"first acks=all acknowledgement from the new leader {found.recovered_after_s:.2f} s after "
                                 f"the signal, " if role == "leader" else "")
                        print(f"[{store}] {stop_name} of a {role}: {first}longest gap between acknowledgements "
                              f"{found.longest_gap_s:.2f} s (session timeout {session_timeout_ms / 1000:.1f} s)")
                    finally:
                        for broker in brokers.values():
                            broker.stop()
        finally:
            server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--store", choices=["zk", "etcd", "both"], default="both")
    parser.add_argument("--session-timeout-ms", type=int, default=SESSION_TIMEOUT_MS)
    args = parser.parse_args()
    for store in (["zk", "etcd"] if args.store == "both" else [args.store]):
        measure(store, args.records, args.session_timeout_ms)


if __name__ == "__main__":
    main()
