"""ACL bindings in the store (admin/acls.py) on every backend: Kafka's refusals and words,
filters (MATCH and ANY among them), compare-and-set under concurrent writers, change
notifications written and pruned, empty nodes removed, one audit line per change."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
from kio.schema.errors import ErrorCode

from replog.admin.acls import create_acls, delete_acls, describe_acls
from replog.coord_backends import change_notifications, paths
from replog.obs.logs import JsonFormatter
from replog.security.acl_records import changed_pattern, node_path
from replog.security.acls import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def binding(name: str = "orders-", principal: str = "User:alice", operation: AclOperation = AclOperation.WRITE, *,
            resource_type: ResourceType = TOPIC, pattern_type: PatternType = PREFIXED, host: str = "*",
            permission: AclPermissionType = ALLOW) -> AclBinding:
    return AclBinding(ResourcePattern(resource_type, name, pattern_type),
                      AccessControlEntry(principal, host, operation, permission))


async def notices(store) -> list[ResourcePattern]:
    names = await store.children(paths.ACL_CHANGES)
    return [changed_pattern((await store.get(f"{paths.ACL_CHANGES}/{name}"))[0]) for name in sorted(names)]


@pytest.mark.parametrize("refused, code, message", [
    (binding("kafka", resource_type=CLUSTER, pattern_type=LITERAL, operation=AclOperation.ALTER),
     ErrorCode.invalid_request, "The only valid name for the CLUSTER resource is kafka-cluster"),
    (binding(""), ErrorCode.invalid_request, "Invalid empty resource name"),
    (binding(pattern_type=PatternType.MATCH), ErrorCode.invalid_request, "Invalid patternType MATCH"),
    (binding(pattern_type=PatternType.ANY), ErrorCode.invalid_request, "Invalid patternType ANY"),
    (binding(resource_type=ResourceType.ANY), ErrorCode.invalid_request, "Invalid resourceType ANY"),
    (binding(resource_type=ResourceType.DELEGATION_TOKEN), ErrorCode.invalid_request,
     "Invalid resourceType DELEGATION_TOKEN"),
    (binding(operation=AclOperation.ANY), ErrorCode.invalid_request, "Invalid operation ANY"),
    (binding(operation=AclOperation.UNKNOWN), ErrorCode.invalid_request, "Invalid operation UNKNOWN"),
    (binding(permission=AclPermissionType.ANY), ErrorCode.invalid_request, "Invalid permissionType ANY"),
    (binding(principal="alice"), ErrorCode.invalid_request,
     "Could not parse principal from `alice` (no colon is present separating the principal type from the principal name)"),
    (binding(host=""), ErrorCode.invalid_request, "Host pattern cannot be null or empty"),
])
async def test_a_binding_kafka_refuses_is_refused_with_its_words_and_the_others_created(store, refused, code, message):
    good = binding("clicks", pattern_type=LITERAL, operation=AclOperation.READ)
    results = await create_acls(store, [refused, good])
    assert (results[0].code, results[0].message) == (code, message)
    assert results[1] is None
    assert await describe_acls(store, AclBindingFilter()) == [good]


async def test_bindings_are_kept_in_kafkas_nodes_and_each_write_notifies(store, caplog):
    created = [binding(), binding(principal="User:bob"), binding("clicks", pattern_type=LITERAL),
               binding("kafka-cluster", resource_type=CLUSTER, pattern_type=LITERAL, operation=AclOperation.ALTER)]
    with caplog.at_level(logging.INFO, logger="replog.audit"):
        assert await create_acls(store, created, requester="User:admin") == [None] * 4
    assert await store.exists("/kafka-acl-extended/prefixed/Topic/orders-") is not None
    assert await store.exists("/kafka-acl/Topic/clicks") is not None
    assert await store.exists("/kafka-acl/Cluster/kafka-cluster") is not None
    assert sorted(await notices(store)) == sorted({entry.pattern for entry in created})  # one per pattern written
    audit = [record for record in caplog.records if record.name == "replog.audit"]
    assert len(audit) == 4
    assert ("ACL added by=User:admin principal=User:bob host=* operation=Write permission=Allow resource_type=Topic "
            "pattern_type=PREFIXED resource=orders-") in [record.getMessage() for record in audit]
    line = json.loads(JsonFormatter().format(audit[-1]))  # as `--log-format json` writes it
    assert {key: line[key] for key in ("logger", "event", "by", "principal", "operation", "resource_type", "resource")} == {
        "logger": "replog.audit", "event": "ACL added", "by": "User:admin", "principal": "User:alice",
        "operation": "Alter", "resource_type": "Cluster", "resource": "kafka-cluster"}

    before = len(await notices(store))
    assert await create_acls(store, [binding()]) == [None]  # already there: no write
    assert len(await notices(store)) == before


async def test_filters_select_by_pattern_and_entry(store):
    prefixed = binding("orders-", operation=AclOperation.WRITE)
    literal = binding("orders-1", pattern_type=LITERAL, principal="User:bob", operation=AclOperation.READ)
    wildcard = binding("*", pattern_type=LITERAL, principal="User:carol", operation=AclOperation.DESCRIBE, permission=DENY)
    other = binding("payments", pattern_type=LITERAL, host="10.0.0.1")
    group = binding("orders-", resource_type=GROUP, operation=AclOperation.READ)
    assert await create_acls(store, [prefixed, literal, wildcard, other, group]) == [None] * 5

    assert await describe_acls(store, AclBindingFilter()) == sorted([prefixed, literal, wildcard, other, group])
    assert await describe_acls(store, AclBindingFilter(TOPIC, "orders-1", PatternType.MATCH)) == \
        sorted([prefixed, literal, wildcard])
    assert await describe_acls(store, AclBindingFilter(ResourceType.ANY, "orders-1", PatternType.MATCH)) == \
        sorted([prefixed, literal, wildcard, group])  # a group called orders-1 is under the group's prefix
    assert await describe_acls(store, AclBindingFilter(TOPIC, "orders-1", LITERAL)) == [literal]
    assert await describe_acls(store, AclBindingFilter(TOPIC, None, PREFIXED)) == [prefixed]
    assert await describe_acls(store, AclBindingFilter(principal="User:alice", host="10.0.0.1")) == [other]
    assert await describe_acls(store, AclBindingFilter(permission=DENY)) == [wildcard]
    assert await describe_acls(store, AclBindingFilter(operation=AclOperation.READ)) == sorted([literal, group])
    assert await describe_acls(store, AclBindingFilter(GROUP)) == [group]


async def test_delete_answers_per_filter_and_removes_emptied_nodes(store):
    prefixed = binding("orders-")
    bob = binding("orders-", principal="User:bob")
    literal = binding("orders-1", pattern_type=LITERAL, operation=AclOperation.READ)
    assert await create_acls(store, [prefixed, bob, literal]) == [None] * 3
    written = len(await notices(store))

    results = await delete_acls(store, [
        AclBindingFilter(TOPIC, "orders-1", PatternType.MATCH, principal="User:alice"),
        AclBindingFilter(resource_type=ResourceType.UNKNOWN),
        AclBindingFilter(operation=AclOperation.UNKNOWN),
        AclBindingFilter(principal="User:nobody"),
        AclBindingFilter(operation=AclOperation.READ),
    ], requester="User:admin")
    assert results[0] == [(literal, None), (prefixed, None)]
    assert (results[1].code, results[1].message) == (ErrorCode.invalid_request, "Unknown patternFilter.")
    assert (results[2].code, results[2].message) == (ErrorCode.invalid_request, "Unknown entryFilter.")
    assert results[3] == []
    assert results[4] == [(literal, None)]  # selected by two filters: in both answers
    assert await describe_acls(store, AclBindingFilter()) == [bob]
    assert await store.exists(node_path(literal.pattern)) is None
    assert len(await notices(store)) == written + 2

    assert await delete_acls(store, [AclBindingFilter(TOPIC, "orders-", PREFIXED)]) == [[(bob, None)]]
    assert await store.exists(node_path(bob.pattern)) is None
    assert await describe_acls(store, AclBindingFilter()) == []


async def test_concurrent_writers_of_one_pattern_lose_nothing(store, connect):
    other = await connect()  # a second client of the store: another broker, or the CLI
    principals = [f"User:u{index}" for index in range(12)]
    await asyncio.gather(*(create_acls(store if index % 2 else other, [binding(principal=principal)])
                           for index, principal in enumerate(principals)))
    assert [found.entry.principal for found in await describe_acls(store, AclBindingFilter())] == sorted(principals)

    await asyncio.gather(*(delete_acls(other if index % 2 else store, [AclBindingFilter(principal=principal)])
                           for index, principal in enumerate(principals[:6])),
                         create_acls(store, [binding(principal="User:late")]))
    assert [found.entry.principal for found in await describe_acls(store, AclBindingFilter())] == \
        sorted(["User:late", *principals[6:]])


async def test_the_writer_keeps_only_the_newest_notifications(store, monkeypatch):
    monkeypatch.setattr(change_notifications, "NOTIFICATIONS_KEPT", 3)
    for index in range(6):
        assert await create_acls(store, [binding(f"t{index}", pattern_type=LITERAL)]) == [None]
    assert [pattern.name for pattern in await notices(store)] == ["t3", "t4", "t5"]
