"""Topic configs as Kafka 4.4 takes them, and AlterConfigs (API 33), Kafka's legacy form that
replaces a resource's whole set of dynamic configs: through confluent-kafka's AdminClient and
as raw requests. The answers expected are those a Kafka 4.4 broker gave to the same requests
(bench/peers/kafka), but for the message's "topic 'NAME': " prefix."""

from __future__ import annotations

import socket
import struct
import warnings

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from replog.net.codec import ApiKey, decode_response
from tests.hostile.seeds import encode as encode_request

TIMEOUT_S = 30
RATE = "leader.replication.throttled.rate"
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4


def admin_call(broker, method: str, resources: list, **options):
    """One AdminClient call on one resource, its result; the client lives until the result is in
    (destroyed, it fails its futures)."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # alter_configs: deprecated there, not in Kafka 4
        [future] = getattr(admin, method)(resources, **options).values()
    return future.result(TIMEOUT_S)


def described(broker, topic: str, resource_type: ResourceType = ResourceType.TOPIC) -> dict[str, ConfigEntry]:
    return admin_call(broker, "describe_configs", [ConfigResource(resource_type, topic)])


def overrides(broker, topic: str) -> dict[str, str]:
    return {name: entry.value for name, entry in described(broker, topic).items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value}


def alter_configs(broker, resource: ConfigResource, *, validate_only: bool = False) -> None:
    admin_call(broker, "alter_configs", [resource], validate_only=validate_only)


def create(broker, topic: str, configs: dict[str, str]) -> None:
    admin_call(broker, "create_topics", [NewTopic(topic, 1, 1, config=configs)])


def refusal(call) -> KafkaError:
    with pytest.raises(KafkaException) as refused:
        call()
    return refused.value.args[0]


def test_a_new_topic_describes_every_kafka_topic_config_at_its_default(broker, make_topic):
    entries = described(broker, make_topic())
    assert len(entries) == 37  # a Kafka 4.4 broker's count; the names and values: tests/test_config.py
    assert {entry.source for entry in entries.values()} == {ConfigSource.DEFAULT_CONFIG.value}
    assert (entries["compression.type"].value, entries["max.compaction.lag.ms"].value,
            entries["file.delete.delay.ms"].value) == ("producer", "9223372036854775807", "60000")


def test_configs_kafka_accepts_are_accepted_at_creation_and_by_incremental_alteration(broker, topic_name):
    configs = {"compression.type": "zstd", "compression.zstd.level": "-5", "file.delete.delay.ms": "0",
               "max.compaction.lag.ms": "3600000", "min.compaction.lag.ms": "1000", "preallocate": "true",
               "segment.jitter.ms": "10"}
    create(broker, topic_name, configs)
    assert overrides(broker, topic_name) == configs
    entry = ConfigEntry("compression.type", "gzip", incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[entry])
    admin_call(broker, "incremental_alter_configs", [resource])
    assert overrides(broker, topic_name) == configs | {"compression.type": "gzip"}


@pytest.mark.parametrize("configs, says", [
    ({"compression.type": "bogus"}, "Invalid value bogus for configuration compression.type: Value must be one of "
                                    "uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.gzip.level": "0"}, "Invalid value 0 for configuration compression.gzip.level: Value must be "
                                      "between 1 and 9 or equal to -1"),
    ({"remote.storage.enable": "true"}, "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                                        "configured with remote log storage."),
    ({"min.compaction.lag.ms": "2", "max.compaction.lag.ms": "1"}, "conflict topic config setting "
                                                                   "min.compaction.lag.ms (2) > max.compaction.lag.ms (1)"),
    ({"foo.bar": "1"}, "Unknown topic config name: foo.bar"),
])
def test_configs_kafka_refuses_are_refused_with_invalid_config(broker, topic_name, configs, says):
    error = refusal(lambda: create(broker, topic_name, configs))
    assert error.code() == KafkaError.INVALID_CONFIG and says in error.str()


def test_alter_configs_replaces_the_topics_whole_set_of_overrides(broker, make_topic):
    topic = make_topic({"retention.ms": "1000", "compression.type": "lz4"})
    alter_configs(broker, ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "5000"}))
    assert overrides(broker, topic) == {"segment.ms": "5000"}
    assert described(broker, topic)["retention.ms"].value == "604800000"


def test_alter_configs_validate_only_changes_nothing(broker, make_topic):
    topic = make_topic({"retention.ms": "1000"})
    alter_configs(broker, ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.ms": "5000"}),
                  validate_only=True)
    assert overrides(broker, topic) == {"retention.ms": "1000"}


@pytest.mark.parametrize("configs, code, says", [
    ({"retention.ms": "abc"}, KafkaError.INVALID_CONFIG, "Invalid value abc for configuration retention.ms"),
    ({"foo.bar": "1"}, KafkaError.INVALID_CONFIG, "Unknown topic config name: foo.bar"),
])
def test_a_bad_alter_configs_is_refused_and_changes_nothing(broker, make_topic, configs, code, says):
    topic = make_topic({"retention.ms": "1000"})
    error = refusal(lambda: alter_configs(broker, ConfigResource(ResourceType.TOPIC, topic, set_config=configs)))
    assert error.code() == code and says in error.str()
    assert overrides(broker, topic) == {"retention.ms": "1000"}


def test_alter_configs_of_an_unknown_topic_is_unknown_topic_or_partition(broker):
    error = refusal(lambda: alter_configs(broker, ConfigResource(ResourceType.TOPIC, "no-such-topic",
                                                                 set_config={"retention.ms": "1000"})))
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_alter_configs_of_a_broker_replaces_its_dynamic_configs(broker):
    def dynamic() -> dict[str, str]:
        return {name: entry.value for name, entry in described(broker, "0", ResourceType.BROKER).items()
                if entry.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value}

    alter_configs(broker, ConfigResource(ResourceType.BROKER, "0", set_config={RATE: "1000"}))
    assert dynamic() == {RATE: "1000"}
    alter_configs(broker, ConfigResource(ResourceType.BROKER, "0", set_config={}))
    assert dynamic() == {}


# -- the protocol ------------------------------------------------------------------------------


def exchange(broker, api_key: int, version: int, values: dict):
    host, port = broker.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=TIMEOUT_S) as connection:
        connection.sendall(encode_request(api_key, version, values))
        (size,) = struct.unpack(">i", connection.recv(4, socket.MSG_WAITALL))
        return decode_response(api_key, version, connection.recv(size, socket.MSG_WAITALL))[1]


def test_segments_below_kafkas_floor_are_refused_at_every_door(broker, make_topic, topic_name):
    """Kafka 4's 1 MiB floor (KIP-1030): a client cannot give a topic tiny segments, which cost
    every replica a file and a descriptor per few records. Kafka 4.4's words."""
    says = "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576"
    error = refusal(lambda: create(broker, topic_name, {"segment.bytes": "1048575"}))
    assert error.code() == KafkaError.INVALID_CONFIG and says in error.str()
    topic = make_topic({"segment.bytes": "1048576"})
    entry = ConfigEntry("segment.bytes", "1048575", incremental_operation=AlterConfigOpType.SET)
    error = refusal(lambda: admin_call(broker, "incremental_alter_configs",
                                       [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])]))
    assert error.code() == KafkaError.INVALID_CONFIG and says in error.str()
    answer = exchange(broker, ApiKey.ALTER_CONFIGS, 2, {"validate_only": False, "resources": [
        {"resource_type": RESOURCE_TOPIC, "resource_name": topic, "configs": [{"name": "segment.bytes", "value": "1048575"}]}]})
    assert int(answer.responses[0].error_code) == 40 and says in answer.responses[0].error_message
    assert overrides(broker, topic) == {"segment.bytes": "1048576"}


def test_api_versions_advertises_alter_configs_0_to_2_as_kafka_4(broker):
    answer = exchange(broker, ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
    assert {(key.api_key, key.min_version, key.max_version) for key in answer.api_keys} >= {(33, 0, 2)}


@pytest.mark.parametrize("version", [0, 1, 2])
def test_each_resource_of_an_alter_configs_request_is_answered_on_its_own(broker, make_topic, version):
    """As Kafka 4.4 answers each of these resources, messages included."""
    good, bad = make_topic({"retention.ms": "1000"}), make_topic({"retention.ms": "1000"})
    answer = exchange(broker, ApiKey.ALTER_CONFIGS, version, {"validate_only": False, "resources": [
        {"resource_type": RESOURCE_TOPIC, "resource_name": good, "configs": [{"name": "max.compaction.lag.ms", "value": "60000"}]},
        {"resource_type": RESOURCE_TOPIC, "resource_name": bad, "configs": [{"name": "segment.ms", "value": "0"}]},
        {"resource_type": RESOURCE_TOPIC, "resource_name": bad, "configs": [{"name": "flush.ms", "value": None}]},
        {"resource_type": RESOURCE_TOPIC, "resource_name": bad, "configs": [
            {"name": "flush.ms", "value": "1"}, {"name": "flush.ms", "value": "2"}]},
        {"resource_type": RESOURCE_TOPIC, "resource_name": "no-such-topic", "configs": []},
        {"resource_type": 3, "resource_name": "g", "configs": []},  # no config resource type
        {"resource_type": RESOURCE_BROKER, "resource_name": "x", "configs": []},
    ]})
    assert [(response.resource_name, int(response.error_code)) for response in answer.responses] == [
        (good, 0), (bad, 40), (bad, 42), (bad, 42), ("no-such-topic", 3), ("g", 42), ("x", 42)]
    messages = [response.error_message or "" for response in answer.responses]
    assert "Invalid value 0 for configuration segment.ms: Value must be at least 1" in messages[1]
    assert (messages[2], messages[3]) == ("Null value not supported for : flush.ms", "Error due to duplicate config keys")
    assert overrides(broker, good) == {"max.compaction.lag.ms": "60000"}
    assert overrides(broker, bad) == {"retention.ms": "1000"}
