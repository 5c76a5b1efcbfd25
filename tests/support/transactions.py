"""The transactions acceptance tests' cluster and instruments (tests/cluster/test_transactions.py,
bench/transactions.py): three brokers, replog's over ZooKeeper or etcd or, when
REPLOG_TXN_AGAINST_KAFKA=1, Apache Kafka's (bench/peers/kafka), behind one small interface, so
that every check is first known right against Kafka; the raw requests that no client exposes
(FindCoordinator for a transactional id, DescribeTransactions, ListOffsets read_committed); and
reading a topic up to a sentinel record, which a read_committed reader sees only once every
transaction before it ended."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection, BrokerUnavailable
from replog.net.codec import ApiKey
from tests.support.cluster import QUICK_SETTINGS, Cluster
from tests.support.group_clients import GROUP_SETTINGS
from tests.support.polling import wait_until
from tests.support.servers import unique_root

AGAINST_KAFKA = os.environ.get("REPLOG_TXN_AGAINST_KAFKA") == "1"
WAIT_S = 120  # a coordinator's failover and the markers it then sends again, on a loaded machine
REQUEST_TIMEOUT_S = 10
READ_COMMITTED = 1
READ_UNCOMMITTED = 0
LATEST_TIMESTAMP = -1
SENTINEL = b"sentinel"
BROKERS = 3
# Quick rebalances for the transform loop's group, as the group tests have.
REPLOG_SETTINGS = QUICK_SETTINGS + GROUP_SETTINGS


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class TxnCluster:
    """Three brokers 0, 1, 2 that a test can SIGKILL and bring back, either kind."""

    def __init__(self, kind: str, base_dir: pathlib.Path, coord_address: str | None = None):
        self.kind = kind
        if kind == "kafka":
            from bench.compare.clusters import KafkaCluster
            self._kafka = KafkaCluster(BROKERS, base_dir / "kafka")
        else:
            self._replog = Cluster(f"{kind}://{coord_address}{unique_root()}", base_dir, BROKERS, settings=REPLOG_SETTINGS)
        self._down: set[int] = set()

    @property
    def bootstrap(self) -> str:
        if self.kind == "kafka":
            return ",".join(address for broker_id, address in enumerate(self._kafka.bootstrap.split(","))
                            if broker_id not in self._down)
        return self._replog.bootstrap

    def address(self, broker_id: int) -> tuple[str, int]:
        bootstrap = (self._kafka.bootstrap.split(",")[broker_id] if self.kind == "kafka"
                     else self._replog.brokers[broker_id].bootstrap)
        host, port = bootstrap.rsplit(":", 1)
        return host, int(port)

    def start(self) -> None:
        self._kafka.start() if self.kind == "kafka" else self._replog.start()

    def stop(self) -> None:
        self._kafka.stop() if self.kind == "kafka" else self._replog.stop()

    def kill(self, broker_id: int) -> None:
        """SIGKILL, and wait until it is gone; it stays down until `restart_stopped`."""
        self._down.add(broker_id)
        self._kafka.kill(broker_id) if self.kind == "kafka" else self._replog.brokers[broker_id].kill()

    def restart_stopped(self) -> None:
        """Every killed broker started again on its data, and back once each live broker's
        metadata names all three (a client asking one that does not would drop the restarted
        broker's connection)."""
        for broker_id in sorted(self._down):
            self._kafka.restart(broker_id) if self.kind == "kafka" else self._replog.brokers[broker_id].restart()
        self._down.clear()
        for broker_id in range(BROKERS):
            host, port = self.address(broker_id)
            admin = AdminClient({"bootstrap.servers": f"{host}:{port}", "log_level": 0})
            wait_until(lambda: _names_every_broker(admin), f"broker {broker_id}'s metadata naming every broker", WAIT_S)


def _names_every_broker(admin: AdminClient) -> bool:
    try:
        return set(admin.list_topics(timeout=5).brokers) == set(range(BROKERS))
    except KafkaException:  # not answering yet
        return False


def create_topic(bootstrap: str, topic: str, partitions: int = 1, assignment: list[list[int]] | None = None) -> None:
    """RF=3 (or `assignment`), min.insync.replicas=2; returns once every partition has a leader."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    config = {"min.insync.replicas": "2" if assignment is None or len(assignment[0]) > 1 else "1"}
    new = (NewTopic(topic, partitions, replica_assignment=assignment, config=config) if assignment
           else NewTopic(topic, partitions, BROKERS, config=config))
    admin.create_topics([new])[topic].result(timeout=WAIT_S)
    wait_until(lambda: len(leaders(bootstrap, topic)) == partitions, f"a leader for every partition of {topic}", WAIT_S)


def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader, for the partitions that have one."""
    try:
        described = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(topic, timeout=10).topics[topic]
    except KafkaException:
        return {}
    return {index: meta.leader for index, meta in (described.partitions or {}).items() if meta.leader >= 0}


def request(address: tuple[str, int], api_key: int, version: int, values: dict):
    """One raw request's kio answer, on a connection of its own."""
    async def exchange():
        async with await BrokerConnection.open(*address, client_id="txn-tests", request_timeout_s=REQUEST_TIMEOUT_S) as connection:
            return await connection.request(api_key, version, values)
    return asyncio.run(exchange())


def coordinator_of(cluster: TxnCluster, transactional_id: str, asked: int | None = None) -> int:
    """The broker that coordinates `transactional_id` now (FindCoordinator v3, key type 1),
    asked of broker `asked` or of any live one."""
    def find() -> int | None:
        for broker_id in ([asked] if asked is not None else range(BROKERS)):
            try:
                answer = request(cluster.address(broker_id), ApiKey.FIND_COORDINATOR, 3,
                                 {"key": transactional_id, "key_type": 1})
            except (BrokerUnavailable, OSError):
                continue
            if answer.error_code == ErrorCode.none:
                return (int(answer.node_id),)
        return None
    return wait_until(find, f"the coordinator of {transactional_id}", WAIT_S)[0]


def describe_transaction(cluster: TxnCluster, transactional_id: str):
    """DescribeTransactions v0's state of `transactional_id`, from its coordinator."""
    def describe():
        try:
            answer = request(cluster.address(coordinator_of(cluster, transactional_id)), ApiKey.DESCRIBE_TRANSACTIONS, 0,
                             {"transactional_ids": [transactional_id]})
        except (BrokerUnavailable, OSError):
            return None
        state = answer.transaction_states[0]
        return state if state.error_code == ErrorCode.none else None
    return wait_until(describe, f"a description of {transactional_id}", WAIT_S)


def last_stable_offset(cluster: TxnCluster, topic: str, partition: int, leader: int) -> int | None:
    """ListOffsets LATEST read_committed, from `leader`: the LSO (None if it refuses, e.g. not
    the leader yet or still loading)."""
    try:
        answer = request(cluster.address(leader), ApiKey.LIST_OFFSETS, 5, {
            "replica_id": -1, "isolation_level": READ_COMMITTED,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}]}]})
    except (BrokerUnavailable, OSError):
        return None
    found = answer.topics[0].partitions[0]
    return int(found.offset) if found.error_code == ErrorCode.none else None


def transactional_producer(bootstrap: str, transactional_id: str, extra: dict | None = None) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "log_level": 0, **(extra or {})})
    producer.init_transactions(WAIT_S)
    return producer


def write_sentinels(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """A non-transactional record at the end of each partition, acknowledged by every in-sync replica."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for partition in range(partitions):
        producer.produce(topic, value=SENTINEL, partition=partition)
    assert producer.flush(WAIT_S) == 0


def read_to_sentinels(bootstrap: str, topic: str, isolation: str, partitions: int = 1) -> dict[int, list[bytes]]:
    """By partition, every value before the first sentinel, read with `isolation.level`
    ("read_committed" | "read_uncommitted") by confluent-kafka. Read committed, the sentinel
    shows once the LSO passed it, so every transaction before it has ended."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique("reader"), "enable.auto.commit": False,
                         "isolation.level": isolation, "log_level": 0})
    consumer.assign([TopicPartition(topic, partition, 0) for partition in range(partitions)])
    read: dict[int, list[bytes]] = {partition: [] for partition in range(partitions)}
    ended: set[int] = set()
    deadline = time.monotonic() + WAIT_S
    try:
        while len(ended) < partitions:
            assert time.monotonic() < deadline, f"no sentinel on partitions {set(read) - ended} of {topic} within {WAIT_S}s"
            for message in consumer.consume(500, 0.5):
                if message.error() is not None or message.partition() in ended:
                    continue
                if message.value() == SENTINEL:
                    ended.add(message.partition())
                else:
                    read[message.partition()].append(message.value())
    finally:
        consumer.close()
    return read
