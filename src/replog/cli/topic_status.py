"""A topic's health as `replog topics describe` shows it: each partition's description with the
flags an operator filters on, the topic's config overrides, and the JSON document of both.

The flags are kafka-topics' (TopicCommand's describe filters), computed the same way from
whichever Admin described the topic:

    under-replicated     fewer in-sync replicas than assigned ones
    under-min-isr        fewer in-sync replicas than min.insync.replicas: acks=all writes fail
    offline              no leader, or a leader whose broker is not registered
    unpreferred-leader   led by a replica other than the first assigned (the preferred leader)

JSON (`--output json`), one document, keys in this order, stable across releases:

    {"topics": [{"name": str, "partition_count": int, "replication_factor": int,
                 "configs": {name: value, ...},            (the topic's overrides only)
                 "partitions": [{"partition": int, "leader": int | null, "leader_epoch": int | null,
                                 "replicas": [int], "isr": [int], "offline_replicas": [int],
                                 "adding_replicas": [int] | null, "removing_replicas": [int] | null,
                                 "flags": [str]}]}]}

null where there is no value (no leader) or the Admin cannot tell (KafkaAdmin has no leader
epoch and no reassignment in its Metadata answer).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection, Mapping

from replog.admin.topics import PartitionDescription


class PartitionFlag(enum.StrEnum):
    UNDER_REPLICATED = "under-replicated"
    UNDER_MIN_ISR = "under-min-isr"
    OFFLINE = "offline"
    UNPREFERRED_LEADER = "unpreferred-leader"


def partition_flags(partition: PartitionDescription, min_insync_replicas: int) -> tuple[PartitionFlag, ...]:
    """The flags that hold for `partition`, in PartitionFlag's order."""
    holds = {
        PartitionFlag.UNDER_REPLICATED: len(partition.isr) < len(partition.replicas),
        PartitionFlag.UNDER_MIN_ISR: len(partition.isr) < min_insync_replicas,
        PartitionFlag.OFFLINE: partition.leader is None or partition.leader in partition.offline_replicas,
        PartitionFlag.UNPREFERRED_LEADER: partition.leader is not None and partition.leader != partition.replicas[0],
    }
    return tuple(flag for flag, held in holds.items() if held)


@dataclasses.dataclass(frozen=True)
class TopicStatus:
    name: str
    partitions: tuple[PartitionDescription, ...]  # those shown: all, or the ones a filter kept
    overrides: Mapping[str, str]  # the topic's own settings; the rest are the brokers'
    min_insync_replicas: int  # effective: the override, else the broker's
    partition_count: int  # the topic's, whatever a filter kept
    replication_factor: int

    @classmethod
    def of(cls, name: str, partitions: tuple[PartitionDescription, ...], overrides: Mapping[str, str],
           min_insync_replicas: int) -> TopicStatus:
        replication_factor = len(partitions[0].replicas) if partitions else 0
        return cls(name, partitions, overrides, min_insync_replicas, len(partitions), replication_factor)

    def flags(self, partition: PartitionDescription) -> tuple[PartitionFlag, ...]:
        return partition_flags(partition, self.min_insync_replicas)

    def having_any(self, wanted: Collection[PartitionFlag]) -> TopicStatus | None:
        """Only the partitions with one of the `wanted` flags (all of them if none is wanted);
        None when no partition has one, so that a filtered listing leaves the topic out."""
        if not wanted:
            return self
        kept = tuple(partition for partition in self.partitions if set(self.flags(partition)) & set(wanted))
        return dataclasses.replace(self, partitions=kept) if kept else None

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "partition_count": self.partition_count,
            "replication_factor": self.replication_factor,
            "configs": dict(sorted(self.overrides.items())),
            "partitions": [
                {
                    "partition": partition.partition,
                    "leader": partition.leader,
                    "leader_epoch": partition.leader_epoch,
                    "replicas": list(partition.replicas),
                    "isr": list(partition.isr),
                    "offline_replicas": list(partition.offline_replicas),
                    "adding_replicas": _list_or_none(partition.adding_replicas),
                    "removing_replicas": _list_or_none(partition.removing_replicas),
                    "flags": [str(flag) for flag in self.flags(partition)],
                }
                for partition in self.partitions
            ],
        }


def _list_or_none(replicas: tuple[int, ...] | None) -> list[int] | None:
    return None if replicas is None else list(replicas)
