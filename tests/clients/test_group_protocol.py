"""The group APIs spoken directly (replog's own protocol client) to a real broker process: the
errors Kafka gives for bad group input, after which the coordinator keeps serving, and the
group administration APIs (ListGroups, DescribeGroups, OffsetDelete, DeleteGroups)."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.support.polling import eventually

SESSION_TIMEOUT_MS = 6000
WAIT_S = 30



@pytest.fixture
async def connection(group_broker):
    async with await BrokerConnection.open("127.0.0.1", group_broker.port, request_timeout_s=WAIT_S) as opened:
        yield opened


async def found_coordinator(connection, group: str) -> None:
    async def found() -> bool:
        answer = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
        return answer.error_code == ErrorCode.none

    await eventually(found, WAIT_S, f"a coordinator for {group}")


async def join(connection, group: str, member_id: str = "", instance: str | None = None):
    return await connection.request(ApiKey.JOIN_GROUP, 5, {
        "group_id": group, "session_timeout": SESSION_TIMEOUT_MS, "rebalance_timeout": SESSION_TIMEOUT_MS,
        "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"subscription"}]})


async def member_of_stable_group(connection, group: str) -> str:
    await found_coordinator(connection, group)
    required = await join(connection, group)
    assert required.error_code == ErrorCode.member_id_required
    joined = await join(connection, group, required.member_id)
    assert (joined.error_code, joined.generation_id, joined.leader) == (ErrorCode.none, 1, required.member_id)
    synced = await sync(connection, group, required.member_id, 1, [{"member_id": required.member_id, "assignment": b"mine"}])
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")
    return required.member_id


async def sync(connection, group, member_id, generation, assignments=(), instance=None):
    return await connection.request(ApiKey.SYNC_GROUP, 3, {
        "group_id": group, "generation_id": generation, "member_id": member_id, "group_instance_id": instance,
        "assignments": list(assignments)})


async def heartbeat(connection, group, member_id, generation, instance=None) -> int:
    answer = await connection.request(ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": generation,
                                                            "member_id": member_id, "group_instance_id": instance})
    return answer.error_code


async def commit(connection, group, member_id, generation, metadata="", topic="__consumer_offsets", partition=0,
                 instance=None) -> int:
    """A commit of partition 0 of `topic` (any topic that exists will do: the offsets topic does)."""
    answer = await connection.request(ApiKey.OFFSET_COMMIT, 7, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": instance,
        "topics": [{"name": topic, "partitions": [
            {"partition_index": partition, "committed_offset": 5, "committed_leader_epoch": -1, "committed_metadata": metadata}]}]})
    return answer.topics[0].partitions[0].error_code


async def fetch(connection, group):
    answer = await connection.request(ApiKey.OFFSET_FETCH, 6, {"group_id": group, "topics": None})
    return answer.error_code, {(topic.name, partition.partition_index): (partition.committed_offset, partition.metadata)
                               for topic in answer.topics for partition in topic.partitions}


async def test_bad_group_input_gets_kafkas_errors_and_the_coordinator_keeps_serving(connection):
    group = f"g-{uuid.uuid4().hex[:8]}"
    await found_coordinator(connection, group)
    assert await heartbeat(connection, group, "nobody", 1) == ErrorCode.unknown_member_id  # unknown group
    assert (await sync(connection, group, "nobody", 1)).error_code == ErrorCode.unknown_member_id
    assert await commit(connection, group, "nobody", 3) == ErrorCode.illegal_generation
    member = await member_of_stable_group(connection, group)
    assert await heartbeat(connection, group, member, 0) == ErrorCode.illegal_generation  # stale generation
    assert await heartbeat(connection, group, "ghost", 1) == ErrorCode.unknown_member_id  # not in the group
    assert await commit(connection, group, member, 0) == ErrorCode.illegal_generation
    assert await commit(connection, group, "ghost", 1) == ErrorCode.unknown_member_id
    assert await commit(connection, group, "", -1) == ErrorCode.unknown_member_id  # outside a group with members
    assert await commit(connection, group, member, 1, "m" * 4097) == ErrorCode.offset_metadata_too_large
    assert (await join(connection, group, "ghost")).error_code == ErrorCode.unknown_member_id
    # Still serving, and nothing refused was written:
    assert await heartbeat(connection, group, member, 1) == ErrorCode.none
    assert await fetch(connection, group) == (ErrorCode.none, {})
    assert await commit(connection, group, member, 1, "m" * 4096) == ErrorCode.none
    assert await fetch(connection, group) == (ErrorCode.none, {("__consumer_offsets", 0): (5, "m" * 4096)})
    assert await commit(connection, group, member, 1, topic="no-such-topic") == ErrorCode.unknown_topic_or_partition
    batched = await connection.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": None}, {"group_id": "never-seen", "topics": [{"name": "t", "partition_indexes": [0]}]}],
        "require_stable": False})
    ours, unknown = batched.groups
    assert [(topic.name, [p.committed_offset for p in topic.partitions]) for topic in ours.topics] == [("__consumer_offsets", [5])]
    assert (unknown.error_code, unknown.topics[0].partitions[0].committed_offset) == (ErrorCode.none, -1)


async def test_groups_are_listed_described_and_deleted(connection):
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = await member_of_stable_group(connection, group)
    kept, dropped = ("__consumer_offsets", 0), ("__consumer_offsets", 1)
    assert await commit(connection, group, member, 1) == ErrorCode.none
    assert await commit(connection, group, member, 1, partition=1) == ErrorCode.none
    listed = await connection.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Stable"]})
    assert (group, "Stable") in {(listing.group_id, listing.group_state) for listing in listed.groups}
    described = await connection.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group, "never-seen"],
                                                                      "include_authorized_operations": False})
    ours, unknown = described.groups
    assert (ours.group_state, ours.protocol_data, [m.member_id for m in ours.members]) == ("Stable", "range", [member])
    assert ours.members[0].member_assignment == b"mine" and ours.members[0].client_host == "/127.0.0.1"
    assert unknown.group_state == "Dead"
    deleting = await connection.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
    assert deleting.results[0].error_code == ErrorCode.non_empty_group
    left = await connection.request(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [
        {"member_id": member, "group_instance_id": None}, {"member_id": "ghost", "group_instance_id": None}]})
    assert [m.error_code for m in left.members] == [ErrorCode.none, ErrorCode.unknown_member_id]
    deleted_offset = await connection.request(ApiKey.OFFSET_DELETE, 0, {"group_id": group, "topics": [
        {"name": dropped[0], "partitions": [{"partition_index": dropped[1]}]}]})
    assert (deleted_offset.error_code, deleted_offset.topics[0].partitions[0].error_code) == (ErrorCode.none, ErrorCode.none)
    assert await fetch(connection, group) == (ErrorCode.none, {kept: (5, "")})
    deleted = await connection.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group, "never-seen"]})
    assert [result.error_code for result in deleted.results] == [ErrorCode.none, ErrorCode.group_id_not_found]
    assert await fetch(connection, group) == (ErrorCode.none, {})


async def test_a_replaced_static_member_is_fenced_whatever_it_sends(connection):
    """KIP-345, as Kafka answers: a request naming an instance id with a member id that is no
    longer that instance's is FENCED_INSTANCE_ID (fatal to the client), not UNKNOWN_MEMBER_ID
    (after which it would rejoin and replace the new instance)."""
    group, instance = f"g-{uuid.uuid4().hex[:8]}", "host-1"
    await found_coordinator(connection, group)
    old = await join(connection, group, instance=instance)  # a static member gets its id at once
    assert (old.error_code, old.generation_id) == (ErrorCode.none, 1)
    assert (await sync(connection, group, old.member_id, 1, [{"member_id": old.member_id, "assignment": b"a"}],
                       instance)).error_code == ErrorCode.none
    new = await join(connection, group, instance=instance)
    assert (new.error_code, new.generation_id) == (ErrorCode.none, 1) and new.member_id != old.member_id
    fenced = ErrorCode.fenced_instance_id
    assert await heartbeat(connection, group, old.member_id, 1, instance) == fenced
    assert (await sync(connection, group, old.member_id, 1, instance=instance)).error_code == fenced
    assert await commit(connection, group, old.member_id, 1, instance=instance) == fenced
    assert (await join(connection, group, old.member_id, instance)).error_code == fenced
    left = await connection.request(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [
        {"member_id": old.member_id, "group_instance_id": instance}]})
    assert [member.error_code for member in left.members] == [fenced]
    assert await heartbeat(connection, group, old.member_id, 1) == ErrorCode.unknown_member_id  # no instance named
    assert await heartbeat(connection, group, new.member_id, 1, instance) == ErrorCode.none


async def test_an_emptied_group_is_still_a_consumer_group_and_listings_filter_as_kafkas(connection):
    group = f"g-{uuid.uuid4().hex[:8]}"
    member = await member_of_stable_group(connection, group)
    left = await connection.request(ApiKey.LEAVE_GROUP, 4, {"group_id": group, "members": [
        {"member_id": member, "group_instance_id": None}]})
    assert [m.error_code for m in left.members] == [ErrorCode.none]
    described = await connection.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group], "include_authorized_operations": False})
    (ours,) = described.groups
    assert (ours.group_state, ours.protocol_type, ours.protocol_data, ours.members) == ("Empty", "consumer", "", ())

    async def listed(version: int, body: dict) -> set[tuple]:
        answer = await connection.request(ApiKey.LIST_GROUPS, version, body)
        return {(g.group_id, g.protocol_type, getattr(g, "group_state", None), getattr(g, "group_type", None))
                for g in answer.groups if g.group_id == group}

    assert await listed(3, {}) == {(group, "consumer", None, None)}
    # States are trimmed and compared case-insensitively; types are compared case-insensitively.
    for states, types in ((["Empty"], []), ([" empty ", "Stable"], []), (["EMPTY"], ["Classic"]), ([], ["consumer", "CLASSIC"])):
        assert await listed(5, {"states_filter": states, "types_filter": types}) == {(group, "consumer", "Empty", "classic")}
    for states, types in ((["Stable"], []), ([], ["consumer"]), ([], [" classic "])):
        assert await listed(5, {"states_filter": states, "types_filter": types}) == set()


async def test_the_offsets_topic_is_internal_compact_and_closed_to_producers(connection):
    await found_coordinator(connection, "any-group")
    metadata = await connection.request(ApiKey.METADATA, 12, {"topics": [{"name": "__consumer_offsets", "topic_id": None}],
                                                               "allow_auto_topic_creation": False,
                                                               "include_topic_authorized_operations": False})
    assert metadata.topics[0].is_internal
    produced = await connection.request(ApiKey.PRODUCE, 9, {
        "transactional_id": None, "acks": -1, "timeout": 1000,
        "topic_data": [{"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": None}]}]})
    refused = produced.responses[0].partition_responses[0]
    assert refused.error_code == ErrorCode.invalid_topic_exception
    assert refused.error_message == "Cannot append to internal topic __consumer_offsets"
    described = await connection.request(ApiKey.DESCRIBE_CONFIGS, 4, {
        "resources": [{"resource_type": 2, "resource_name": "__consumer_offsets", "configuration_keys": ["cleanup.policy"]}],
        "include_synonyms": False, "include_documentation": False})
    assert [(entry.name, entry.value) for entry in described.results[0].configs] == [("cleanup.policy", "compact")]
