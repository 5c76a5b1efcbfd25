"""DescribeProducers (KIP-664): the producers a partition leader keeps state for, with the first
offset of each one's open transaction, which is what `replog transactions describe-producers`
shows and `abort --start-offset` looks for (docs/design.md §16.5).

As Kafka's: a topic the client may not Read is answered TOPIC_AUTHORIZATION_FAILED in every
partition asked, one the metadata does not know UNKNOWN_TOPIC_OR_PARTITION, both with Kafka's
message for the error; a partition this broker does not lead NOT_LEADER_OR_FOLLOWER (or
UNKNOWN_TOPIC_OR_PARTITION when no broker has it), so that the client asks its leader.
Answered in slices (loop_slices.py): a request may name many partitions.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.partition import ReplicaState
from replog.security.acls import AclOperation, ResourceType

from ..authorization import denied_names
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import count_error, handles

# Kafka's messages for the errors of a whole topic (its ApiError's default message).
_TOPIC_ERROR_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.unknown_topic_or_partition: "This server does not host this topic-partition.",
}


@handles(ApiKey.DESCRIBE_PRODUCERS)
async def describe_producers(services, request: Request):
    denied = denied_names(services, request, AclOperation.READ, ResourceType.TOPIC,
                          (topic.name for topic in request.body.topics))
    slices = LoopSlices()
    topics = []
    for topic in request.body.topics:
        topic_error = ErrorCode.topic_authorization_failed if topic.name in denied else \
            ErrorCode.unknown_topic_or_partition if topic.name not in services.metadata.topics else None
        answers = []
        for index in topic.partition_indexes:
            await slices.pause()
            if topic_error is None:
                answer = _producers(services, topic.name, index)
            else:
                answer = _refused(index, topic_error) | {"error_message": _TOPIC_ERROR_MESSAGES[topic_error]}
            count_error(services.metrics, request, answer["error_code"])
            answers.append(answer)
        topics.append({"name": topic.name, "partitions": answers})
    return await respond(request, {"throttle_time": 0, "topics": topics}, slices)


def _producers(services, topic: str, index: int) -> dict:
    try:
        partition = services.replicas.get_partition(topic, index)
    except UnknownTopicOrPartitionError:
        return _refused(index, services.unknown_partition_error(topic, index))
    if partition.state is not ReplicaState.LEADER:
        return _refused(index, ErrorCode.not_leader_or_follower)
    return {"partition_index": index, "error_code": ErrorCode.none, "active_producers": [
        {"producer_id": state.producer_id, "producer_epoch": state.producer_epoch, "last_sequence": state.last_sequence,
         "last_timestamp": state.last_timestamp_ms, "coordinator_epoch": state.coordinator_epoch,
         "current_txn_start_offset": state.current_txn_start_offset}
        for state in partition.producer_states()]}


def _refused(index: int, error: ErrorCode) -> dict:
    return {"partition_index": index, "error_code": error, "active_producers": []}
