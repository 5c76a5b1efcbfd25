"""InitProducerId: an id and epoch for an idempotent producer.

Transactions are not implemented: a request naming a transactional id is refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, a fatal error the client reports at once rather than
retrying forever. An idempotent producer's id needs IdempotentWrite on the cluster or Write on
some topic, as Kafka's (net/authorization.py): CLUSTER_AUTHORIZATION_FAILED otherwise.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.security.acls import AclOperation, ResourceType

from ..authorization import authorized_any, authorized_on_cluster
from ..codec import ApiKey, Request, build_response
from . import handles

FIRST_EPOCH = 0


@handles(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(services, request: Request):
    if request.body.transactional_id is not None:
        return build_response(
            request,
            {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed, "producer_id": -1, "producer_epoch": -1},
        )
    if not (authorized_on_cluster(services, request, AclOperation.IDEMPOTENT_WRITE, audit=False)
            or authorized_any(services, request, AclOperation.WRITE, ResourceType.TOPIC)):
        return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                         "producer_id": -1, "producer_epoch": -1})
    producer_id = await services.producer_ids.next_id()
    return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.none, "producer_id": producer_id, "producer_epoch": FIRST_EPOCH})
