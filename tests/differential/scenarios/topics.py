"""Topic lifecycle through the admin APIs: what CreateTopics refuses, what a deleted topic
answers, partitions added, and the Metadata a topic is described by."""

from __future__ import annotations

import uuid

from confluent_kafka.admin import NewPartitions

from replog.net.codec import ApiKey
from tests.support.polling import wait_until
from tests.support.batches import build_batch

from ..protocol import create_topic, create_topic_error, list_offset, produce
from ..targets import TOPIC_READY_TIMEOUT_S, Target
from .registry import scenario

BROKER = "<broker>"
TOPIC_ID = "<topic id>"
NO_TOPIC_ID = uuid.UUID(int=0)
LATEST = -1


@scenario
def create_topic_refusals(target: Target) -> dict:
    """The error code of each CreateTopics a single broker must refuse, and of one it accepts."""
    create_topic(target, "differential-exists")
    return {
        "accepted": create_topic_error(target, "differential-accepted"),
        "already_exists": create_topic_error(target, "differential-exists"),
        "zero_partitions": create_topic_error(target, "differential-zero", partitions=0),
        "replication_factor_over_brokers": create_topic_error(target, "differential-rf3", replication_factor=3),
        "zero_replication_factor": create_topic_error(target, "differential-rf0", replication_factor=0),
        "invalid_name": create_topic_error(target, "bad/name"),
        "name_too_long": create_topic_error(target, "x" * 250),
        "invalid_config_value": create_topic_error(target, "differential-bad-value", configs={"cleanup.policy": "bogus"}),
        "unknown_config": create_topic_error(target, "differential-unknown-config", configs={"no.such.config": "1"}),
        "number_config_not_a_number": create_topic_error(target, "differential-nan", configs={"retention.ms": "soon"}),
        "validate_only": create_topic_error(target, "differential-validate-only", validate_only=True),
    }


@scenario
def topic_configs_kafka_accepts(target: Target) -> dict:
    configs = {"compression.type": "zstd", "file.delete.delay.ms": "60000", "max.compaction.lag.ms": "86400000"}
    return {name: create_topic_error(target, f"differential-accepts-{name}", configs={name: value}) for name, value in configs.items()}


def _deleted(target: Target, name: str) -> None:
    admin = target.admin()
    admin.delete_topics([name])[name].result(timeout=TOPIC_READY_TIMEOUT_S)
    wait_until(lambda: target.metadata([name])["topics"][0]["error_code"] == "unknown_topic_or_partition",
               f"{name} gone on {target.name}", TOPIC_READY_TIMEOUT_S)


@scenario
def deleted_topic(target: Target) -> dict:
    name = "differential-deleted"
    create_topic(target, name)
    _deleted(target, name)
    deleted_again = target.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": name, "topic_id": NO_TOPIC_ID}], "timeout": 30_000})
    return {"produce": produce(target, name, 0, build_batch())["error_code"],
            "list_offsets": list_offset(target, name, 0, LATEST)["error_code"],
            "delete_again": deleted_again["responses"][0]["error_code"]}


@scenario
def create_partitions(target: Target) -> dict:
    name = "differential-grown"
    create_topic(target, name)
    admin = target.admin()

    def error(count: int) -> str:
        try:
            admin.create_partitions([NewPartitions(name, count)])[name].result(timeout=TOPIC_READY_TIMEOUT_S)
        except Exception as failure:  # confluent-kafka's KafkaException carries the code
            return failure.args[0].name()
        return "none"

    return {"grow_to_3": error(3), "same_count": error(3), "shrink_to_2": error(2),
            "partitions": len(target.wait_for_leaders(name)["topics"][0]["partitions"])}


def _normalised_metadata(answer: dict) -> dict:
    """Metadata with what is each broker's own (addresses, ids, the cluster id) as placeholders."""
    brokers = {broker["node_id"] for broker in answer["brokers"]}
    as_broker = lambda node: BROKER if node in brokers else node  # noqa: E731
    return {
        "brokers": [{**broker, "node_id": BROKER, "host": "<host>", "port": "<port>"} for broker in answer["brokers"]],
        "cluster_id": "<cluster id>" if answer["cluster_id"] else answer["cluster_id"],
        "controller_id": as_broker(answer["controller_id"]),
        "topics": [{**topic, "topic_id": TOPIC_ID, "partitions": [
            {**partition, "leader_id": as_broker(partition["leader_id"]),
             "replica_nodes": [as_broker(node) for node in partition["replica_nodes"]],
             "isr_nodes": [as_broker(node) for node in partition["isr_nodes"]],
             "offline_replicas": [as_broker(node) for node in partition["offline_replicas"]]}
            for partition in sorted(topic["partitions"], key=lambda partition: partition["partition_index"])]}
            for topic in answer["topics"]],
    }


@scenario
def metadata_shape(target: Target) -> dict:
    create_topic(target, "differential-described", partitions=3)
    return _normalised_metadata(target.wait_for_leaders("differential-described"))


@scenario
def metadata_topic_ids(target: Target) -> dict:
    name = "differential-recreated"
    create_topic(target, name)
    first = target.metadata([name])["topics"][0]["topic_id"]
    _deleted(target, name)
    create_topic(target, name)
    second = target.metadata([name])["topics"][0]["topic_id"]
    return {"non_zero": str(NO_TOPIC_ID) not in (first, second), "changed_on_recreate": first != second}


@scenario
def describe_cluster_shape(target: Target) -> dict:
    answer = target.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 1})
    return {key: answer[key] for key in ("error_code", "endpoint_type", "cluster_authorized_operations")} | {
        "brokers": len(answer["brokers"]), "controller_is_a_broker": answer["controller_id"] in
        {broker["broker_id"] for broker in answer["brokers"]}, "cluster_id_given": bool(answer["cluster_id"])}
