"""ACLs as the coordination store keeps them, in Kafka's ZooKeeper format.

One node per resource pattern: /kafka-acl/<Type>/<name> for a LITERAL one,
/kafka-acl-extended/prefixed/<Type>/<name> for a PREFIXED one (paths.acl_resource), holding an
AclEntries value whose entries carry Kafka's names ({"principal": "User:alice", "host": "*",
"operation": "Read", "permissionType": "Allow"}). A writer changes a pattern's node with
compare-and-set on the version `read_entries` returns, then creates a sequential AclChange
notification (`change_notice`) so that every broker re-reads that node (acl_feed.py).

What cannot be read (a node this version does not understand, an entry naming an unknown
operation) is logged and skipped: one bad node must not stop a broker from loading the others.
"""

from __future__ import annotations

import logging
from typing import Iterable

from replog.coord_backends.base import NoNode, Store, children_or_empty, get_all
from replog.coord_backends.paths import (
    LITERAL_ACLS,
    PREFIXED_ACLS,
    AclChange,
    AclEntries,
    InvalidNodeValue,
    acl_resource,
    acl_resources,
    unsanitized,
)
from replog.security.acls import (BINDABLE_OPERATIONS, BINDABLE_PERMISSIONS, BINDABLE_RESOURCE_TYPES, AccessControlEntry,
                                  AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType, name_of,
                                  parse_name)

logger = logging.getLogger(__name__)

_PATTERN_ROOTS = {PatternType.LITERAL: LITERAL_ACLS, PatternType.PREFIXED: PREFIXED_ACLS}


def node_path(pattern: ResourcePattern) -> str:
    """The node holding `pattern`'s entries."""
    return acl_resource(name_of(pattern.resource_type), pattern.pattern_type == PatternType.PREFIXED, pattern.name)


def encoded(entries: Iterable[AccessControlEntry]) -> bytes:
    """A pattern node's value for `entries` (sorted, so that equal sets encode equally)."""
    return AclEntries(acls=tuple(_record_of(entry) for entry in sorted(set(entries)))).encode()


def decoded(raw: bytes, where: str = "") -> tuple[AccessControlEntry, ...]:
    """The entries of a pattern node's value; InvalidNodeValue when the value is unreadable. An
    entry that names something unknown is logged and left out."""
    value = AclEntries.decode(raw)
    entries = []
    for record in value.acls:  # bounded by the node's size
        try:
            entries.append(_entry_of(record))
        except (TypeError, ValueError, KeyError) as error:
            logger.warning("unreadable ACL entry skipped node=%s entry=%r error=%s", where, record, error)
    return tuple(entries)


def _record_of(entry: AccessControlEntry) -> dict[str, str]:
    return {"principal": entry.principal, "host": entry.host, "operation": name_of(entry.operation),
            "permissionType": name_of(entry.permission)}


def _entry_of(record: dict[str, str]) -> AccessControlEntry:
    principal, host = record["principal"], record["host"]
    if not (isinstance(principal, str) and ":" in principal and isinstance(host, str) and host):
        raise ValueError("principal must be Type:name and host not empty")
    operation = parse_name(AclOperation, record["operation"])
    permission = parse_name(AclPermissionType, record["permissionType"])
    if operation not in BINDABLE_OPERATIONS or permission not in BINDABLE_PERMISSIONS:
        raise ValueError(f"{name_of(operation)}/{name_of(permission)} cannot be bound")
    return AccessControlEntry(principal, host, AclOperation(operation), AclPermissionType(permission))


async def read_entries(store: Store, pattern: ResourcePattern) -> tuple[tuple[AccessControlEntry, ...], int | None]:
    """`pattern`'s entries and its node's version (None: no node; a writer creates it). An
    unreadable node is logged and reads as no entries, with its version, so that a writer
    replaces it."""
    path = node_path(pattern)
    try:
        raw, version = await store.get(path)
    except NoNode:
        return (), None
    return _entries_or_none(raw, path), version


def _entries_or_none(raw: bytes, path: str) -> tuple[AccessControlEntry, ...]:
    try:
        return decoded(raw, path)
    except InvalidNodeValue as error:
        logger.warning("unreadable ACL node skipped node=%s error=%s", path, error)
        return ()


async def read_many(store: Store, patterns: list[ResourcePattern]) -> dict[ResourcePattern, tuple[AccessControlEntry, ...]]:
    """The entries of each of `patterns`: none for one without a node or readable entries."""
    paths = [node_path(pattern) for pattern in patterns]
    return {pattern: () if answer is None else _entries_or_none(answer[0], path)
            for pattern, path, answer in zip(patterns, paths, await get_all(store, paths))}


async def stored_patterns(store: Store) -> list[ResourcePattern]:
    """Every resource pattern with a node, literal and prefixed, of the types ACLs are kept for."""
    patterns = []
    for pattern_type, root in _PATTERN_ROOTS.items():
        for type_name in await children_or_empty(store, root):
            try:
                resource_type = ResourceType(parse_name(ResourceType, type_name))
            except ValueError:
                resource_type = ResourceType.UNKNOWN
            if resource_type not in BINDABLE_RESOURCE_TYPES:
                logger.warning("ACL nodes of an unknown resource type skipped path=%s/%s", root, type_name)
                continue
            parent = acl_resources(type_name, pattern_type == PatternType.PREFIXED)
            patterns.extend(ResourcePattern(resource_type, unsanitized(child), pattern_type)
                            for child in await children_or_empty(store, parent))
    return patterns


def change_notice(pattern: ResourcePattern) -> bytes:
    """The value of the notification telling brokers that `pattern`'s entries changed."""
    return AclChange(resource_type=name_of(pattern.resource_type), pattern_type=pattern.pattern_type.name,
                     name=pattern.name).encode()


def changed_pattern(raw: bytes) -> ResourcePattern:
    """The pattern a notification names; InvalidNodeValue when it names none this version knows."""
    change = AclChange.decode(raw)
    try:
        resource_type = ResourceType(parse_name(ResourceType, change.resource_type))
        pattern_type = PatternType(parse_name(PatternType, change.pattern_type))
    except (TypeError, ValueError, AttributeError) as error:
        raise InvalidNodeValue(f"AclChange: {error}") from None
    if resource_type not in BINDABLE_RESOURCE_TYPES or pattern_type not in _PATTERN_ROOTS or not isinstance(change.name, str):
        raise InvalidNodeValue(f"AclChange: {change} names no pattern ACLs are kept for")
    return ResourcePattern(resource_type, change.name, pattern_type)
