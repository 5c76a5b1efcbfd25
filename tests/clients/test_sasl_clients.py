"""Real clients over SASL: confluent-kafka (produce, a consumer group, admin), kafka-python,
aiokafka, kcat and Kafka's Java clients, each over SASL_SSL with SCRAM-SHA-512 and with PLAIN, and confluent-kafka
over SASL_PLAINTEXT, against one broker process whose listeners are PLAINTEXT (where the test
makes its SCRAM users, as an operator would with `replog users create`), SASL_SSL and
SASL_PLAINTEXT; certificates from the TLS client tests' fixtures (trustme). librdkafka
re-authenticates on its connection when the broker gives its session a lifetime."""

from __future__ import annotations

import shutil
import ssl
import urllib.request

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.clients import secured_clients
from tests.clients.secured_clients import RECORDS, TIMEOUT_S, new_topic
from tests.clients.records import Record
from tests.clients.test_java import as_record, java, produce  # noqa: F401 (java: a fixture)
from tests.clients.test_tls_clients import ca, started, tls_files  # noqa: F401 (fixtures)
from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until

SCRAM_USER, SCRAM_PASSWORD = "alice", "alice-Scram-pw-5"
PLAIN_USER, PLAIN_PASSWORD = "carol", "carol-Plain-pw-8"
MECHANISMS = {"SCRAM-SHA-512": (SCRAM_USER, SCRAM_PASSWORD), "PLAIN": (PLAIN_USER, PLAIN_PASSWORD)}
REAUTH_MS = 3000


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory, tls_files):
    directory = tmp_path_factory.mktemp("sasl-broker")
    users = directory / "plain-users"
    users.write_text(f"{PLAIN_USER}={PLAIN_PASSWORD}\n")
    process = started(directory / "data", tls_files, "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
                      f"sasl.plain.users.file={users}", f"connections.max.reauth.ms={REAUTH_MS}",
                      listeners=("PLAINTEXT", "SASL_SSL", "SASL_PLAINTEXT"))
    try:
        admin = AdminClient({"bootstrap.servers": process.bootstrap})
        upsertion = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                                 SCRAM_PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(TIMEOUT_S)
        yield process
    finally:
        output = "".join(process.output)
        process.stop()
    for secret in (SCRAM_PASSWORD, PLAIN_PASSWORD):
        assert secret not in output


def confluent_sasl(broker: BrokerProcess, ca_file, mechanism: str, protocol: str = "SASL_SSL") -> dict[str, str]:
    user, password = MECHANISMS[mechanism]
    settings = {"bootstrap.servers": f"127.0.0.1:{broker.ports[protocol]}", "security.protocol": protocol,
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
    return settings | ({"ssl.ca.location": str(ca_file)} if protocol == "SASL_SSL" else {})


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_kafka_over_sasl_ssl(sasl_broker, tls_files, mechanism):
    settings = confluent_sasl(sasl_broker, tls_files[0], mechanism)
    brokers = AdminClient(settings).list_topics(timeout=TIMEOUT_S).brokers
    assert [(found.host, found.port) for found in brokers.values()] == [("127.0.0.1", sasl_broker.ports["SASL_SSL"])]
    secured_clients.confluent_round_trip(settings)


def test_confluent_kafka_over_sasl_plaintext(sasl_broker, tls_files):
    secured_clients.confluent_round_trip(confluent_sasl(sasl_broker, tls_files[0], "SCRAM-SHA-512", "SASL_PLAINTEXT"))


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("library", ["kafka-python", "aiokafka"])
def test_python_clients_over_sasl_ssl(sasl_broker, tls_files, mechanism, library):
    ca_file, _ = tls_files
    user, password = MECHANISMS[mechanism]
    topic = new_topic(confluent_sasl(sasl_broker, ca_file, mechanism))
    settings = {"bootstrap_servers": f"127.0.0.1:{sasl_broker.ports['SASL_SSL']}", "security_protocol": "SASL_SSL",
                "sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
    if library == "kafka-python":
        got = secured_clients.kafka_python_round_trip(settings | {"ssl_cafile": str(ca_file)}, topic)
    else:
        got = secured_clients.aiokafka_round_trip(
            settings | {"ssl_context": ssl.create_default_context(cafile=str(ca_file))}, topic)
    assert got == RECORDS


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/install-test-deps.sh)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kcat_over_sasl_ssl(sasl_broker, tls_files, mechanism):
    ca_file, _ = tls_files
    user, password = MECHANISMS[mechanism]
    topic = new_topic(confluent_sasl(sasl_broker, ca_file, mechanism))
    arguments = ("-b", f"127.0.0.1:{sasl_broker.ports['SASL_SSL']}", "-X", "security.protocol=SASL_SSL", "-X",
                 f"ssl.ca.location={ca_file}", "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={user}",
                 "-X", f"sasl.password={password}")
    assert secured_clients.kcat_round_trip(arguments, topic) == secured_clients.KCAT_RECORDS


@pytest.mark.skipif(shutil.which("javac") is None, reason="javac is not installed (scripts/install-test-deps.sh)")
@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafkas_java_clients_over_sasl_ssl(sasl_broker, tls_files, java, mechanism):
    ca_file, _ = tls_files
    user, password = MECHANISMS[mechanism]
    topic = new_topic(confluent_sasl(sasl_broker, ca_file, mechanism))
    module = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
              "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}[mechanism]
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.jaas.config": f'{module} required username="{user}" password="{password}";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca_file)}
    bootstrap = f"127.0.0.1:{sasl_broker.ports['SASL_SSL']}"
    batch = [Record(key, value) for key, value in RECORDS]
    assert produce(java, bootstrap, topic, batch, [0] * len(batch), **settings) == list(range(len(RECORDS)))
    got = java.call("read", bootstrap=bootstrap, topic=topic, partition=0, start=0, count=len(RECORDS),
                    timeout_ms=TIMEOUT_S * 1000, settings=settings)
    assert [(record.key, record.value) for record in map(as_record, got)] == RECORDS


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_a_wrong_password_is_refused(sasl_broker, tls_files, mechanism):
    settings = confluent_sasl(sasl_broker, tls_files[0], mechanism) | {"sasl.password": "not-the-password"}
    with pytest.raises(KafkaException):
        AdminClient(settings).list_topics(timeout=5)


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT"])
def test_a_client_without_sasl_or_tls_gets_nothing_from_the_sasl_ssl_listener(sasl_broker, tls_files, protocol):
    settings = confluent_sasl(sasl_broker, tls_files[0], "SCRAM-SHA-512") | {"security.protocol": protocol}
    with pytest.raises(KafkaException):
        AdminClient(settings).list_topics(timeout=5)
    assert AdminClient(confluent_sasl(sasl_broker, tls_files[0], "SCRAM-SHA-512")).list_topics(timeout=TIMEOUT_S).brokers


def reauthentications(broker: BrokerProcess) -> float:
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=TIMEOUT_S) as answer:
        lines = answer.read().decode().splitlines()
    return sum(float(line.rpartition(" ")[2]) for line in lines
               if line.startswith("replog_sasl_authentications_total{") and 'kind="reauthentication"' in line)


def test_librdkafka_reauthenticates_before_its_session_ends(sasl_broker, tls_files):
    settings = confluent_sasl(sasl_broker, tls_files[0], "SCRAM-SHA-512")
    admin = AdminClient(settings)
    before = reauthentications(sasl_broker)

    def reauthenticated() -> bool:
        admin.list_topics(timeout=TIMEOUT_S)  # the connection is used, and kept, throughout
        return reauthentications(sasl_broker) > before

    wait_until(reauthenticated, "librdkafka re-authenticated on its connection", timeout_s=REAUTH_MS / 1000 * 5)
