"""CreateAcls, DescribeAcls and DeleteAcls as KafkaAdmin sends them with replog's own client
(net/client.py): request bodies from bindings and filters, and answers read back into what
admin/acls.py returns, so that both doors of `replog acls` give the same results."""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from replog.admin.acls import DeletedBindings
from replog.admin.errors import AdminError, error_for_code
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


def creations(bindings: Sequence[AclBinding]) -> dict:
    return {"creations": [
        {"resource_type": binding.pattern.resource_type, "resource_name": binding.pattern.name,
         "resource_pattern_type": binding.pattern.pattern_type, "principal": binding.entry.principal,
         "host": binding.entry.host, "operation": binding.entry.operation, "permission_type": binding.entry.permission}
        for binding in bindings]}


def filter_fields(acl_filter: AclBindingFilter) -> dict:
    return {"resource_type_filter": acl_filter.resource_type, "resource_name_filter": acl_filter.name,
            "pattern_type_filter": acl_filter.pattern_type, "principal_filter": acl_filter.principal,
            "host_filter": acl_filter.host, "operation": acl_filter.operation, "permission_type": acl_filter.permission}


def _error(item) -> AdminError | None:
    if item.error_code == ErrorCode.none:
        return None
    return error_for_code(int(item.error_code), item.error_message or item.error_code.name)


def created(answer) -> list[AdminError | None]:
    """Per creation, in order: its refusal, or None."""
    return [_error(result) for result in answer.results]


def _binding(resource_type: int, name: str, pattern_type: int, acl) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType(resource_type), name, PatternType(pattern_type)),
                      AccessControlEntry(acl.principal, acl.host, AclOperation(acl.operation),
                                         AclPermissionType(acl.permission_type)))


def described(answer) -> list[AclBinding]:
    """The bindings of a DescribeAcls answer, sorted; its error raised as the AdminError."""
    error = _error(answer)
    if error is not None:
        raise error
    return sorted(_binding(resource.resource_type, resource.resource_name, resource.pattern_type, acl)
                  for resource in answer.resources for acl in resource.acls)


def deleted(answer) -> list[DeletedBindings | AdminError]:
    """Per filter, in order: its refusal, or the bindings it removed, each with its failure."""
    return [_error(result) or [(_binding(acl.resource_type, acl.resource_name, acl.pattern_type, acl), _error(acl))
                               for acl in result.matching_acls]
            for result in answer.filter_results]
