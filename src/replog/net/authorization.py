"""Whether a request may do what it asks, as Kafka's KafkaApis decides it: the checks the request
handlers make before acting, each naming an operation on a resource (a topic, a group, the
cluster, a transactional id), and the audit line of every denial.

With no authorizer configured (services.authorizer None) every request is allowed, at the cost
of one attribute test: the produce and fetch paths ask once per topic of a request, never per
partition.

Denials are written on their own logger, `replog.audit`, so that an operator can ship them apart
from the broker's other lines: principal, host, operation and resource, and the API asked. A
client retrying a refused request in a loop, or naming 50,000 topics it may not touch, writes
one line per (principal, host, operation, resource) per interval, within a budget of lines an
interval across them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from kio.schema.errors import ErrorCode

from replog.admin.errors import AdminError
from replog.inter_broker_settings import acts_as_broker
from replog.obs.logs import OncePerInterval
from replog.security.acls import CLUSTER_NAME, AclOperation, ResourceType, name_of

from .codec import ApiKey, Request

audit_logger = logging.getLogger("replog.audit")

DENIAL_LOG_INTERVAL_S = 10.0
DENIAL_SUBJECTS_MAX = 4096
DENIAL_LINES_PER_INTERVAL_MAX = 100

# Kafka's "not requested" value of an authorized_operations field.
OPERATIONS_NOT_REQUESTED = -(2**31)

# The operations an authorized_operations bit field reports for a resource type, as Kafka's
# AclEntry.supportedOperations.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}

# Kafka's words for each authorization error, where its answers carry a message.
REFUSAL_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.transactional_id_authorization_failed: "Transactional Id authorization failed.",
}

# The refusal of an admin request answered per item as the store-side admin answers its own.
CLUSTER_REFUSED = AdminError(ErrorCode.cluster_authorization_failed,
                             REFUSAL_MESSAGES[ErrorCode.cluster_authorization_failed])

_API_NAMES = {int(api_key): api_key.name.lower() for api_key in ApiKey}


class DenialLog:
    """The audit lines of denials, within the bounds above."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._lines = OncePerInterval(audit_logger, "denial", DENIAL_SUBJECTS_MAX, DENIAL_LINES_PER_INTERVAL_MAX,
                                      DENIAL_LOG_INTERVAL_S, clock)

    def log(self, request: Request, operation: AclOperation, resource_type: ResourceType, name: str) -> None:
        if self._lines.allows((request.principal, request.client_host, operation, resource_type, name)):
            audit_logger.warning("denied principal=%s host=%s operation=%s resource_type=%s resource=%s api=%s",
                                 request.principal, request.client_host or "-", name_of(operation),
                                 name_of(resource_type), name, _API_NAMES.get(request.api_key, str(request.api_key)))


_denials = DenialLog()


def authorized(services, request: Request, operation: AclOperation, resource_type: ResourceType, name: str,
               *, audit: bool = True) -> bool:
    """Whether the request's principal, from its host, may perform `operation` on the resource;
    a denial is audited unless `audit` is False (a check whose denial is not the request's, such
    as a topic left out of an answer listing every topic)."""
    authorizer = services.authorizer
    if authorizer is None:
        return True
    if authorizer.authorize(request.principal, request.client_host, operation, resource_type, name):
        return True
    if audit:
        _denials.log(request, operation, resource_type, name)
    return False


def authorized_on_cluster(services, request: Request, operation: AclOperation, *, audit: bool = True) -> bool:
    return authorized(services, request, operation, ResourceType.CLUSTER, CLUSTER_NAME, audit=audit)


def authorized_any(services, request: Request, operation: AclOperation, resource_type: ResourceType) -> bool:
    """Whether the principal may perform `operation` on some resource of the type (Kafka's
    authorizeByResourceType); a denial is audited with the resource named "*"."""
    authorizer = services.authorizer
    if authorizer is None:
        return True
    if authorizer.authorize_any(request.principal, request.client_host, operation, resource_type):
        return True
    _denials.log(request, operation, resource_type, "*")
    return False


def denied_names(services, request: Request, operation: AclOperation, resource_type: ResourceType,
                 names: Iterable[str], *, audit: bool = True) -> frozenset[str]:
    """The names among `names` the principal may not perform `operation` on, each asked once
    however often named: empty, at once, with no authorizer."""
    if services.authorizer is None:
        return frozenset()
    return frozenset(name for name in set(names)
                     if not authorized(services, request, operation, resource_type, name, audit=audit))


def authorized_operations(services, request: Request, resource_type: ResourceType, name: str) -> int:
    """Kafka's authorized_operations bit field of a resource: bit `code` set for each operation
    of the type's supported ones the principal may perform (all of them with no authorizer).
    Asking is not acting: nothing is audited."""
    field = 0
    for operation in SUPPORTED_OPERATIONS[resource_type]:
        if authorized(services, request, operation, resource_type, name, audit=False):
            field |= 1 << operation
    return field


def authorized_as_broker(services, request: Request) -> bool:
    """Whether the request may do what only brokers do (fetch as a follower, ask epochs as a
    replica): ClusterAction on the cluster with an authorizer, which allows super.users
    everything; without one, super.users' own rule (inter_broker_settings.acts_as_broker)."""
    if services.authorizer is None:
        return acts_as_broker(services.config, request.principal)
    return authorized_on_cluster(services, request, AclOperation.CLUSTER_ACTION)
