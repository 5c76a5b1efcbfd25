"""What fault tests drive a cluster with: a producer of numbered acks=all records that remembers
which were acknowledged, a sampler of the HW clients see, partition metadata from the live
brokers, and the final check of every replica's log (checker.py)."""

from __future__ import annotations

import asyncio
import threading

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from replog.net.client import BrokerConnection, BrokerUnavailable, PartitionMetadata

from tests.support.checker import Observed, read_replica, violations
from tests.support.polling import wait_until

WAIT_S = 60
POLL_S = 0.2  # between polls of a remote condition: a bounded poll, not synchronisation
PRODUCE_INTERVAL_S = 0.005
RECORDS_MAX = 100_000  # far more than a run sends at PRODUCE_INTERVAL_S; bounds the producer
SAMPLES_MAX = 10_000
VIEW_TIMEOUT_S = 5


def record_batch(*values: bytes) -> bytearray:
    """A v2 batch of real records (readable by clients and the checker), timestamps fixed at 0."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=0, key=None, value=value, headers=[])
    return bytearray(builder.build())


def create_topic(cluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 3, config={"min.insync.replicas": "2"})])[topic].result(timeout=WAIT_S)


async def _views(ports: list[int], topic: str) -> list[PartitionMetadata | None]:
    async def view(port: int) -> PartitionMetadata | None:
        try:
            async with await BrokerConnection.open("127.0.0.1", port, request_timeout_s=VIEW_TIMEOUT_S) as connection:
                return (await connection.metadata([topic])).topics[topic].partitions.get(0)
        except (BrokerUnavailable, KeyError):
            return None

    return list(await asyncio.gather(*(view(port) for port in ports)))


def agreed_view(cluster, topic: str, excluded=()) -> PartitionMetadata | None:
    """Partition 0 as every live broker (but `excluded`) describes it, if they all agree.

    Each is asked, not just any one: a broker that was paused answers from a cache that the
    store's watches have not refreshed yet, and may still describe the world before its pause."""
    ports = [broker.port for broker_id, broker in cluster.brokers.items()
             if broker.running and broker_id not in excluded]
    views = {None if view is None else (view.leader_id, view.leader_epoch, tuple(sorted(view.isr)), view.replicas): view
             for view in asyncio.run(_views(ports, topic))}
    return next(iter(views.values())) if len(views) == 1 else None


def settled_view(cluster, topic: str) -> PartitionMetadata:
    return wait_until(lambda: agreed_view(cluster, topic), "the live brokers to agree on leader, epoch and ISR", WAIT_S)


def leader_of(cluster, topic: str, excluded=()) -> int:
    view = agreed_view(cluster, topic, excluded)
    return -1 if view is None else view.leader_id


def isr_of(cluster, topic: str, excluded=()) -> tuple[int, ...] | None:
    view = agreed_view(cluster, topic, excluded)
    return None if view is None else tuple(sorted(view.isr))


def fully_in_sync(cluster, topic: str) -> bool:
    return isr_of(cluster, topic) == tuple(sorted(cluster.brokers))


class SecuredBootstrap(str):
    """Bootstrap servers that clients reach with more than an address: `security`, librdkafka's
    settings for it (security.protocol, sasl.*, ssl.*), which client_config adds."""

    def __new__(cls, servers: str, security: dict[str, str]):
        bootstrap = super().__new__(cls, servers)
        bootstrap.security = security
        return bootstrap


def client_config(bootstrap: str) -> dict[str, str]:
    """librdkafka's settings to reach `bootstrap`: the servers, and their security if it is a
    SecuredBootstrap."""
    return {"bootstrap.servers": str(bootstrap), **getattr(bootstrap, "security", {})}


class _Background:
    """Runs the subclass's `_run` in a thread while used as a context manager; `_stopping` tells
    it to end, and leaving the context calls the subclass's `stop`."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _end_thread(self) -> None:
        self._stopping.set()
        self._thread.join(WAIT_S)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class NumberedProducer(_Background):
    """Sends "0", "1", ... with acks=all and idempotence from a thread until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                   "message.timeout.ms": 30000, "linger.ms": 2})
        self._topic = topic
        self._lock = threading.Lock()
        self._acknowledged: set[bytes] = set()
        super().__init__()

    def _delivered(self, error, message) -> None:
        if error is None:
            with self._lock:
                self._acknowledged.add(message.value())

    def _run(self) -> None:
        for number in range(RECORDS_MAX):  # until stopped
            if self._stopping.wait(PRODUCE_INTERVAL_S):
                return
            try:
                self._producer.produce(self._topic, value=str(number).encode(), partition=0, on_delivery=self._delivered)
            except BufferError:
                pass  # the queue is full while no leader answers: this number is simply never sent
            self._producer.poll(0)

    def acknowledged_count(self) -> int:
        self._producer.poll(0)
        with self._lock:
            return len(self._acknowledged)

    def stop(self) -> frozenset[bytes]:
        """Stop sending, wait for the answers to what was sent; the acknowledged values."""
        self._end_thread()
        self._producer.flush(WAIT_S)
        with self._lock:
            return frozenset(self._acknowledged)


class HighWatermarkSampler(_Background):
    """ListOffsets latest from whichever broker leads, from a thread, in order; errors skipped."""

    def __init__(self, bootstrap: str, topic: str):
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw-sampler", "enable.auto.commit": False})
        self._partition = TopicPartition(topic, 0)
        self.samples: list[int] = []
        super().__init__()

    def _run(self) -> None:
        while len(self.samples) < SAMPLES_MAX and not self._stopping.wait(POLL_S):
            try:
                _, high = self._consumer.get_watermark_offsets(self._partition, timeout=2, cached=False)
            except KafkaException:
                continue  # no leader, or one whose HW is not available yet (KIP-207)
            self.samples.append(high)

    def stop(self) -> tuple[int, ...]:
        self._end_thread()
        self._consumer.close()
        return tuple(self.samples)


def stop_and_check(cluster, topic: str, acknowledged: frozenset[bytes], high_watermark_samples=()) -> list[str]:
    """Wait until every replica is in sync, stop every broker cleanly, then check their logs."""
    wait_until(lambda: fully_in_sync(cluster, topic), "every replica back in the ISR", WAIT_S)
    isr = frozenset(cluster.brokers)
    cluster.stop()
    replicas = {broker_id: read_replica(broker.data_dir, broker_id, topic, 0) for broker_id, broker in cluster.brokers.items()}
    observed = Observed(acknowledged, isr, tuple(high_watermark_samples),
                        {broker_id: broker.output for broker_id, broker in cluster.brokers.items()})
    problems = violations(replicas, observed, topic, 0)
    if problems:
        for broker in cluster.brokers.values():  # bounded by the cluster size
            broker.data_dir.with_suffix(".log").write_text("".join(broker.output))
        problems.append(f"broker output: {cluster.brokers[0].data_dir.parent}/broker-*.log")
    return problems
