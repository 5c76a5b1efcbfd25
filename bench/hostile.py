"""Latency of well-behaved clients while the adversarial fuzzer runs beside them, against the
same clients alone, in one run.

    .venv/bin/python bench/hostile.py [--seconds S] [--rate R] [--families frames,random,...] [--fuzz-cases-per-s F]

Starts one broker as the fuzzer's test does (tests/hostile/arena.py: 2 GiB address space, 1,024
files, the fuzz topics), with the default flush and cleaner intervals, and measures, from this process:
  - Produce: two confluent-kafka producers, acks=1 and acks=all, each sending 1 KiB records at
    R records/s (linger.ms=0) to a topic of their own; a record's latency runs from produce()
    to its delivery report;
  - ApiVersions: a raw socket round trip every 5 ms on one connection.
First S seconds alone, then S seconds with `python -m tests.hostile` (the fuzzer, in a process of
its own so that it does not share this one's interpreter) attacking the same broker. Prints
p50, p99, p99.9 and max of each, and the p99 beside the fuzzer over the p99 alone (the goal is
at most 2x). Records that failed and round trips that got no answer are counted and printed; a
broker that died is said. Figures are never asserted. The broker, the fuzzer and the clients
share this machine's CPUs (`nproc`), which weighs on the figures beside the fuzzer too.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import socket
import subprocess
import sys
import tempfile
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from replog.net.codec import ApiKey  # noqa: E402

from tests.hostile.__main__ import DEFAULT_FAMILIES  # noqa: E402
from tests.hostile.arena import Arena  # noqa: E402
from tests.hostile.seeds import encode  # noqa: E402

RECORD_BYTES = 1024
API_VERSIONS_INTERVAL_S = 0.005
ANSWER_TIMEOUT_S = 10.0
ADMIN_TIMEOUT_S = 30.0


class Latencies:
    """Milliseconds of one kind of request, and how many got no answer."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.failed = 0
        self._lock = threading.Lock()

    def add(self, ms: float) -> None:
        with self._lock:
            self.ms.append(ms)

    def fail(self) -> None:
        with self._lock:
            self.failed += 1

    def percentile(self, fraction: float) -> float:
        ordered = sorted(self.ms)
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else float("nan")


def produce_steadily(bootstrap: str, topic: str, acks: str, rate_per_s: float, stop: threading.Event,
                     latencies: Latencies) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0, "message.timeout.ms": 60_000})
    value = b"x" * RECORD_BYTES
    interval_s = 1.0 / rate_per_s
    next_s = time.monotonic()

    def delivered(error, message, sent_s: float) -> None:
        if error is None:
            latencies.add((time.monotonic() - sent_s) * 1000)
        else:
            latencies.fail()

    while not stop.is_set():  # bounded by the phase's end
        now_s = time.monotonic()
        if now_s >= next_s:
            try:
                producer.produce(topic, value=value, on_delivery=lambda error, message, sent_s=now_s: delivered(error, message, sent_s))
            except BufferError:
                latencies.fail()
            next_s += interval_s
        producer.poll(max(0.0, min(next_s - time.monotonic(), 0.01)))
    producer.flush(60)


def ask_api_versions(port: int, stop: threading.Event, latencies: Latencies) -> None:
    request = encode(ApiKey.API_VERSIONS, 0, {})
    sock: socket.socket | None = None
    while not stop.is_set():  # bounded by the phase's end
        started_s = time.monotonic()
        try:
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", port), timeout=ANSWER_TIMEOUT_S)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                started_s = time.monotonic()
            sock.sendall(request)
            _read_frame(sock)
            latencies.add((time.monotonic() - started_s) * 1000)
        except OSError:
            latencies.fail()
            if sock is not None:
                sock.close()
            sock = None
        stop.wait(max(0.0, API_VERSIONS_INTERVAL_S - (time.monotonic() - started_s)))
    if sock is not None:
        sock.close()


def _read_frame(sock: socket.socket) -> bytes:
    size = int.from_bytes(_read_exactly(sock, 4), "big")
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:  # bounded by `size`
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return bytes(data)


def phase(bootstrap: str, port: int, seconds: float, rate_per_s: float) -> dict[str, Latencies]:
    results = {"produce acks=1": Latencies(), "produce acks=all": Latencies(), "ApiVersions": Latencies()}
    stop = threading.Event()
    threads = [
        threading.Thread(target=produce_steadily, args=(bootstrap, "bench-acks-1", "1", rate_per_s, stop, results["produce acks=1"])),
        threading.Thread(target=produce_steadily, args=(bootstrap, "bench-acks-all", "all", rate_per_s, stop, results["produce acks=all"])),
        threading.Thread(target=ask_api_versions, args=(port, stop, results["ApiVersions"])),
    ]
    for thread in threads:
        thread.start()
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=120)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=30.0, help="of each phase")
    parser.add_argument("--rate", type=float, default=200.0, help="records/s of each producer")
    parser.add_argument("--families", default=DEFAULT_FAMILIES, help="the fuzzer's (python -m tests.hostile --help)")
    parser.add_argument("--fuzz-cases-per-s", type=float, default=0.0,
                        help="the fuzzer's pace (0: as fast as it goes, which takes a whole core of the broker's)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-hostile-") as scratch:
        with Arena(pathlib.Path(scratch) / "data", broker_settings={}) as arena:
            broker = arena.broker
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            for future in admin.create_topics([NewTopic("bench-acks-1", 1, 1), NewTopic("bench-acks-all", 1, 1)]).values():
                future.result(timeout=ADMIN_TIMEOUT_S)
            print(f"broker on {broker.bootstrap} (pid {broker.process.pid}); {os.cpu_count()} CPUs; "
                  f"{args.seconds:.0f} s per phase, {args.rate:.0f} records/s per producer", flush=True)
            alone = phase(broker.bootstrap, broker.port, args.seconds, args.rate)
            fuzzer_command = [sys.executable, "-m", "tests.hostile", "--port", str(broker.port),
                              "--seconds", str(args.seconds), "--families", args.families,
                              "--cases-per-s", str(args.fuzz_cases_per_s)]
            print("$ " + " ".join(fuzzer_command[1:]), flush=True)
            fuzzer = subprocess.Popen(fuzzer_command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            try:
                beside = phase(broker.bootstrap, broker.port, args.seconds, args.rate)
                fuzzer_output, _ = fuzzer.communicate(timeout=args.seconds + 300)
            finally:
                if fuzzer.poll() is None:
                    fuzzer.kill()
                    fuzzer.wait()
            print(fuzzer_output.strip().splitlines()[-1] if fuzzer_output.strip() else "fuzzer: no output", flush=True)
            alive = broker.process is not None and broker.process.poll() is None
            print_table(alone, beside)
            print("broker alive at the end" if alive else f"the broker DIED (exit status {broker.process.returncode})")


def print_table(alone: dict[str, Latencies], beside: dict[str, Latencies]) -> None:
    header = f"{'':18} {'phase':7} {'count':>7} {'failed':>6} {'p50 ms':>8} {'p99 ms':>8} {'p99.9 ms':>9} {'max ms':>8}"
    print(header)
    for name in alone:
        for label, results in (("alone", alone[name]), ("fuzzed", beside[name])):
            print(f"{name:18} {label:7} {len(results.ms):7d} {results.failed:6d} {results.percentile(0.5):8.2f} "
                  f"{results.percentile(0.99):8.2f} {results.percentile(0.999):9.2f} "
                  f"{max(results.ms, default=float('nan')):8.2f}")
        ratio = beside[name].percentile(0.99) / alone[name].percentile(0.99)
        print(f"{name:18} p99 fuzzed / alone: {ratio:.2f}x (goal: at most 2x)")


if __name__ == "__main__":
    main()
