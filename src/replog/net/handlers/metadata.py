"""Metadata: brokers, topics and partitions, answered from the broker's metadata cache."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC

from ..codec import ApiKey, Request, build_response
from . import handles, log_refusal


def _requested_topics(request: Request) -> list[str] | None:
    """Names asked for, or None for every topic (v0 says "all" with an empty list)."""
    topics = request.body.topics
    if topics is None or (request.api_version == 0 and not topics):
        return None
    return [topic.name for topic in topics]


def partition_entries(services, topic: str) -> list[dict]:
    live = services.metadata.brokers
    entries = []
    for partition, view in sorted(services.metadata.topics.get(topic, {}).items()):
        # A leader presumed gone (it refused its followers) is not named until its successor
        # is: LEADER_NOT_AVAILABLE is retriable, and clients keep asking until then, where a
        # named leader would send them to a dead port until their next periodic refresh. Nor is
        # this broker while its replica is still opening (its log recovers in a worker thread).
        available = (view.leader in live and not services.leader_connections.presumed_gone(view.leader)
                     and services.serving(topic, partition))
        entries.append(
            {
                "error_code": ErrorCode.none if available else ErrorCode.leader_not_available,
                "partition_index": partition,
                "leader_id": view.leader if available else -1,
                "leader_epoch": view.leader_epoch,
                "replica_nodes": view.replicas,
                "isr_nodes": view.isr,
                "offline_replicas": tuple(replica for replica in view.replicas if replica not in live),
            }
        )
    return entries


@handles(ApiKey.METADATA)
async def metadata(services, request: Request):
    names = _requested_topics(request)
    allow_auto_create = getattr(request.body, "allow_auto_topic_creation", True)
    topics = []
    for name in sorted(services.metadata.topics) if names is None else names:
        error = ErrorCode.none
        if name is None:
            error = ErrorCode.unknown_topic_id  # asked by topic id alone; replog names topics only
        elif name not in services.metadata.topics:
            error = await services.topic_missing(name, allow_auto_create)
            if error == ErrorCode.invalid_topic_exception:
                log_refusal(request, "metadata for an invalid topic name", name, error)
        topics.append(
            {
                "error_code": error,
                "name": name,
                "topic_id": None,
                "is_internal": name == OFFSETS_TOPIC,
                "partitions": partition_entries(services, name) if error == ErrorCode.none else [],
            }
        )
    brokers = [
        {"node_id": broker_id, "host": registration.host, "port": registration.port, "rack": registration.rack}
        for broker_id, registration in sorted(services.metadata.brokers.items())
    ]
    return build_response(
        request,
        {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": services.cluster_id,
            # The V2 design has no controller: every broker acts on the store itself, so any
            # broker can take the admin requests clients send to "the controller".
            "controller_id": services.broker_id,
            "topics": topics,
        },
    )
