"""Real clients over TLS: confluent-kafka (produce, a consumer group, admin), kafka-python,
aiokafka and kcat, each against a broker process whose listeners are PLAINTEXT and SSL, with
certificates made here (trustme). A client of the SSL listener is told the SSL addresses, so
every connection it makes after the bootstrap is TLS too; and ssl.client.auth=required takes
only certificates the truststore's CA signed."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import uuid

import pytest
import trustme
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess

TIMEOUT_S = 30
RECORDS = [(f"k{index}".encode(), f"value {index}".encode()) for index in range(20)]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory, ca):
    """(the CA's file, the broker's keystore file)."""
    directory = tmp_path_factory.mktemp("tls")
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(directory / "broker.pem"))
    return directory / "ca.pem", directory / "broker.pem"


def started(data_dir, tls_files, *settings: str, listeners=("PLAINTEXT", "SSL")) -> BrokerProcess:
    ca_file, keystore = tls_files
    process = BrokerProcess(data_dir, listeners=listeners, extra_args=(
        "--set", f"ssl.keystore.location={keystore}", "--set", f"ssl.truststore.location={ca_file}",
        *(argument for setting in settings for argument in ("--set", setting))))
    process.start()
    return process


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory, tls_files):
    process = started(tmp_path_factory.mktemp("tls-broker") / "data", tls_files)
    yield process
    process.stop()


def ssl_address(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SSL']}"


def confluent_tls(broker: BrokerProcess, ca_file) -> dict[str, str]:
    return {"bootstrap.servers": ssl_address(broker), "security.protocol": "ssl", "ssl.ca.location": str(ca_file)}


def new_topic(settings: dict[str, str]) -> str:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(settings)  # held until the answer: a client destroyed meanwhile fails it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    return topic


def confluent_read(settings: dict[str, str], topic: str, count: int, group: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(settings | {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(200):  # bounded: each poll waits at most a second
            if len(got) >= count:
                break
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append((message.key(), message.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert [partition.offset for partition in committed] == [count]
    return got


def test_confluent_kafka_produces_consumes_in_a_group_and_administers_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    settings = confluent_tls(tls_broker, ca_file)
    admin = AdminClient(settings)
    brokers = admin.list_topics(timeout=TIMEOUT_S).brokers
    assert [(found.host, found.port) for found in brokers.values()] == [("127.0.0.1", tls_broker.ports["SSL"])]
    topic = new_topic(settings)
    producer = Producer(settings)
    for key, value in RECORDS:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert confluent_read(settings, topic, len(RECORDS), f"g-{uuid.uuid4().hex[:6]}") == RECORDS
    assert admin.delete_topics([topic])[topic].result(TIMEOUT_S) is None


def test_kafka_python_over_tls(tls_broker, tls_files):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    tls = {"bootstrap_servers": ssl_address(tls_broker), "security_protocol": "SSL", "ssl_cafile": str(ca_file)}
    producer = KafkaProducer(**tls, acks="all")
    for key, value in RECORDS:
        producer.send(topic, value=value, key=key, partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(**tls, enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_S * 1000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for message in consumer:  # bounded: stops after consumer_timeout_ms without a record
        got.append((message.key, message.value))
        if len(got) == len(RECORDS):
            break
    consumer.close()
    assert got == RECORDS


def test_aiokafka_over_tls(tls_broker, tls_files):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    context = ssl.create_default_context(cafile=str(ca_file))
    tls = {"bootstrap_servers": ssl_address(tls_broker), "security_protocol": "SSL", "ssl_context": context}

    async def round_trip() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(**tls, acks="all")
        await producer.start()
        try:
            for key, value in RECORDS:
                await producer.send_and_wait(topic, value=value, key=key, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**tls, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            got = []
            while len(got) < len(RECORDS):  # bounded by the wait_for around it
                got.append(await consumer.getone())
            return [(message.key, message.value) for message in got]
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(round_trip(), TIMEOUT_S)) == RECORDS


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/install-test-deps.sh)")
def test_kcat_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    tls = ("-b", ssl_address(tls_broker), "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={ca_file}")
    produced = subprocess.run(["kcat", "-P", *tls, "-t", topic, "-p", "0", "-K", "\t"], capture_output=True, text=True,
                              input="".join(f"{key.decode()}\t{value.decode()}\n" for key, value in RECORDS), timeout=TIMEOUT_S)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-C", *tls, "-t", topic, "-p", "0", "-o", "beginning", "-c", str(len(RECORDS)),
                               "-f", "%k\t%s\n"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.splitlines() == [f"{key.decode()}\t{value.decode()}" for key, value in RECORDS]


def test_a_required_client_certificate_must_come_from_the_truststores_ca(tmp_path, tls_files, ca):
    ca_file, _ = tls_files
    broker = started(tmp_path / "data", tls_files, "ssl.client.auth=required", listeners=("SSL",))
    try:
        settings = {"bootstrap.servers": ssl_address(broker), "security.protocol": "ssl", "ssl.ca.location": str(ca_file),
                    "socket.timeout.ms": "5000"}
        for refused in ({}, {"certificate": trustme.CA().issue_cert("client.example")}):  # none; another CA's
            client = settings
            if refused:
                pem = tmp_path / "other.pem"
                refused["certificate"].private_key_and_cert_chain_pem.write_to_path(str(pem))
                client = settings | {"ssl.certificate.location": str(pem), "ssl.key.location": str(pem)}
            with pytest.raises(KafkaException):
                AdminClient(client).list_topics(timeout=5)
        mine = tmp_path / "client.pem"
        ca.issue_cert("client.example").private_key_and_cert_chain_pem.write_to_path(str(mine))
        accepted = AdminClient(settings | {"ssl.certificate.location": str(mine), "ssl.key.location": str(mine)})
        assert list(accepted.list_topics(timeout=TIMEOUT_S).brokers) == [0]
    finally:
        broker.stop()


def test_the_start_line_names_every_listener_with_its_port(tls_broker):
    line = next(line for line in tls_broker.output if "listening on" in line)
    assert line.rstrip().endswith(f"listeners PLAINTEXT://127.0.0.1:{tls_broker.ports['PLAINTEXT']},"
                                  f"SSL://127.0.0.1:{tls_broker.ports['SSL']}")
    assert tls_broker.port == tls_broker.ports["PLAINTEXT"] != tls_broker.ports["SSL"]
