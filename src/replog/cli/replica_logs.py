"""How far each replica's log has come, asked of the brokers hosting them: DescribeLogDirs for
its size on disk, and ListOffsets with Kafka's debugging replica id for its log end offset
(followers answer that too, from their own logs). `reassign verify` shows how far the replicas
being added are behind their leader; the planner weighs partitions by their size.

Through either Admin: StoreAdmin finds the brokers by their registrations, KafkaAdmin by a
Metadata answer. A broker that is down or does not answer leaves its replicas out: their
progress is unknown, not zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping

from kio.schema.errors import ErrorCode

from replog.net.client import LATEST_TIMESTAMP, READ_UNCOMMITTED, BrokerConnection, BrokerUnavailable
from replog.net.codec import ApiKey

from replog.admin.reassignment import PartitionKey

DEBUGGING_REPLICA_ID = -2  # Kafka's: a tool reading any replica's own log
NO_LEADER_EPOCH = -1

# (broker, topic, partition)
ReplicaKey = tuple[int, str, int]
# The open connection to a broker, or None if it is not registered or cannot be reached.
Connect = Callable[[int], Awaitable[BrokerConnection | None]]


@dataclasses.dataclass(frozen=True)
class ReplicaLog:
    size_bytes: int
    log_end_offset: int | None  # None: not asked, or the broker could not tell


async def replica_logs(connect: Connect, wanted: Mapping[int, Collection[PartitionKey] | None], *,
                       with_end_offsets: bool = True) -> dict[ReplicaKey, ReplicaLog]:
    """The logs of the replicas each broker of `wanted` hosts among its partitions (None: all)."""

    async def ask(broker: int, partitions: Collection[PartitionKey] | None) -> dict[ReplicaKey, ReplicaLog]:
        try:
            connection = await connect(broker)
            if connection is None:
                return {}
            sizes = await _sizes(connection, partitions)
            end_offsets = await _log_end_offsets(connection, sizes) if with_end_offsets and sizes else {}
        except BrokerUnavailable:
            return {}
        return {(broker, *key): ReplicaLog(size, end_offsets.get(key)) for key, size in sizes.items()}

    logs: dict[ReplicaKey, ReplicaLog] = {}
    for answer in await asyncio.gather(*(ask(broker, partitions) for broker, partitions in sorted(wanted.items()))):
        logs.update(answer)
    return logs


def partition_sizes(logs: Mapping[ReplicaKey, ReplicaLog]) -> dict[PartitionKey, int]:
    """Each partition's size: its largest replica's, which is the leader's but while retention
    deletes at different moments on different replicas."""
    sizes: dict[PartitionKey, int] = {}
    for (_, topic, partition), log in logs.items():
        sizes[topic, partition] = max(sizes.get((topic, partition), 0), log.size_bytes)
    return sizes


# A request naming partitions names at most this many, each with its replicas at most: a broker
# refuses a request of more than 50,000 items (net/frame_check.py), so a cluster's worth of them
# goes in several.
PARTITIONS_PER_REQUEST_MAX = 2_000


def in_requests(partitions: Iterable[PartitionKey]) -> list[list[PartitionKey]]:
    """`partitions`, sorted, in runs of at most PARTITIONS_PER_REQUEST_MAX: one request each."""
    ordered = sorted(partitions)
    return [ordered[start:start + PARTITIONS_PER_REQUEST_MAX] for start in range(0, len(ordered), PARTITIONS_PER_REQUEST_MAX)]


def indexes_by_topic(partitions: Collection[PartitionKey]) -> dict[str, list[int]]:
    """The partitions' indexes under their topics, both sorted: the shape of Kafka requests that
    name partitions."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


async def _sizes(connection: BrokerConnection, partitions: Collection[PartitionKey] | None) -> dict[PartitionKey, int]:
    sizes = {}
    for asked in [None] if partitions is None else [
            [{"topic": topic, "partitions": indexes} for topic, indexes in indexes_by_topic(run).items()]
            for run in in_requests(partitions)]:
        answer = await connection.request(ApiKey.DESCRIBE_LOG_DIRS, None, {"topics": asked})
        sizes.update({(topic.name, partition.partition_index): partition.partition_size
                      for result in answer.results if result.error_code == ErrorCode.none
                      for topic in result.topics for partition in topic.partitions})
    return sizes


async def _log_end_offsets(connection: BrokerConnection, partitions: Collection[PartitionKey]) -> dict[PartitionKey, int]:
    end_offsets = {}
    for run in in_requests(partitions):
        answer = await connection.request(ApiKey.LIST_OFFSETS, None, {
            "replica_id": DEBUGGING_REPLICA_ID, "isolation_level": READ_UNCOMMITTED,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": index, "current_leader_epoch": NO_LEADER_EPOCH, "timestamp": LATEST_TIMESTAMP}
                for index in indexes]} for topic, indexes in indexes_by_topic(run).items()]})
        end_offsets.update({(topic.name, partition.partition_index): partition.offset
                            for topic in answer.topics for partition in topic.partitions
                            if partition.error_code == ErrorCode.none})
    return end_offsets
