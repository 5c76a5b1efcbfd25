"""The raw requests the scenarios send, at fixed versions that both brokers speak, so that a
difference in an answer is never one of negotiation: each returns the part of the answer a
scenario compares, as plain data."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from replog.net.codec import ApiKey
from replog.storage.batch_format import ATTRIBUTES_POSITION, HEADER
from tests.support.polling import wait_until

from .targets import CLOSED, TOPIC_READY_TIMEOUT_S, Target

PRODUCE_VERSION = 9
FETCH_VERSION = 12
LIST_OFFSETS_VERSION = 8
CREATE_TOPICS_VERSION = 7
DESCRIBE_CONFIGS_VERSION = 4
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
TIMEOUT_MS = 30_000
_BATCH_LENGTH = struct.Struct(">qi")
CONFIG_SOURCES = ["UNKNOWN", "DYNAMIC_TOPIC_CONFIG", "DYNAMIC_BROKER_CONFIG", "DYNAMIC_DEFAULT_BROKER_CONFIG",
                  "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG", "DYNAMIC_BROKER_LOGGER_CONFIG", "CLIENT_METRICS_CONFIG", "GROUP_CONFIG"]
# Errors a client retries: the coordinator (and the internal topic behind it) is still starting.
COORDINATOR_STARTING = {"coordinator_load_in_progress", "coordinator_not_available", "not_coordinator"}
GROUP_KEY = 0
TRANSACTION_KEY = 1


def produce(target: Target, topic: str, partition: int, batch: bytes, *, acks: int = -1) -> dict | str:
    """The partition's answer to a Produce of `batch` (error_code, base_offset, record_errors...)."""
    answer = target.request(ApiKey.PRODUCE, PRODUCE_VERSION, {"transactional_id": None, "acks": acks, "timeout": TIMEOUT_MS, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": bytes(batch)}]}]})
    if answer == CLOSED:
        return answer
    (topic_answer,) = answer["responses"]
    (partition_answer,) = topic_answer["partition_responses"]
    return partition_answer


def fetch(target: Target, partitions: dict[tuple[str, int], int], *, max_bytes: int = 50 << 20,
          partition_max_bytes: int = 1 << 20) -> dict[tuple[str, int], dict]:
    """Each partition's answer to a consumer's Fetch from the given offsets, at once."""
    topics: dict[str, list[dict]] = {}
    for (topic, partition), offset in partitions.items():
        topics.setdefault(topic, []).append({"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                                             "last_fetched_epoch": -1, "log_start_offset": -1,
                                             "partition_max_bytes": partition_max_bytes})
    answer = target.request(ApiKey.FETCH, FETCH_VERSION, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0, "session_id": 0,
        "session_epoch": -1, "topics": [{"topic": topic, "partitions": asked} for topic, asked in topics.items()],
        "forgotten_topics_data": [], "rack_id": ""})
    return {(topic["topic"], partition["partition_index"]): partition
            for topic in answer["responses"] for partition in topic["partitions"]}


def batch_attributes(records: bytes) -> list[int]:
    """The attributes of each batch in a Fetch answer's records."""
    attributes, position = [], 0
    while position + HEADER.size <= len(records):
        _, length = _BATCH_LENGTH.unpack_from(records, position)
        attributes.append(struct.unpack_from(">h", records, position + ATTRIBUTES_POSITION)[0])
        position += _BATCH_LENGTH.size + length
    return attributes


def list_offset(target: Target, topic: str, partition: int, timestamp: int) -> dict:
    answer = target.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {"replica_id": -1, "isolation_level": 0, "topics": [
        {"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]})
    (topic_answer,) = answer["topics"]
    (partition_answer,) = topic_answer["partitions"]
    return {key: partition_answer[key] for key in ("error_code", "offset", "timestamp")}


def create_topic(target: Target, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
    """Create `name` and wait until every partition has a leader."""
    error = create_topic_error(target, name, partitions=partitions, configs=configs)
    assert error == "none", f"{target.name} refused to create {name}: {error}"
    target.wait_for_leaders(name)


def create_topic_error(target: Target, name: str, *, partitions: int = 1, replication_factor: int = 1,
                       configs: dict[str, str] | None = None, validate_only: bool = False) -> str:
    """The error code CreateTopics answers for one topic."""
    answer = target.request(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION, {"topics": [
        {"name": name, "num_partitions": partitions, "replication_factor": replication_factor, "assignments": [],
         "configs": [{"name": key, "value": value} for key, value in (configs or {}).items()]}],
        "timeout": TIMEOUT_MS, "validate_only": validate_only})
    (topic,) = answer["topics"]
    return topic["error_code"]


def describe_configs(target: Target, resource_type: int, name: str, keys: list[str] | None = None) -> dict[str, Any]:
    """error_code and name -> {value, source, read_only, sensitive} of one resource."""
    answer = target.request(ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, {
        "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": False, "include_documentation": False})
    (resource,) = answer["results"]
    return {"error_code": resource["error_code"],
            "configs": {config["name"]: {"value": config["value"], "source": CONFIG_SOURCES[config["config_source"]],
                                         "read_only": config["read_only"], "sensitive": config["is_sensitive"]}
                        for config in resource["configs"]}}


def broker_id(target: Target) -> int:
    (broker,) = target.metadata([])["brokers"]
    return broker["node_id"]


def until_served(target: Target, send: Callable[[], dict], what: str) -> dict:
    """`send()`'s answer once it is not that a coordinator is starting: as a client retries."""
    def answered() -> dict | None:
        answer = send()
        return None if answer.get("error_code") in COORDINATOR_STARTING else answer
    return wait_until(answered, f"{what} on {target.name}", TOPIC_READY_TIMEOUT_S)


def coordinated(target: Target, key: str, key_type: int, send: Callable[[], dict]) -> dict:
    """`send()`'s answer once the coordinator of `key` serves it: found first, as a client finds
    it (Kafka creates the coordinator's internal topic then)."""
    until_served(target, lambda: target.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": key_type, "coordinator_keys": [key]})[
        "coordinators"][0], f"the coordinator of {key}")
    return until_served(target, send, f"the coordinator of {key}")
