"""ACLs in the store: Kafka's ZooKeeper format, both directions, and what a bad node reads as."""

from __future__ import annotations

import json

import pytest

from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import ACL_CHANGE_PREFIX, InvalidNodeValue
from replog.security import acl_records
from replog.security.acls import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                  ResourceType)

ALICE_READS = AccessControlEntry("User:alice", "*", AclOperation.READ, AclPermissionType.ALLOW)
BOB_DENIED = AccessControlEntry("User:bob", "10.0.0.1", AclOperation.CLUSTER_ACTION, AclPermissionType.DENY)
ORDERS = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
ODD_NAME = ResourcePattern(ResourceType.TRANSACTIONAL_ID, "tx/1 ..", PatternType.LITERAL)


@pytest.fixture
async def store(tmp_path):
    async with MemoryStore(str(tmp_path / "coordination.sqlite")) as opened:
        yield opened


def test_the_format_is_kafkas():
    body = json.loads(acl_records.encoded([BOB_DENIED, ALICE_READS]))
    assert body == {"version": 1, "acls": [
        {"principal": "User:alice", "host": "*", "operation": "Read", "permissionType": "Allow"},
        {"principal": "User:bob", "host": "10.0.0.1", "operation": "ClusterAction", "permissionType": "Deny"},
    ]}
    assert acl_records.node_path(ORDERS) == "/kafka-acl-extended/prefixed/Topic/orders-"
    assert acl_records.node_path(ODD_NAME) == "/kafka-acl/TransactionalId/tx%2F1%20.."


def test_an_entry_naming_an_unknown_operation_is_skipped_not_fatal():
    raw = json.dumps({"version": 1, "acls": [
        {"principal": "User:alice", "host": "*", "operation": "Read", "permissionType": "Allow"},
        {"principal": "User:eve", "host": "*", "operation": "Teleport", "permissionType": "Allow"},
        {"principal": "User:eve", "host": "*", "operation": "Any", "permissionType": "Allow"},
        {"principal": "nobody", "host": "*", "operation": "Read", "permissionType": "Allow"},
    ]}).encode()
    assert acl_records.decoded(raw) == (ALICE_READS,)
    with pytest.raises(InvalidNodeValue):
        acl_records.decoded(b"\xff not json")


async def test_entries_and_patterns_read_back_from_the_store(store):
    assert await acl_records.read_entries(store, ORDERS) == ((), None)
    for pattern, entries in ((ORDERS, [ALICE_READS]), (ODD_NAME, [ALICE_READS, BOB_DENIED])):
        await store.create(acl_records.node_path(pattern), acl_records.encoded(entries), make_parents=True)
    entries, version = await acl_records.read_entries(store, ODD_NAME)
    assert entries == (ALICE_READS, BOB_DENIED) and version is not None
    assert sorted(await acl_records.stored_patterns(store)) == sorted([ORDERS, ODD_NAME])
    assert await acl_records.read_many(store, [ORDERS, ODD_NAME]) == {ORDERS: (ALICE_READS,), ODD_NAME: (ALICE_READS, BOB_DENIED)}


async def test_a_corrupt_node_reads_as_empty_with_its_version_and_unknown_types_are_skipped(store):
    await store.create(acl_records.node_path(ORDERS), b"garbage", make_parents=True)
    await store.create("/kafka-acl/Galaxy/andromeda", acl_records.encoded([ALICE_READS]), make_parents=True)
    entries, version = await acl_records.read_entries(store, ORDERS)
    assert entries == () and version is not None
    assert await acl_records.stored_patterns(store) == [ORDERS]
    assert await acl_records.read_many(store, [ORDERS, ODD_NAME]) == {ORDERS: (), ODD_NAME: ()}


async def test_a_change_notice_names_its_pattern(store):
    path = await store.create(ACL_CHANGE_PREFIX, acl_records.change_notice(ORDERS), sequential=True, make_parents=True)
    raw, _ = await store.get(path)
    assert json.loads(raw) == {"version": 1, "resource_type": "Topic", "pattern_type": "PREFIXED", "name": "orders-"}
    assert acl_records.changed_pattern(raw) == ORDERS
    with pytest.raises(InvalidNodeValue):
        acl_records.changed_pattern(json.dumps({"version": 1, "resource_type": "Topic", "pattern_type": "ANY", "name": "x"}).encode())
