"""WriteTxnMarkers: a transaction coordinator's markers, written to the partitions led here
(docs/design.md §16.2), each once its in-sync replicas hold it; a marker in a partition of
__consumer_offsets then completes the offsets its transaction committed there
(txn_markers.write_marker).

Brokers send it (net/txn_markers.py), and so does an operator ending a hanging transaction: as
Kafka's, it needs Alter on the cluster or ClusterAction (authorization.authorized_as_broker),
else every partition is answered CLUSTER_AUTHORIZATION_FAILED. A partition not hosted here is
answered UNKNOWN_TOPIC_OR_PARTITION, one hosted but not led here NOT_LEADER_OR_FOLLOWER; the
sender finds the leader again and retries either.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from replog.security.acls import AclOperation
from replog.storage.control_batches import ControlType, Marker

from ..authorization import authorized_as_broker, authorized_on_cluster
from ..codec import ApiKey, Request, build_response
from ..txn_markers import write_marker
from . import count_error, handles


@handles(ApiKey.WRITE_TXN_MARKERS)
async def write_txn_markers(services, request: Request):
    markers = request.body.markers
    if not (authorized_on_cluster(services, request, AclOperation.ALTER, audit=False)
            or authorized_as_broker(services, request)):
        return _answer(request, markers, [[ErrorCode.cluster_authorization_failed] * _partitions_of(asked)
                                          for asked in markers])
    timeout_ms = services.config["request.timeout.ms"]
    errors = await asyncio.gather(*(
        asyncio.gather(*(_write(services, asked, topic.name, index, timeout_ms)
                         for topic in asked.topics for index in topic.partition_indexes))
        for asked in markers))
    for error in (error for written in errors for error in written):
        count_error(services.metrics, request, error)
    return _answer(request, markers, errors)


async def _write(services, asked, topic: str, index: int, timeout_ms: int) -> ErrorCode:
    partition = services.replicas.hosted(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    marker = Marker(asked.producer_id, asked.producer_epoch,
                    ControlType.COMMIT if asked.transaction_result else ControlType.ABORT, asked.coordinator_epoch)
    return await write_marker(partition, services.groups, marker, timeout_ms)


def _partitions_of(asked) -> int:
    return sum(len(topic.partition_indexes) for topic in asked.topics)


def _answer(request: Request, markers, errors) -> object:
    """The answer: for each marker asked, its partitions' errors in the order asked."""
    results = []
    for asked, marker_errors in zip(markers, errors):
        next_error = iter(marker_errors)
        results.append({"producer_id": asked.producer_id, "topics": [
            {"name": topic.name, "partitions": [{"partition_index": index, "error_code": next(next_error)}
                                                for index in topic.partition_indexes]}
            for topic in asked.topics]})
    return build_response(request, {"markers": results})
