"""Real clients over TLS: confluent-kafka (produce, a consumer group, admin), kafka-python,
aiokafka and kcat, each against a broker process whose listeners are PLAINTEXT and SSL, with
certificates made here (trustme). A client of the SSL listener is told the SSL addresses, so
every connection it makes after the bootstrap is TLS too; and ssl.client.auth=required takes
only certificates the truststore's CA signed."""

from __future__ import annotations

import shutil
import ssl

import pytest
import trustme
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.clients.secured_clients import (
    KCAT_RECORDS,
    RECORDS,
    TIMEOUT_S,
    aiokafka_round_trip,
    confluent_round_trip,
    kafka_python_round_trip,
    kcat_round_trip,
    new_topic,
)
from tests.support.broker_process import BrokerProcess


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


def test_confluent_kafka_produces_consumes_in_a_group_and_administers_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    settings = confluent_tls(tls_broker, ca_file)
    admin = AdminClient(settings)
    brokers = admin.list_topics(timeout=TIMEOUT_S).brokers
    assert [(found.host, found.port) for found in brokers.values()] == [("127.0.0.1", tls_broker.ports["SSL"])]
    confluent_round_trip(settings)


def test_kafka_python_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    tls = {"bootstrap_servers": ssl_address(tls_broker), "security_protocol": "SSL", "ssl_cafile": str(ca_file)}
    assert kafka_python_round_trip(tls, topic) == RECORDS


def test_aiokafka_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    context = ssl.create_default_context(cafile=str(ca_file))
    tls = {"bootstrap_servers": ssl_address(tls_broker), "security_protocol": "SSL", "ssl_context": context}
    assert aiokafka_round_trip(tls, topic) == RECORDS


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/install-test-deps.sh)")
def test_kcat_over_tls(tls_broker, tls_files):
    ca_file, _ = tls_files
    topic = new_topic(confluent_tls(tls_broker, ca_file))
    tls = ("-b", ssl_address(tls_broker), "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={ca_file}")
    assert kcat_round_trip(tls, topic) == KCAT_RECORDS


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
