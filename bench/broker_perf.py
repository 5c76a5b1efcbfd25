"""Produce and consume throughput of one fresh broker, measured with `replog perf`, and what
the broker's Prometheus metrics cost it.

    .venv/bin/python bench/broker_perf.py [--num-records N] [--record-size BYTES] [--partitions P] [--rounds R]

Starts two `replog broker start` processes on free ports with fresh data directories, one with
its metrics endpoint off (`--metrics-listen ""`) and one with it on, and creates topic `perf`
(P partitions, replication factor 1) on each. Then, as an operator would, each command its own
process: `replog perf produce` with acks=1 and with acks=all, against the two brokers in turn,
R rounds (alternating, each first in half of them, so that a machine growing busier or quieter
weighs on both alike; the idle broker costs the other little); the median produce rate of each
is printed with the difference. A broker without the endpoint counts nothing on the produce
path (obs.UnservedMetrics), so the difference is what the metrics cost; as that is smaller
than what a shared machine's noise does to a run, the cost is also computed: the metrics calls
of one produce request timed here, times the produce requests the broker with metrics counted. Last, `replog perf consume` of everything the first round wrote to the broker with
metrics on, with 1 MiB and 32 MiB fetches. Each command and its report line are printed;
figures are never asserted. The brokers and the tools share this machine's CPUs, so read the
figures with `nproc` in mind.
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import timeit
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from replog.obs import BrokerMetrics  # noqa: E402

from tests.support.broker_process import BrokerProcess  # noqa: E402

TOPIC = "perf"
ADMIN_TIMEOUT_S = 30


REPORTED_RATE = re.compile(r"([\d.]+) records/sec")
METRICS = {"off": ("--metrics-listen", ""), "on": ("--metrics-listen", "127.0.0.1:0")}


def run(*args: str) -> float:
    """The records/sec the tool reported."""
    command = [sys.executable, "-m", "replog", *args]
    print("$ replog " + " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    print(done.stdout.strip() or done.stderr.strip(), flush=True)
    if done.returncode != 0:
        raise SystemExit(f"replog {args[0]} {args[1]} failed: {done.stderr.strip()}")
    # The summary is the last line; progress lines come before it.
    return float(REPORTED_RATE.search(done.stdout.strip().rpartition("\n")[2])[1])


def create_topic(bootstrap: str, partitions: int) -> None:
    # The admin client lives only here: left open, it would log reconnects after the broker stops.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(ADMIN_TIMEOUT_S)


@contextlib.contextmanager
def broker_with_metrics(work_dir: pathlib.Path, metrics: str, partitions: int):
    broker = BrokerProcess(work_dir / f"metrics-{metrics}", extra_args=METRICS[metrics])
    broker.start()
    try:
        create_topic(broker.bootstrap, partitions)
        yield broker
    finally:
        broker.stop()


def print_instrument_cost(broker: BrokerProcess, records_produced: int, records_per_s: float) -> None:
    """What the metrics cost, computed rather than measured against the noise of a shared
    machine: their calls for one produce request, timed in this process, times the produce
    requests the broker counted, at the fastest rate seen."""
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=ADMIN_TIMEOUT_S) as scrape:
        families = text_string_to_metric_families(scrape.read().decode())
    requests = sum(sample.value for family in families if family.name == "replog_requests"
                   for sample in family.samples if sample.labels.get("api") == "produce")
    metrics = BrokerMetrics()

    def produce_request() -> None:  # the calls the broker makes for an acks=all request to one partition
        metrics.request_handled("produce", 9, 0.0, 0.0001, 0.002)
        metrics.produced(TOPIC, 1_000_000, 1_000)
        metrics.replication_waited("produce", 0.001)
        metrics.request_sent("produce", 0.0, 0.002, 0.0021)

    calls = 100_000
    per_request_s = min(timeit.repeat(produce_request, number=calls, repeat=5)) / calls
    records_per_request = records_produced / requests
    share = per_request_s * records_per_s / records_per_request
    print(f"metrics cost: {per_request_s * 1e6:.1f} us per produce request; {records_per_request:.0f} records per request "
          f"here, so {share:.2%} of a CPU at {records_per_s:.1f} records/sec", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=1_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=4)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replog-bench-") as data_dir, contextlib.ExitStack() as brokers:
        by_metrics = {metrics: brokers.enter_context(broker_with_metrics(pathlib.Path(data_dir), metrics, options.partitions))
                      for metrics in METRICS}
        rates_on: list[float] = []
        for acks in ("1", "all"):
            rates: dict[str, list[float]] = {metrics: [] for metrics in METRICS}
            for round_index in range(options.rounds):
                # Each goes first in half the rounds: the first of a pair tends to find the machine quieter.
                order = list(by_metrics.items())
                for metrics, broker in order[::-1] if round_index % 2 else order:
                    print(f"# metrics {metrics}", flush=True)
                    rates[metrics].append(run("perf", "produce", "--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
                                              "--num-records", str(options.num_records),
                                              "--record-size", str(options.record_size), "--acks", acks))
            off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
            # Within a round the two runs are back to back: their ratio is the least disturbed by
            # whatever else the machine does, which shifts whole rounds.
            paired = statistics.median(on_rate / off_rate for on_rate, off_rate in zip(rates["on"], rates["off"]))
            print(f"produce acks={acks}, median of {options.rounds} rounds: metrics off {off:.1f} records/sec, "
                  f"metrics on {on:.1f} records/sec; on/off within a round, median {paired - 1:+.1%}", flush=True)
            rates_on.extend(rates["on"])
        print_instrument_cost(by_metrics["on"], len(rates_on) * options.num_records, max(rates_on))
        # Kafka's default fetch size (1 MiB) and a large one: a consumer of one partition is
        # bound by fetch round trips, so the pair shows the broker's per-fetch cost.
        common = ["--bootstrap-server", by_metrics["on"].bootstrap, "--topic", TOPIC]
        for fetch_size_bytes in (1_048_576, 33_554_432):
            run("perf", "consume", *common, "--num-records", str(options.num_records), "--fetch-size", str(fetch_size_bytes))


if __name__ == "__main__":
    main()
