"""Configuration as the admin APIs show and change it: DescribeConfigs of topics and the broker,
IncrementalAlterConfigs and the older AlterConfigs."""

from __future__ import annotations

from replog.net.codec import ApiKey

from ..protocol import BROKER_RESOURCE, TOPIC_RESOURCE, broker_id, create_topic, describe_configs
from ..targets import CLOSED, Target
from .registry import scenario

SET = 0
DELETE = 1
ALTER_CONFIGS = 33  # the API before IncrementalAlterConfigs, which clients still send
TOPIC_CONFIGS_REPLOG_DESCRIBES = [
    "cleanup.policy", "delete.retention.ms", "flush.messages", "flush.ms", "follower.replication.throttled.replicas",
    "index.interval.bytes", "leader.replication.throttled.replicas", "max.message.bytes", "message.timestamp.after.max.ms",
    "message.timestamp.before.max.ms", "message.timestamp.type", "min.cleanable.dirty.ratio", "min.insync.replicas",
    "retention.bytes", "retention.ms", "segment.bytes", "segment.ms", "unclean.leader.election.enable",
]
# Broker configs a client or an operator reads from any broker: compared by value and source.
CLIENT_FACING_BROKER_CONFIGS = [
    "message.max.bytes", "num.partitions", "default.replication.factor", "auto.create.topics.enable",
    "min.insync.replicas", "log.retention.ms", "log.retention.hours", "log.segment.bytes", "log.cleanup.policy",
    "offsets.retention.minutes", "group.min.session.timeout.ms", "group.max.session.timeout.ms",
    "socket.request.max.bytes", "compression.type", "unclean.leader.election.enable",
]


@scenario
def topic_config_names(target: Target) -> list:
    create_topic(target, "differential-config-names")
    return sorted(describe_configs(target, TOPIC_RESOURCE, "differential-config-names")["configs"])


@scenario
def topic_config_values(target: Target) -> dict:
    """Value, source, read-only and sensitive of the topic configs replog describes (which names
    each broker describes is topic_config_names' to compare), two of them set at creation."""
    topic = "differential-config-values"
    create_topic(target, topic, configs={"retention.ms": "3600000", "cleanup.policy": "compact"})
    return describe_configs(target, TOPIC_RESOURCE, topic, TOPIC_CONFIGS_REPLOG_DESCRIBES)


@scenario
def topic_configs_of_an_unknown_topic(target: Target) -> str:
    return describe_configs(target, TOPIC_RESOURCE, "differential-nowhere")["error_code"]


@scenario
def broker_configs(target: Target) -> dict:
    answer = describe_configs(target, BROKER_RESOURCE, str(broker_id(target)))
    return {"error_code": answer["error_code"], "names": sorted(answer["configs"]),
            "client_facing": {name: answer["configs"].get(name) for name in CLIENT_FACING_BROKER_CONFIGS}}


def _incremental(target: Target, topic: str, operations: list[tuple[int, str, str | None]]) -> str:
    answer = target.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic,
         "configs": [{"name": name, "config_operation": operation, "value": value} for operation, name, value in operations]}],
        "validate_only": False})
    return answer["responses"][0]["error_code"]


@scenario
def incremental_alter_configs(target: Target) -> dict:
    topic = "differential-altered"
    create_topic(target, topic)
    set_answer = _incremental(target, topic, [(SET, "retention.ms", "7200000"), (SET, "cleanup.policy", "compact")])
    after_set = describe_configs(target, TOPIC_RESOURCE, topic, ["retention.ms", "cleanup.policy"])["configs"]
    delete_answer = _incremental(target, topic, [(DELETE, "cleanup.policy", None)])
    after_delete = describe_configs(target, TOPIC_RESOURCE, topic, ["cleanup.policy"])["configs"]
    return {"set": set_answer, "after_set": after_set, "delete": delete_answer, "after_delete": after_delete,
            "invalid_value": _incremental(target, topic, [(SET, "retention.ms", "soon")]),
            "unknown_config": _incremental(target, topic, [(SET, "no.such.config", "1")]),
            "unknown_topic": _incremental(target, "differential-nowhere", [(SET, "retention.ms", "1000")])}


@scenario
def alter_configs(target: Target) -> dict:
    """AlterConfigs replaces a topic's whole set of configs."""
    topic = "differential-replaced"
    create_topic(target, topic, configs={"cleanup.policy": "compact"})
    answer = target.request(ALTER_CONFIGS, 2, {"resources": [
        {"resource_type": TOPIC_RESOURCE, "resource_name": topic, "configs": [{"name": "retention.ms", "value": "7200000"}]}],
        "validate_only": False})
    if answer == CLOSED:
        return {"alter": answer}
    return {"alter": answer["responses"][0]["error_code"],
            "after": describe_configs(target, TOPIC_RESOURCE, topic, ["retention.ms", "cleanup.policy"])["configs"]}
