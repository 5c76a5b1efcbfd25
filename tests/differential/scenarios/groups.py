"""The classic group protocol, request by request: joining, fencing, generations, an empty
group's listing, committed offsets."""

from __future__ import annotations

import struct

from replog.net.codec import ApiKey

from ..protocol import GROUP_KEY, coordinated, create_topic
from ..targets import Target
from .registry import scenario

JOIN_GROUP_VERSION = 7
SESSION_TIMEOUT_MS = 30_000
REBALANCE_TIMEOUT_MS = 30_000
PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
UNKNOWN_MEMBER = "differential-unknown-member"
NO_GENERATION = -1


def _subscription(topic: str) -> bytes:
    """ConsumerProtocolSubscription v0 of one topic, no user data."""
    name = topic.encode()
    return struct.pack(">hih", 0, 1, len(name)) + name + struct.pack(">i", -1)


EMPTY_ASSIGNMENT = struct.pack(">hii", 0, 0, -1)  # ConsumerProtocolAssignment v0: nothing, no user data


def _join(target: Target, group: str, member_id: str = "", instance_id: str | None = None) -> dict:
    return coordinated(target, group, GROUP_KEY, lambda: target.request(ApiKey.JOIN_GROUP, JOIN_GROUP_VERSION, {
        "group_id": group, "session_timeout": SESSION_TIMEOUT_MS, "rebalance_timeout": REBALANCE_TIMEOUT_MS,
        "member_id": member_id, "group_instance_id": instance_id, "protocol_type": PROTOCOL_TYPE,
        "protocols": [{"name": ASSIGNOR, "metadata": _subscription("differential-subscribed")}]}))


def _sync(target: Target, group: str, generation: int, member_id: str, instance_id: str | None = None) -> dict:
    return target.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance_id,
        "protocol_type": PROTOCOL_TYPE, "protocol_name": ASSIGNOR,
        "assignments": [{"member_id": member_id, "assignment": EMPTY_ASSIGNMENT}]})


def _heartbeat(target: Target, group: str, generation: int, member_id: str, instance_id: str | None = None) -> str:
    return target.request(ApiKey.HEARTBEAT, 4, {"group_id": group, "generation_id": generation, "member_id": member_id,
                                                "group_instance_id": instance_id})["error_code"]


def _leave(target: Target, group: str, member_id: str) -> str:
    return target.request(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [{"member_id": member_id, "group_instance_id": None}]})[
        "error_code"]


def _stable_member(target: Target, group: str, instance_id: str | None = None) -> tuple[str, int]:
    """A group of one member that joined and synced: (member id, generation)."""
    joined = _join(target, group, instance_id=instance_id)
    if joined["error_code"] == "member_id_required":
        joined = _join(target, group, joined["member_id"], instance_id)
    assert joined["error_code"] == "none", joined
    synced = _sync(target, group, joined["generation_id"], joined["member_id"], instance_id)
    assert synced["error_code"] == "none", synced
    return joined["member_id"], joined["generation_id"]


@scenario
def join_group_member_id_required(target: Target) -> dict:
    """A dynamic member's first JoinGroup (v4+) is answered with the id to join with."""
    answer = _join(target, "differential-first-join")
    return {"error_code": answer["error_code"], "member_id_given": bool(answer["member_id"]),
            "generation_id": answer["generation_id"]}


@scenario
def group_requests_from_strangers(target: Target) -> dict:
    """Requests naming a member or a generation the group does not have."""
    group = "differential-strangers"
    member, generation = _stable_member(target, group)
    return {
        "join_as_unknown_member": _join(target, group, UNKNOWN_MEMBER)["error_code"],
        "heartbeat_unknown_member": _heartbeat(target, group, generation, UNKNOWN_MEMBER),
        "heartbeat_old_generation": _heartbeat(target, group, generation - 1, member),
        "heartbeat_unknown_group": _heartbeat(target, "differential-no-group", 1, UNKNOWN_MEMBER),
        "sync_old_generation": _sync(target, group, generation - 1, member)["error_code"],
        "heartbeat_member": _heartbeat(target, group, generation, member),
    }


@scenario
def static_member_replaced(target: Target) -> dict:
    """A second member with the same group.instance.id takes the first one's place: the first
    one's next heartbeat is fenced."""
    group, instance = "differential-static", "differential-instance"
    old_member, generation = _stable_member(target, group, instance)
    replacement = _join(target, group, instance_id=instance)
    return {"replacement_join": replacement["error_code"],
            "old_member_heartbeat": _heartbeat(target, group, generation, old_member, instance)}


@scenario
def empty_group_listed(target: Target) -> dict:
    """A group whose only member left: still listed, Empty, with the protocol type it had."""
    group = "differential-emptied"
    member, _ = _stable_member(target, group)
    left = _leave(target, group, member)
    listed = target.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    return {"leave": left, "listed": [(listing["protocol_type"], listing["group_state"])
                                                    for listing in listed["groups"] if listing["group_id"] == group]}


@scenario
def committed_offsets(target: Target) -> dict:
    """Offsets committed outside any generation (as a consumer with assign() does), read back."""
    topic, group = "differential-committed", "differential-committer"
    create_topic(target, topic, partitions=2)

    def commit(name: str, partition: int, offset: int) -> str:
        answer = coordinated(target, group, GROUP_KEY, lambda: target.request(ApiKey.OFFSET_COMMIT, 8, {
            "group_id": group, "generation_id_or_member_epoch": NO_GENERATION, "member_id": "", "group_instance_id": None,
            "topics": [{"name": name, "partitions": [{"partition_index": partition, "committed_offset": offset,
                                                      "committed_leader_epoch": -1, "committed_metadata": "meta"}]}]}))
        return answer["topics"][0]["partitions"][0]["error_code"]

    committed = {"commit": commit(topic, 0, 5), "commit_unknown_topic": commit("differential-nowhere", 0, 5)}
    fetched = target.request(ApiKey.OFFSET_FETCH, 7, {"group_id": group, "require_stable": False,
                                                      "topics": [{"name": topic, "partition_indexes": [0, 1]}]})
    committed["fetched"] = {partition["partition_index"]: (partition["committed_offset"], partition["metadata"], partition["error_code"])
                            for partition in fetched["topics"][0]["partitions"]}
    committed["fetch_error"] = fetched["error_code"]
    return committed


def _describe(target: Target, group: str) -> dict:
    (described,) = target.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})["groups"]
    return described


@scenario
def describe_groups(target: Target) -> dict:
    group = "differential-described"
    member, _ = _stable_member(target, group)
    described = _describe(target, group)
    (described_member,) = described["members"]
    return {"group": {key: described[key] for key in ("error_code", "group_state", "protocol_type", "protocol_data")},
            "member": {"is_the_member": described_member["member_id"] == member, "client_id": described_member["client_id"],
                       "metadata": described_member["member_metadata"], "assignment": described_member["member_assignment"]},
            "unknown_group": {key: _describe(target, "differential-no-group")[key] for key in ("error_code", "group_state", "members")}}


@scenario
def delete_groups(target: Target) -> dict:
    active, emptied = "differential-undeletable", "differential-deletable"
    _stable_member(target, active)
    member, _ = _stable_member(target, emptied)
    _leave(target, emptied, member)
    answer = target.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [active, emptied, "differential-no-group"]})
    return {result["group_id"]: result["error_code"] for result in answer["results"]}
