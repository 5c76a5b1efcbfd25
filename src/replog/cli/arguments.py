"""The text forms operators type for commands, parsed: `key=value` settings and headers,
kafka-topics' `--replica-assignment` and broker-id lists (kafka-reassign-partitions'
`--broker-list`, `replog cluster add-brokers IDS`). A ValueError says what is wrong with the
text; whether the values make sense (known settings, registered brokers) is the commands' to
check."""

from __future__ import annotations

from collections.abc import Iterable


def key_value_pairs(assignments: Iterable[str]) -> list[tuple[str, str]]:
    """`key=value` texts as (key, value) pairs, in the order given: split at the first '=', the
    key stripped and not empty, the value as given (it may be empty, Kafka's way to set an empty
    list). A key may repeat, as a record's headers may."""
    pairs = []
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"takes key=value, got {assignment!r}")
        pairs.append((name.strip(), value))
    return pairs


def key_values(assignments: Iterable[str]) -> dict[str, str]:
    """`key=value` settings as a dict: key_value_pairs, where a setting given twice is refused
    rather than one of its values silently dropped."""
    parsed: dict[str, str] = {}
    for name, value in key_value_pairs(assignments):
        if name in parsed:
            raise ValueError(f"{name} is given twice")
        parsed[name] = value
    return parsed


def replica_assignment(text: str) -> dict[int, list[int]]:
    """kafka-topics' form: partitions separated by ',', each a ':'-separated list of broker ids,
    preferred leader first. '0:1:2,1:2:0' is partition 0 on brokers 0, 1, 2 and partition 1 on
    1, 2, 0."""
    assignment = {}
    for partition_id, replicas in enumerate(text.split(",")):
        try:
            assignment[partition_id] = [int(broker) for broker in replicas.split(":")]
        except ValueError:
            raise ValueError(
                f"partition {partition_id}: {replicas.strip()!r} is not broker ids separated by ':' (as in 0:1:2,1:2:0)"
            ) from None
    return assignment


def broker_ids(texts: Iterable[str]) -> list[int]:
    """Broker ids separated by ',' in one text or several (`--broker-list 0,1,2`, `4 5,6`), in
    the order given; a broker listed twice is refused, as kafka-reassign-partitions refuses it."""
    brokers: list[int] = []
    for text in texts:
        for item in text.split(","):
            if not item.strip().isdigit():
                raise ValueError(f"{text!r} is not broker ids separated by ',' (as in 0,1,2)")
            if int(item) in brokers:
                raise ValueError(f"broker {int(item)} is listed twice")
            brokers.append(int(item))
    return brokers
