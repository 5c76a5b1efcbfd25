"""OffsetCommit, OffsetFetch and OffsetDelete: a group's committed offsets, through the group
coordinator (groups/coordinator.py); answered in slices (loop_slices.py), as a request may name
50,000 partitions. OffsetFetch with require_stable (v7+, KIP-447) answers a partition with an
offset committed in a transaction not ended yet UNSTABLE_OFFSET_COMMIT, which the consumer
retries, rather than the offset before it (docs/design.md §16.6). TxnOffsetCommit
(txn_offsets.py) reads and answers its commits as OffsetCommit does.

Each checks the group, then each topic, before acting, as Kafka's (net/authorization.py):
OffsetCommit needs Read on both, OffsetFetch Describe on both (a topic the client may not
Describe is left out of "every committed offset"), OffsetDelete Delete on the group and Read on
the topic; GROUP_AUTHORIZATION_FAILED or TOPIC_AUTHORIZATION_FAILED otherwise."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from replog.groups import OffsetCommit
from replog.security.acls import AclOperation, ResourceType

from .. import codec
from ..authorization import authorized, denied_names
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal

_NO_THROTTLE = datetime.timedelta(0)
NO_LEADER_EPOCH = -1
FIRST_BATCHED_OFFSET_FETCH_VERSION = 8
# Answers not worth a line in the refusal log (net/authorization.py audits denials).
_AUTHORIZATION_ERRORS = frozenset({ErrorCode.none, ErrorCode.group_authorization_failed, ErrorCode.topic_authorization_failed,
                                   ErrorCode.transactional_id_authorization_failed})


@handles(ApiKey.OFFSET_COMMIT)
async def offset_commit(services, request: Request):
    body = request.body
    slices = LoopSlices()
    group_denied = not authorized(services, request, AclOperation.READ, ResourceType.GROUP, body.group_id)
    commits, refusals = await requested_commits(services, request,
                                                ErrorCode.group_authorization_failed if group_denied else ErrorCode.none,
                                                slices)
    known_errors = iter(() if group_denied else await services.groups.commit(
        body.group_id, body.member_id, getattr(body, "group_instance_id", None), body.generation_id_or_member_epoch,
        [commit for commit, refusal in zip(commits, refusals) if not refusal]))
    errors = [refusal or next(known_errors) for refusal in refusals]
    return await commit_answer(request, "offset commit", commits, errors, slices)


async def requested_commits(services, request: Request, refusal: int,
                            slices: LoopSlices) -> tuple[list[OffsetCommit], list[int]]:
    """The commits an OffsetCommit or TxnOffsetCommit names, each with the error it is answered
    without asking the coordinator, or 0: `refusal` for every one if set (the request's), else
    its topic's (Read on it, the partition's existence)."""
    body = request.body
    denied = frozenset() if refusal else denied_names(services, request, AclOperation.READ, ResourceType.TOPIC,
                                                      (topic.name for topic in body.topics))
    commits, refusals = [], []
    for topic in body.topics:
        for partition in topic.partitions:
            await slices.pause()
            commit = OffsetCommit(topic.name, partition.partition_index, partition.committed_offset,
                                  getattr(partition, "committed_leader_epoch", NO_LEADER_EPOCH), partition.committed_metadata)
            commits.append(commit)
            refusals.append(refusal or _partition_refusal(services, commit, denied))
    return commits, refusals


def _partition_refusal(services, commit: OffsetCommit, denied_topics: frozenset[str]) -> int:
    if commit.topic in denied_topics:
        return ErrorCode.topic_authorization_failed
    if commit.partition not in services.metadata.topics.get(commit.topic, {}):
        return ErrorCode.unknown_topic_or_partition  # Kafka's rule: offsets of partitions that do not exist are not kept
    return ErrorCode.none


async def commit_answer(request: Request, what: str, commits: list[OffsetCommit], errors: list[int],
                        slices: LoopSlices) -> codec.EncodedBody:
    """The answer of an OffsetCommit or TxnOffsetCommit: an error per commit."""
    by_topic: dict[str, list[dict]] = {}
    for commit, error in zip(commits, errors):
        await slices.pause()
        by_topic.setdefault(commit.topic, []).append({"partition_index": commit.partition, "error_code": error})
        if error not in _AUTHORIZATION_ERRORS:
            log_refusal(request, what, f"{request.body.group_id}/{commit.topic}-{commit.partition}", error)
    return await respond(request, {"throttle_time": _NO_THROTTLE,
                                   "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]},
                         slices)


async def _fetched(services, request: Request, group_id: str, topics, slices: LoopSlices) -> dict:
    """One group's committed offsets: all of them for `topics` None (v2+), else those asked."""
    require_stable = getattr(request.body, "require_stable", False)
    asked = None
    if topics is not None:
        asked = []
        for topic in topics:
            await slices.pause()
            asked += [(topic.name, index) for index in topic.partition_indexes]
    denied = frozenset()
    if not authorized(services, request, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        error, committed = ErrorCode.group_authorization_failed, {}
    else:
        if asked is not None:
            denied = denied_names(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC, (name for name, _ in asked))
        error, committed = services.groups.fetch(group_id, asked if not denied else [key for key in asked if key[0] not in denied])
        if error != ErrorCode.none:
            log_refusal(request, "offset fetch", group_id, error)
    if error != ErrorCode.none:
        # Before v2 there is no group-level error: each partition carries it.
        committed = {key: None for key in asked or ()}
    elif asked is None and services.authorizer is not None:  # every committed offset: of the topics it may Describe
        may_describe = {name for name, _ in committed
                        if authorized(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC, name, audit=False)}
        committed = {key: value for key, value in committed.items() if key[0] in may_describe}
    unstable = services.groups.unstable_offsets(group_id) if require_stable and error == ErrorCode.none else set()
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), value in committed.items():
        await slices.pause()
        if (topic, partition) in unstable:
            value, partition_error = None, ErrorCode.unstable_offset_commit
        else:
            partition_error = error
        by_topic.setdefault(topic, []).append({
            "partition_index": partition,
            "committed_offset": -1 if value is None else value.offset,
            "committed_leader_epoch": NO_LEADER_EPOCH if value is None else value.leader_epoch,
            "metadata": "" if value is None else value.metadata,
            "error_code": partition_error,
        })
    # A group error alone is the answer, as Kafka's; else the partitions of topics it may not
    # Describe are answered as such.
    refused = [key for key in asked or () if key[0] in denied] if error == ErrorCode.none else []
    for topic, partition in refused:
        await slices.pause()
        by_topic.setdefault(topic, []).append({
            "partition_index": partition, "committed_offset": -1, "committed_leader_epoch": NO_LEADER_EPOCH,
            "metadata": "", "error_code": ErrorCode.topic_authorization_failed})
    return {"group_id": group_id, "error_code": error,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


@handles(ApiKey.OFFSET_FETCH)
async def offset_fetch(services, request: Request):
    body = request.body
    slices = LoopSlices()
    if request.api_version < FIRST_BATCHED_OFFSET_FETCH_VERSION:
        fetched = await _fetched(services, request, body.group_id, body.topics, slices)
        return await respond(request, {"throttle_time": _NO_THROTTLE} | fetched, slices)
    # v9's member id and epoch belong to KIP-848's consumer groups; classic groups ignore them.
    # A group named twice is answered INVALID_REQUEST the second time, so that one request's
    # answer holds each group's offsets once (null topics: every one the group committed).
    seen: set[str] = set()
    groups = []
    for group in body.groups:
        if group.group_id in seen:
            log_refusal(request, "group named twice", group.group_id, ErrorCode.invalid_request)
            groups.append({"group_id": group.group_id, "error_code": ErrorCode.invalid_request, "topics": []})
            continue
        seen.add(group.group_id)
        groups.append(await _fetched(services, request, group.group_id, group.topics, slices))
    return await respond(request, {"throttle_time": _NO_THROTTLE, "groups": groups}, slices)


@handles(ApiKey.OFFSET_DELETE)
async def offset_delete(services, request: Request):
    body = request.body
    if not authorized(services, request, AclOperation.DELETE, ResourceType.GROUP, body.group_id):
        return await respond(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.group_authorization_failed,
                                       "topics": []})
    denied = denied_names(services, request, AclOperation.READ, ResourceType.TOPIC, (topic.name for topic in body.topics))
    slices = LoopSlices()
    asked = []
    for topic in body.topics:
        await slices.pause()
        asked += [(topic.name, partition.partition_index) for partition in topic.partitions]
    error, known_errors = await services.groups.delete_offsets(body.group_id, [key for key in asked if key[0] not in denied])
    known = iter(known_errors)
    # A group error alone answers no partition, as the coordinator answers none.
    errors = [ErrorCode.topic_authorization_failed if topic in denied else next(known) for topic, _ in asked] \
        if error == ErrorCode.none else []
    by_topic: dict[str, list[dict]] = {}
    for (topic, partition), partition_error in zip(asked, errors):
        await slices.pause()
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": partition_error})
    return await respond(request, {"throttle_time": _NO_THROTTLE, "error_code": error,
                                   "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]},
                         slices)



