"""The throughput and latency figures of bench/kafka_compare.py: replog beside Apache Kafka, driven
by the same clients with the same settings against both.

- single broker, a topic of 3 partitions: produce with acks=1 and with acks=all, then consume
  what acks=1 wrote, 1 KiB and 16 KiB records, with librdkafka (`replog perf`, confluent-kafka)
  and with the Java client (Kafka's ProducerPerformance and ConsumerPerformance);
- three brokers, a topic of 3 partitions with RF=3 and min.insync.replicas=2: produce with
  acks=all, idempotent and not, both record sizes, both clients;
- end-to-end latency on those three brokers, RF=3 acks=all (idempotent), 1 KiB records at fixed
  rates: each record's time from just before produce() to a consumer's poll() returning it, in
  one process (`replog perf end-to-end`, librdkafka), p50 and p99.

Each client keeps its own defaults (librdkafka's as `replog perf` sets them: batch.size 1 MB,
linger.ms 5; the Java client's: batch.size 16 KiB, linger.ms 5), the same against both systems,
so a ratio compares the brokers under one client. Throughput is MB/s (MiB, as Kafka's tools
count): the producer's from first send to last acknowledgement, the consumer's from its
assignment (librdkafka) or its first fetch (Java, fetch.MB.sec: without the group join) to the
last record. Every run has a fresh topic, deleted after it.
"""

from __future__ import annotations

import itertools
import math
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka.admin import NewTopic

from bench.compare.clusters import Cluster, Pairs
from bench.compare.report import Row, Rows
from bench.peers.kafka import peer
from tests.support.failover import FAILOVER_WAIT_S, quiet_admin, wait_until_in_sync

PARTITIONS = 3
RECORD_SIZES_BYTES = (1024, 16 * 1024)
LATENCY_RECORD_BYTES = 1024
LATENCY_RATES_PER_S = (1_000, 10_000)
RUN_TIMEOUT_S = 900
# A consumer gives up after this long without a record: long enough for a group join.
CONSUME_IDLE_TIMEOUT_MS = 30_000
# Kafka's tools and `replog perf` end with the same summary line.
PRODUCED = re.compile(r"(\d+) records sent, [\d.]+ records/sec \(([\d.]+) MB/sec\)")
CONSUMED = re.compile(r"(\d+) records consumed, [\d.]+ records/sec \(([\d.]+) MB/sec\)")
PERCENTILE = re.compile(r"([\d.]+) ms (50th|99th)")
# Topic names are never reused: a deleted topic's name may not be free again at once.
TOPIC_SERIAL = itertools.count()


@dataclass(frozen=True)
class Volume:
    """How much a run moves: `mib` MiB per produce run, `latency_s` seconds per latency run."""

    mib: int
    latency_s: float

    def records(self, record_bytes: int) -> int:
        return max(1, self.mib * 2**20 // record_bytes)


FULL = Volume(mib=256, latency_s=30)
QUICK = Volume(mib=4, latency_s=2)


def order(round_index: int, pair: list[Cluster]) -> list[Cluster]:
    """replog first in even rounds, Kafka first in odd ones: neither always runs right after the other."""
    return pair if round_index % 2 == 0 else pair[::-1]


def size_name(record_bytes: int) -> str:
    return f"{record_bytes // 1024} KiB"


# --- clients ----------------------------------------------------------------------------------


def run_tool(command: list[str], what: str) -> str:
    """The tool's output; "" (and its error on stderr) if it failed, so that the round counts as failed."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        print(f"  {what}: no result within {RUN_TIMEOUT_S} s", file=sys.stderr)
        return ""
    if done.returncode != 0:
        print(f"  {what}: exit status {done.returncode}: {done.stderr.strip()[-2000:]}", file=sys.stderr)
        return ""
    return done.stdout


def summary_mb_per_s(output: str, pattern: re.Pattern, records: int, what: str) -> float:
    """MB/s from a tool's last summary line, if it moved every record; else NaN."""
    found = pattern.findall(output)
    if not found or int(found[-1][0]) < records:
        print(f"  {what}: no summary of {records} records in: {output.strip()[-500:]}", file=sys.stderr)
        return math.nan
    return float(found[-1][1])


def replog_perf(tool: str, bootstrap: str, topic: str, records: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "replog", "perf", tool, "--bootstrap-server", bootstrap, "--topic", topic,
            "--num-records", str(records), *options]


def java_tool(tool: str, *options: str) -> list[str]:
    return peer.java(peer.TOOLS[tool], *options)


def idempotence_options(idempotence: bool | None) -> tuple[str, ...]:
    return () if idempotence is None else ("--idempotence" if idempotence else "--no-idempotence",)


def librdkafka_produce(bootstrap: str, topic: str, records: int, record_bytes: int, acks: str, idempotence: bool | None) -> float:
    command = replog_perf("produce", bootstrap, topic, records, "--record-size", str(record_bytes), "--acks", acks,
                          *idempotence_options(idempotence))
    return summary_mb_per_s(run_tool(command, "replog perf produce"), PRODUCED, records, "replog perf produce")


def java_produce(bootstrap: str, topic: str, records: int, record_bytes: int, acks: str, idempotence: bool | None) -> float:
    settings = [f"bootstrap.servers={bootstrap}", f"acks={acks}"]
    if idempotence is not None:
        settings.append(f"enable.idempotence={str(idempotence).lower()}")
    command = java_tool("producer-perf-test", "--topic", topic, "--num-records", str(records), "--record-size", str(record_bytes),
                        "--throughput", "-1", "--producer-props", *settings)
    return summary_mb_per_s(run_tool(command, "ProducerPerformance"), PRODUCED, records, "ProducerPerformance")


def librdkafka_consume(bootstrap: str, topic: str, records: int) -> float:
    command = replog_perf("consume", bootstrap, topic, records, "--timeout-ms", str(CONSUME_IDLE_TIMEOUT_MS))
    return summary_mb_per_s(run_tool(command, "replog perf consume"), CONSUMED, records, "replog perf consume")


def java_consume(bootstrap: str, topic: str, records: int) -> float:
    """fetch.MB.sec of ConsumerPerformance's CSV summary (a header line, then the values)."""
    command = java_tool("consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
                        "--timeout", str(CONSUME_IDLE_TIMEOUT_MS))
    lines = run_tool(command, "ConsumerPerformance").splitlines()
    for header, values in zip(lines, lines[1:]):
        if "fetch.MB.sec" in header:
            summary = dict(zip((name.strip() for name in header.split(",")), (value.strip() for value in values.split(","))))
            if int(summary["data.consumed.in.nMsg"]) >= records:
                return float(summary["fetch.MB.sec"])
    print(f"  ConsumerPerformance: no summary of {records} records in: {lines[-5:]}", file=sys.stderr)
    return math.nan


@dataclass(frozen=True)
class Client:
    produce: Callable[[str, str, int, int, str, bool | None], float]
    consume: Callable[[str, str, int], float]


CLIENTS = {"librdkafka": Client(librdkafka_produce, librdkafka_consume), "java": Client(java_produce, java_consume)}


def end_to_end_ms(bootstrap: str, topic: str, records: int, rate_per_s: int) -> tuple[float, float]:
    """(p50, p99) of `replog perf end-to-end` at `rate_per_s`; NaNs if it failed."""
    command = replog_perf("end-to-end", bootstrap, topic, records, "--record-size", str(LATENCY_RECORD_BYTES), "--acks", "all",
                          "--throughput", str(rate_per_s))
    output = run_tool(command, "replog perf end-to-end")
    if f"{records} records sent and consumed" not in output:
        print(f"  replog perf end-to-end: no summary of {records} records in: {output.strip()[-500:]}", file=sys.stderr)
        return math.nan, math.nan
    percentiles = {name: float(value) for value, name in PERCENTILE.findall(output.strip().splitlines()[-1])}
    return percentiles["50th"], percentiles["99th"]


# --- topics -----------------------------------------------------------------------------------


def fresh_topic(prefix: str) -> str:
    return f"{prefix}-{next(TOPIC_SERIAL)}"


def create_topic(cluster: Cluster, topic: str, replicas: int) -> None:
    """PARTITIONS partitions of `replicas` replicas (min.insync.replicas=2 when replicated),
    returned once every replica is in every ISR."""
    config = {"min.insync.replicas": "2"} if replicas > 1 else {}
    admin = quiet_admin(cluster.bootstrap)  # kept until the answer: a destroyed client fails its futures
    admin.create_topics([NewTopic(topic, PARTITIONS, replicas, config=config)])[topic].result(timeout=FAILOVER_WAIT_S)
    wait_until_in_sync(cluster.bootstrap, topic)


def delete_topics(cluster: Cluster, *topics: str) -> None:
    admin = quiet_admin(cluster.bootstrap)
    for future in admin.delete_topics(list(topics)).values():
        future.result(timeout=FAILOVER_WAIT_S)


# --- sections ---------------------------------------------------------------------------------


def single_broker(pairs: Pairs, rounds: int, volume: Volume) -> list[Row]:
    rows = Rows()
    for round_index in range(rounds):
        for record_bytes in RECORD_SIZES_BYTES:
            records = volume.records(record_bytes)
            for client_name, client in CLIENTS.items():
                for cluster in order(round_index, pairs.get(1)):
                    figure = f"1 broker, {size_name(record_bytes)}, {client_name}"
                    print(f"[{cluster.kind}] round {round_index + 1}: {figure}", flush=True)
                    written, acknowledged = fresh_topic("acks1"), fresh_topic("acksall")
                    create_topic(cluster, written, 1)
                    create_topic(cluster, acknowledged, 1)
                    rows.add(f"{figure}, produce acks=1", "MB/s", cluster.kind,
                             client.produce(cluster.bootstrap, written, records, record_bytes, "1", None))
                    rows.add(f"{figure}, produce acks=all", "MB/s", cluster.kind,
                             client.produce(cluster.bootstrap, acknowledged, records, record_bytes, "all", None))
                    rows.add(f"{figure}, consume", "MB/s", cluster.kind, client.consume(cluster.bootstrap, written, records))
                    delete_topics(cluster, written, acknowledged)
    return rows.rows()


def replicated(pairs: Pairs, rounds: int, volume: Volume) -> list[Row]:
    rows = Rows()
    for round_index in range(rounds):
        for record_bytes in RECORD_SIZES_BYTES:
            records = volume.records(record_bytes)
            for idempotence in (True, False):
                for client_name, client in CLIENTS.items():
                    for cluster in order(round_index, pairs.get(3)):
                        figure = (f"3 brokers RF=3 acks=all, {'idempotent' if idempotence else 'not idempotent'}, "
                                  f"{size_name(record_bytes)}, {client_name}")
                        print(f"[{cluster.kind}] round {round_index + 1}: {figure}", flush=True)
                        topic = fresh_topic("replicated")
                        create_topic(cluster, topic, 3)
                        rows.add(figure, "MB/s", cluster.kind,
                                 client.produce(cluster.bootstrap, topic, records, record_bytes, "all", idempotence))
                        delete_topics(cluster, topic)
    return rows.rows()


def latency(pairs: Pairs, rounds: int, volume: Volume) -> list[Row]:
    rows = Rows()
    for round_index in range(rounds):
        for rate_per_s in LATENCY_RATES_PER_S:
            for cluster in order(round_index, pairs.get(3)):
                figure = f"end-to-end RF=3 acks=all, {size_name(LATENCY_RECORD_BYTES)} at {rate_per_s:,}/s, librdkafka"
                print(f"[{cluster.kind}] round {round_index + 1}: {figure}", flush=True)
                topic = fresh_topic("latency")
                create_topic(cluster, topic, 3)
                p50_ms, p99_ms = end_to_end_ms(cluster.bootstrap, topic, int(rate_per_s * volume.latency_s), rate_per_s)
                rows.add(f"{figure}, p50", "ms", cluster.kind, p50_ms)
                rows.add(f"{figure}, p99", "ms", cluster.kind, p99_ms)
                delete_topics(cluster, topic)
    return rows.rows()


SECTIONS: dict[str, Callable[[Pairs, int, Volume], list[Row]]] = {
    "single": single_broker,
    "replicated": replicated,
    "latency": latency,
}
