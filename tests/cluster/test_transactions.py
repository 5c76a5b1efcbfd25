"""Transactions and exactly-once over three brokers (docs/design.md §16): confluent-kafka's
consume-transform-produce loop through SIGKILLs of the transaction coordinator, of an output
partition's leader and of the loop's own process; aborted records hidden from read_committed and
shown to read_uncommitted, for each client's producer and consumer; a zombie fenced; a timed-out
transaction aborted by the coordinator; `replog transactions abort` ending a hanging one; a
coordinator SIGKILLed in PrepareCommit; a leader SIGKILLed mid-transaction recovering its LSO
and aborted-transaction index.

One cluster per backend for the whole module; a test that kills a broker leaves it down and the
next brings it back. REPLOG_TXN_AGAINST_KAFKA=1 runs the same checks against Apache Kafka
(bench/peers/kafka), the reference they were first made to pass on."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey
from tests.support.polling import wait_until
from tests.support.transactions import (
    AGAINST_KAFKA, BROKERS, SENTINEL, WAIT_S, TxnCluster, coordinator_of, create_topic,
    describe_transaction, last_stable_offset, leaders, read_to_sentinels, request, transactional_producer, unique,
    write_sentinels,
)

from .conftest import SHARED_SERVERS

REPO = pathlib.Path(__file__).resolve().parents[2]
INPUT_RECORDS = 600
PARTITIONS = 3


@pytest.fixture(scope="module", params=["kafka"] if AGAINST_KAFKA else ["zk", "etcd"])
def shared_cluster(request, tmp_path_factory):
    address = None if request.param == "kafka" else request.getfixturevalue(SHARED_SERVERS[request.param]).address
    running = TxnCluster(request.param, tmp_path_factory.mktemp(f"txn-{request.param}"), address)
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture
def txn_cluster(shared_cluster):
    shared_cluster.restart_stopped()
    return shared_cluster


# consume-transform-produce

class Transformer:
    """tests/support/txn_transform.py in a process of its own."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, transactional_id: str):
        self.process = subprocess.Popen([sys.executable, "-m", "tests.support.txn_transform", bootstrap, source, sink,
                                         group, transactional_id], cwd=REPO, stderr=subprocess.PIPE)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(WAIT_S)

    def stop(self) -> None:
        if self.alive():
            self.process.terminate()
        assert self.process.wait(WAIT_S) == 0 or self.process.returncode < 0, self.process.stderr.read().decode()


def committed_total(bootstrap: str, group: str, topic: str) -> int:
    """How many input records the group's committed offsets cover (they start at 0)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    try:
        committed = consumer.committed([TopicPartition(topic, partition) for partition in range(PARTITIONS)], timeout=10)
    except KafkaException:  # the group's coordinator moving
        return 0
    finally:
        consumer.close()
    return sum(max(partition.offset, 0) for partition in committed)


def test_consume_transform_produce_is_exactly_once_through_kills(txn_cluster):
    """Every input record's result exactly once in the output, read committed, although the
    transaction coordinator, an output partition's leader and the transforming process itself
    are SIGKILLed midway; a new process with the same transactional id fences the killed one."""
    bootstrap = txn_cluster.bootstrap
    source, sink, group, transactional_id = unique("in"), unique("out"), unique("g"), unique("eos")
    create_topic(bootstrap, source, PARTITIONS)
    create_topic(bootstrap, sink, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for number in range(INPUT_RECORDS):
        producer.produce(source, value=str(number).encode(), partition=number % PARTITIONS)
    assert producer.flush(WAIT_S) == 0

    def transformed_beyond(share: float, transformer: Transformer) -> None:
        wait_until(lambda: committed_total(txn_cluster.bootstrap, group, source) >= share * INPUT_RECORDS
                   or not transformer.alive(), f"{share:.0%} of the input transformed", WAIT_S)
        assert transformer.alive(), transformer.process.stderr.read().decode()

    first = Transformer(bootstrap, source, sink, group, transactional_id)
    try:
        transformed_beyond(0.2, first)
        txn_cluster.kill(coordinator_of(txn_cluster, transactional_id))
        transformed_beyond(0.4, first)
        txn_cluster.restart_stopped()
        output_leader = wait_until(lambda: [leader for partition, leader in leaders(txn_cluster.bootstrap, sink).items()
                                            if partition == 0], "a leader of output 0", WAIT_S)[0]  # a list: broker 0 is one
        txn_cluster.kill(output_leader)
        transformed_beyond(0.6, first)
        txn_cluster.restart_stopped()
        first.kill()
    finally:
        if first.alive():
            first.kill()
    second = Transformer(txn_cluster.bootstrap, source, sink, group, transactional_id)
    try:
        transformed_beyond(1.0, second)
    finally:
        second.stop()
    write_sentinels(txn_cluster.bootstrap, sink, PARTITIONS)
    output = read_to_sentinels(txn_cluster.bootstrap, sink, "read_committed", PARTITIONS)
    for partition, values in output.items():
        expected = [f"out-{number}".encode() for number in range(partition, INPUT_RECORDS, PARTITIONS)]
        assert sorted(values) == sorted(expected), f"partition {partition}: duplicates or losses"
        assert values == expected, f"partition {partition}: out of order"


# aborted records, for each client

def produce_confluent(bootstrap: str, topic: str, transactional_id: str) -> None:
    producer = transactional_producer(bootstrap, transactional_id)
    for outcome in ("committed", "aborted", "committed-again"):
        producer.begin_transaction()
        for number in range(3):
            producer.produce(topic, value=f"{outcome}-{number}".encode(), partition=0)
        producer.flush(WAIT_S)
        producer.commit_transaction(WAIT_S) if outcome != "aborted" else producer.abort_transaction(WAIT_S)


def produce_kafka_python(bootstrap: str, topic: str, transactional_id: str) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    producer.init_transactions()
    try:
        for outcome in ("committed", "aborted", "committed-again"):
            producer.begin_transaction()
            for number in range(3):
                producer.send(topic, value=f"{outcome}-{number}".encode(), partition=0).get(WAIT_S)
            producer.commit_transaction() if outcome != "aborted" else producer.abort_transaction()
    finally:
        producer.close(WAIT_S)


def produce_aiokafka(bootstrap: str, topic: str, transactional_id: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
        await producer.start()
        try:
            for outcome in ("committed", "aborted", "committed-again"):
                await producer.begin_transaction()
                for number in range(3):
                    await producer.send_and_wait(topic, value=f"{outcome}-{number}".encode(), partition=0)
                await (producer.commit_transaction() if outcome != "aborted" else producer.abort_transaction())
        finally:
            await producer.stop()
    asyncio.run(produce())


def read_kafka_python(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    consumer.assign([KafkaPythonPartition(topic, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while SENTINEL not in read:
            assert time.monotonic() < deadline, f"kafka-python: no sentinel within {WAIT_S}s"
            read.extend(record.value for records in consumer.poll(500).values() for record in records)
    finally:
        consumer.close()
    return read[:read.index(SENTINEL)]


@pytest.mark.parametrize("produce", [produce_confluent, produce_kafka_python, produce_aiokafka],
                         ids=["confluent-kafka", "kafka-python", "aiokafka"])
def test_aborted_records_are_hidden_from_read_committed_only(txn_cluster, produce):
    bootstrap = txn_cluster.bootstrap
    topic = unique("aborted")
    create_topic(bootstrap, topic)
    produce(bootstrap, topic, unique("clients"))
    write_sentinels(bootstrap, topic)
    committed = [f"{outcome}-{number}".encode() for outcome in ("committed", "committed-again") for number in range(3)]
    everything = [f"{outcome}-{number}".encode() for outcome in ("committed", "aborted", "committed-again")
                  for number in range(3)]
    assert read_to_sentinels(bootstrap, topic, "read_committed")[0] == committed
    assert read_to_sentinels(bootstrap, topic, "read_uncommitted")[0] == everything
    assert read_kafka_python(bootstrap, topic, "read_committed") == committed
    assert read_kafka_python(bootstrap, topic, "read_uncommitted") == everything


# fencing and the coordinator's own aborts

def test_zombie_producer_is_fenced_and_its_records_never_visible(txn_cluster):
    bootstrap = txn_cluster.bootstrap
    topic, transactional_id = unique("zombie"), unique("zombie")
    create_topic(bootstrap, topic)
    zombie = transactional_producer(bootstrap, transactional_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(WAIT_S)
    zombie_epoch = describe_transaction(txn_cluster, transactional_id).producer_epoch
    successor = transactional_producer(bootstrap, transactional_id)  # aborts the zombie's transaction
    with pytest.raises(KafkaException) as fenced:
        zombie.commit_transaction(WAIT_S)
    assert fenced.value.args[0].fatal() and fenced.value.args[0].code() == KafkaError._FENCED
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(WAIT_S)
    # What the broker answers the zombie itself, once the successor's commit completed (before,
    # the coordinator answers CONCURRENT_TRANSACTIONS whoever asks): its epoch is fenced.
    state = wait_until(lambda: (found := describe_transaction(txn_cluster, transactional_id)).transaction_state
                       == "CompleteCommit" and found, "the successor's commit completed", WAIT_S)
    assert state.producer_epoch > zombie_epoch
    answer = request(txn_cluster.address(coordinator_of(txn_cluster, transactional_id)), ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": state.producer_id,
        "v3_and_below_producer_epoch": zombie_epoch, "v3_and_below_topics": [{"name": topic, "partitions": [0]}]})
    assert answer.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == ErrorCode.producer_fenced
    write_sentinels(bootstrap, topic)
    assert read_to_sentinels(bootstrap, topic, "read_committed")[0] == [b"successor"]


def test_transaction_open_past_its_timeout_is_aborted_by_the_coordinator(txn_cluster):
    bootstrap = txn_cluster.bootstrap
    topic, transactional_id = unique("expired"), unique("expired")
    create_topic(bootstrap, topic)
    producer = transactional_producer(bootstrap, transactional_id, {"transaction.timeout.ms": 3000})
    producer.begin_transaction()
    producer.produce(topic, value=b"expired", partition=0)
    producer.flush(WAIT_S)
    opened_epoch = describe_transaction(txn_cluster, transactional_id).producer_epoch
    write_sentinels(bootstrap, topic)  # read committed, it shows once the abort's marker is written
    assert read_to_sentinels(bootstrap, topic, "read_committed")[0] == []
    state = wait_until(lambda: (found := describe_transaction(txn_cluster, transactional_id)).transaction_state
                       == "CompleteAbort" and found, "the transaction's abort completed", WAIT_S)
    assert state.producer_epoch > opened_epoch  # fenced, as Kafka does
    with pytest.raises(KafkaException):
        producer.commit_transaction(WAIT_S)


def test_replog_transactions_abort_ends_a_hanging_transaction(txn_cluster, tmp_path):
    bootstrap = txn_cluster.bootstrap
    topic, transactional_id = unique("hanging"), unique("hanging")
    create_topic(bootstrap, topic)
    producer = transactional_producer(bootstrap, transactional_id, {"transaction.timeout.ms": 600_000})
    idle = subprocess.run([sys.executable, "-m", "replog", "transactions", "describe", "--transactional-id",
                           transactional_id, "--bootstrap-server", bootstrap, "--output", "json"],
                          cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)
    assert idle.returncode == 0, idle.stderr
    assert json.loads(idle.stdout)["start_time_ms"] == -1  # no transaction open yet: Kafka's null
    producer.begin_transaction()
    offsets = []
    producer.produce(topic, value=b"hanging", partition=0, on_delivery=lambda error, message: offsets.append(message.offset()))
    producer.flush(WAIT_S)
    write_sentinels(bootstrap, topic)
    leader = leaders(bootstrap, topic)[0]
    assert last_stable_offset(txn_cluster, topic, 0, leader) == offsets[0]
    described = subprocess.run([sys.executable, "-m", "replog", "transactions", "describe-producers", "--topic", topic,
                                "--partition", "0", "--bootstrap-server", bootstrap],
                               cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)
    assert described.returncode == 0, described.stderr
    assert str(offsets[0]) in described.stdout
    aborted = subprocess.run([sys.executable, "-m", "replog", "transactions", "abort", "--topic", topic, "--partition", "0",
                              "--start-offset", str(offsets[0]), "--bootstrap-server", bootstrap],
                             cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)
    assert aborted.returncode == 0, aborted.stderr
    assert read_to_sentinels(bootstrap, topic, "read_committed")[0] == []
    assert read_to_sentinels(bootstrap, topic, "read_uncommitted")[0] == [b"hanging"]
    listed = subprocess.run([sys.executable, "-m", "replog", "transactions", "list", "--bootstrap-server", bootstrap],
                            cwd=REPO, capture_output=True, text=True, timeout=WAIT_S)
    assert listed.returncode == 0 and transactional_id in listed.stdout, listed.stderr
    producer.abort_transaction(WAIT_S)


# failover and recovery

def test_commit_completes_after_its_coordinator_is_killed_in_prepare_commit(txn_cluster):
    """The output partition's only replica is SIGKILLed, so the commit's markers cannot be
    written and the transaction stays in PrepareCommit; then its coordinator is SIGKILLed too,
    and both come back: the coordinator that loads PrepareCommit from the log completes the
    commit. Not against Kafka: its coordinator (4.4) takes a partition without a live leader for
    a deleted one and skips its marker ("Couldn't find leader endpoint ... likely deleted"),
    leaving the transaction hanging in that partition until an operator aborts it."""
    if AGAINST_KAFKA:
        pytest.skip("Kafka skips the marker of a partition without a live leader")
    transactional_id = unique("prepared")
    coordinator = coordinator_of(txn_cluster, transactional_id)
    leader = (coordinator + 1) % BROKERS
    topic = unique("prepared")
    create_topic(txn_cluster.bootstrap, topic, assignment=[[leader]])
    producer = transactional_producer(txn_cluster.bootstrap, transactional_id)
    producer.begin_transaction()
    for number in range(5):
        producer.produce(topic, value=str(number).encode(), partition=0)
    producer.flush(WAIT_S)
    txn_cluster.kill(leader)
    producer.commit_transaction(WAIT_S)  # answered once PrepareCommit is in the log
    assert describe_transaction(txn_cluster, transactional_id).transaction_state == "PrepareCommit"
    txn_cluster.kill(coordinator)
    wait_until(lambda: coordinator_of(txn_cluster, transactional_id) != coordinator, "another coordinator", WAIT_S)
    txn_cluster.restart_stopped()
    write_sentinels(txn_cluster.bootstrap, topic)
    assert read_to_sentinels(txn_cluster.bootstrap, topic, "read_committed")[0] == [str(n).encode() for n in range(5)]
    wait_until(lambda: describe_transaction(txn_cluster, transactional_id).transaction_state == "CompleteCommit",
               "the commit completed", WAIT_S)


def test_recovery_after_sigkill_rebuilds_the_lso_and_the_aborted_index(txn_cluster):
    """A partition of one replica whose broker is SIGKILLed with an aborted transaction, a
    committed one and an open one in its log: recovered, its LSO is still the open
    transaction's first offset and read committed still hides the aborted records."""
    transactional_id = unique("recovered")
    coordinator = coordinator_of(txn_cluster, transactional_id)
    victim = (coordinator + 1) % BROKERS  # the coordinator stays: only the log's recovery is tested
    topic = unique("recovered")
    create_topic(txn_cluster.bootstrap, topic, assignment=[[victim]])
    producer = transactional_producer(txn_cluster.bootstrap, transactional_id)
    offsets: list[int] = []
    for outcome in ("aborted", "committed", "open"):
        producer.begin_transaction()
        for number in range(3):
            producer.produce(topic, value=f"{outcome}-{number}".encode(), partition=0,
                             on_delivery=lambda error, message: offsets.append(message.offset()))
        producer.flush(WAIT_S)
        if outcome == "aborted":
            producer.abort_transaction(WAIT_S)
        elif outcome == "committed":
            producer.commit_transaction(WAIT_S)
    open_first_offset = offsets[6]
    assert last_stable_offset(txn_cluster, topic, 0, victim) == open_first_offset
    txn_cluster.kill(victim)
    txn_cluster.restart_stopped()
    assert wait_until(lambda: last_stable_offset(txn_cluster, topic, 0, victim), "the recovered LSO", WAIT_S) \
        == open_first_offset
    reader = Consumer({"bootstrap.servers": txn_cluster.bootstrap, "group.id": unique("r"), "isolation.level": "read_committed",
                       "enable.auto.commit": False, "log_level": 0})
    reader.assign([TopicPartition(topic, 0, 0)])
    read: list[bytes] = []
    try:
        wait_until(lambda: read.extend(m.value() for m in reader.consume(100, 0.5) if m.error() is None)
                   or len(read) >= 3, "the committed records", WAIT_S)
    finally:
        reader.close()
    assert read == [f"committed-{number}".encode() for number in range(3)]
    producer.commit_transaction(WAIT_S)
    write_sentinels(txn_cluster.bootstrap, topic)
    assert read_to_sentinels(txn_cluster.bootstrap, topic, "read_committed")[0] == [
        f"{outcome}-{number}".encode() for outcome in ("committed", "open") for number in range(3)]
