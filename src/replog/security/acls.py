"""Access control entries as Kafka defines them: what an ACL binding is, the codes the wire
carries, the names operators write, and which bindings a filter selects.

A binding says that a principal, from a host, is allowed or denied an operation on resources:
the one named (LITERAL; the name "*" stands for every resource of its type) or every one whose
name starts with it (PREFIXED). The codes are the wire's (Kafka's ResourceType, PatternType,
AclOperation, AclPermissionType); the names are those of kafka-acls and of Kafka's ZooKeeper
records ("Topic", "Read", "Allow"). A filter's ANY matches every value; its MATCH pattern type
selects every binding that would apply to the named resource (literal, wildcard and prefixed),
as DescribeAcls and DeleteAcls take them. What the authorizer does with bindings is
authorizer.py's.
"""

from __future__ import annotations

import dataclasses
import enum

CLUSTER_NAME = "kafka-cluster"  # the one Cluster resource's name, as Kafka's
WILDCARD_RESOURCE = "*"  # a LITERAL name matching every resource of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# The kinds of resource ACLs are kept for; a binding on another is refused.
BINDABLE_RESOURCE_TYPES = frozenset({ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                                     ResourceType.TRANSACTIONAL_ID})
BINDABLE_PATTERN_TYPES = frozenset({PatternType.LITERAL, PatternType.PREFIXED})
BINDABLE_OPERATIONS = frozenset(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY}
BINDABLE_PERMISSIONS = frozenset({AclPermissionType.ALLOW, AclPermissionType.DENY})

# Allowing one of these allows the operation it maps to as well (Kafka's implied operations).
IMPLIED_BY: dict[AclOperation, frozenset[AclOperation]] = {
    AclOperation.DESCRIBE: frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER}),
    AclOperation.DESCRIBE_CONFIGS: frozenset({AclOperation.ALTER_CONFIGS}),
}


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def name_of(value: enum.IntEnum) -> str:
    """Kafka's written name of a code: Topic, TransactionalId, ClusterAction, Allow, Prefixed."""
    return _camel(value.name)


def parse_name(kind: type[enum.IntEnum], text: str) -> enum.IntEnum:
    """The code of a written name, in any case and with or without underscores or dashes
    (Topic, TOPIC, transactional-id, CLUSTER_ACTION); ValueError naming the accepted ones."""
    wanted = text.strip().replace("-", "").replace("_", "").lower()
    for value in kind:
        if value.name.replace("_", "").lower() == wanted and value.name != "UNKNOWN":
            return value
    raise ValueError(f"{text!r} is not one of {', '.join(name_of(value) for value in kind if value.name != 'UNKNOWN')}")


@dataclasses.dataclass(frozen=True, order=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return f"{name_of(self.resource_type)}:{name_of(self.pattern_type).upper()}:{self.name}"


@dataclasses.dataclass(frozen=True, order=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (f"{self.principal} has {name_of(self.permission)} permission for operation {name_of(self.operation)} "
                f"from host {self.host}")


@dataclasses.dataclass(frozen=True, order=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry

    def __str__(self) -> str:
        return f"({self.pattern}, {self.entry})"


@dataclasses.dataclass(frozen=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls name: None for a name, principal or host, and ANY for a
    code, match every value."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            return self.name is None or _applies(pattern, self.name)
        if self.pattern_type != PatternType.ANY and self.pattern_type != pattern.pattern_type:
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation == AclOperation.ANY or self.operation == entry.operation)
                and (self.permission == AclPermissionType.ANY or self.permission == entry.permission))

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)


def _applies(pattern: ResourcePattern, name: str) -> bool:
    """Whether bindings on `pattern` apply to the resource called `name` (of its type)."""
    if pattern.pattern_type == PatternType.LITERAL:
        return pattern.name == name or pattern.name == WILDCARD_RESOURCE
    return pattern.pattern_type == PatternType.PREFIXED and name.startswith(pattern.name)
