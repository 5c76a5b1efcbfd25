"""The first acks=all delivery on fresh three-broker clusters, to catch a rare slow one.

    .venv/bin/python bench/first_delivery.py [--trials N] [--store zk|etcd|both] [--settings default|quick]
                                             [--partitions N] [--idempotence] [--keep-slower-than S] [--logs DIR]

For each store, one ZooKeeper or etcd server, and per trial a fresh cluster of three brokers
under a root of its own (at the broker's own settings, or the cluster tests' quick ones:
4 s sessions, 2 s replica lag): a topic with RF=3 and min.insync.replicas=2 created with
confluent-kafka's AdminClient, then a new producer (acks=all, linger.ms 0) sends one record
to each partition. Prints, per trial, the seconds from the sends to each delivery report, and
for each store the median and the slowest. A trial slower than --keep-slower-than (default
5 s) keeps its brokers' logs and librdkafka's debug log (broker,topic,msg,metadata,protocol)
in --logs, to read what waited.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.cluster import QUICK_SETTINGS, Cluster  # noqa: E402
from tests.support.servers import ServerProcess, unique_root  # noqa: E402

TOPIC = "first"
DELIVERY_WAIT_S = 120
SERVERS = {"zk": "zookeeper", "etcd": "etcd"}


class _DebugLines:
    """librdkafka's log lines, with the wall-clock time they arrived."""

    def __init__(self):
        self.lines: list[str] = []

    def log(self, level, message, *args, **kwargs) -> None:
        self.lines.append(f"{time.time():.3f} {message % args if args else message}")


def first_deliveries(bootstrap: str, partitions: int, idempotence: bool, debug: _DebugLines) -> list[float]:
    """Seconds from the sends to each partition's delivery report (NaN: none in time)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 3, config={"min.insync.replicas": "2"})])[TOPIC].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "enable.idempotence": idempotence,
                         "message.timeout.ms": DELIVERY_WAIT_S * 1000, "debug": "broker,topic,msg,metadata,protocol",
                         "logger": debug})
    delivered_at: dict[int, float] = {}
    sent_at = time.monotonic()
    for partition in range(partitions):
        producer.produce(TOPIC, b"v", partition=partition,
                         on_delivery=lambda error, message: delivered_at.setdefault(message.partition(), time.monotonic()))
    while len(delivered_at) < partitions and time.monotonic() - sent_at < DELIVERY_WAIT_S:  # bounded by the wait
        producer.poll(0.05)
    producer.flush(5)
    return [delivered_at.get(partition, float("nan")) - sent_at for partition in range(partitions)]


def trials(store: str, args: argparse.Namespace, scratch: pathlib.Path) -> list[float]:
    server = ServerProcess(SERVERS[store], scratch / f"server-{store}")
    server.start()
    slowest: list[float] = []
    try:
        for trial in range(args.trials):
            base = scratch / f"{store}-{trial}"
            base.mkdir()
            cluster = Cluster(f"{store}://{server.address}{unique_root()}", base, 3, extra_args=("--log-level", "INFO"),
                              settings=QUICK_SETTINGS if args.settings == "quick" else ())
            debug = _DebugLines()
            cluster.start()
            try:
                seconds = first_deliveries(cluster.bootstrap, args.partitions, args.idempotence, debug)
            finally:
                cluster.stop()  # writes broker-N.log beside the data
            slowest.append(max(seconds))
            kept = ""
            if not max(seconds) <= args.keep_slower_than:
                kept_dir = args.logs / f"{store}-{trial}"
                kept_dir.mkdir(parents=True, exist_ok=True)
                for log in base.glob("broker-*.log"):
                    (kept_dir / log.name).write_text(log.read_text())
                (kept_dir / "librdkafka.log").write_text("\n".join(debug.lines))
                kept = f"  (logs in {kept_dir})"
            print(f"[{store}] trial {trial}: first deliveries {', '.join(f'{s:.2f}' for s in seconds)} s{kept}", flush=True)
    finally:
        server.stop()
    return slowest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--store", choices=("zk", "etcd", "both"), default="both")
    parser.add_argument("--settings", choices=("default", "quick"), default="default")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--idempotence", action="store_true")
    parser.add_argument("--keep-slower-than", type=float, default=5.0, metavar="S")
    parser.add_argument("--logs", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "replog-first-delivery")
    args = parser.parse_args()
    for store in ("zk", "etcd") if args.store == "both" else (args.store,):
        with tempfile.TemporaryDirectory(prefix=f"first-delivery-{store}-") as scratch:
            slowest = trials(store, args, pathlib.Path(scratch))
        print(f"[{store}] {args.settings} settings, {args.partitions} partition(s), idempotence {args.idempotence}: "
              f"{len(slowest)} fresh clusters, slowest first delivery per cluster: "
              f"median {statistics.median(slowest):.2f} s, max {max(slowest):.2f} s")


if __name__ == "__main__":
    main()
