"""confluent-kafka's transactional producer against three brokers: transactions committed and
aborted (read_committed readers see only the committed ones, read_uncommitted ones both), a
zombie producer fenced by a new one with its transactional id, and a transaction committed across
the death (SIGKILL) of its coordinator, whose successor loads the id from its replica of
__transaction_state. One cluster for the module."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey

from .conftest import QUICK_SETTINGS, SHARED_SERVERS, _running_cluster

PARTITIONS = 3
WAIT_S = 90
TRANSACTION_KEY = 1


@pytest.fixture(scope="module", params=["etcd"])
def transaction_cluster(request, tmp_path_factory):
    # Timed-out transactions are looked for often, so that a zombie's open one does not linger.
    settings = QUICK_SETTINGS + ("--set", "transaction.abort.timed.out.transaction.cleanup.interval.ms=1000")
    yield from _running_cluster(request, tmp_path_factory.mktemp("transactions"), SHARED_SERVERS, settings=settings)


@pytest.fixture
def topic(transaction_cluster) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": transaction_cluster.bootstrap})  # kept until the result
    admin.create_topics([NewTopic(name, PARTITIONS, 3)])[name].result(WAIT_S)
    return name


def transactional_producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": WAIT_S * 1000, "message.timeout.ms": WAIT_S * 1000})
    producer.init_transactions(WAIT_S)
    return producer


def send_transaction(producer: Producer, topic: str, values: list[str], commit: bool) -> None:
    producer.begin_transaction()
    for index, value in enumerate(values):
        producer.produce(topic, value.encode(), partition=index % PARTITIONS)
    producer.flush(WAIT_S)  # an abort would drop what is still unsent
    if commit:
        producer.commit_transaction(WAIT_S)
    else:
        producer.abort_transaction(WAIT_S)


def read_all(bootstrap: str, topic: str, isolation_level: str, expected: int) -> list[str]:
    """The topic's values as a reader at `isolation_level` sees them, once it has `expected` (or
    WAIT_S has passed), and then one more poll, to see none come after."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": isolation_level})
    consumer.subscribe([topic])
    values: list[str] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(values) < expected and time.monotonic() < deadline:  # bounded by WAIT_S
            values += [message.value().decode() for message in consumer.consume(100, timeout=0.5)
                       if message.error() is None]
        values += [message.value().decode() for message in consumer.consume(100, timeout=2) if message.error() is None]
    finally:
        consumer.close()
    return sorted(values)


def coordinator_of(bootstrap_port: int, transactional_id: str) -> int:
    async def find() -> int:
        deadline = time.monotonic() + WAIT_S
        async with await BrokerConnection.open("127.0.0.1", bootstrap_port) as connection:
            while time.monotonic() < deadline:  # until __transaction_state has a leader for the id
                answer = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": transactional_id,
                                                                                "key_type": TRANSACTION_KEY})
                if answer.error_code == ErrorCode.none:
                    return answer.node_id
                await asyncio.sleep(0.1)
        raise AssertionError(f"no coordinator for {transactional_id} within {WAIT_S}s")

    return asyncio.run(find())


def test_committed_transactions_are_read_and_aborted_ones_only_uncommitted(transaction_cluster, topic):
    bootstrap = transaction_cluster.bootstrap
    producer = transactional_producer(bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    committed = [f"committed-{index}" for index in range(30)]
    aborted = [f"aborted-{index}" for index in range(30)]
    send_transaction(producer, topic, committed[:15], commit=True)
    send_transaction(producer, topic, aborted, commit=False)
    send_transaction(producer, topic, committed[15:], commit=True)
    assert read_all(bootstrap, topic, "read_committed", len(committed)) == sorted(committed)
    assert read_all(bootstrap, topic, "read_uncommitted", len(committed) + len(aborted)) == sorted(committed + aborted)


def test_a_zombie_is_fenced_and_none_of_its_records_is_read(transaction_cluster, topic):
    bootstrap = transaction_cluster.bootstrap
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = transactional_producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    for index in range(10):
        zombie.produce(topic, f"zombie-{index}".encode(), partition=index % PARTITIONS)
    zombie.flush(WAIT_S)
    successor = transactional_producer(bootstrap, transactional_id)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(WAIT_S)
    assert fenced.value.args[0].code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
    send_transaction(successor, topic, ["successor"], commit=True)
    assert read_all(bootstrap, topic, "read_committed", 1) == ["successor"]


def test_a_transaction_commits_across_its_coordinators_death(transaction_cluster, topic):
    bootstrap = transaction_cluster.bootstrap
    transactional_id = f"tx-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(bootstrap, transactional_id)
    send_transaction(producer, topic, ["before"], commit=True)
    port = next(broker.port for broker in transaction_cluster.brokers.values() if broker.running)
    coordinator = transaction_cluster.brokers[coordinator_of(port, transactional_id)]
    producer.begin_transaction()
    producer.produce(topic, b"across", partition=0)
    producer.flush(WAIT_S)
    coordinator.kill()
    try:
        producer.produce(topic, b"after", partition=1)
        producer.commit_transaction(WAIT_S)
        assert read_all(transaction_cluster.bootstrap, topic, "read_committed", 3) == ["across", "after", "before"]
    finally:
        coordinator.restart()
