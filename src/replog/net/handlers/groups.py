"""The group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups,
DescribeGroups, DeleteGroups. Thin: they translate requests for the group coordinator
(groups/coordinator.py), which holds every rule.

FindCoordinator creates __consumer_offsets (for a group) or __transaction_state (for a
transactional id, key type 1) on first use, in the background: the answer is
COORDINATOR_NOT_AVAILABLE, which clients retry. It names the leader of the key's partition.

Each checks its group before acting, as Kafka's (net/authorization.py): Describe for
FindCoordinator and DescribeGroups, Read to join, sync, heartbeat or leave, Delete to delete,
GROUP_AUTHORIZATION_FAILED otherwise; ListGroups lists every group to a client that may Describe
the cluster, else those it may Describe.

A request may name 50,000 groups, keys or members: those are answered in slices
(loop_slices.py).
"""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC, GroupState, JoinRequest
from replog.security.acls import AclOperation, ResourceType
from replog.transactions import TRANSACTION_STATE_TOPIC

from ..authorization import (
    OPERATIONS_NOT_REQUESTED,
    REFUSAL_MESSAGES,
    authorized,
    authorized_on_cluster,
    authorized_operations,
)
from ..codec import ApiKey, Request, build_response
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal

GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE = 0, 1
CLASSIC_GROUP_TYPE = "classic"
FIRST_BATCHED_FIND_COORDINATOR_VERSION = 4
FIRST_MEMBER_ID_REQUIRED_VERSION = 4
FIRST_BATCHED_LEAVE_VERSION = 3
_NO_THROTTLE = datetime.timedelta(0)


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


def _may(services, request: Request, operation: AclOperation, group_id: str) -> bool:
    return authorized(services, request, operation, ResourceType.GROUP, group_id)


# -- FindCoordinator ------------------------------------------------------------------------


async def _coordinator_for(services, request: Request, key: str, key_type: int) -> dict:
    if key_type == GROUP_KEY_TYPE and not _may(services, request, AclOperation.DESCRIBE, key):
        return _refused(ErrorCode.group_authorization_failed)
    if key_type == TRANSACTION_KEY_TYPE and not authorized(services, request, AclOperation.DESCRIBE,
                                                           ResourceType.TRANSACTIONAL_ID, key):
        return _refused(ErrorCode.transactional_id_authorization_failed)
    if key_type == GROUP_KEY_TYPE:
        topic, partition, create = OFFSETS_TOPIC, services.groups.partition_of(key), services.create_offsets_topic
    elif key_type == TRANSACTION_KEY_TYPE:
        topic, partition = TRANSACTION_STATE_TOPIC, services.transactions.partition_of(key)
        create = services.create_transaction_state_topic
    else:
        log_refusal(request, "find coordinator of an unknown key type", key, ErrorCode.invalid_request)
        return {"error_code": ErrorCode.invalid_request, "error_message": f"unknown key type {key_type}",
                "node_id": -1, "host": "", "port": -1}
    view = services.metadata.topics.get(topic, {}).get(partition)
    if view is None:
        # Not made yet, or made in steps and not grown to this partition yet (or a creation
        # was cut short): made or grown in the background, while clients retry.
        create()
        return _not_available(f"partition {partition} of {topic} is being created")
    broker = services.metadata.brokers.get(view.leader)
    # As Metadata answers: a leader whose process is gone is not named until its successor is.
    if broker is None or services.leader_connections.presumed_gone(view.leader) or not services.serving(topic, partition):
        return _not_available(f"partition {partition} of {topic} has no leader")
    endpoint = broker.endpoint(request.listener)
    if endpoint is None:  # as Kafka answers a client of a listener the coordinator lacks
        return _not_available(f"the coordinator, broker {view.leader}, has no listener {request.listener}")
    return {"error_code": ErrorCode.none, "error_message": None, "node_id": view.leader, "host": endpoint[0],
            "port": endpoint[1]}


def _refused(error: ErrorCode) -> dict:
    return {"error_code": error, "error_message": REFUSAL_MESSAGES[error], "node_id": -1, "host": "", "port": -1}


def _not_available(message: str) -> dict:
    return {"error_code": ErrorCode.coordinator_not_available, "error_message": message, "node_id": -1, "host": "", "port": -1}


@handles(ApiKey.FIND_COORDINATOR)
async def find_coordinator(services, request: Request):
    body = request.body
    if request.api_version < FIRST_BATCHED_FIND_COORDINATOR_VERSION:
        key_type = getattr(body, "key_type", GROUP_KEY_TYPE)
        return build_response(request, {"throttle_time": _NO_THROTTLE} | await _coordinator_for(services, request, body.key, key_type))
    slices = LoopSlices()
    coordinators = []
    for key in body.coordinator_keys:
        await slices.pause()
        coordinators.append({"key": key} | await _coordinator_for(services, request, key, body.key_type))
    return await respond(request, {"throttle_time": _NO_THROTTLE, "coordinators": coordinators}, slices)


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----------------------------------------------


@handles(ApiKey.JOIN_GROUP)
async def join_group(services, request: Request):
    body = request.body
    if not _may(services, request, AclOperation.READ, body.group_id):
        return build_response(request, {
            "throttle_time": _NO_THROTTLE, "error_code": ErrorCode.group_authorization_failed, "generation_id": -1,
            "protocol_type": None, "protocol_name": None if request.api_version >= 7 else "", "leader": "",
            "skip_assignment": False, "member_id": body.member_id, "members": []})
    join = JoinRequest(
        member_id=body.member_id,
        group_instance_id=getattr(body, "group_instance_id", None),
        client_id=request.client_id or "",
        client_host=f"/{request.client_host}" if request.client_host else "",  # as Kafka names a member's host
        session_timeout_ms=_ms(body.session_timeout),
        rebalance_timeout_ms=_ms(body.rebalance_timeout),
        protocol_type=body.protocol_type,
        protocols=tuple((protocol.name, protocol.metadata) for protocol in body.protocols),
        require_known_member_id=request.api_version >= FIRST_MEMBER_ID_REQUIRED_VERSION,
    )
    result = await services.groups.join(body.group_id, join)
    if result.error not in (ErrorCode.none, ErrorCode.member_id_required):
        log_refusal(request, "join group", body.group_id, result.error)
    return build_response(request, {
        "throttle_time": _NO_THROTTLE,
        "error_code": result.error,
        "generation_id": result.generation,
        "protocol_type": result.protocol_type,
        # Before v7 the field is not nullable: an error answer carries "".
        "protocol_name": result.protocol_name if result.protocol_name is not None or request.api_version >= 7 else "",
        "leader": result.leader,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
                    for member_id, instance_id, metadata in result.members],
    })


@handles(ApiKey.SYNC_GROUP)
async def sync_group(services, request: Request):
    body = request.body
    if not _may(services, request, AclOperation.READ, body.group_id):
        return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.group_authorization_failed,
                                        "protocol_type": None, "protocol_name": None, "assignment": b""})
    assignments = {assignment.member_id: assignment.assignment for assignment in body.assignments}
    result = await services.groups.sync(body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                                        body.generation_id, getattr(body, "protocol_type", None),
                                        getattr(body, "protocol_name", None), assignments)
    if result.error != ErrorCode.none:
        log_refusal(request, "sync group", body.group_id, result.error)
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": result.error,
                                    "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
                                    "assignment": result.assignment})


@handles(ApiKey.HEARTBEAT)
async def heartbeat(services, request: Request):
    body = request.body
    if not _may(services, request, AclOperation.READ, body.group_id):
        return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.group_authorization_failed})
    error = services.groups.heartbeat(body.group_id, body.member_id, getattr(body, "group_instance_id", None),
                                      body.generation_id)
    if error not in (ErrorCode.none, ErrorCode.rebalance_in_progress):
        log_refusal(request, "heartbeat", body.group_id, error)
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": error})


@handles(ApiKey.LEAVE_GROUP)
async def leave_group(services, request: Request):
    body = request.body
    if not _may(services, request, AclOperation.READ, body.group_id):
        return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.group_authorization_failed,
                                        "members": []})
    batched = request.api_version >= FIRST_BATCHED_LEAVE_VERSION
    members = [(member.member_id, member.group_instance_id) for member in body.members] if batched \
        else [(body.member_id, None)]
    error, member_errors = services.groups.leave(body.group_id, members)
    if not batched and error == ErrorCode.none:
        error = member_errors[0]
    return await respond(request, {
        "throttle_time": _NO_THROTTLE,
        "error_code": error,
        "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": member_error}
                    for (member_id, instance_id), member_error in zip(members, member_errors)],
    })


# -- ListGroups, DescribeGroups, DeleteGroups -------------------------------------------------


@handles(ApiKey.LIST_GROUPS)
async def list_groups(services, request: Request):
    """The filters as Kafka applies them: states (v4+) trimmed and case-insensitive, types (v5+)
    case-insensitive; every group here is of Kafka's "classic" type."""
    states = {state.strip().lower() for state in getattr(request.body, "states_filter", ()) or ()}
    types = {group_type.lower() for group_type in getattr(request.body, "types_filter", ()) or ()}
    error, groups = services.groups.list_groups()
    if types and CLASSIC_GROUP_TYPE not in types:
        groups = []
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE, audit=False):
        groups = [group for group in groups if authorized(services, request, AclOperation.DESCRIBE, ResourceType.GROUP,
                                                          group.group_id, audit=False)]
    listed = [{"group_id": group.group_id, "protocol_type": group.protocol_type, "group_state": group.state,
               "group_type": CLASSIC_GROUP_TYPE}
              for group in groups if not states or group.state.lower() in states]
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": error, "groups": listed})


def _description(services, request: Request, group_id: str) -> dict:
    if not _may(services, request, AclOperation.DESCRIBE, group_id):
        return _no_description(group_id, ErrorCode.group_authorization_failed, "")
    error, group = services.groups.describe(group_id)
    if group is None:
        return _no_description(group_id, error, GroupState.DEAD.value if error == ErrorCode.none else "")
    in_generation = group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
    members = [{
        "member_id": member.member_id,
        "group_instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "member_metadata": member.metadata(group.protocol_name) if in_generation and group.protocol_name else b"",
        "member_assignment": member.assignment if group.state is GroupState.STABLE else b"",
    } for member in group.members.values()]
    return {"error_code": ErrorCode.none, "group_id": group_id, "group_state": group.state.value,
            "protocol_type": group.protocol_type or "", "protocol_data": group.protocol_name or "",
            "members": members, "authorized_operations":
                authorized_operations(services, request, ResourceType.GROUP, group_id)
                if getattr(request.body, "include_authorized_operations", False) else OPERATIONS_NOT_REQUESTED}


def _no_description(group_id: str, error: int, state: str) -> dict:
    return {"error_code": error, "group_id": group_id, "group_state": state, "protocol_type": "", "protocol_data": "",
            "members": [], "authorized_operations": OPERATIONS_NOT_REQUESTED}


@handles(ApiKey.DESCRIBE_GROUPS)
async def describe_groups(services, request: Request):
    """A group named twice in one request is answered INVALID_REQUEST the second time (no client
    sends that: librdkafka refuses it, Java's admin client keys groups by id), so that one
    request's answer holds each group's members once, whatever their number and metadata."""
    slices = LoopSlices()
    seen: set[str] = set()
    groups = []
    for group_id in request.body.groups:
        await slices.pause()
        if group_id in seen:
            log_refusal(request, "group named twice", group_id, ErrorCode.invalid_request)
            groups.append(_no_description(group_id, ErrorCode.invalid_request, ""))
            continue
        seen.add(group_id)
        groups.append(_description(services, request, group_id))
    return await respond(request, {"throttle_time": _NO_THROTTLE, "groups": groups}, slices)


@handles(ApiKey.DELETE_GROUPS)
async def delete_groups(services, request: Request):
    slices = LoopSlices()
    results = []
    for group_id in request.body.groups_names:
        await slices.pause()
        error = ErrorCode.group_authorization_failed if not _may(services, request, AclOperation.DELETE, group_id) \
            else await services.groups.delete_group(group_id)
        results.append({"group_id": group_id, "error_code": error})
    return await respond(request, {"throttle_time": _NO_THROTTLE, "results": results}, slices)
