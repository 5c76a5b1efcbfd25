"""ACL bindings in the coordination store, as CreateAcls, DescribeAcls, DeleteAcls and
`replog acls` change and read them (the node format is security/acl_records.py's).

    create_acls     each binding checked with Kafka's words, then added to its pattern's node
    describe_acls   the bindings a filter selects, by pattern
    delete_acls     per filter, the bindings it removed

Every change of a pattern's node is a compare-and-set on the version read, read again on a
conflict, so that two brokers and the CLI adding to one pattern at once lose nothing; then a
sequential AclChange notification tells every broker to read that node again. The writer keeps
the newest notifications and removes older ones (change_notifications.py), as Kafka's writer does: a
broker that lags further behind reads every pattern again. A node left without entries is
deleted. Each binding added or removed is one line on the `replog.audit` logger.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence

from kio.schema.errors import ErrorCode

from replog.coord_backends import BadVersion, NodeExists, NoNode, Store, StoreError
from replog.coord_backends import paths
from replog.coord_backends.change_notifications import notify
from replog.security.acl_records import change_notice, encoded, node_path, read_entries, read_many, stored_patterns
from replog.security.acls import (
    BINDABLE_OPERATIONS,
    BINDABLE_PATTERN_TYPES,
    BINDABLE_PERMISSIONS,
    BINDABLE_RESOURCE_TYPES,
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    name_of,
)

from .errors import AdminError, store_failure

audit = logging.getLogger("replog.audit")

# Writers of one pattern at once: every broker and CLI of the cluster; each conflict means another
# writer's change went in, so a writer that keeps losing is a sign of a runaway loop elsewhere.
WRITE_ATTEMPTS_MAX = 64
UNKNOWN_REQUESTER = "-"  # the audit line's `by` when no principal made the change (the store door)

DeletedBindings = list[tuple[AclBinding, AdminError | None]]


def invalid_request(message: str) -> AdminError:
    return AdminError(ErrorCode.invalid_request, message)


def creation_refusal(binding: AclBinding) -> AdminError | None:
    """Why a binding cannot be created, in Kafka's words and order (AclApis, then the
    controller's validateNewAcl), or None. Beyond Kafka, which answers these with
    UNKNOWN_SERVER_ERROR and no message, the codes a binding cannot carry (ANY, MATCH) and the
    resource types ACLs are not kept for are INVALID_REQUEST, named."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.resource_type == ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return invalid_request(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        return invalid_request("Invalid empty resource name")
    for value, allowed in ((pattern.pattern_type, BINDABLE_PATTERN_TYPES), (pattern.resource_type, BINDABLE_RESOURCE_TYPES),
                           (entry.operation, BINDABLE_OPERATIONS), (entry.permission, BINDABLE_PERMISSIONS)):
        if value not in allowed:
            return invalid_request(f"Invalid {_kind(value)} {value.name}")
    if ":" not in entry.principal:
        return invalid_request(f"Could not parse principal from `{entry.principal}` (no colon is present separating the "
                               "principal type from the principal name)")
    if not entry.host:
        return invalid_request("Host pattern cannot be null or empty")
    return None


def _kind(value) -> str:
    """Kafka's field name for a code's kind: patternType, resourceType, operation, permissionType."""
    return {PatternType: "patternType", ResourceType: "resourceType", AclOperation: "operation",
            AclPermissionType: "permissionType"}[type(value)]


def filter_refusal(acl_filter: AclBindingFilter) -> AdminError | None:
    """Why a filter cannot select anything, in Kafka's words (validateFilter), or None."""
    if acl_filter.resource_type == ResourceType.UNKNOWN or acl_filter.pattern_type == PatternType.UNKNOWN:
        return invalid_request("Unknown patternFilter.")
    if acl_filter.operation == AclOperation.UNKNOWN or acl_filter.permission == AclPermissionType.UNKNOWN:
        return invalid_request("Unknown entryFilter.")
    return None


async def create_acls(store: Store, bindings: Sequence[AclBinding], requester: str | None = None) -> list[AdminError | None]:
    """Add the bindings (one already there is no change); per binding, in order, its refusal or
    failure, or None. `requester`: the principal asking, for the audit line."""
    results: list[AdminError | None] = [creation_refusal(binding) for binding in bindings]
    wanted: dict[ResourcePattern, list[int]] = {}
    for index, binding in enumerate(bindings):
        if results[index] is None:
            wanted.setdefault(binding.pattern, []).append(index)
    for pattern, indexes in wanted.items():  # bounded by the request's bindings
        added = {bindings[index].entry for index in indexes}
        try:
            before, after = await _change(store, pattern, lambda entries: entries | added)
        except (AdminError, StoreError) as error:
            failure = error if isinstance(error, AdminError) else store_failure("ACLs", error)
            for index in indexes:
                results[index] = failure
            continue
        _audit("ACL added", requester, pattern, after - before)
    return results


async def describe_acls(store: Store, acl_filter: AclBindingFilter) -> list[AclBinding]:
    """The bindings `acl_filter` selects, sorted by pattern then entry."""
    patterns = [pattern for pattern in await stored_patterns(store) if acl_filter.matches_pattern(pattern)]
    return sorted(AclBinding(pattern, entry) for pattern, entries in (await read_many(store, patterns)).items()
                  for entry in entries if acl_filter.matches_entry(entry))


async def delete_acls(store: Store, filters: Sequence[AclBindingFilter],
                      requester: str | None = None) -> list[DeletedBindings | AdminError]:
    """Remove every binding any of the filters selects; per filter, in order, its refusal, or
    the bindings it selected that were removed, each with the failure that kept it, if any (a
    binding two filters select is in both results, as Kafka answers)."""
    results: list[DeletedBindings | AdminError] = [filter_refusal(acl_filter) or [] for acl_filter in filters]
    valid = [acl_filter for acl_filter, result in zip(filters, results) if not isinstance(result, AdminError)]
    patterns = [pattern for pattern in await stored_patterns(store)
                if any(acl_filter.matches_pattern(pattern) for acl_filter in valid)]
    for pattern, entries in (await read_many(store, patterns)).items():  # bounded by the stored patterns
        def kept(current: frozenset[AccessControlEntry]) -> frozenset[AccessControlEntry]:
            return frozenset(entry for entry in current
                             if not any(acl_filter.matches(AclBinding(pattern, entry)) for acl_filter in valid))

        if kept(frozenset(entries)) == frozenset(entries):
            continue
        failure = None
        try:
            before, after = await _change(store, pattern, kept)
            removed = before - after
        except (AdminError, StoreError) as error:
            failure = error if isinstance(error, AdminError) else store_failure("ACLs", error)
            removed = frozenset(entries) - kept(frozenset(entries))
        else:
            _audit("ACL deleted", requester, pattern, removed)
        for acl_filter, result in zip(filters, results):
            if not isinstance(result, AdminError):
                result.extend((AclBinding(pattern, entry), failure) for entry in sorted(removed)
                              if acl_filter.matches(AclBinding(pattern, entry)))
    return results


async def _change(store: Store, pattern: ResourcePattern,
                  change: Callable[[frozenset[AccessControlEntry]], frozenset[AccessControlEntry]],
                  ) -> tuple[frozenset[AccessControlEntry], frozenset[AccessControlEntry]]:
    """Apply `change` to the pattern's entries with compare-and-set, reading them again after
    another writer's change; (entries before, entries after). A change notification follows
    every write; no write, no notification."""
    path = node_path(pattern)
    for _ in range(WRITE_ATTEMPTS_MAX):
        current, version = await read_entries(store, pattern)
        before = frozenset(current)
        after = change(before)
        if after == before:
            return before, after
        try:
            if version is None:
                await store.create(path, encoded(after), make_parents=True)
            elif after:
                await store.set(path, encoded(after), version)
            else:
                await store.delete(path, version)
        except (NodeExists, BadVersion, NoNode):
            continue
        await notify(store, paths.ACL_CHANGE_PREFIX, change_notice(pattern))
        return before, after
    raise AdminError(ErrorCode.unknown_server_error, f"the ACLs of {pattern} kept changing meanwhile; try again")


def _audit(event: str, requester: str | None, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
    for entry in sorted(entries):
        audit.info("%s by=%s principal=%s host=%s operation=%s permission=%s resource_type=%s pattern_type=%s resource=%s",
                   event, requester or UNKNOWN_REQUESTER, entry.principal, entry.host, name_of(entry.operation),
                   name_of(entry.permission), name_of(pattern.resource_type), pattern.pattern_type.name, pattern.name)
