"""Replica assignment: which brokers hold each partition's replicas. Pure functions, no store.

`assign_replicas` is Kafka's `AdminUtils.assignReplicasToBrokers`:

- Brokers are arranged in a list: by id when no broker has a rack; otherwise alternating racks
  (racks sorted, each rack's brokers by id, one broker per rack in turn), so that neighbours in
  the list sit on different racks.
- Partition p's first replica (its preferred leader) is list[(p + start_index) % n]: leaders go
  round-robin from a random start, so they spread evenly over brokers.
- Follower j of p sits `1 + (shift + j) % (n - 1)` places after the leader. The shift starts
  random and grows by one every n partitions, so that the followers of one broker's leaders are
  not always the same brokers (which would overload them when that broker fails).
- With racks, a candidate follower is skipped while some rack, or some broker, still has no
  replica of the partition; so each partition spans min(rf, #racks) racks.

Either every broker has a rack or none has: a mix is refused (Kafka's RackAwareMode.Enforced,
which CreateTopics uses), since a rack-aware placement cannot place brokers of unknown rack.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from .errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor

# A topic's partitions are committed in one store transaction and each runs its own tasks on
# every replica broker; the bound also keeps a CreateTopics asking for 2**31 partitions from
# planning (and allocating) them all before anything else could refuse it.
PARTITIONS_MAX = 10_000

BrokerRack = tuple[int, str | None]


def assign_replicas(
    brokers: Sequence[BrokerRack],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int | None = None,
    next_replica_shift: int | None = None,
    first_partition_id: int = 0,
) -> dict[int, list[int]]:
    """Replicas of partitions first_partition_id .. first_partition_id + partitions - 1, leader first.

    `start_index` and `next_replica_shift` default to random values (Kafka: a fixed start index
    fixes the shift too); create_partitions passes the existing leader's index so new partitions
    continue the round-robin.
    """
    if partitions < 1:
        raise InvalidPartitions(f"number of partitions must be at least 1, got {partitions}")
    if first_partition_id + partitions > PARTITIONS_MAX:
        raise InvalidPartitions(f"a topic has at most {PARTITIONS_MAX} partitions, asked for {first_partition_id + partitions}")
    if replication_factor < 1:
        raise InvalidReplicationFactor(f"replication factor must be at least 1, got {replication_factor}")
    if not brokers:
        raise InvalidReplicationFactor(
            "no broker is registered under /brokers/ids (are all brokers down?); give an explicit replica assignment"
        )
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"replication factor {replication_factor} is larger than the {len(brokers)} available brokers"
        )
    rack_of = _racks(brokers)
    arranged = _rack_alternated(rack_of)
    broker_count = len(arranged)
    start = random.randrange(broker_count) if start_index is None else start_index
    if next_replica_shift is not None:
        shift = next_replica_shift
    else:
        shift = start if start_index is not None else random.randrange(broker_count)
    assignment: dict[int, list[int]] = {}
    for partition_id in range(first_partition_id, first_partition_id + partitions):
        if partition_id > 0 and partition_id % broker_count == 0:
            shift += 1
        first_index = (partition_id + start) % broker_count
        assignment[partition_id] = _replicas_of(arranged, rack_of, first_index, shift, replication_factor)
    return assignment


def _racks(brokers: Sequence[BrokerRack]) -> dict[int, str | None]:
    rack_of = dict(brokers)
    if len(rack_of) != len(brokers):
        raise InvalidReplicaAssignment(f"broker ids are not unique: {sorted(broker for broker, _ in brokers)}")
    without_rack = sorted(broker for broker, rack in rack_of.items() if rack is None)
    if without_rack and len(without_rack) < len(rack_of):
        raise InvalidReplicaAssignment(
            f"not all brokers have rack information (brokers {without_rack} have none) for rack-aware assignment"
        )
    return rack_of


def _rack_alternated(rack_of: Mapping[int, str | None]) -> list[int]:
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker] or "", []).append(broker)
    queues = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(queue) for queue in queues)
    return [queue[row] for row in range(depth) for queue in queues if row < len(queue)]


def _replicas_of(
    arranged: list[int], rack_of: Mapping[int, str | None], first_index: int, shift: int, replication_factor: int
) -> list[int]:
    broker_count, rack_count = len(arranged), len(set(rack_of.values()))
    shift *= rack_count  # Kafka scales the shift so consecutive followers land on other racks
    leader = arranged[first_index]
    replicas, racks_used = [leader], {rack_of[leader]}
    candidate = 0  # Kafka's k: it keeps counting across followers
    for _ in range(replication_factor - 1):
        # The candidates cycle over all n - 1 other brokers, so n - 1 tries always find one.
        for _ in range(broker_count - 1):
            offset = 1 + (shift + candidate) % (broker_count - 1)
            broker = arranged[(first_index + offset) % broker_count]
            candidate += 1
            rack_ok = rack_of[broker] not in racks_used or len(racks_used) == rack_count
            if rack_ok and broker not in replicas:
                replicas.append(broker)
                racks_used.add(rack_of[broker])
                break
        else:
            raise AssertionError(f"no follower found among {arranged} for replicas {replicas}")
    return replicas


def check_assignment(assignment: Mapping[int, Sequence[int]], first_partition_id: int = 0) -> dict[int, list[int]]:
    """An explicit assignment (CreateTopics/CreatePartitions, `--replica-assignment`), validated.

    Partition ids run from `first_partition_id` without gaps; every partition has the same
    number (>= 1) of distinct, non-negative broker ids. The brokers need not be registered: an
    admin may place replicas on brokers that are down, whose replicas stay offline until they
    register.
    """
    if not assignment:
        raise InvalidReplicaAssignment("the replica assignment names no partition")
    expected_ids = list(range(first_partition_id, first_partition_id + len(assignment)))
    if sorted(assignment) != expected_ids:
        raise InvalidReplicaAssignment(
            f"the replica assignment must name partitions {expected_ids[0]}..{expected_ids[-1]}, got {sorted(assignment)}"
        )
    sizes = {len(replicas) for replicas in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignment("every partition must have the same, non-zero number of replicas")
    for partition_id, replicas in assignment.items():
        if len(set(replicas)) != len(replicas) or min(replicas) < 0:
            raise InvalidReplicaAssignment(
                f"partition {partition_id}: replicas {list(replicas)} must be distinct, non-negative broker ids"
            )
    return {partition_id: list(assignment[partition_id]) for partition_id in expected_ids}
