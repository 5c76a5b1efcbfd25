"""ACLs written to a store as a writer does, for the authorizer's tests."""

from __future__ import annotations

from replog.coord_backends.paths import ACL_CHANGE_PREFIX
from replog.security import acl_records
from replog.security.acls import (AccessControlEntry, AclOperation, AclPermissionType, PatternType, ResourcePattern,
                                  ResourceType)

ALICE, HOST = "User:alice", "10.0.0.7"
WRITE = AclOperation.WRITE
ORDERS = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
PAYMENTS = ResourcePattern(ResourceType.TOPIC, "payments", PatternType.LITERAL)
ALICE_WRITES = AccessControlEntry(ALICE, "*", WRITE, AclPermissionType.ALLOW)


async def set_acls(store, pattern, entries, notify=True) -> None:
    """What an ACL writer does: the pattern's node, then a notification."""
    path = acl_records.node_path(pattern)
    if entries:
        if await store.exists(path) is None:
            await store.create(path, acl_records.encoded(entries), make_parents=True)
        else:
            await store.set(path, acl_records.encoded(entries))
    else:
        await store.delete(path)
    if notify:
        await notify_change(store, acl_records.change_notice(pattern))


async def notify_change(store, value: bytes) -> str:
    return await store.create(ACL_CHANGE_PREFIX, value, sequential=True, make_parents=True)


def may_write(authorizer, topic) -> bool:
    return authorizer.authorize(ALICE, HOST, WRITE, ResourceType.TOPIC, topic)
