"""CreateAcls, DescribeAcls and DeleteAcls: the ACL bindings in the coordination store
(admin/acls.py), as `kafka-acls --bootstrap-server` and the AdminClients manage them. Any broker
answers; every broker's authorizer learns the change from the store.

With an authorizer, the caller needs Alter on the Cluster to create or delete ACLs and Describe
on it to list them, as in Kafka; refused, each item (CreateAcls, DeleteAcls) or the whole answer
(DescribeAcls) is CLUSTER_AUTHORIZATION_FAILED, and the denial audited (net/authorization.py). A code the wire carries that Kafka does not know
reads as UNKNOWN, which the checks refuse with INVALID_REQUEST (Kafka closes the connection).
"""

from __future__ import annotations

import enum

from kio.schema.errors import ErrorCode

from replog.admin import acls
from replog.admin.errors import AdminError, store_failure
from replog.coord_backends import StoreError
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

from ..authorization import CLUSTER_REFUSED, authorized_on_cluster
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal



def _code(kind: type[enum.IntEnum], value: int) -> enum.IntEnum:
    try:
        return kind(value)
    except ValueError:
        return kind(0)  # UNKNOWN


def _error_fields(error: AdminError | None) -> dict:
    if error is None:
        return {"error_code": ErrorCode.none, "error_message": None}
    return {"error_code": error.code, "error_message": error.message}


def _filter(resource_type: int, name: str | None, pattern_type: int, principal: str | None, host: str | None,
            operation: int, permission: int) -> AclBindingFilter:
    return AclBindingFilter(_code(ResourceType, resource_type), name, _code(PatternType, pattern_type), principal, host,
                            _code(AclOperation, operation), _code(AclPermissionType, permission))


@handles(ApiKey.CREATE_ACLS)
async def create_acls(services, request: Request):
    """One result per creation, in order."""
    creations = request.body.creations
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        results = [CLUSTER_REFUSED] * len(creations)
    else:
        bindings = [AclBinding(ResourcePattern(_code(ResourceType, creation.resource_type), creation.resource_name,
                                               _code(PatternType, creation.resource_pattern_type)),
                               AccessControlEntry(creation.principal, creation.host, _code(AclOperation, creation.operation),
                                                  _code(AclPermissionType, creation.permission_type)))
                    for creation in creations]
        results = await acls.create_acls(services.store, bindings, request.principal)
        for binding, error in zip(bindings, results):
            if error is not None:
                log_refusal(request, "ACL creation", str(binding.pattern), error.code)
    return await respond(request, {"throttle_time": 0, "results": [_error_fields(error) for error in results]})


@handles(ApiKey.DESCRIBE_ACLS)
async def describe_acls(services, request: Request):
    """The bindings the filter selects, grouped by resource pattern."""
    body = request.body
    acl_filter = _filter(body.resource_type_filter, body.resource_name_filter, body.pattern_type_filter,
                         body.principal_filter, body.host_filter, body.operation, body.permission_type)
    refused = not authorized_on_cluster(services, request, AclOperation.DESCRIBE)
    error = CLUSTER_REFUSED if refused else acls.filter_refusal(acl_filter)
    found: list[AclBinding] = []
    if error is None:
        try:
            found = await acls.describe_acls(services.store, acl_filter)
        except StoreError as failure:
            error = store_failure("ACLs", failure)
    slices = LoopSlices()
    resources: dict[ResourcePattern, list[dict]] = {}
    for binding in found:
        await slices.pause()
        entry = binding.entry
        resources.setdefault(binding.pattern, []).append({"principal": entry.principal, "host": entry.host,
                                                          "operation": entry.operation, "permission_type": entry.permission})
    return await respond(request, {"throttle_time": 0, **_error_fields(error), "resources": [
        {"resource_type": pattern.resource_type, "resource_name": pattern.name, "pattern_type": pattern.pattern_type,
         "acls": entries} for pattern, entries in resources.items()]}, slices)


@handles(ApiKey.DELETE_ACLS)
async def delete_acls(services, request: Request):
    """One result per filter, in order: the bindings it removed."""
    filters = [_filter(each.resource_type_filter, each.resource_name_filter, each.pattern_type_filter,
                       each.principal_filter, each.host_filter, each.operation, each.permission_type)
               for each in request.body.filters]
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        outcomes = [CLUSTER_REFUSED] * len(filters)
    else:
        try:
            outcomes = await acls.delete_acls(services.store, filters, request.principal)
        except StoreError as failure:
            outcomes = [store_failure("ACLs", failure)] * len(filters)
    slices = LoopSlices()
    results = []
    for outcome in outcomes:
        if isinstance(outcome, AdminError):
            results.append({**_error_fields(outcome), "matching_acls": []})
            continue
        matching = []
        for binding, error in outcome:
            await slices.pause()
            pattern, entry = binding.pattern, binding.entry
            matching.append({**_error_fields(error), "resource_type": pattern.resource_type, "resource_name": pattern.name,
                             "pattern_type": pattern.pattern_type, "principal": entry.principal, "host": entry.host,
                             "operation": entry.operation, "permission_type": entry.permission})
        results.append({**_error_fields(None), "matching_acls": matching})
    return await respond(request, {"throttle_time": 0, "filter_results": results}, slices)
