"""Settings are parsed and validated in one place, with errors naming the setting and its source."""

from __future__ import annotations

import pathlib
import re

import pytest

from replog.broker import Broker
from replog.listener_settings import Endpoint, ListenerProtocol
from replog.tls_settings import principal_of
from replog.config import (
    TOPIC_SETTINGS,
    ConfigError,
    HostCount,
    HostPort,
    defaults,
    effective_topic_config,
    format_value,
    is_sensitive,
    load_broker_config,
    parse_setting,
    validate_topic_configs,
)
from replog.replica.manager import NEVER_MS, ManagerConfig
from replog.replica.partition_config import PartitionConfig
from replog.storage import LogConfig


def test_defaults():
    assert defaults()["coord.url"] == "memory://"
    assert defaults()["coord.session.timeout.ms"] == 9_000


def test_values_are_parsed():
    assert parse_setting("coord.session.timeout.ms", "6000") == 6000
    assert parse_setting("coord.url", "zk://127.0.0.1:2181/replog") == "zk://127.0.0.1:2181/replog"


@pytest.mark.parametrize(
    "name, text, complaint",
    [
        ("no.such.setting", "1", "unknown setting 'no.such.setting'"),
        ("coord.session.timeout.ms", "soon", "coord.session.timeout.ms"),
        ("coord.session.timeout.ms", "10", "at least 1000"),
        ("coord.url", "ftp://x", "accepted forms"),
        ("coord.url", "memory:127.0.0.1", "memory: must be followed by //; accepted forms"),
        ("coord.url", "zk://127.0.0.1:2181//replog", "chroot '//replog'"),
        ("listeners", "PLAINTEXT://a:1,PLAINTEXT://b:2", "Each listener must have a different name"),
        ("listeners", "PLAINTEXT://a:1,SSL://b:1", "Each listener must have a different port"),
        ("listeners", "host", "host:port"),
        ("listeners", "://host:1", "without a name"),
        ("advertised.listeners", "host:0", "port from 1"),
        ("listener.security.protocol.map", "CLIENT:TLS", "not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ("ssl.client.auth", "always", "none, requested, required"),
        ("ssl.enabled.protocols", "TLSv1.1", "older versions are not offered"),
        ("metrics.listeners", "host", "host:port"),
        ("log.segment.bytes", str(2**31), "at most 2147483647"),
        ("log.segment.bytes", "1048575", "at least 1048576"),
        ("internal.segment.bytes.min", "13", "at least 14"),
        ("state.change.queue.max.requests", "0", "at least 1"),
        ("auto.create.topics.enable", "yes", "true or false"),
        ("log.message.timestamp.type", "createtime", "CreateTime, LogAppendTime"),
        ("log.cleanup.policy", "delete,archive", "must be delete, compact or compact,delete"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "between 0 and 1"),
        ("log.cleaner.min.cleanable.ratio", "half", "not a number"),
        ("log.dirs", " , ", "at least one directory"),
        ("log.retention.check.interval.ms", "0", "at least 1"),
        ("log.dir.min.free.bytes", "-1", "at least 0"),
        ("max.connections.per.ip.overrides", "10.0.0.7", "host:count pairs"),
        ("max.connections.per.ip.overrides", "10.0.0.7:many", "host:count pairs"),
        ("queued.max.request.bytes", "-1", "at least 1"),  # Kafka's "unlimited": replog bounds it
    ],
)
def test_bad_values_name_the_setting(name, text, complaint):
    with pytest.raises(ConfigError, match=name.replace(".", r"\.")) as caught:
        parse_setting(name, text)
    assert complaint in str(caught.value)


# --- broker settings ---------------------------------------------------------------------------


def test_broker_defaults_are_kafkas():
    config = load_broker_config(None, {})
    assert config["broker.id"] == 0
    assert config["listeners"] == (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
    assert config["advertised.listeners"] == config["listeners"]
    assert config["listener.security.protocol.map"] == tuple(
        ListenerProtocol(protocol, protocol) for protocol in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))
    assert config["inter.broker.listener.name"] == "PLAINTEXT"
    assert config["ssl.client.auth"] == "none"
    assert config["ssl.enabled.protocols"] == ("TLSv1.2", "TLSv1.3")
    assert config["metrics.listeners"] == HostPort("127.0.0.1", 9644)  # Redpanda's port
    assert config["metrics.per.partition.enable"] is False
    assert config["broker.rack"] is None
    assert config["log.dirs"] == ("./replog-data",)
    assert config["auto.create.topics.enable"] is False
    assert config["message.max.bytes"] == 1_048_588
    assert config["log.retention.ms"] == 7 * 24 * 3600 * 1000
    assert config["replica.lag.time.max.ms"] == 30_000
    assert config["log.retention.check.interval.ms"] == 300_000
    assert config["unclean.leader.election.enable"] is False
    assert config["connections.max.idle.ms"] == 600_000
    assert config["log.message.timestamp.before.max.ms"] == 2**63 - 1  # KIP-937, Kafka 4's defaults
    assert config["log.message.timestamp.after.max.ms"] == 3_600_000
    assert config.sources["broker.id"] == "default"


@pytest.mark.parametrize(
    "name, text, value",
    [
        ("listeners", "PLAINTEXT://0.0.0.0:0", (Endpoint("PLAINTEXT", "0.0.0.0", 0),)),
        ("listeners", "[::1]:9093", (Endpoint("PLAINTEXT", "::1", 9093),)),
        ("listeners", "client://a:1, SSL://[::1]:2, b:0", (Endpoint("CLIENT", "a", 1), Endpoint("SSL", "::1", 2),
                                                         Endpoint("PLAINTEXT", "b", 0))),
        ("listeners", "A://a:0,B://b:0", (Endpoint("A", "a", 0), Endpoint("B", "b", 0))),  # each any free port
        ("listener.security.protocol.map", "client:ssl, REPLICATION:PLAINTEXT",
         (ListenerProtocol("CLIENT", "SSL"), ListenerProtocol("REPLICATION", "PLAINTEXT"))),
        ("metrics.listeners", "0.0.0.0:9644", HostPort("0.0.0.0", 9644)),
        ("metrics.listeners", "", None),  # off
        ("log.dirs", "/data/a, /data/b", ("/data/a", "/data/b")),
        ("auto.leader.rebalance.enable", "FALSE", False),
        ("log.retention.ms", "-1", -1),
        ("log.flush.interval.messages", str(2**63 - 1), 2**63 - 1),
        ("max.connections.per.ip.overrides", "10.0.0.7:50, client.example.com:200, [::1]:3",
         (HostCount("10.0.0.7", 50), HostCount("client.example.com", 200), HostCount("::1", 3))),
        ("max.connections.per.ip.overrides", "", ()),
    ],
)
def test_broker_values_are_parsed(name, text, value):
    assert parse_setting(name, text) == value


def test_the_retention_check_interval_reaches_the_replica_manager(tmp_path):
    # Nothing else reads it: without this wiring the setting would be accepted and ignored.
    config = load_broker_config(None, {"log.dirs": str(tmp_path), "log.retention.check.interval.ms": "250"})
    broker = Broker(config)
    try:
        assert broker.replicas.config.retention_check_interval_ms == 250
    finally:
        broker.data_dir_lock.release()  # never started, so never stopped


def test_the_free_space_threshold_reaches_the_broker_s_disk_space(tmp_path):
    assert load_broker_config(None, {})["log.dir.min.free.bytes"] == 1 << 30
    broker = Broker(load_broker_config(None, {"log.dirs": str(tmp_path), "log.dir.min.free.bytes": "2048"}))
    try:
        assert broker.disk_space.min_free_bytes == 2048
        assert broker.disk_space.free_bytes is not None, "read before the broker serves anything"
        assert broker.replicas.disk_space is broker.disk_space
    finally:
        broker.data_dir_lock.release()  # never started, so never stopped


def test_a_topic_name_in_broker_config_points_at_the_broker_synonym():
    with pytest.raises(ConfigError, match="retention.ms is a topic setting, its broker default is log.retention.ms"):
        parse_setting("retention.ms", "1")


# --- layering: defaults < TOML file < --set ----------------------------------------------------


def write_toml(tmp_path, text: str) -> str:
    path = tmp_path / "broker.toml"
    path.write_text(text)
    return str(path)


def test_file_overrides_defaults_and_set_overrides_file(tmp_path):
    toml_path = write_toml(
        tmp_path,
        """
        "broker.id" = 3
        listeners = "PLAINTEXT://10.0.0.3:9092"
        log.retention.ms = 3600000
        log.dirs = ["/d1", "/d2"]
        auto.create.topics.enable = true
        [log.flush.interval]
        ms = 1000
        """,
    )
    config = load_broker_config(toml_path, {"log.retention.ms": "60000", "broker.rack": "r2"})

    assert config["broker.id"] == 3
    assert config["listeners"] == config["advertised.listeners"] == (Endpoint("PLAINTEXT", "10.0.0.3", 9092),)
    assert config["log.retention.ms"] == 60_000
    assert config["log.dirs"] == ("/d1", "/d2")
    assert config["auto.create.topics.enable"] is True
    assert config["log.flush.interval.ms"] == 1000
    assert config["broker.rack"] == "r2"
    assert config["num.partitions"] == 1
    assert config.sources["broker.id"] == f"file {toml_path}"
    assert config.sources["log.retention.ms"] == "--set"
    assert config.sources["num.partitions"] == "default"


def test_advertised_listeners_can_differ_from_listeners():
    config = load_broker_config(None, {"listeners": "0.0.0.0:9092", "advertised.listeners": "broker1.example:9092"})
    assert config["advertised.listeners"] == (Endpoint("PLAINTEXT", "broker1.example", 9092),)


def test_named_listeners_take_their_protocol_from_the_map():
    config = load_broker_config(None, {
        "listeners": "CLIENT://127.0.0.1:9093,REPLICATION://127.0.0.1:9094",
        "listener.security.protocol.map": "CLIENT:SSL,REPLICATION:PLAINTEXT",
        "advertised.listeners": "CLIENT://broker1.example:9093,REPLICATION://10.0.0.1:9094",
        "inter.broker.listener.name": "replication",
    })
    assert config["inter.broker.listener.name"] == "REPLICATION"
    assert config["advertised.listeners"] == (Endpoint("CLIENT", "broker1.example", 9093),
                                              Endpoint("REPLICATION", "10.0.0.1", 9094))


def test_inter_broker_listener_defaults_to_plaintext_else_the_first():
    assert load_broker_config(None, {"listeners": "SSL://a:1,PLAINTEXT://a:2"})["inter.broker.listener.name"] == "PLAINTEXT"
    assert load_broker_config(None, {"listeners": "SSL://a:1"})["inter.broker.listener.name"] == "SSL"


def test_a_listener_may_override_its_ssl_settings():
    config = load_broker_config(None, {"ssl.keystore.location": "/etc/all.pem",
                                       "listener.name.client.ssl.keystore.location": "/etc/client.pem",
                                       "listener.name.client.ssl.key.password": "s3cret"})
    assert config["listener.name.client.ssl.keystore.location"] == "/etc/client.pem"
    assert config["listener.name.client.ssl.key.password"].text == "s3cret"
    password = config["listener.name.client.ssl.key.password"]
    assert "s3cret" not in format_value(password) + f"{password} {password!r} {password:>10}" + "%s" % password
    with pytest.raises(ConfigError, match="unknown setting 'listener.name.client.ssl.no.such'"):
        load_broker_config(None, {"listener.name.client.ssl.no.such": "x"})


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"listeners": "CLIENT://a:1"}, "No security protocol defined for listener CLIENT"),
        ({"listeners": "PLAINTEXT://a:1", "advertised.listeners": "SSL://a:1"},
         "advertised.listeners listener names must be equal to or a subset of the ones defined in listeners. Found SSL"),
        ({"listeners": "0.0.0.0:9092"}, "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"),
        ({"listeners": "SSL://a:1,PLAINTEXT://a:2", "inter.broker.listener.name": "INTERNAL"},
         "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid options based "
         "on currently configured listeners are SSL,PLAINTEXT"),
    ],
)
def test_listener_settings_are_checked_against_each_other_in_kafkas_words(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_broker_config(None, overrides)


@pytest.mark.parametrize(
    "toml_text, overrides, complaints",
    [
        ('log.retention.hours = 168', {}, ["unknown setting 'log.retention.hours'", "from file"]),
        ('"num.partitions" = 0', {}, ["num.partitions", "at least 1", "from file"]),
        ('"broker.id" = 1', {"broker.id": "-1"}, ["broker.id", "from --set"]),
        ('"broker.id" = 1', {"segment.bytes": "5"}, ["segment.bytes", "log.segment.bytes", "from --set"]),
        ("broker.id = ", {}, ["is not valid TOML"]),
    ],
)
def test_layering_errors_name_the_key_and_source(tmp_path, toml_text, overrides, complaints):
    toml_path = write_toml(tmp_path, toml_text)
    with pytest.raises(ConfigError) as caught:
        load_broker_config(toml_path, overrides)
    for complaint in complaints:
        assert complaint in str(caught.value)


@pytest.mark.parametrize(
    "toml_text, overrides, flags, message",
    [
        ("", {}, {"broker.id": ("--broker-id", "abc")}, "--broker-id: 'abc' is not an integer"),
        ("", {"broker.id": "abc"}, {}, "broker.id (from --set): 'abc' is not an integer"),
        ('"broker.id" = "abc"', {}, {}, "broker.id (from file {toml_path}): 'abc' is not an integer"),
        ("", {}, {"listeners": ("--listen", "h")}, "--listen: 'h' must be NAME://host:port (or host:port for PLAINTEXT) with a port from 0 to 65535"),
        ("", {"auto.create.topics.enable": "yes"}, {}, "auto.create.topics.enable (from --set): 'yes' must be true or false"),
    ],
)
def test_a_bad_value_is_named_as_the_operator_wrote_it(tmp_path, toml_text, overrides, flags, message):
    """A flag's bad value is named by that flag, not as --set, and in plain words, not Python's."""
    toml_path = write_toml(tmp_path, toml_text)
    with pytest.raises(ConfigError) as caught:
        load_broker_config(toml_path, overrides, flags)
    assert str(caught.value) == message.format(toml_path=toml_path)


def test_flags_win_over_set_and_are_their_values_source():
    config = load_broker_config(None, {"broker.id": "1", "broker.rack": "r1"}, {"broker.id": ("--broker-id", "2")})
    assert config["broker.id"] == 2 and config.sources["broker.id"] == "--broker-id"
    assert config.sources["broker.rack"] == "--set"


def test_missing_file_is_named(tmp_path):
    missing = str(tmp_path / "absent.toml")
    with pytest.raises(ConfigError, match=f"cannot read config file {missing}"):
        load_broker_config(missing, {})


def test_broker_config_is_frozen():
    config = load_broker_config(None, {})
    with pytest.raises(TypeError):
        config.parsed["broker.id"] = 5  # type: ignore[index]


# --- topic settings ----------------------------------------------------------------------------


def test_topic_defaults_follow_kafkas_broker_synonyms():
    config = load_broker_config(None, {"log.retention.ms": "5000", "message.max.bytes": "777", "log.roll.ms": "9"})
    topic_defaults = config.topic_defaults()
    assert topic_defaults["retention.ms"] == 5000
    assert topic_defaults["max.message.bytes"] == 777
    assert topic_defaults["segment.ms"] == 9
    assert set(topic_defaults) == set(TOPIC_SETTINGS)


def test_effective_topic_config_prefers_the_topics_overrides():
    broker_config = load_broker_config(None, {"log.retention.ms": "5000"})
    settings = effective_topic_config(broker_config, {"retention.bytes": "1024", "message.timestamp.type": "LogAppendTime"})
    assert settings["retention.bytes"] == 1024
    assert settings["retention.ms"] == 5000
    assert settings["message.timestamp.type"] == "LogAppendTime"
    assert settings.sources["retention.bytes"] == "topic"
    assert settings.sources["retention.ms"] == "--set"


def test_log_config_carries_every_log_setting():
    broker_config = load_broker_config(None, {"log.segment.bytes": "2097152", "log.flush.interval.ms": "100"})
    settings = effective_topic_config(
        broker_config, {"retention.ms": "-1", "index.interval.bytes": "0", "max.message.bytes": "2048"}
    )
    assert LogConfig.from_topic_settings(settings) == LogConfig(
        segment_bytes=2097152, flush_ms=100, retention_ms=-1, index_interval_bytes=0, max_message_bytes=2048
    )
    assert LogConfig.from_topic_settings(effective_topic_config(load_broker_config(None, {}), {})) == LogConfig()


def test_the_compaction_lags_reach_the_log():
    settings = effective_topic_config(load_broker_config(None, {}),
                                      {"min.compaction.lag.ms": "60000", "max.compaction.lag.ms": "3600000"})
    config = LogConfig.from_topic_settings(settings)
    assert (config.min_compaction_lag_ms, config.max_compaction_lag_ms) == (60_000, 3_600_000)


def test_min_insync_replicas_reaches_the_partition():
    broker = load_broker_config(None, {"min.insync.replicas": "2"})
    assert PartitionConfig.from_topic_settings(effective_topic_config(broker, {})).min_insync_replicas == 2
    overridden = effective_topic_config(broker, {"min.insync.replicas": "3"})
    assert PartitionConfig.from_topic_settings(overridden).min_insync_replicas == 3
    assert PartitionConfig.from_topic_settings(effective_topic_config(load_broker_config(None, {}), {})) == PartitionConfig()


def test_the_replica_managers_intervals_come_from_the_broker_config():
    data_dir = pathlib.Path("data")
    broker = load_broker_config(None, {"log.retention.check.interval.ms": "1000",
                                       "log.flush.offset.checkpoint.interval.ms": "2000",
                                       "log.cleaner.backoff.ms": "3000", "log.cleaner.dedupe.buffer.size": "2097152"})
    assert ManagerConfig.from_broker_config(broker, data_dir, 7) == ManagerConfig(
        data_dir, 7, retention_check_interval_ms=1000, recovery_point_checkpoint_interval_ms=2000,
        cleaner_backoff_ms=3000, cleaner_map_max_bytes=2 << 20)
    cleaner_off = load_broker_config(None, {"log.cleaner.enable": "false"})
    assert ManagerConfig.from_broker_config(cleaner_off, data_dir, 7).cleaner_backoff_ms == NEVER_MS
    assert ManagerConfig.from_broker_config(load_broker_config(None, {}), data_dir, 7) == ManagerConfig(data_dir, 7)


# What a Kafka 4.4 broker's DescribeConfigs lists for a topic without overrides, every value its
# default (asked of bench/peers/kafka).
KAFKA_TOPIC_DEFAULTS = {
    "cleanup.policy": "delete", "compression.gzip.level": "-1", "compression.lz4.level": "9",
    "compression.type": "producer", "compression.zstd.level": "3", "delete.retention.ms": "86400000",
    "errors.deadletterqueue.group.enable": "false", "file.delete.delay.ms": "60000",
    "flush.messages": "9223372036854775807", "flush.ms": "9223372036854775807",
    "follower.replication.throttled.replicas": "", "index.interval.bytes": "4096",
    "leader.replication.throttled.replicas": "", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "9223372036854775807", "max.decompressed.message.bytes": "2147483639",
    "max.message.bytes": "1048588", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.5", "min.compaction.lag.ms": "0", "min.insync.replicas": "1",
    "preallocate": "false", "remote.copy.lag.bytes": "-1", "remote.copy.lag.ms": "0",
    "remote.log.copy.disable": "false", "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
    "retention.bytes": "-1", "retention.ms": "604800000", "segment.bytes": "1073741824",
    "segment.index.bytes": "10485760", "segment.jitter.ms": "0", "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}


def test_every_topic_config_of_kafka_is_known_with_kafkas_default():
    settings = effective_topic_config(load_broker_config(None, {}), {})
    assert {name: format_value(value) for name, value in settings.items()} == KAFKA_TOPIC_DEFAULTS


@pytest.mark.parametrize("name, text", [
    *(("compression.type", codec) for codec in ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")),
    ("compression.gzip.level", "-1"), ("compression.gzip.level", "1"), ("compression.gzip.level", "9"),
    ("compression.lz4.level", "1"), ("compression.lz4.level", "17"),
    ("compression.zstd.level", "-131072"), ("compression.zstd.level", "22"),
    ("file.delete.delay.ms", "0"), ("max.compaction.lag.ms", "1"), ("min.compaction.lag.ms", "0"),
    ("preallocate", "TRUE"), ("segment.index.bytes", "4"), ("segment.jitter.ms", "0"),
    ("max.decompressed.message.bytes", "2147483639"), ("errors.deadletterqueue.group.enable", "true"),
    ("local.retention.ms", "-2"), ("local.retention.bytes", "-2"), ("remote.copy.lag.ms", "-1"),
    ("remote.copy.lag.bytes", "-1"), ("remote.log.copy.disable", "true"), ("remote.log.delete.on.disable", "true"),
    ("remote.storage.enable", "false"),
])
def test_values_kafka_accepts_are_accepted(name, text):
    assert name in validate_topic_configs({name: text})


# Kafka 4.4's answers to the same values, for comparison: "Invalid value bogus for configuration
# compression.type: String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer",
# "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or
# equal to -1", "Unknown topic config name: foo.bar".
@pytest.mark.parametrize("name, text, complaint", [
    ("compression.type", "bogus", "Invalid value bogus for configuration compression.type: Value must be one of "
                                  "uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("compression.type", "none", "must be one of"),  # the producer's name for it, not the topic's
    ("compression.gzip.level", "0", "Invalid value 0 for configuration compression.gzip.level: Value must be between "
                                    "1 and 9 or equal to -1"),
    ("compression.gzip.level", "fast", "Value is not an integer"),
    ("compression.lz4.level", "18", "must be between 1 and 17"),
    ("compression.zstd.level", "23", "must be between -131072 and 22"),
    ("file.delete.delay.ms", "-1", "Invalid value -1 for configuration file.delete.delay.ms: Value must be at least 0"),
    ("max.compaction.lag.ms", "0", "must be at least 1"),
    ("min.compaction.lag.ms", "-1", "must be at least 0"),
    ("preallocate", "yes", "Invalid value yes for configuration preallocate: Value must be true or false"),
    ("segment.index.bytes", "3", "must be at least 4"),
    # Kafka 4's floor (KIP-1030), and the others that keep one principal from hurting the brokers.
    ("segment.bytes", "1048575", "Invalid value 1048575 for configuration segment.bytes: Value must be at least 1048576"),
    ("segment.ms", "0", "Invalid value 0 for configuration segment.ms: Value must be at least 1"),
    ("flush.messages", "0", "must be at least 1"),
    ("flush.ms", "-1", "must be at least 0"),
    ("min.insync.replicas", "0", "must be at least 1"),
    ("index.interval.bytes", "-1", "must be at least 0"),
    ("max.message.bytes", "-1", "must be at least 0"),
    ("retention.ms", "-2", "must be at least -1"),
    ("delete.retention.ms", "-1", "must be at least 0"),
    ("message.timestamp.after.max.ms", "-1", "must be at least 0"),
    ("max.decompressed.message.bytes", "2147483640", "must be at most 2147483639"),
    ("local.retention.ms", "-3", "must be at least -2"),
    ("remote.copy.lag.ms", "-2", "must be at least -1"),
    ("foo.bar", "1", "Unknown topic config name: foo.bar"),
])
def test_values_kafka_refuses_are_refused_as_kafka_words_it(name, text, complaint):
    with pytest.raises(ConfigError) as caught:
        validate_topic_configs({name: text})
    assert complaint in str(caught.value)


def test_a_broker_may_lower_the_segment_bytes_floor_for_its_clients():
    assert validate_topic_configs({"segment.bytes": "1048576"}) == {"segment.bytes": 1048576}
    assert validate_topic_configs({"segment.bytes": "16384"}, segment_bytes_min=1024) == {"segment.bytes": 16384}
    with pytest.raises(ConfigError, match="Value must be at least 1024"):
        validate_topic_configs({"segment.bytes": "1023"}, segment_bytes_min=1024)
    assert load_broker_config(None, {})["internal.segment.bytes.min"] == 1048576


@pytest.mark.parametrize("name", ["offsets.topic.segment.bytes", "transaction.state.log.segment.bytes"])
def test_an_internal_topic_below_the_segment_bytes_floor_is_refused_at_start(name):
    with pytest.raises(ConfigError, match=rf"{name} \(from --set\): 16384 is below .* 1048576"):
        load_broker_config(None, {name: "16384"})
    lowered = load_broker_config(None, {name: "16384", "internal.segment.bytes.min": "16384"})
    assert lowered[name] == 16384


def test_transaction_settings_have_kafkas_defaults():
    config = load_broker_config(None, {})
    assert config["transaction.max.timeout.ms"] == 900_000
    assert config["transaction.state.log.num.partitions"] == 50
    assert config["transaction.state.log.replication.factor"] == 3
    assert config["transaction.state.log.min.isr"] == 2
    assert config["transactional.id.expiration.ms"] == 604_800_000
    assert config["transaction.abort.timed.out.transaction.cleanup.interval.ms"] == 10_000
    assert config["transaction.partition.verification.enable"] is True


def test_a_segment_size_the_store_already_holds_still_applies_below_the_floor():
    """Written before the floor rose, or through a broker that lowered it: the partitions keep it."""
    settings = effective_topic_config(load_broker_config(None, {}), {"segment.bytes": "1024"})
    assert LogConfig.from_topic_settings(settings).segment_bytes == 1024
    with pytest.raises(ConfigError, match="at least 14"):
        effective_topic_config(load_broker_config(None, {}), {"segment.bytes": "13"})


@pytest.mark.parametrize("configs, complaint", [
    ({"min.compaction.lag.ms": "2000", "max.compaction.lag.ms": "1000"},
     "conflict topic config setting min.compaction.lag.ms (2000) > max.compaction.lag.ms (1000)"),
    ({"min.compaction.lag.ms": "9223372036854775807"}, None),  # the default max: no conflict
    ({"remote.storage.enable": "true"},
     "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."),
])
def test_configs_that_conflict_are_refused_as_kafka_refuses_them(configs, complaint):
    if complaint is None:
        assert validate_topic_configs(configs)
        return
    with pytest.raises(ConfigError) as caught:
        validate_topic_configs(configs)
    assert str(caught.value) == complaint


def test_the_timestamp_bounds_are_topic_settings_with_kafkas_broker_synonyms():
    broker_config = load_broker_config(None, {"log.message.timestamp.after.max.ms": "60000"})
    settings = effective_topic_config(broker_config, {"message.timestamp.before.max.ms": "86400000"})
    config = LogConfig.from_topic_settings(settings)
    assert (config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms) == (86_400_000, 60_000)
    assert settings.sources["message.timestamp.after.max.ms"] == "--set"


@pytest.mark.parametrize(
    "configs, complaint",
    [
        ({"no.such": "1"}, "Unknown topic config name: no.such"),
        ({"log.retention.ms": "1"}, "that is a broker setting"),
        ({"cleanup.policy": "delete,archive"}, "must be delete, compact or compact,delete"),
        ({"min.cleanable.dirty.ratio": "-0.1"}, "min.cleanable.dirty.ratio"),
        ({"delete.retention.ms": "-1"}, "delete.retention.ms"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"message.timestamp.type": "Now"}, "CreateTime, LogAppendTime"),
        ({"flush.messages": "0"}, "flush.messages"),
        ({"leader.replication.throttled.replicas": "0-1"},
         "Invalid value 0-1 for configuration leader.replication.throttled.replicas: Value is not '*' or "
         "PARTITION:BROKER pairs, comma-separated (e.g. 0:1,1:2)"),
        ({"follower.replication.throttled.replicas": "*,0:1"}, "follower.replication.throttled.replicas"),
    ],
)
def test_validate_topic_configs_names_the_bad_setting(configs, complaint):
    with pytest.raises(ConfigError) as caught:
        validate_topic_configs(configs)
    assert complaint in str(caught.value)


def test_validate_topic_configs_returns_parsed_values():
    assert validate_topic_configs({"cleanup.policy": "delete", "unclean.leader.election.enable": "true"}) == {
        "cleanup.policy": ("delete",),
        "unclean.leader.election.enable": True,
    }


def test_kafkas_throttled_replicas_are_accepted_and_default_to_none():
    """Set by kafka-reassign-partitions --throttle; replog throttles moving replicas regardless."""
    assert validate_topic_configs({"leader.replication.throttled.replicas": "0:1,1:2",
                                   "follower.replication.throttled.replicas": "*"}) == {
        "leader.replication.throttled.replicas": ("0:1", "1:2"),
        "follower.replication.throttled.replicas": ("*",),
    }
    settings = effective_topic_config(load_broker_config(None, {}), {})
    assert (settings["leader.replication.throttled.replicas"], settings.sources["leader.replication.throttled.replicas"]) \
        == ((), "default")


@pytest.mark.parametrize(
    "value, text",
    [(True, "true"), (("a", "b"), "a,b"), (HostPort("h", 1), "h:1"), (HostPort("::1", 2), "[::1]:2"), (None, None), (5, "5"),
     ((HostCount("10.0.0.7", 50), HostCount("h", 2)), "10.0.0.7:50,h:2")],
)
def test_format_value_writes_kafkas_text(value, text):
    assert format_value(value) == text


def test_a_compact_topic_is_cleaned_and_deletes_by_retention_only_if_also_delete():
    """compact alone: the cleaner bounds the log, retention never deletes a segment (it would
    lose the latest value of keys); compact,delete: both, as in Kafka."""
    broker = load_broker_config(None, {"log.cleaner.delete.retention.ms": "5000"})
    compact = LogConfig.from_topic_settings(
        effective_topic_config(broker, {"cleanup.policy": "compact", "retention.ms": "1000"}))
    assert (compact.compact, compact.retention_ms, compact.retention_bytes) == (True, -1, -1)
    assert (compact.delete_retention_ms, compact.min_cleanable_dirty_ratio) == (5000, 0.5)
    both = LogConfig.from_topic_settings(effective_topic_config(
        broker, {"cleanup.policy": "delete,compact", "retention.ms": "1000", "min.cleanable.dirty.ratio": "0.1"}))
    assert (both.compact, both.retention_ms, both.min_cleanable_dirty_ratio) == (True, 1000, 0.1)
    assert not LogConfig.from_topic_settings(effective_topic_config(broker, {})).compact


@pytest.mark.parametrize("subject, user", [  # Kafka's SslPrincipalMapperTest
    ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "Duke"),
    ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
    ("cn=duke,ou=SME,o=mycp,l=Fulton,st=MD,c=US", "duke"),
    ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
])
def test_certificate_subjects_map_to_users_by_kafkas_rules(subject, user):
    rules = parse_setting("ssl.principal.mapping.rules",
                          r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/, RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
                          r"RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L, DEFAULT")
    assert principal_of(rules, subject) == user


def test_a_subject_no_rule_maps_has_no_user_and_a_bad_rule_is_refused():
    assert principal_of(parse_setting("ssl.principal.mapping.rules", "RULE:^CN=(.*)$/$1/U"), "O=org") is None
    with pytest.raises(ConfigError, match="invalid rule: 'CN=x'"):
        parse_setting("ssl.principal.mapping.rules", "CN=x")
    with pytest.raises(ConfigError, match="not a regular expression"):
        parse_setting("ssl.principal.mapping.rules", "RULE:^CN=($/$1/")


@pytest.mark.parametrize("name", ["ssl.key.password", "listener.name.ssl.ssl.keystore.key", "ssl.truststore.certificates",
                                  "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config", "no.such.setting"])
def test_secret_settings_and_unknown_ones_are_sensitive_as_kafka_tells_them(name):
    assert is_sensitive(name)


@pytest.mark.parametrize("name", ["ssl.keystore.location", "listener.name.ssl.ssl.client.auth", "num.partitions",
                                  "leader.replication.throttled.rate"])
def test_settings_that_are_not_secret_are_not_sensitive(name):
    assert not is_sensitive(name)
