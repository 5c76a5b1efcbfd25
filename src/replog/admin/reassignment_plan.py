"""Plan files in the JSON formats of Kafka's `kafka-reassign-partitions`. Pure: text in, text out.

Reassignment (what `reassign generate` proposes and `execute`, `verify`, `cancel` read):

    {"version":1,"partitions":[{"topic":"foo","partition":0,"replicas":[1,2,3],"log_dirs":["any","any","any"]}]}

`log_dirs` may be left out on input; replog keeps one log directory per broker, so any entry
other than "any" is refused rather than silently ignored. Topics to move (`generate` reads):

    {"version":1,"topics":[{"topic":"foo"}]}

As in Kafka, a missing `version` means 1 and unknown fields are ignored. Every error is one line
that names the file kind and the offending entry (`partitions[2] (foo-0)`). Output is compact,
one line, sorted by topic then partition, so the same plan always gives the same file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

from .errors import InvalidReplicaAssignment, InvalidTopic

PartitionKey = tuple[str, int]

VERSION = 1
ANY_LOG_DIR = "any"

_REASSIGNMENT = "reassignment JSON"
_TOPICS = "topics-to-move JSON"


def format_reassignment(assignment: Mapping[PartitionKey, Sequence[int]]) -> str:
    partitions = [
        {"topic": topic, "partition": partition, "replicas": list(replicas), "log_dirs": [ANY_LOG_DIR] * len(replicas)}
        for (topic, partition), replicas in sorted(assignment.items())
    ]
    return _compact({"version": VERSION, "partitions": partitions})


def parse_reassignment(text: str) -> dict[PartitionKey, tuple[int, ...]]:
    """The partitions a reassignment file names and the replicas it gives each, preferred first."""
    entries = _entries(text, _REASSIGNMENT, "partitions", InvalidReplicaAssignment)
    assignment: dict[PartitionKey, tuple[int, ...]] = {}
    first_index: dict[PartitionKey, int] = {}
    for index, entry in enumerate(entries):
        where = f"partitions[{index}]"
        key = _partition_key(entry, where)
        where = f"{where} ({key[0]}-{key[1]})"
        if key in first_index:
            _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"the partition is listed twice (first at partitions[{first_index[key]}])")
        first_index[key] = index
        assignment[key] = _replicas(entry, where)
        _check_log_dirs(entry, where, len(assignment[key]))
    return assignment


def format_topics_to_move(topics: Iterable[str]) -> str:
    return _compact({"version": VERSION, "topics": [{"topic": topic} for topic in sorted(set(topics))]})


def parse_topics_to_move(text: str) -> list[str]:
    """The topics a topics-to-move file names, in file order."""
    topics: list[str] = []
    for index, entry in enumerate(_entries(text, _TOPICS, "topics", InvalidTopic)):
        where = f"topics[{index}]"
        topic = _topic(entry, where, _TOPICS, InvalidTopic)
        if topic in topics:
            _refuse(InvalidTopic, _TOPICS, f"{where} ({topic})", f"the topic is listed twice (first at topics[{topics.index(topic)}])")
        topics.append(topic)
    return topics


def _compact(document: Mapping[str, Any]) -> str:
    return json.dumps(document, separators=(",", ":"))


def _refuse(error: type[InvalidReplicaAssignment | InvalidTopic], kind: str, where: str, why: str) -> NoReturn:
    raise error(f"{kind}: {where}: {why}")


def _entries(text: str, kind: str, field: str, error: type[InvalidReplicaAssignment | InvalidTopic]) -> list[dict]:
    """The file's list under `field`, each entry an object, after the version check."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as invalid:
        raise error(f"{kind} is not valid JSON: {invalid}") from None
    if not isinstance(document, dict):
        raise error(f'{kind} must be an object such as {{"version":1,"{field}":[...]}}, got {_shown(document)}')
    version = document.get("version", VERSION)
    if version != VERSION or isinstance(version, bool):
        raise error(f"{kind}: unsupported version {_shown(version)} (only {VERSION} is known)")
    entries = document.get(field)
    if not isinstance(entries, list) or not entries:
        raise error(f'{kind} names no {field}: "{field}" must be a non-empty list, got {_shown(entries)}')
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            _refuse(error, kind, f"{field}[{index}]", f"must be an object, got {_shown(entry)}")
    return entries


def _partition_key(entry: dict, where: str) -> PartitionKey:
    topic = _topic(entry, where, _REASSIGNMENT, InvalidReplicaAssignment)
    partition = entry.get("partition")
    if not _is_id(partition):
        _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"partition must be a non-negative integer, got {_shown(partition)}")
    return topic, partition


def _topic(entry: dict, where: str, kind: str, error: type[InvalidReplicaAssignment | InvalidTopic]) -> str:
    topic = entry.get("topic")
    if not isinstance(topic, str) or not topic:
        _refuse(error, kind, where, f"topic must be a non-empty string, got {_shown(topic)}")
    return topic


def _replicas(entry: dict, where: str) -> tuple[int, ...]:
    replicas = entry.get("replicas")
    if not isinstance(replicas, list) or not replicas:
        _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"replicas must be a non-empty list of broker ids, got {_shown(replicas)}")
    for replica in replicas:
        if not _is_id(replica):
            _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"replica {_shown(replica)} in {_shown(replicas)} is not a non-negative broker id")
    repeated = sorted({replica for replica in replicas if replicas.count(replica) > 1})
    if repeated:
        _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"replicas {replicas} name broker {repeated[0]} twice")
    return tuple(replicas)


def _check_log_dirs(entry: dict, where: str, replica_count: int) -> None:
    if "log_dirs" not in entry:
        return
    log_dirs = entry["log_dirs"]
    if not isinstance(log_dirs, list) or len(log_dirs) != replica_count:
        _refuse(InvalidReplicaAssignment, _REASSIGNMENT, where, f"log_dirs {_shown(log_dirs)} must list one entry per replica ({replica_count})")
    moved = [log_dir for log_dir in log_dirs if log_dir != ANY_LOG_DIR]
    if moved:
        _refuse(
            InvalidReplicaAssignment, _REASSIGNMENT, where,
            f'log_dirs {_shown(moved[0])} is not supported: replog keeps one log directory per broker; use "any"',
        )


def _is_id(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _shown(value: object) -> str:
    return json.dumps(value)
