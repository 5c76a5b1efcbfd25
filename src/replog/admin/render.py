"""How admin commands show their results: tables drawn by rich, which fit the terminal (80
columns when the output is not a terminal), or one JSON document (`--output json`, formats
documented beside the data: topic_status.py)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

from .topic_status import TopicStatus

UNKNOWN = "-"  # a value the door asked cannot tell


def console() -> Console:
    # No highlighting: numbers in ids and epochs are data, not syntax.
    return Console(highlight=False)


def print_json(document: object) -> None:
    # Not through rich, which would wrap long lines at the terminal's width.
    print(json.dumps(document, indent=2))


def _ids(replicas: Iterable[int] | None) -> str:
    return UNKNOWN if replicas is None else ",".join(map(str, replicas))


def _value(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def print_topics(statuses: Sequence[TopicStatus]) -> None:
    """kafka-topics --describe's content: a line per topic, a table row per partition."""
    out = console()
    for index, status in enumerate(statuses):
        if index:
            out.print()
        configs = ",".join(f"{name}={value}" for name, value in sorted(status.overrides.items())) or "none"
        out.print(f"[bold]{status.name}[/bold]  partitions: {status.partition_count}  "
                  f"replication factor: {status.replication_factor}  configs: {configs}")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for header in ("PART", "LEADER", "EPOCH", "REPLICAS", "ISR", "ADDING", "REMOVING"):
            table.add_column(header, no_wrap=header in ("PART", "LEADER", "EPOCH"))
        table.add_column("FLAGS", overflow="fold")
        for partition in status.partitions:
            table.add_row(
                str(partition.partition), _value(partition.leader), _value(partition.leader_epoch),
                _ids(partition.replicas), _ids(partition.isr), _ids(partition.adding_replicas),
                _ids(partition.removing_replicas), " ".join(status.flags(partition)),
            )
        out.print(table)
