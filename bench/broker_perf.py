"""Produce and consume throughput of one fresh broker, measured with `replog perf`.

    .venv/bin/python bench/broker_perf.py [--num-records N] [--record-size BYTES] [--partitions P]

Starts `replog broker start` on a free port with a fresh data directory, creates topic `perf`
(P partitions, replication factor 1), then runs, each as its own process as an operator would:
`replog perf produce` with acks=1, the same with acks=all, and `replog perf consume` of
everything both wrote, with 1 MiB and 32 MiB fetches. Each command and its report line are
printed; figures are never asserted. The broker and the tools share this machine's CPUs, so
read the figures with `nproc` in mind.
"""

from __future__ import annotations

import argparse
import pathlib
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.broker_process import BrokerProcess  # noqa: E402

TOPIC = "perf"
ADMIN_TIMEOUT_S = 30


def run(*args: str) -> None:
    command = [sys.executable, "-m", "replog", *args]
    print("$ replog " + " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    print(done.stdout.strip() or done.stderr.strip(), flush=True)
    if done.returncode != 0:
        raise SystemExit(f"replog {args[0]} {args[1]} failed: {done.stderr.strip()}")


def create_topic(bootstrap: str, partitions: int) -> None:
    # The admin client lives only here: left open, it would log reconnects after the broker stops.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=1)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replog-bench-") as data_dir:
        broker = BrokerProcess(pathlib.Path(data_dir) / "data")
        broker.start()
        try:
            create_topic(broker.bootstrap, options.partitions)
            common = ["--bootstrap-server", broker.bootstrap, "--topic", TOPIC]
            for acks in ("1", "all"):
                run("perf", "produce", *common, "--num-records", str(options.num_records), "--record-size", str(options.record_size), "--acks", acks)
            # Kafka's default fetch size (1 MiB) and a large one: a consumer of one partition is
            # bound by fetch round trips, so the pair shows the broker's per-fetch cost.
            for fetch_size_bytes in (1_048_576, 33_554_432):
                run("perf", "consume", *common, "--num-records", str(2 * options.num_records), "--fetch-size", str(fetch_size_bytes))
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
