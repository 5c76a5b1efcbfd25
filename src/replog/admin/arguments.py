"""The text forms operators type for admin commands, parsed: `key=value` settings,
kafka-topics' `--replica-assignment` and kafka-reassign-partitions' `--broker-list`. A ValueError
says what is wrong with the text; whether the values make sense (known settings, distinct
brokers) is the admin commands' to check."""

from __future__ import annotations

from collections.abc import Iterable


def key_values(assignments: Iterable[str]) -> dict[str, str]:
    """`key=value` texts as a dict; the value may be empty (Kafka's way to set an empty list)."""
    parsed: dict[str, str] = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"takes key=value, got {assignment!r}")
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


def broker_list(text: str) -> list[int]:
    """kafka-reassign-partitions' `--broker-list 0,1,2`: distinct broker ids."""
    brokers = []
    for item in text.split(","):
        if not item.strip().isdigit():
            raise ValueError(f"{text!r} is not broker ids separated by ',' (as in 0,1,2)")
        if int(item) in brokers:
            raise ValueError(f"broker {int(item)} is listed twice")
        brokers.append(int(item))
    return brokers
