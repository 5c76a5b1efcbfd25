"""DescribeClientQuotas and AlterClientQuotas: client quotas in the coordination store
(admin/client_quotas.py), as `kafka-configs --entity-type users|clients` manages them. Any
broker answers, as it answers the other admin requests; every broker's feed then applies a
change (security/client_quota_feed.py).

With an authorizer, describing needs DescribeConfigs on the cluster and altering AlterConfigs
on it, as in Kafka: CLUSTER_AUTHORIZATION_FAILED otherwise, for the whole request or each of
its entries.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.admin import client_quotas
from replog.admin.client_quotas import QuotaAlteration, QuotaFilter
from replog.admin.errors import AdminError, store_failure
from replog.coord_backends import StoreError
from replog.security.acls import AclOperation

from ..authorization import CLUSTER_REFUSED, authorized_on_cluster
from ..codec import ApiKey, Request, build_response
from . import handles, log_refusal


def _names(entity) -> tuple[tuple[str, str | None], ...]:
    return tuple((part.entity_type, part.entity_name) for part in entity)


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS)
async def describe_client_quotas(services, request: Request):
    """The entities with quotas that the filter selects, with their quotas; or the request's
    error, with null entries."""
    body = request.body
    try:
        if not authorized_on_cluster(services, request, AclOperation.DESCRIBE_CONFIGS):
            raise CLUSTER_REFUSED
        described = await client_quotas.describe_client_quotas(services.store, QuotaFilter(
            tuple((component.entity_type, component.match_type, component.match) for component in body.components),
            body.strict))
    except (AdminError, StoreError) as error:
        failure = error if isinstance(error, AdminError) else store_failure("client quotas", error)
        log_refusal(request, "client quota description", "filter", failure.code)
        return build_response(request, {"throttle_time": 0, "error_code": failure.code, "error_message": failure.message,
                                        "entries": None})
    return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "entries": [
        {"entity": [{"entity_type": entity_type, "entity_name": name} for entity_type, name in names],
         "values": [{"key": key, "value": value} for key, value in values.items()]}
        for names, values in described]})


@handles(ApiKey.ALTER_CLIENT_QUOTAS)
async def alter_client_quotas(services, request: Request):
    """One result per entry, in request order."""
    body = request.body
    if authorized_on_cluster(services, request, AclOperation.ALTER_CONFIGS):
        outcomes = await client_quotas.alter_client_quotas(services.store, [
            QuotaAlteration(_names(entry.entity), tuple((op.key, None if op.remove else op.value) for op in entry.ops))
            for entry in body.entries], body.validate_only)
    else:
        outcomes = [CLUSTER_REFUSED] * len(body.entries)
    results = []
    for entry, error in zip(body.entries, outcomes):
        if error is not None:
            log_refusal(request, "client quota alteration", repr(_names(entry.entity)), error.code)
        results.append({"error_code": ErrorCode.none if error is None else error.code,
                        "error_message": None if error is None else error.message,
                        "entity": [{"entity_type": part.entity_type, "entity_name": part.entity_name} for part in entry.entity]})
    return build_response(request, {"throttle_time": 0, "entries": results})
