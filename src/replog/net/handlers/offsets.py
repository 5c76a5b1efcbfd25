"""ListOffsets (earliest, latest, by timestamp) and OffsetForLeaderEpoch (KIP-101), answered in
slices (loop_slices.py): a request may name 200,000 partitions.

ListOffsets v2+ carries the consumer's isolation level: read_committed's latest offset is the
last stable offset, and no offset by timestamp is found at or past it, as Kafka's
(docs/design.md §16.5).

Both need Describe on each topic asked (TOPIC_AUTHORIZATION_FAILED for its partitions), or for
OffsetForLeaderEpoch ClusterAction on the cluster, as Kafka's (net/authorization.py).
OffsetForLeaderEpoch naming a replica id (v3+) is a follower's, and only brokers may ask as one
(authorization.authorized_as_broker): from any other principal each partition is answered
TOPIC_AUTHORIZATION_FAILED, as Kafka answers a client without the CLUSTER_ACTION right that
may not describe the topic."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.results import READ_UNCOMMITTED
from replog.security.acls import AclOperation, ResourceType

from ..authorization import authorized_as_broker, authorized_on_cluster, denied_names
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import count_error, handles, log_refusal

NO_EPOCH = -1
CONSUMER_REPLICA_ID = -1
# Kafka's replica id for tools reading any replica's own log (ListOffsets answers it from
# followers too, with the log end for "latest"): what `replog reassign verify` asks.
DEBUGGING_REPLICA_ID = -2


def _partition_or_error(services, topic: str, partition_index: int):
    try:
        return services.replicas.get_partition(topic, partition_index), None
    except UnknownTopicOrPartitionError:
        return None, services.unknown_partition_error(topic, partition_index)


@handles(ApiKey.LIST_OFFSETS)
async def list_offsets(services, request: Request):
    any_replica = request.body.replica_id == DEBUGGING_REPLICA_ID
    isolation_level = getattr(request.body, "isolation_level", READ_UNCOMMITTED)  # v2+
    denied = denied_names(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                          (topic.name for topic in request.body.topics))
    slices = LoopSlices()
    topics = []
    for topic in request.body.topics:
        answers = []
        for asked in topic.partitions:
            await slices.pause()
            partition, error = (None, ErrorCode.topic_authorization_failed) if topic.name in denied else \
                _partition_or_error(services, topic.name, asked.partition_index)
            if partition is None:
                answers.append({"partition_index": asked.partition_index, "error_code": error, "timestamp": -1, "offset": -1, "leader_epoch": -1})
                continue
            found = partition.list_offsets(asked.timestamp, getattr(asked, "current_leader_epoch", NO_EPOCH),
                                           any_replica=any_replica, isolation_level=isolation_level)
            answers.append(
                {
                    "partition_index": asked.partition_index,
                    "error_code": found.error_code,
                    "timestamp": found.timestamp,
                    "offset": found.offset,
                    "leader_epoch": found.leader_epoch,
                }
            )
        topics.append({"name": topic.name, "partitions": answers})
    return await respond(request, {"throttle_time": 0, "topics": topics}, slices)


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH)
async def offset_for_leader_epoch(services, request: Request):
    replica_id = getattr(request.body, "replica_id", CONSUMER_REPLICA_ID)
    refused = replica_id >= 0 and not authorized_as_broker(services, request)
    if refused:
        log_refusal(request, "epoch end offsets asked as a replica by a principal that may not act as a broker",
                    f"replica {replica_id} principal {request.principal}", ErrorCode.topic_authorization_failed)
    denied = frozenset()
    if not refused and replica_id < 0 and not authorized_on_cluster(services, request, AclOperation.CLUSTER_ACTION,
                                                                    audit=False):
        denied = denied_names(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              (topic.topic for topic in request.body.topics))
    slices = LoopSlices()
    topics = []
    for topic in request.body.topics:
        answers = []
        for asked in topic.partitions:
            await slices.pause()
            if refused or topic.topic in denied:
                count_error(services.metrics, request, ErrorCode.topic_authorization_failed)
                answers.append({"error_code": ErrorCode.topic_authorization_failed, "partition": asked.partition,
                                "leader_epoch": -1, "end_offset": -1})
                continue
            partition, error = _partition_or_error(services, topic.topic, asked.partition)
            if partition is None:
                answers.append({"error_code": error, "partition": asked.partition, "leader_epoch": -1, "end_offset": -1})
                continue
            found = partition.end_offset_for_epoch(asked.leader_epoch, asked.current_leader_epoch)
            answers.append(
                {"error_code": found.error_code, "partition": asked.partition, "leader_epoch": found.leader_epoch, "end_offset": found.end_offset}
            )
        topics.append({"topic": topic.topic, "partitions": answers})
    return await respond(request, {"throttle_time": 0, "topics": topics}, slices)
