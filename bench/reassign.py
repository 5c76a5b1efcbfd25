"""Partition reassignment on this machine: three brokers over ZooKeeper, one partition holding
--size-gib of log moved to another broker, unthrottled and then throttled.

    .venv/bin/python bench/reassign.py [--size-gib 1] [--throttle-mb-per-s 50]

Prints (never asserts): for each move, the time from asking (AlterPartitionReassignments
through the store, as `replog reassign execute --coord` does) to the move's end (no
reassignment in flight, the partition on its target replicas), the achieved copy rate
(bytes of log over that time) against the throttle, and the p50/p99/max acknowledgement
latency of a concurrent producer (idempotent, acks=all, a record every 5 ms, on another
partition led by the broker the data is copied from), before and during the move.

The partition is filled with `replog perf produce` (1 KB records, acks=1) on replicas [0, 1];
the first move copies it to broker 2 ([0, 2]), the second, throttled, back to broker 1.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replog import admin  # noqa: E402
from replog.coord_backends import open_store  # noqa: E402
from tests.support.harness import WAIT_S  # noqa: E402
from tests.support.cluster import cluster_with_own_server  # noqa: E402
from tests.support.failover import TimedProducer, create_topic  # noqa: E402
from tests.support.polling import wait_until  # noqa: E402

MOVE_WAIT_S = 1800
RECORD_BYTES = 1024


def fill(bootstrap: str, topic: str, size_bytes: int) -> None:
    records = size_bytes // RECORD_BYTES
    subprocess.run([sys.executable, "-m", "replog", "perf", "produce", "--bootstrap-server", bootstrap, "--topic", topic,
                    "--num-records", str(records), "--record-size", str(RECORD_BYTES), "--acks", "1"],
                   check=True, capture_output=True, text=True, timeout=MOVE_WAIT_S)


async def move(coord_url: str, topic: str, target: list[int], throttle_bytes_per_s: int | None) -> float:
    """Seconds from asking to the move's end."""
    store = open_store(coord_url)
    await store.start()
    try:
        started = time.monotonic()
        refused = await admin.alter_partition_reassignments(store, {(topic, 0): target}, throttle_bytes_per_s=throttle_bytes_per_s)
        assert refused[topic, 0] is None, refused
        deadline = started + MOVE_WAIT_S
        while await admin.list_partition_reassignments(store, [(topic, 0)]):  # polled: the figure is coarse anyway
            assert time.monotonic() < deadline, f"the move of {topic}-0 to {target} did not end in {MOVE_WAIT_S} s"
            await asyncio.sleep(0.1)
        return time.monotonic() - started
    finally:
        await store.close()


def latencies_ms(producer: TimedProducer, since: float, until: float) -> str:
    with producer._lock:
        sent = producer._sent_at
        waits = sorted((at - sent[number]) * 1000 for times in producer._acknowledged_at.values()
                       for number, at in times if since <= sent[number] < until)
    if not waits:
        return "no acknowledgements"
    return (f"p50 {statistics.median(waits):.1f} ms, p99 {waits[int(len(waits) * 0.99) - 1]:.1f} ms, "
            f"max {waits[-1]:.1f} ms over {len(waits)} records")


def measure(size_gib: float, throttle_mb_per_s: float) -> None:
    with tempfile.TemporaryDirectory(prefix="replog-bench-reassign-") as scratch:
        with cluster_with_own_server("zk", pathlib.Path(scratch)) as cluster:
            size_bytes = int(size_gib * (1 << 30))
            create_topic(cluster.bootstrap, "big", 1, [[0, 1]])
            create_topic(cluster.bootstrap, "live", 3, [[0, 1, 2], [0, 1, 2], [0, 1, 2]])
            started = time.monotonic()
            fill(cluster.bootstrap, "big", size_bytes)
            print(f"filled big-0 with {size_bytes / 1e9:.2f} GB in {time.monotonic() - started:.1f} s")
            with TimedProducer(cluster.bootstrap, "live", 3) as producer:
                wait_until(producer.acknowledged_on_every_partition, "the producer under way", WAIT_S)
                quiet_from = time.monotonic()
                time.sleep(5)  # a baseline of latencies, not synchronisation
                for label, target, throttle in (("unthrottled", [0, 2], None),
                                                (f"throttled to {throttle_mb_per_s:g} MB/s", [0, 1], int(throttle_mb_per_s * 1e6))):
                    begun = time.monotonic()
                    took_s = asyncio.run(move(cluster.coord_url, "big", target, throttle))
                    print(f"move of big-0 to {target}, {label}: {took_s:.1f} s, {size_bytes / took_s / 1e6:.0f} MB/s")
                    print(f"  producer during it: {latencies_ms(producer, begun, begun + took_s)}")
                print(f"producer before the moves: {latencies_ms(producer, quiet_from, quiet_from + 5)}")
                producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--throttle-mb-per-s", type=float, default=50.0)
    arguments = parser.parse_args()
    measure(arguments.size_gib, arguments.throttle_mb_per_s)


if __name__ == "__main__":
    main()
