"""The authorizer's answers, case by case, against Kafka's StandardAuthorizer rules."""

from __future__ import annotations

import pytest

from replog.security.acls import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                  ResourceType)
from replog.security.authorizer import AclAuthorizer

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
O = AclOperation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALICE, HOST = "User:alice", "10.0.0.7"


def acl(pattern_name: str, operation: AclOperation, permission=ALLOW, principal=ALICE, host="*",
        pattern_type=LITERAL, resource_type=TOPIC) -> tuple[ResourcePattern, AccessControlEntry]:
    return (ResourcePattern(resource_type, pattern_name, pattern_type),
            AccessControlEntry(principal, host, operation, permission))


def authorizer_of(*acls, **settings) -> AclAuthorizer:
    authorizer = AclAuthorizer(**settings)
    grouped: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for pattern, entry in acls:
        grouped.setdefault(pattern, []).append(entry)
    authorizer.replace_all(grouped)
    return authorizer


# (what, ACLs, operation, topic name, allowed): alice asking from HOST unless the ACLs say otherwise
CASES = [
    ("no ACL: denied", [], O.READ, "orders", False),
    ("literal allow", [acl("orders", O.READ)], O.READ, "orders", True),
    ("literal is exact", [acl("orders", O.READ)], O.READ, "orders-1", False),
    ("another operation", [acl("orders", O.READ)], O.WRITE, "orders", False),
    ("wildcard resource", [acl("*", O.READ)], O.READ, "anything", True),
    ("prefixed", [acl("orders-", O.WRITE, pattern_type=PREFIXED)], O.WRITE, "orders-1", True),
    ("prefixed, not a prefix", [acl("orders-", O.WRITE, pattern_type=PREFIXED)], O.WRITE, "payments", False),
    ("prefixed, whole name", [acl("orders", O.WRITE, pattern_type=PREFIXED)], O.WRITE, "orders", True),
    ("prefixed star is no wildcard", [acl("*", O.WRITE, pattern_type=PREFIXED)], O.WRITE, "orders", False),
    ("other principal", [acl("orders", O.READ, principal="User:bob")], O.READ, "orders", False),
    ("User:* principal", [acl("orders", O.READ, principal="User:*")], O.READ, "orders", True),
    ("host matches", [acl("orders", O.READ, host=HOST)], O.READ, "orders", True),
    ("host differs", [acl("orders", O.READ, host="10.0.0.8")], O.READ, "orders", False),
    ("deny wins over allow", [acl("orders", O.READ), acl("orders", O.READ, DENY)], O.READ, "orders", False),
    ("prefixed deny beats literal allow", [acl("orders", O.READ), acl("ord", O.READ, DENY, pattern_type=PREFIXED)],
     O.READ, "orders", False),
    ("wildcard deny beats literal allow", [acl("orders", O.ALL), acl("*", O.READ, DENY, principal="User:*")],
     O.READ, "orders", False),
    ("deny of another host", [acl("orders", O.READ), acl("orders", O.READ, DENY, host="10.0.0.8")], O.READ, "orders", True),
    ("deny of another operation", [acl("orders", O.ALL), acl("orders", O.WRITE, DENY)], O.READ, "orders", True),
    ("deny all", [acl("orders", O.READ), acl("orders", O.ALL, DENY)], O.READ, "orders", False),
    ("allow all", [acl("orders", O.ALL)], O.DELETE, "orders", True),
    ("read implies describe", [acl("orders", O.READ)], O.DESCRIBE, "orders", True),
    ("write implies describe", [acl("orders", O.WRITE)], O.DESCRIBE, "orders", True),
    ("describe implies no read", [acl("orders", O.DESCRIBE)], O.READ, "orders", False),
    ("alter configs implies describe configs", [acl("orders", O.ALTER_CONFIGS)], O.DESCRIBE_CONFIGS, "orders", True),
    ("a deny implies nothing", [acl("orders", O.ALL), acl("orders", O.READ, DENY)], O.DESCRIBE, "orders", True),
    ("other resource type", [acl("orders", O.READ, resource_type=GROUP)], O.READ, "orders", False),
]


@pytest.mark.parametrize(("acls", "operation", "name", "allowed"), [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_kafkas_rules(acls, operation, name, allowed):
    authorizer = authorizer_of(*acls)
    assert authorizer.authorize(ALICE, HOST, operation, TOPIC, name) is allowed
    assert authorizer.authorize(ALICE, HOST, operation, TOPIC, name) is allowed  # answered from the cache


def test_super_users_pass_whatever_denies():
    authorizer = authorizer_of(acl("*", O.ALL, DENY, principal="User:*"), super_users=["User:admin"])
    assert authorizer.authorize("User:admin", HOST, O.CLUSTER_ACTION, CLUSTER, "kafka-cluster")
    assert authorizer.authorize_any("User:admin", HOST, O.WRITE, TOPIC)
    assert not authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "orders")


def test_allow_everyone_if_no_acl_found_only_where_no_acl_applies():
    authorizer = authorizer_of(acl("orders", O.READ, principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "payments")
    assert not authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders")  # bob's ACL applies to the topic
    assert authorizer.authorize_any(ALICE, HOST, O.WRITE, TOPIC)
    assert not authorizer_of(acl("orders", O.READ, principal="User:bob")).authorize(ALICE, HOST, O.WRITE, TOPIC, "payments")


ANY_CASES = [
    ("nothing", [], False),
    ("a literal allow", [acl("orders", O.WRITE)], True),
    ("a prefixed allow", [acl("orders-", O.WRITE, pattern_type=PREFIXED)], True),
    ("all", [acl("orders", O.ALL)], True),
    ("implied operations do not count", [acl("orders", O.ALTER)], False),
    ("another principal's", [acl("orders", O.WRITE, principal="User:bob")], False),
    ("literal denied", [acl("orders", O.WRITE), acl("orders", O.WRITE, DENY)], False),
    ("a prefix denied", [acl("orders-1", O.WRITE), acl("ord", O.WRITE, DENY, pattern_type=PREFIXED)], False),
    ("one of two denied", [acl("orders", O.WRITE), acl("audit", O.WRITE), acl("orders", O.WRITE, DENY)], True),
    ("wildcard deny", [acl("orders", O.WRITE), acl("*", O.WRITE, DENY)], False),
    ("wildcard allow", [acl("*", O.WRITE), acl("orders", O.WRITE, DENY)], True),
    ("a longer prefix denied does not cover", [acl("ord", O.WRITE, pattern_type=PREFIXED),
                                               acl("orders", O.WRITE, DENY, pattern_type=PREFIXED)], True),
]


@pytest.mark.parametrize(("acls", "allowed"), [case[1:] for case in ANY_CASES], ids=[case[0] for case in ANY_CASES])
def test_authorize_any_is_kafkas_authorize_by_resource_type(acls, allowed):
    assert authorizer_of(*acls).authorize_any(ALICE, HOST, O.WRITE, TOPIC) is allowed


def test_a_change_replaces_one_pattern_and_clears_cached_answers():
    authorizer = authorizer_of(acl("orders-", O.WRITE, pattern_type=PREFIXED), acl("audit", O.READ))
    assert authorizer.acl_count == 2
    assert authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders-1")
    pattern, deny = acl("orders-1", O.WRITE, DENY)
    authorizer.replace(pattern, [deny])
    assert not authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders-1")
    authorizer.replace(pattern, [])
    assert authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders-1")
    authorizer.replace(ResourcePattern(TOPIC, "orders-", PREFIXED), [])
    assert not authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders-1")
    assert authorizer.acl_count == 1
    authorizer.replace_all({})
    assert authorizer.acl_count == 0 and not authorizer.authorize(ALICE, HOST, O.READ, TOPIC, "audit")


def test_the_decision_cache_is_bounded():
    authorizer = authorizer_of(acl("*", O.READ), decision_cache_max=3)
    for index in range(10):
        assert authorizer.authorize(ALICE, HOST, O.READ, TOPIC, f"topic-{index}")
    assert len(authorizer._decisions) == 3


def test_ten_thousand_acls_answer_as_a_few():
    many = [acl(f"team-{index}-", O.WRITE, pattern_type=PREFIXED, principal=f"User:u{index}") for index in range(5000)]
    many += [acl(f"topic-{index}", O.READ, principal=f"User:u{index}") for index in range(5000)]
    authorizer = authorizer_of(*many, acl("orders-", O.WRITE, pattern_type=PREFIXED))
    assert authorizer.acl_count == 10_001
    # Every distinct prefix length is looked up, never every prefixed pattern: the count of
    # lengths, not of ACLs, bounds a check.
    assert len(authorizer._prefix_lengths[TOPIC]) < 10
    assert authorizer.authorize(ALICE, HOST, O.WRITE, TOPIC, "orders-1")
    assert authorizer.authorize("User:u42", HOST, O.WRITE, TOPIC, "team-42-x")
    assert not authorizer.authorize("User:u42", HOST, O.WRITE, TOPIC, "team-43-x")
