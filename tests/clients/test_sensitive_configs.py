"""DescribeConfigs of a broker answers a secret setting (Kafka's PASSWORD type: key passwords,
inline PEM keys and certificates, JAAS configs) with a null value and is_sensitive, as a Kafka
4.4 broker does, through confluent-kafka's and kafka-python's admin clients: the secret's text
is nowhere in the answer, and a setting that is not secret is told as before."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import ConfigResourceType

from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.cluster

TIMEOUT_S = 30
PASSWORD = "never-told-3141"
SECRETS = {"ssl.key.password": PASSWORD, "listener.name.plaintext.ssl.key.password": PASSWORD}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("sensitive") / "data", extra_args=(
        "--broker-id", "0", *(argument for name, value in SECRETS.items() for argument in ("--set", f"{name}={value}"))))
    process.start()
    yield process
    process.stop()


def test_confluent_kafka_is_told_secrets_are_sensitive_not_their_values(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    [future] = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")]).values()
    described = future.result(TIMEOUT_S)
    for name in SECRETS:
        assert described[name].value is None, name
        assert described[name].is_sensitive, name
    assert described["ssl.keystore.key"].is_sensitive and described["ssl.keystore.key"].value is None, "unset, still secret"
    assert not described["num.partitions"].is_sensitive and described["num.partitions"].value == "1"
    assert not any(PASSWORD in str(entry.value) for entry in described.values())


def test_kafka_python_is_told_secrets_are_sensitive_not_their_values(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        answer = admin.describe_configs([KafkaPythonResource(ConfigResourceType.BROKER, "0")], config_filter="all")
    finally:
        admin.close()
    described = answer["broker"]["0"]
    for name in SECRETS:
        assert described[name]["value"] is None, name
        assert described[name]["is_sensitive"] is True, name
    assert described["num.partitions"]["is_sensitive"] is False and described["num.partitions"]["value"] == "1"
    assert PASSWORD not in repr(answer)
