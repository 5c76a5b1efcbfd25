"""Partition reassignment, the admin's part (docs/design.md §10.1): the admin writes a
partition's target replicas to /brokers/partitions_reassigned/[topic]/[partition], and the
partition's leader moves it (replication/reassignment.py), so a move goes on through any
admin's exit and any broker's restart.

    alter_partition_reassignments  a target per partition, or None to cancel: the partition
                                   goes back to the replicas it had when its move began
    list_partition_reassignments   the moves in flight: replicas now, adding, removing

Kafka's AlterPartitionReassignments and ListPartitionReassignments answer from these, and so
does `replog reassign`. Each partition's node is written by compare-and-set under the topic's
change marker, so two admins, or an admin and a partition being added, never interleave.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

from replog.coord_backends import BadVersion, NodeExists, NoNode, Store, children_or_empty
from replog.coord_backends import paths
from replog.coord_backends.paths import PartitionReassignment

from .errors import (
    AdminError,
    InvalidReplicaAssignment,
    NoReassignmentInProgress,
    ReassignmentInProgress,
    UnknownTopicOrPartition,
)
from .topics import StateChangeLimits, _changing_topic, _partition_ids, read_replicas

PartitionKey = tuple[str, int]


@dataclasses.dataclass(frozen=True)
class ReassignmentStatus:
    topic: str
    partition: int
    replicas: tuple[int, ...]  # assigned now: during a move, the target and then those leaving
    adding: tuple[int, ...]
    removing: tuple[int, ...]


async def alter_partition_reassignments(
    store: Store, targets: Mapping[PartitionKey, Sequence[int] | None], *, throttle_bytes_per_s: int | None = None,
    limits: StateChangeLimits = StateChangeLimits(),
) -> dict[PartitionKey, AdminError | None]:
    """Start, change or cancel (None) the move of each partition; per partition, None or the
    error that refused it (the others go ahead, as in Kafka). `throttle_bytes_per_s` bounds
    what each moving partition's leader sends the replicas it adds (all its throttled
    partitions together, replica/throttle.py); None keeps a move's throttle as it was."""
    if throttle_bytes_per_s is not None and throttle_bytes_per_s < 1:
        raise InvalidReplicaAssignment(f"the throttle must be a positive number of bytes per second, not {throttle_bytes_per_s}")
    known = await cluster_brokers(store)
    outcomes: dict[PartitionKey, AdminError | None] = {}
    for topic in sorted({topic for topic, _ in targets}):  # bounded by the request
        asked = {partition: target for (name, partition), target in targets.items() if name == topic}

        async def alter_topic() -> dict[PartitionKey, AdminError | None]:
            return {(topic, partition): await _refusal(store, topic, partition, target, known, throttle_bytes_per_s)
                    for partition, target in sorted(asked.items())}

        try:
            outcomes |= await _changing_topic(store, topic, "reassign", limits, alter_topic)
        except AdminError as error:
            outcomes |= {(topic, partition): error for partition in asked}
    return outcomes


async def cluster_brokers(store: Store) -> set[int]:
    """The brokers of the cluster, running or not: those registered, and those with a state-change
    queue (made at a broker's first start, deleted when it is removed: docs/design.md §12)."""
    return {int(child) for path in (paths.STATE_QUEUES, paths.BROKER_IDS)
            for child in await children_or_empty(store, path) if child.isdigit()}


async def _refusal(store: Store, topic: str, partition: int, target: Sequence[int] | None,
                   known: set[int], throttle_bytes_per_s: int | None) -> AdminError | None:
    try:
        await _alter_one(store, topic, partition, target, known, throttle_bytes_per_s)
    except AdminError as error:
        return error
    return None


async def _alter_one(store: Store, topic: str, partition: int, target: Sequence[int] | None, known: set[int],
                     throttle_bytes_per_s: int | None) -> None:
    subject = f"{topic}-{partition}"
    if partition not in await _partition_ids(store, topic):
        raise UnknownTopicOrPartition(f"partition {subject} does not exist")
    assigned = await read_replicas(store, paths.replicas(topic, partition))
    path = paths.reassigned_partition(topic, partition)
    current = await _reassignment(store, topic, partition)
    if current is not None and current[0].closing is not None:
        raise ReassignmentInProgress(f"{subject}: its move to {list(current[0].replicas)} is completing; try again")
    if target is None:
        if current is None:
            raise NoReassignmentInProgress(f"{subject}: no reassignment in progress to cancel")
        await store.set(path, dataclasses.replace(current[0], replicas=current[0].original).encode(), current[1])
        return
    target = _checked_target(subject, target, known)
    if current is None:
        try:
            await store.create(path, PartitionReassignment(target, tuple(assigned), throttle_bytes_per_s=throttle_bytes_per_s).encode(),
                               make_parents=True)
        except NodeExists:
            raise ReassignmentInProgress(f"{subject}: another reassignment started meanwhile; try again") from None
        return
    throttle_bytes_per_s = current[0].throttle_bytes_per_s if throttle_bytes_per_s is None else throttle_bytes_per_s
    try:
        await store.set(path, dataclasses.replace(current[0], replicas=target, throttle_bytes_per_s=throttle_bytes_per_s).encode(),
                        current[1])
    except BadVersion:
        raise ReassignmentInProgress(f"{subject}: its reassignment changed meanwhile; try again") from None


def _checked_target(subject: str, target: Sequence[int], known: set[int]) -> tuple[int, ...]:
    target = tuple(target)
    if not target:
        raise InvalidReplicaAssignment(f"{subject}: the target replicas are empty")
    if len(set(target)) != len(target) or any(broker < 0 for broker in target):
        raise InvalidReplicaAssignment(f"{subject}: target replicas {list(target)} must be distinct broker ids")
    unknown = sorted(set(target) - known)
    if unknown:
        raise InvalidReplicaAssignment(f"{subject}: brokers {unknown} of target {list(target)} are not in the cluster")
    return target


async def _reassignment(store: Store, topic: str, partition: int) -> tuple[PartitionReassignment, int] | None:
    """The move in flight, with its node's version; None if none (a partition being staged by
    a create is not a move)."""
    try:
        data, version = await store.get(paths.reassigned_partition(topic, partition))
    except NoNode:
        return None
    reassignment = PartitionReassignment.decode(data)
    return None if reassignment.original is None else (reassignment, version)


async def list_partition_reassignments(store: Store, partitions: Iterable[PartitionKey] | None = None) -> list[ReassignmentStatus]:
    """The moves in flight, of the given partitions or of all."""
    if partitions is None:
        partitions = [(topic, int(child)) for topic in await children_or_empty(store, paths.PARTITIONS_REASSIGNED)
                      for child in await children_or_empty(store, paths.reassigned_topic(topic))]
    statuses = []
    for topic, partition in sorted(partitions):  # bounded by the partitions
        current = await _reassignment(store, topic, partition)
        assigned = await read_replicas(store, paths.replicas(topic, partition))
        if current is None or assigned is None:
            continue
        target = current[0].replicas
        statuses.append(ReassignmentStatus(
            topic, partition, assigned,
            adding=tuple(broker for broker in target if broker not in current[0].original),
            removing=tuple(broker for broker in assigned if broker not in target)))
    return statuses
