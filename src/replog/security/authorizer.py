"""Whether a principal may do something, by Kafka's ACL rules, answered from memory.

The rules are those of Kafka's StandardAuthorizer: the ACLs that apply to a resource are those
on its exact name (LITERAL), on the wildcard name "*" (LITERAL) and on every prefix of its name
(PREFIXED). Of those, an entry counts when its principal is the caller's or User:*, and its host
the caller's address or *. A counting DENY for the operation (or for All) refuses, whatever
allows; otherwise a counting ALLOW for the operation, for All, or for one implying it (Read,
Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs; a DENY implies
nothing) grants. With no ALLOW, the answer is no, unless no ACL at all applies to the resource
and allow.everyone.if.no.acl.found is set. super.users are always allowed.

The index is by resource type, then by literal name and by prefix, so that a check costs a few
dict lookups: its exact name, "*", and each of its prefixes of a length some PREFIXED pattern
of its type has. Answers are kept in a bounded cache cleared on every change, so that the
produce and fetch paths ask one dict. The feed (acl_feed.py) changes the index from the store;
all of it runs on the broker's event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from replog.security.acls import (
    IMPLIED_BY,
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)

# Bounds the decisions kept: (principal, host, operation, resource) tuples, a few hundred bytes
# each. Past it the oldest is dropped: clients with many topics still hit for the ones they use.
DECISION_CACHE_MAX = 100_000
# The name Kafka's authorizeByResourceType checks first, so that super users and
# allow.everyone.if.no.acl.found pass whatever the ACLs on the type deny.
_PROBE_NAME = "hardcode"

_Entries = tuple[AccessControlEntry, ...]


class AclAuthorizer:
    """Kafka's ACL semantics over an in-memory index (see the module)."""

    def __init__(self, super_users: Iterable[str] = (), allow_everyone_if_no_acl_found: bool = False,
                 decision_cache_max: int = DECISION_CACHE_MAX):
        assert decision_cache_max > 0
        self.super_users = frozenset(super_users)
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._decision_cache_max = decision_cache_max
        self._literal: dict[ResourceType, dict[str, _Entries]] = {}
        self._prefixed: dict[ResourceType, dict[str, _Entries]] = {}
        # Per type, how many PREFIXED patterns have each name length: the prefixes of a name
        # worth looking up.
        self._prefix_lengths: dict[ResourceType, dict[int, int]] = {}
        self._decisions: dict[tuple, bool] = {}
        self.acl_count = 0

    # checks
    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        key = (principal, host, operation, resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._remember(key, principal in self.super_users
                                      or self._decide(principal, host, operation, resource_type, name))
        return decision

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether some resource of the type allows the operation (Kafka's
        authorizeByResourceType): an ALLOW for the principal, literal or prefixed, that no
        DENY for the same operation on "*", the same name or a prefix of it overrides. Only the
        operation itself and All count here, as in Kafka: no implied operations."""
        key = (principal, host, operation, resource_type, None)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._remember(key, self.authorize(principal, host, operation, resource_type, _PROBE_NAME)
                                      or self._any_allowed(principal, host, operation, resource_type))
        return decision

    def _remember(self, key: tuple, decision: bool) -> bool:
        if len(self._decisions) >= self._decision_cache_max:
            del self._decisions[next(iter(self._decisions))]
        self._decisions[key] = decision
        return decision

    def _decide(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        applying = False
        allowed = False
        for entries in self._applying(resource_type, name):
            applying = True
            for entry in entries:  # bounded by the ACLs on one pattern
                permission = _counts(entry, principal, host, operation)
                if permission == AclPermissionType.DENY:
                    return False
                allowed = allowed or permission == AclPermissionType.ALLOW
        return allowed or (not applying and self.allow_everyone_if_no_acl_found)

    def _applying(self, resource_type: ResourceType, name: str) -> Iterable[_Entries]:
        """The entries of every pattern that applies to the resource: a few lookups, no scan."""
        literal = self._literal.get(resource_type)
        if literal:
            for key in (name, WILDCARD_RESOURCE) if name != WILDCARD_RESOURCE else (name,):
                entries = literal.get(key)
                if entries:
                    yield entries
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for length in self._prefix_lengths[resource_type]:  # bounded by the distinct prefix lengths
                if length <= len(name):
                    entries = prefixed.get(name[:length])
                    if entries:
                        yield entries

    def _any_allowed(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool:
        allowed: list[tuple[PatternType, str]] = []
        denied: dict[PatternType, set[str]] = {PatternType.LITERAL: set(), PatternType.PREFIXED: set()}
        wildcard_allowed = False
        for pattern_type, by_name in ((PatternType.LITERAL, self._literal.get(resource_type, {})),
                                      (PatternType.PREFIXED, self._prefixed.get(resource_type, {}))):
            for name, entries in by_name.items():  # every ACL of the type: asked rarely, and cached
                for entry in entries:
                    if not _names(entry, principal, host) or entry.operation not in (operation, AclOperation.ALL):
                        continue
                    wildcard = pattern_type == PatternType.LITERAL and name == WILDCARD_RESOURCE
                    if entry.permission == AclPermissionType.DENY:
                        if wildcard:
                            return False
                        denied[pattern_type].add(name)
                    elif wildcard:
                        wildcard_allowed = True
                    else:
                        allowed.append((pattern_type, name))
        return wildcard_allowed or any(
            not (pattern_type == PatternType.LITERAL and name in denied[PatternType.LITERAL])
            and not any(name[:length] in denied[PatternType.PREFIXED] for length in range(1, len(name) + 1))
            for pattern_type, name in allowed)

    # changes, from the feed
    def replace(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> None:
        """`pattern`'s entries are now `entries` (none: the pattern has no ACLs)."""
        self._set(pattern, tuple(sorted(set(entries))))
        self._decisions.clear()

    def replace_all(self, acls: Mapping[ResourcePattern, Iterable[AccessControlEntry]]) -> None:
        """Every pattern's entries, replacing all there were."""
        self._literal.clear()
        self._prefixed.clear()
        self._prefix_lengths.clear()
        self.acl_count = 0
        for pattern, entries in acls.items():
            self._set(pattern, tuple(sorted(set(entries))))
        self._decisions.clear()

    def _set(self, pattern: ResourcePattern, entries: _Entries) -> None:
        assert pattern.pattern_type in (PatternType.LITERAL, PatternType.PREFIXED), pattern
        prefixed = pattern.pattern_type == PatternType.PREFIXED
        by_name = (self._prefixed if prefixed else self._literal).setdefault(pattern.resource_type, {})
        before = by_name.pop(pattern.name, ())
        self.acl_count += len(entries) - len(before)
        if entries:
            by_name[pattern.name] = entries
        if prefixed and bool(before) != bool(entries):
            lengths = self._prefix_lengths.setdefault(pattern.resource_type, {})
            count = lengths.get(len(pattern.name), 0) + (1 if entries else -1)
            if count:
                lengths[len(pattern.name)] = count
            else:
                del lengths[len(pattern.name)]


def _names(entry: AccessControlEntry, principal: str, host: str) -> bool:
    """Whether the entry is about this principal from this host."""
    return (entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL) and (
        entry.host == host or entry.host == WILDCARD_HOST)


def _counts(entry: AccessControlEntry, principal: str, host: str, operation: AclOperation) -> AclPermissionType | None:
    """The entry's permission when it decides `operation` for the principal and host, else None."""
    if not _names(entry, principal, host):
        return None
    if entry.operation == AclOperation.ALL or entry.operation == operation:
        return entry.permission
    if entry.permission == AclPermissionType.ALLOW and entry.operation in IMPLIED_BY.get(operation, ()):
        return entry.permission
    return None
