"""Coordination store throughput and watch latency, per backend.

    python bench/coord.py [--ops N] [--updates N]

Starts its own ZooKeeper and etcd on 127.0.0.1 through scripts/ (and stops them), then, for
the embedded store, ZooKeeper and etcd, prints operations per second of create, get and set,
issued one at a time (latency-bound, as a broker's control path is) and 32 at a time, and the
latency from a `set` on one client to the change arriving at another client's data watch
(p50/p99 over sequential updates). Results are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO))

from replog.coord_backends import open_store  # noqa: E402
from tests.support.servers import ServerProcess  # noqa: E402

CONCURRENCY = 32


async def timed_ops_per_s(count: int, concurrency: int, make_call) -> float:
    started = time.perf_counter()
    for batch_start in range(0, count, concurrency):
        await asyncio.gather(*(make_call(i) for i in range(batch_start, min(count, batch_start + concurrency))))
    return count / (time.perf_counter() - started)


async def measure(url: str, ops: int, updates: int) -> dict[str, float]:
    writer, watcher = open_store(url), open_store(url)
    await writer.start()
    await watcher.start()
    figures: dict[str, float] = {}
    try:
        for concurrency in (1, CONCURRENCY):
            base = f"/bench-{concurrency}"
            await writer.create(base, b"")
            figures[f"create x{concurrency}"] = await timed_ops_per_s(ops, concurrency, lambda i: writer.create(f"{base}/n{i}", b"v" * 64))
            figures[f"get x{concurrency}"] = await timed_ops_per_s(ops, concurrency, lambda i: writer.get(f"{base}/n{i}"))
            figures[f"set x{concurrency}"] = await timed_ops_per_s(ops, concurrency, lambda i: writer.set(f"{base}/n{i}", b"w" * 64))

        await writer.create("/watched", b"start")
        latencies_ms = []
        async with await watcher.watch_data("/watched") as watch:
            await anext(watch)
            for i in range(updates):
                payload = str(i).encode()
                sent = time.perf_counter()
                await writer.set("/watched", payload)
                while (await anext(watch)).data != payload:
                    pass
                latencies_ms.append((time.perf_counter() - sent) * 1000)
        quantiles = statistics.quantiles(latencies_ms, n=100)
        figures["watch p50 ms"], figures["watch p99 ms"] = quantiles[49], quantiles[98]
    finally:
        await watcher.close()
        await writer.close()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000, help="operations per measurement")
    parser.add_argument("--updates", type=int, default=500, help="watched updates for the latency figures")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="replog-bench-coord-") as scratch:
        zookeeper, etcd = ServerProcess("zookeeper", pathlib.Path(scratch, "zk")), ServerProcess("etcd", pathlib.Path(scratch, "etcd"))
        zookeeper.start()
        try:
            etcd.start()
            try:
                root = f"/bench-{uuid.uuid4().hex[:8]}"
                urls = {
                    "memory": f"memory://{scratch}/coordination.sqlite",
                    "zk": f"zk://{zookeeper.address}{root}",
                    "etcd": f"etcd://{etcd.address}{root}",
                }
                results = {backend: asyncio.run(measure(url, args.ops, args.updates)) for backend, url in urls.items()}
            finally:
                etcd.stop()
        finally:
            zookeeper.stop()

    columns = list(next(iter(results.values())))
    print(f"coordination store: {args.ops} ops per figure, {args.updates} watched updates; ops/s unless marked ms")
    print(f"{'backend':<8}" + "".join(f"{column:>14}" for column in columns))
    for backend, figures in results.items():
        print(f"{backend:<8}" + "".join(f"{figures[column]:>14.1f}" if "ms" in column else f"{figures[column]:>14.0f}" for column in columns))


if __name__ == "__main__":
    main()
