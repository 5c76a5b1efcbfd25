"""Transactions over three brokers, RF=3: a transactional producer's throughput against the same
idempotent one's, and a read_committed consumer's end-to-end latency.

    .venv/bin/python bench/transactions.py [--against replog|kafka] [--seconds 20] [--record-bytes 1024]

Starts three brokers, replog's over a ZooKeeper of their own or Apache Kafka's (bench/peers/kafka,
bench/compare/clusters.py), and a topic of 3 partitions, RF=3, min.insync.replicas=2. Throughput:
confluent-kafka producers (acks=all, linger.ms 5) send --record-bytes records as fast as they can
for --seconds each: idempotent; transactional committing every 100 ms; transactional committing
every 1,000 records (a commit waits for its markers, so no record is sent meanwhile: what a
transactional producer pays). Latency: a transactional producer sends 1,000 records/s, committing
every 100 ms, each stamped with its send time, and a read_committed consumer notes when each
arrives: p50/p99 of the difference, which includes the wait for the commit. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from bench.compare.clusters import KafkaCluster, ReplogCluster  # noqa: E402

PARTITIONS = 3
SETTLE_S = 120
COMMIT_INTERVAL_S = 0.1
COMMIT_RECORDS = 1000
LATENCY_RATE = 1000  # records/s of the latency run: well below either broker's ceiling
_STAMP = struct.Struct(">q")


def create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})])[topic].result(SETTLE_S)


def producer(bootstrap: str, transactional: bool) -> Producer:
    settings = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                "queue.buffering.max.kbytes": 256 * 1024, "log_level": 0}
    if transactional:
        settings["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    made = Producer(settings)
    if transactional:
        made.init_transactions(SETTLE_S)
    return made


def send(made: Producer, topic: str, value: bytes) -> None:
    while True:  # bounded by the broker's pace: a full queue drains as it acknowledges
        try:
            made.produce(topic, value=value)
            return
        except BufferError:
            made.poll(0.01)


def throughput(bootstrap: str, seconds: float, record_bytes: int, commit_every: str | None) -> float:
    """Records/s acknowledged over `seconds`: idempotent if `commit_every` is None, else
    transactional, committing every COMMIT_INTERVAL_S ("interval") or COMMIT_RECORDS ("records")."""
    topic = f"txn-bench-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    made = producer(bootstrap, commit_every is not None)
    value = b"x" * record_bytes
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        if commit_every is not None:
            made.begin_transaction()
        opened = time.monotonic()
        in_transaction = 0
        while True:  # one transaction, or a slice of the idempotent run
            send(made, topic, value)
            in_transaction += 1
            if in_transaction % 100 == 0:
                made.poll(0)
                if (commit_every == "records" and in_transaction >= COMMIT_RECORDS
                        or commit_every != "records" and time.monotonic() - opened >= COMMIT_INTERVAL_S):
                    break
        if commit_every is not None:
            made.commit_transaction(SETTLE_S)  # flushes the transaction's records first
        sent += in_transaction
    assert made.flush(SETTLE_S) == 0
    return sent / (time.monotonic() - started)


def end_to_end_latency(bootstrap: str, seconds: float, record_bytes: int) -> list[float]:
    """Seconds from send to a read_committed consumer's receipt, of every record; the consumer
    polls in a thread of its own, so that a commit's wait never delays a receipt."""
    topic = f"txn-latency-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10, "log_level": 0})
    # Assigned, not subscribed: a group's join (and Kafka's initial rebalance delay) would count.
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
    total = int(seconds * LATENCY_RATE)
    latencies: list[float] = []

    def consume() -> None:
        deadline = time.monotonic() + seconds + SETTLE_S
        while len(latencies) < total and time.monotonic() < deadline:
            for message in consumer.consume(1000, 0.05):
                if message.error() is None:
                    latencies.append((time.time_ns() - _STAMP.unpack_from(message.value())[0]) / 1e9)

    receiver = threading.Thread(target=consume, daemon=True)
    receiver.start()
    made = producer(bootstrap, True)
    padding = b"x" * max(0, record_bytes - _STAMP.size)
    started = time.monotonic()
    number = 0
    while number < total:
        made.begin_transaction()
        opened = time.monotonic()
        while time.monotonic() - opened < COMMIT_INTERVAL_S and number < total:
            pause_s = started + number / LATENCY_RATE - time.monotonic()
            if pause_s > 0:
                made.poll(pause_s)  # pacing the sender, not waiting for an event
                continue
            send(made, topic, _STAMP.pack(time.time_ns()) + padding)
            number += 1
        made.commit_transaction(SETTLE_S)
    receiver.join()
    consumer.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", choices=["replog", "kafka"], default="replog")
    parser.add_argument("--seconds", type=float, default=20, help="length of each run")
    parser.add_argument("--record-bytes", type=int, default=1024)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="txn-bench-") as scratch:
        run_dir = pathlib.Path(scratch) / args.against
        with (KafkaCluster(3, run_dir) if args.against == "kafka" else ReplogCluster(3, run_dir)) as cluster:
            bootstrap = cluster.bootstrap
            print(f"{args.against}: 3 brokers, topic of {PARTITIONS} partitions RF=3 min.insync.replicas=2, "
                  f"{args.record_bytes} B records, {args.seconds:.0f} s per run")
            # A first run warms up what the first would otherwise pay alone (connections, the
            # producer ids' block, a freshly started broker's caches): not counted.
            throughput(bootstrap, min(args.seconds, 5), args.record_bytes, "interval")
            idempotent = throughput(bootstrap, args.seconds, args.record_bytes, None)
            by_interval = throughput(bootstrap, args.seconds, args.record_bytes, "interval")
            by_records = throughput(bootstrap, args.seconds, args.record_bytes, "records")
            mib = args.record_bytes / 2**20
            print(f"idempotent:                            {idempotent:10.0f} records/s {idempotent * mib:7.1f} MiB/s")
            print(f"transactional, commit every 100 ms:    {by_interval:10.0f} records/s {by_interval * mib:7.1f} MiB/s"
                  f"  ({by_interval / idempotent:.0%} of idempotent)")
            print(f"transactional, commit every {COMMIT_RECORDS} rec: {by_records:10.0f} records/s "
                  f"{by_records * mib:7.1f} MiB/s  ({by_records / idempotent:.0%} of idempotent)")
            latencies = sorted(end_to_end_latency(bootstrap, args.seconds, args.record_bytes))
            if latencies:
                p50 = statistics.median(latencies)
                p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
                print(f"read_committed end-to-end at {LATENCY_RATE} records/s, commit every 100 ms: "
                      f"p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms ({len(latencies)} records)")
            else:
                print("read_committed end-to-end: no record arrived")


if __name__ == "__main__":
    main()
