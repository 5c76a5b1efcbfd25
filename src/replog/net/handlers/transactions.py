"""The transaction APIs a producer and an operator use: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions. Thin: they translate requests
for the transaction coordinator (transactions/coordinator.py), which holds every rule.

InitProducerId without a transactional id is an idempotent producer's: a fresh producer id,
with IdempotentWrite on the cluster or Write on some topic. With one, the id's coordinator
answers, and the request needs Write on the TransactionalId.

Authorization as Kafka's table (net/authorization.py): Write on the TransactionalId for
InitProducerId, AddPartitionsToTxn v0-3, AddOffsetsToTxn and EndTxn; Write on each topic added
(internal topics never: __consumer_offsets joins through AddOffsetsToTxn, which needs Read on
the group); AddPartitionsToTxn v4+ is a broker's (KIP-890 verification, verify_only) and needs
ClusterAction; DescribeTransactions needs Describe on each id, and ListTransactions lists the
ids the principal may Describe.

Clients older than PRODUCER_FENCED (InitProducerId v0-3, the others v0-1) are answered
INVALID_PRODUCER_EPOCH instead, as Kafka answers them.
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC
from replog.security.acls import AclOperation, ResourceType
from replog.transactions import TRANSACTION_STATE_TOPIC

from ..authorization import authorized, authorized_any, authorized_on_cluster
from ..codec import ApiKey, Request, build_response
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal

FIRST_EPOCH = 0
FIRST_PRODUCER_FENCED_INIT_VERSION = 4
FIRST_PRODUCER_FENCED_VERSION = 2
FIRST_BATCHED_ADD_PARTITIONS_VERSION = 4
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
_NO_THROTTLE = datetime.timedelta(0)
# DescribeTransactions' start time is not nullable: Kafka writes -1 for a transaction not started
# (kio's reader refuses a negative instant: a client of kio reads this field by hand), and its
# default, 0, beside an error.
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_NOT_STARTED = _EPOCH - datetime.timedelta(milliseconds=1)


def _ms(value: datetime.timedelta) -> int:
    return int(value.total_seconds() * 1000)


def _for_version(request: Request, error: int, first_fenced_version: int = FIRST_PRODUCER_FENCED_VERSION) -> int:
    if error == ErrorCode.producer_fenced and request.api_version < first_fenced_version:
        return ErrorCode.invalid_producer_epoch
    return error


def _may_write(services, request: Request, transactional_id: str) -> bool:
    return authorized(services, request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


# -- InitProducerId ---------------------------------------------------------------------------


@handles(ApiKey.INIT_PRODUCER_ID)
async def init_producer_id(services, request: Request):
    body = request.body
    transactional_id = body.transactional_id
    if transactional_id is None:
        if not (authorized_on_cluster(services, request, AclOperation.IDEMPOTENT_WRITE, audit=False)
                or authorized_any(services, request, AclOperation.WRITE, ResourceType.TOPIC)):
            return _init_answer(request, ErrorCode.cluster_authorization_failed)
        producer_id = await services.producer_ids.next_id()
        return _init_answer(request, ErrorCode.none, producer_id, FIRST_EPOCH)
    if not _may_write(services, request, transactional_id):
        return _init_answer(request, ErrorCode.transactional_id_authorization_failed)
    result = await services.transactions.init_producer_id(
        transactional_id, _ms(body.transaction_timeout), getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
    if result.error in (ErrorCode.invalid_transaction_timeout, ErrorCode.invalid_request):
        log_refusal(request, "init transactional producer", transactional_id, result.error)
    return _init_answer(request, _for_version(request, result.error, FIRST_PRODUCER_FENCED_INIT_VERSION),
                        result.producer_id, result.producer_epoch)


def _init_answer(request: Request, error: int, producer_id: int = -1, producer_epoch: int = -1):
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": error, "producer_id": producer_id,
                                    "producer_epoch": producer_epoch})


# -- AddPartitionsToTxn -----------------------------------------------------------------------


@handles(ApiKey.ADD_PARTITIONS_TO_TXN)
async def add_partitions_to_txn(services, request: Request):
    body = request.body
    if request.api_version < FIRST_BATCHED_ADD_PARTITIONS_VERSION:
        errors = await _add_partitions(services, request, body.v3_and_below_transactional_id,
                                       body.v3_and_below_producer_id, body.v3_and_below_producer_epoch,
                                       _partitions(body.v3_and_below_topics), verify_only=False)
        return build_response(request, {"throttle_time": _NO_THROTTLE, "results_by_topic_v3_and_below": _by_topic(errors)})
    # Batches of transactions come from other brokers only: verification before appending.
    if not authorized_on_cluster(services, request, AclOperation.CLUSTER_ACTION):
        return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.cluster_authorization_failed,
                                        "results_by_transaction": []})
    slices = LoopSlices()
    results = []
    for transaction in body.transactions:  # bounded by the request's size
        await slices.pause()
        errors = await _add_partitions(services, request, transaction.transactional_id, transaction.producer_id,
                                       transaction.producer_epoch, _partitions(transaction.topics),
                                       verify_only=transaction.verify_only)
        results.append({"transactional_id": transaction.transactional_id, "topic_results": _by_topic(errors)})
    return await respond(request, {"throttle_time": _NO_THROTTLE, "error_code": ErrorCode.none,
                                   "results_by_transaction": results}, slices)


def _partitions(topics) -> list[tuple[str, int]]:
    return list(dict.fromkeys((topic.name, int(index)) for topic in topics for index in topic.partitions))


async def _add_partitions(services, request: Request, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: list[tuple[str, int]], *, verify_only: bool) -> dict[tuple[str, int], int]:
    """An error per partition. Any partition refused (not authorized, unknown) fails the whole
    transaction's request: the others answer OPERATION_NOT_ATTEMPTED, as Kafka's."""
    from_client = request.api_version < FIRST_BATCHED_ADD_PARTITIONS_VERSION
    if from_client and not _may_write(services, request, transactional_id):
        return dict.fromkeys(partitions, ErrorCode.transactional_id_authorization_failed)
    refused = {}
    for topic, index in partitions:  # bounded by the request's size
        if from_client and (topic in INTERNAL_TOPICS
                            or not authorized(services, request, AclOperation.WRITE, ResourceType.TOPIC, topic)):
            refused[(topic, index)] = ErrorCode.topic_authorization_failed
        elif index not in services.metadata.topics.get(topic, {}):
            refused[(topic, index)] = ErrorCode.unknown_topic_or_partition
    if refused:
        return {partition: refused.get(partition, ErrorCode.operation_not_attempted) for partition in partitions}
    coordinator = services.transactions
    if verify_only:
        return coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
    error = await coordinator.add_partitions(transactional_id, producer_id, producer_epoch, partitions)
    return dict.fromkeys(partitions, _for_version(request, error))


def _by_topic(errors: dict[tuple[str, int], int]) -> list[dict]:
    topics: dict[str, list[dict]] = {}
    for (topic, index), error in errors.items():  # bounded by the request's partitions
        topics.setdefault(topic, []).append({"partition_index": index, "partition_error_code": error})
    return [{"name": topic, "results_by_partition": results} for topic, results in topics.items()]


# -- AddOffsetsToTxn, EndTxn ------------------------------------------------------------------


@handles(ApiKey.ADD_OFFSETS_TO_TXN)
async def add_offsets_to_txn(services, request: Request):
    body = request.body
    return await _producer_request(services, request, lambda: services.transactions.add_offsets(
        body.transactional_id, body.producer_id, body.producer_epoch, body.group_id), group_id=body.group_id)


@handles(ApiKey.END_TXN)
async def end_txn(services, request: Request):
    body = request.body
    return await _producer_request(services, request, lambda: services.transactions.end_txn(
        body.transactional_id, body.producer_id, body.producer_epoch, body.committed))


async def _producer_request(services, request: Request, act: Callable[[], Awaitable[int]], group_id: str | None = None):
    """One error for the request: Write on its transactional id (and Read on `group_id`) first."""
    if not _may_write(services, request, request.body.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    elif group_id is not None and not authorized(services, request, AclOperation.READ, ResourceType.GROUP, group_id):
        error = ErrorCode.group_authorization_failed
    else:
        error = _for_version(request, await act())
    return build_response(request, {"throttle_time": _NO_THROTTLE, "error_code": error})


# -- DescribeTransactions, ListTransactions ---------------------------------------------------


@handles(ApiKey.DESCRIBE_TRANSACTIONS)
async def describe_transactions(services, request: Request):
    slices = LoopSlices()
    states = []
    for transactional_id in request.body.transactional_ids:  # bounded by the request's size
        await slices.pause()
        if not authorized(services, request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, transactional_id):
            states.append(_description(transactional_id, ErrorCode.transactional_id_authorization_failed))
            continue
        (described,) = services.transactions.describe([transactional_id])
        if described.error != ErrorCode.none:
            states.append(_description(transactional_id, described.error))
            continue
        topics: dict[str, list[int]] = {}
        for topic, index in described.partitions:  # bounded by the transaction's partitions
            # As Kafka's: the topics the principal may not Describe are left out.
            if authorized(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC, topic, audit=False):
                topics.setdefault(topic, []).append(index)
        start = (_NOT_STARTED if described.start_timestamp_ms < 0 else described.start_timestamp_ms)
        states.append(_description(transactional_id, ErrorCode.none, described.state, described.timeout_ms, start,
                                   described.producer_id, described.producer_epoch,
                                   [{"topic": topic, "partitions": indexes} for topic, indexes in topics.items()]))
    return await respond(request, {"throttle_time": _NO_THROTTLE, "transaction_states": states}, slices)


def _description(transactional_id: str, error: int, state: str = "", timeout_ms: int = 0,
                 start: int | datetime.datetime = _EPOCH, producer_id: int = -1, producer_epoch: int = -1,
                 topics: list[dict] | None = None) -> dict:
    return {"error_code": error, "transactional_id": transactional_id, "transaction_state": state,
            "transaction_timeout": timeout_ms, "transaction_start_time": start, "producer_id": producer_id,
            "producer_epoch": producer_epoch, "topics": topics or []}


@handles(ApiKey.LIST_TRANSACTIONS)
async def list_transactions(services, request: Request):
    body = request.body
    error, unknown_states, listed = services.transactions.list_transactions(
        body.state_filters, body.producer_id_filters, getattr(body, "duration_filter", -1))
    slices = LoopSlices()
    states = []
    for listing in listed:  # bounded by the ids coordinated here
        await slices.pause()
        if authorized(services, request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, listing.transactional_id,
                      audit=False):
            states.append({"transactional_id": listing.transactional_id, "producer_id": listing.producer_id,
                           "transaction_state": listing.state})
    return await respond(request, {"throttle_time": _NO_THROTTLE, "error_code": error,
                                   "unknown_state_filters": unknown_states, "transaction_states": states}, slices)
