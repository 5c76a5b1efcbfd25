"""Produce and consume throughput of this tree's broker and of an earlier revision's, in one run,
on the same machine: what a change costs the usual confluent-kafka workload.

    .venv/bin/python bench/throughput_ab.py [--before REV] [--rounds R] [--sizes 1024,16384]

Checks REV (default: the last revision before leaders validated every record and frames were
checked before decoding) out into a temporary git worktree and builds its C extensions there.
Then, for each record size, R rounds, each starting one fresh broker of each tree in turn (the
order alternating between rounds, so that a machine growing busier or quieter weighs on both
alike), with topic `perf` of 3 partitions on it, and runs this tree's `replog perf produce` with
acks=1 and with acks=all, then `replog perf consume` of everything produced. The broker is the
only thing that differs. Prints each run's rates and the broker's CPU time per record produced
with acks=1 (from /proc, user + system), then the medians and after/before. Figures are
printed, never asserted; the brokers and the clients share this machine's CPUs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.replication import cpu_seconds  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402

BEFORE_DEFAULT = "1c3c227"
RECORDS_FOR_SIZE = {1024: 400_000, 16384: 40_000}  # about 400 MB and 650 MB a run
REPORTED_RATE = re.compile(r"([\d.]+) records/sec")
COMMAND_TIMEOUT_S = 900


@contextlib.contextmanager
def worktree_of(revision: str) -> Iterator[pathlib.Path]:
    """`revision` checked out beside this tree, its C extensions built; removed afterwards."""
    with tempfile.TemporaryDirectory() as scratch:
        path = pathlib.Path(scratch) / "before"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "--quiet", str(path), revision], check=True)
        try:
            subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=path, check=True,
                           stdout=subprocess.DEVNULL)
            yield path
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(path)], check=False)


def replog_command(*args: str) -> str:
    """This tree's `replog` tool; its output."""
    done = subprocess.run([sys.executable, "-m", "replog", *args], capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT_S, env=os.environ | {"PYTHONPATH": str(REPO / "src")})
    return done.stdout + done.stderr


def rate(output: str) -> float:
    found = REPORTED_RATE.findall(output)
    if not found:
        raise RuntimeError(f"no rate in the tool's output: {output[-500:]}")
    return float(found[-1])


def measure(tree: pathlib.Path, size: int, count: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as scratch:
        broker = BrokerProcess(pathlib.Path(scratch) / "data", extra_args=("--metrics-listen", ""),
                               env={"PYTHONPATH": str(tree / "src")})
        broker.start()
        try:
            replog_command("topics", "create", "perf", "--partitions", "3", "--bootstrap-server", broker.bootstrap)
            figures = {}
            for acks in ("1", "all"):
                cpu_before = cpu_seconds(broker.process.pid)
                output = replog_command("perf", "produce", "--topic", "perf", "--num-records", str(count),
                                        "--record-size", str(size), "--acks", acks, "--bootstrap-server", broker.bootstrap)
                figures[f"produce acks={acks}"] = rate(output)
                if acks == "1":
                    figures["broker CPU us/record"] = (cpu_seconds(broker.process.pid) - cpu_before) / count * 1e6
            figures["consume"] = rate(replog_command("perf", "consume", "--topic", "perf", "--num-records", str(2 * count),
                                                     "--bootstrap-server", broker.bootstrap))
            return figures
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE_DEFAULT, help="the revision to compare this tree with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1024,16384", help=f"record sizes, of {sorted(RECORDS_FOR_SIZE)}")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with worktree_of(args.before) as before_tree:
        trees = {"before": before_tree, "after": REPO}
        print(f"before: {args.before}; after: this tree ({REPO}); {os.cpu_count()} CPUs", flush=True)
        for size in sizes:
            count = RECORDS_FOR_SIZE[size]
            runs: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
            for round_index in range(args.rounds):
                order = list(trees) if round_index % 2 == 0 else list(reversed(trees))
                for name in order:
                    runs[name].append(measure(trees[name], size, count))
                    shown = ", ".join(f"{key} {value:,.2f}" if "CPU" in key else f"{key} {value:,.0f}/s"
                                      for key, value in runs[name][-1].items())
                    print(f"{size} B x {count:,} {name:6}: {shown}", flush=True)
            for key in runs["before"][0]:
                medians = {name: statistics.median(run[key] for run in runs[name]) for name in trees}
                print(f"{size} B {key:22} median before {medians['before']:12,.2f}  after {medians['after']:12,.2f}  "
                      f"after/before {medians['after'] / medians['before']:6.1%}", flush=True)


if __name__ == "__main__":
    main()
