"""OffsetCommit, OffsetFetch and OffsetDelete: a group's committed offsets, through the group
coordinator (groups/coordinator.py)."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from replog.groups import OffsetCommit

from ..codec import ApiKey, Request, build_response
from . import handles, log_refusal

_NO_THROTTLE = datetime.timedelta(0)
NO_LEADER_EPOCH = -1
FIRST_BATCHED_OFFSET_FETCH_VERSION = 8


@handles(ApiKey.OFFSET_COMMIT)
async def offset_commit(services, request: Request):
    body = request.body
    commits = [OffsetCommit(topic.name, partition.partition_index, partition.committed_offset,
                            getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH), partition.committed_metadata)
               for topic in body.topics for partition in topic.partitions]
    # Kafka's rule: offsets of partitions that do not exist are not kept.
    exists = [_exists(services, commit) for commit in commits]
    known_errors = iter(await services.groups.commit(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None), body.generation_id_or_member_epoch,
        [commit for commit, known in zip(commits, exists) if known]))
    errors = [next(known_errors) if known else ErrorCode.unknown_topic_or_partition for known in exists]
    by_topic: dict[str, list[dict]] = {}
    for commit, error in zip(commits, errors):
        by_topic.setdefault(commit.topic, []).append({"partition_index": commit.partition, "error_code": error})
        if error != ErrorCode.none:
            log_refusal(request, "offset commit", f"{body.group_id}/{commit.topic}-{commit.partition}", error)
    return build_response(request, {"throttle_time": _NO_THROTTLE,
                                    "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]})


def _exists(services, commit: OffsetCommit) -> bool:
    return commit.partition in services.metadata.topics.get(commit.topic, {})


def _fetched(services, request: Request, group_id: str, topics) -> dict:
    """One group's committed offsets: all of them for `topics` None (v2+), else those asked."""
    asked = None if topics is None else [(topic.name, index) for topic in topics for index in topic.partition_indexes]
    error, committed = services.groups.fetch(group_id, asked)
    if error != ErrorCode.none:
        log_refusal(request, "offset fetch", group_id, error)
        # Before v2 there is no group-level error: each partition carries it.
        committed = {key: None for key in asked or ()}
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), value in committed.items():
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": -1 if value is None else value.offset,
            "committed_leader_epoch": NO_LEADER_EPOCH if value is None else value.leader_epoch,
            "metadata": "" if value is None else value.metadata,
            "error_code": error,
        })
    return {"group_id": group_id, "error_code": error,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


@handles(ApiKey.OFFSET_FETCH)
async def offset_fetch(services, request: Request):
    body = request.body
    if request.api_version < FIRST_BATCHED_OFFSET_FETCH_VERSION:
        return build_response(request, {"throttle_time": _NO_THROTTLE} | _fetched(services, request, body.group_id, body.topics))
    # v9's member id and epoch belong to KIP-848's consumer groups; classic groups ignore them.
    groups = [_fetched(services, request, group.group_id, group.topics) for group in body.groups]
    return build_response(request, {"throttle_time": _NO_THROTTLE, "groups": groups})


@handles(ApiKey.OFFSET_DELETE)
async def offset_delete(services, request: Request):
    body = request.body
    asked = [(topic.name, partition.partition_index) for topic in body.topics for partition in topic.partitions]
    error, errors = await services.groups.delete_offsets(body.group_id, asked)
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), partition_error in zip(asked, errors):
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": partition_error})
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": error,
                                    "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]})



