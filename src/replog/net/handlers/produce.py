"""Produce: append each partition's record batch on its leader and answer per `acks`.

The record bytes stay bytes: the partition validates the batch as Kafka's LogValidator does
(storage/records.py) and assigns offsets in place; a refused batch is answered with Kafka's error
code, `error_message` and, where the refusal is about records, `record_errors` (v8+, KIP-467):
every record a compacted topic refuses for want of a key, or whose timestamp is out of bounds, as
Kafka names them, so that clients fail those records and not the others of the batch. The
request body is decoded here rather than by kio so that each partition's records are copied
exactly once, from the connection's receive buffer into the writable buffer the log writes with
one syscall (kio would copy them into bytes first). Partitions of one request are appended
concurrently, so acks=all waits for all of them at once. acks=0 gets no response at all.

Before the partitions, the request's own rules (Kafka's ProduceRequest.validateRecords and
KafkaApis): a partition named twice in one request is refused in every entry, as nothing could
say which of its batches came first; zstd needs Produce v7+ (UNSUPPORTED_COMPRESSION_TYPE).

First of all, authorization (net/authorization.py), as Kafka's: a transactional request needs
Write on its transactional id (every partition TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise),
and each topic Write (its partitions TOPIC_AUTHORIZATION_FAILED otherwise), asked once per topic.

A transactional batch that would open its producer's transaction in a partition is appended
only once the transaction coordinator confirmed the partition is in that transaction (KIP-890,
net/transaction_verification.py), with the partition's verification guard taken before asking:
an append the guard no longer matches (the transaction ended meanwhile) is refused. Errors as
Kafka's: INVALID_TXN_STATE when the partition is not in the transaction; the coordinator's
retriable errors as NOT_ENOUGH_REPLICAS, which every client retries without a metadata refresh.
The request's appends wait for the answer (they start in request order: a producer's next
batches to the partition must not overtake it), but only those of such batches do.

NOT_LEADER_OR_FOLLOWER names the leader to go to (KIP-951: `current_leader` per partition and
`node_endpoints`, Produce v10+), once this broker's metadata knows one. A leader that stops
taking writes (controlled shutdown, resignation, fencing) does so before the store names its
successor; refusing at once would send the client to metadata that still names this broker,
and librdkafka then waits for its next periodic refresh (1 s) before trying again. So the
refusal waits, at most SUCCESSOR_WAIT_S, for the metadata to name another live leader.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import struct
import time
from typing import Callable, NamedTuple

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC
from replog.transactions import TRANSACTION_STATE_TOPIC
from replog.replica.manager import UnknownTopicOrPartitionError
from replog.security.acls import AclOperation, ResourceType

from ..authorization import authorized, denied_names

from ..codec import BODY_DECODERS, ApiKey, Request, WireReader, build_response
from ..loop_slices import LoopSlices, respond
from . import API_NAMES, count_error, handles, log_refusal
from .metadata import broker_addresses

FIRST_FLEXIBLE_VERSION = 9
FIRST_STORAGE_ERROR_VERSION = 4  # KAFKA_STORAGE_ERROR: "the requestor must be prepared to handle" it from v4
FIRST_ZSTD_VERSION = 7
FIRST_ABORTABLE_VERSION = 11  # TRANSACTION_ABORTABLE (KIP-890): older clients take INVALID_TXN_STATE
_ATTRIBUTES_LOW_BYTE = 22  # of a batch's attributes: its codec and its transactional bit
_CODEC_MASK, _ZSTD, _TRANSACTIONAL_BIT = 0x07, 4, 0x10
# What a batch a partition refused is logged as (once per subject and interval).
_BATCH_REFUSALS = frozenset({ErrorCode.invalid_record, ErrorCode.corrupt_message, ErrorCode.invalid_timestamp,
                             ErrorCode.message_too_large, ErrorCode.invalid_txn_state})
# Bounds how long a refusal waits for the metadata to name a successor: about one election
# (store round trips and watch delivery); beyond it the client's own refresh is as quick.
SUCCESSOR_WAIT_S = 1.0
# Answers of at most this many partitions are encoded in one step (kio's writer, quicker for a
# few); more in slices.
ANSWERED_AT_ONCE_MAX = 1000
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
# Only the coordinators write their topics; clients may read them.
_INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# The coordinator's retriable answers, which clients too old for them would not retry: Kafka
# answers NOT_ENOUGH_REPLICAS instead, retried by every client without a metadata refresh.
_RETRIABLE_UNVERIFIED = frozenset({ErrorCode.concurrent_transactions, ErrorCode.network_exception,
                                   ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available,
                                   ErrorCode.not_coordinator})


class PartitionData(NamedTuple):
    index: int
    records: bytearray | None


class TopicData(NamedTuple):
    name: str
    partition_data: list[PartitionData]


class ProduceBody(NamedTuple):
    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[TopicData]


def decode_produce_body(frame: memoryview | bytes, position: int, api_version: int) -> ProduceBody:
    reader = WireReader(frame, position, api_version >= FIRST_FLEXIBLE_VERSION)
    transactional_id = reader.string()
    acks, timeout_ms = reader.fixed(_I16), reader.fixed(_I32)
    topics = []
    for _ in range(max(0, reader.length(_I32))):
        name = reader.string()
        partitions = []
        for _ in range(max(0, reader.length(_I32))):
            index = reader.fixed(_I32)
            partitions.append(PartitionData(index, reader.records()))
            reader.tagged_fields()
        reader.tagged_fields()
        if name is None:
            raise ValueError("null topic name")
        topics.append(TopicData(name, partitions))
    reader.tagged_fields()
    return ProduceBody(transactional_id, acks, timeout_ms, topics)


async def _append(services, request: Request, topic: str, partition_index: int, records: bytearray | None,
                  appended: Callable[[], None] | None, named_twice: bool, denied_error: int,
                  verification: object | None) -> dict:
    """`verification`: for a batch the coordinator had to verify, the partition's guard, or the
    error it was not verified with."""
    answer = {"index": partition_index, "base_offset": -1, "log_append_time": None, "log_start_offset": -1, "record_errors": ()}
    if denied_error:
        return answer | {"error_code": denied_error}
    subject = f"{topic}-{partition_index}"
    if isinstance(verification, ErrorCode):
        log_refusal(request, "produce of a transactional batch not verified", subject, verification)
        return answer | _unverified(verification)
    if named_twice:
        log_refusal(request, "produce naming a partition twice", subject, ErrorCode.invalid_record)
        return answer | {"error_code": ErrorCode.invalid_record,
                         "error_message": f"partition {subject} is named more than once in the request"}
    if topic in _INTERNAL_TOPICS:
        log_refusal(request, "produce to an internal topic", f"{topic}-{partition_index}", ErrorCode.invalid_topic_exception)
        return answer | {"error_code": ErrorCode.invalid_topic_exception,
                         "error_message": f"Cannot append to internal topic {topic}"}
    if records is None:
        log_refusal(request, "produce of null records", subject, ErrorCode.invalid_record)
        return answer | {"error_code": ErrorCode.invalid_record, "error_message": "null records"}
    if (request.api_version < FIRST_ZSTD_VERSION and len(records) > _ATTRIBUTES_LOW_BYTE
            and records[_ATTRIBUTES_LOW_BYTE] & _CODEC_MASK == _ZSTD):
        log_refusal(request, "produce of zstd before v7", subject, ErrorCode.unsupported_compression_type)
        return answer | {"error_code": ErrorCode.unsupported_compression_type,
                         "error_message": f"Produce v{request.api_version} cannot carry zstd batches (v7+)"}
    try:
        partition = services.replicas.get_partition(topic, partition_index)
    except UnknownTopicOrPartitionError:
        error = services.unknown_partition_error(topic, partition_index)
        log_refusal(request, "produce to a partition not led here", f"{topic}-{partition_index}", error)
        if error == ErrorCode.not_leader_or_follower:
            answer |= await _current_leader(services, topic, partition_index)
        return answer | {"error_code": error}
    acks, timeout_ms = request.body.acks, request.body.timeout_ms
    result = await partition.append_as_leader(records, acks, timeout_ms, appended, verification_guard=verification)
    if result.record_count:
        services.metrics.produced(topic, len(records), result.record_count)
    if result.error_code == ErrorCode.not_leader_or_follower:
        answer |= await _current_leader(services, topic, partition_index)
    if result.error_code in _BATCH_REFUSALS:
        log_refusal(request, f"produce of a batch the log refused ({ErrorCode(result.error_code).name})", subject,
                    result.error_code)
        answer |= {"error_message": result.error_message,
                   "record_errors": [{"batch_index": index, "batch_index_error_message": message}
                                     for index, message in result.record_errors]}
    error_code = result.error_code
    if error_code == ErrorCode.kafka_storage_error and request.api_version < FIRST_STORAGE_ERROR_VERSION:
        # Kafka's ProduceResponse rule: a client of Produce v3 may not know 56 and take it as
        # fatal; NOT_LEADER_OR_FOLLOWER makes it refresh its metadata and retry.
        error_code = ErrorCode.not_leader_or_follower
    return answer | {"error_code": error_code, "base_offset": result.base_offset,
                     "log_append_time": result.log_append_time_ms, "log_start_offset": result.log_start_offset}


def _unverified(error: ErrorCode) -> dict:
    """The answer to a batch the coordinator did not verify, as Kafka's handleProduceAppend words it."""
    if error == ErrorCode.invalid_txn_state:
        return {"error_code": error, "error_message": "Partition was not added to the transaction"}
    if error in _RETRIABLE_UNVERIFIED:
        return {"error_code": ErrorCode.not_enough_replicas,
                "error_message": f"Unable to verify the partition has been added to the transaction. Underlying error: "
                                 f"{error.name.upper()}"}
    return {"error_code": error}


async def _current_leader(services, topic: str, partition_index: int) -> dict:
    """KIP-951's hint for a refused partition: the other live broker the metadata names as its
    leader, waiting (bounded) for one if the metadata still names this broker or none."""
    metadata = services.metadata

    def successor():
        view = metadata.topics.get(topic, {}).get(partition_index)
        if view is not None and view.leader != services.broker_id and view.leader in metadata.brokers:
            return view
        return None

    await metadata.wait_for(lambda: successor() is not None, SUCCESSOR_WAIT_S)
    view = successor()
    if view is None:
        return {}
    return {"current_leader": {"leader_id": view.leader, "leader_epoch": view.leader_epoch}}


BODY_DECODERS[int(ApiKey.PRODUCE)] = decode_produce_body


@handles(ApiKey.PRODUCE)
async def produce(services, request: Request):
    """Each partition's append is a task of its own, so that acks=all waits for all of them at
    once; a request naming many partitions starts them in slices (loop_slices.py), holding the
    connection's `appends_in_order` meanwhile so that its next request's appends start after."""
    body = request.body
    # acks=all: when each partition's local append was done and its wait for the ISR began;
    # the request waits for replication from the last of them.
    appended_s: list[float] = []
    appended = (lambda: appended_s.append(time.perf_counter())) if body.acks == -1 else None
    named = collections.Counter((topic.name, data.index) for topic in body.topic_data for data in topic.partition_data)
    denied = _denied(services, request)
    slices = LoopSlices()
    topics, appends = [], []
    async with asyncio.TaskGroup() as appending:
        async with request.appends_in_order or contextlib.nullcontext():
            verifications = await _verifications(services, request, denied) if body.transactional_id is not None else {}
            for topic in body.topic_data:
                denied_error = denied.get(topic.name, 0) if denied else 0
                for data in topic.partition_data:
                    topics.append(topic.name)
                    appends.append(appending.create_task(_append(services, request, topic.name, data.index, data.records,
                                                                 appended, named[topic.name, data.index] > 1,
                                                                 denied_error, verifications.get((topic.name, data.index)))))
                    await slices.pause()
    answers = [append.result() for append in appends]
    if appended_s:
        services.metrics.replication_waited(API_NAMES[request.api_key], time.perf_counter() - max(appended_s))
    for answer in answers:  # bounded by the request's partitions
        count_error(services.metrics, request, answer["error_code"])
    if body.acks == 0:
        return None
    by_topic: dict[str, list[dict]] = {}
    for topic, answer in zip(topics, answers):
        by_topic.setdefault(topic, []).append(answer)
    values = {
        "throttle_time": 0,
        "responses": [{"name": topic, "partition_responses": partitions} for topic, partitions in by_topic.items()],
        "node_endpoints": _endpoints(services, answers, request.listener),
    }
    if len(answers) <= ANSWERED_AT_ONCE_MAX:
        return build_response(request, values)
    return await respond(request, values, slices)


async def _verifications(services, request: Request, denied: dict[str, int]) -> dict[tuple[str, int], object]:
    """For each partition whose batch would open its producer's transaction there: the
    partition's verification guard once the coordinator verified it, else the error it gave.
    Kafka's rule: the transactional batches of one request are one producer's
    (INVALID_PRODUCER_ID_MAPPING otherwise)."""
    verifier = services.transaction_verifier
    if verifier is None:  # transaction.partition.verification.enable=false
        return {}
    guards, producers = {}, set()
    for topic in request.body.topic_data:
        if denied.get(topic.name):
            continue
        for data in topic.partition_data:  # bounded by the request's partitions
            if data.records is None:
                continue
            try:
                partition = services.replicas.get_partition(topic.name, data.index)
            except UnknownTopicOrPartitionError:
                continue  # answered by _append
            producer = partition.needs_verification(data.records)
            if producer is not None:
                producers.add(producer)
                guards[topic.name, data.index] = partition.verification_guard(producer[0])
    if len(producers) != 1:
        return dict.fromkeys(guards, ErrorCode.invalid_producer_id_mapping)
    ((producer_id, producer_epoch),) = producers
    errors = await verifier.verify(request.body.transactional_id, producer_id, producer_epoch, list(guards),
                                   abortable_known=request.api_version >= FIRST_ABORTABLE_VERSION)
    return guards | errors


def _denied(services, request: Request) -> dict[str, int]:
    """The error of each topic the request may not write to, as Kafka decides it: all of them
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED when it may not write as its transactional id, or
    carries a transactional batch without one (which would open a transaction no coordinator
    knows of, holding the partition's last stable offset for good), else those without Write
    TOPIC_AUTHORIZATION_FAILED; asked once per topic, not per partition."""
    body = request.body
    names = (topic.name for topic in body.topic_data)
    if body.transactional_id is None and _any_transactional(body):
        return dict.fromkeys(names, ErrorCode.transactional_id_authorization_failed)
    if services.authorizer is None:
        return {}
    if body.transactional_id is not None and not authorized(services, request, AclOperation.WRITE,
                                                            ResourceType.TRANSACTIONAL_ID, body.transactional_id):
        return dict.fromkeys(names, ErrorCode.transactional_id_authorization_failed)
    return dict.fromkeys(denied_names(services, request, AclOperation.WRITE, ResourceType.TOPIC, names),
                         ErrorCode.topic_authorization_failed)


def _any_transactional(body: ProduceBody) -> bool:
    """Whether the first batch of any partition's records is transactional (Kafka's
    RequestUtils.hasTransactionalRecords)."""
    return any(data.records is not None and len(data.records) > _ATTRIBUTES_LOW_BYTE
               and data.records[_ATTRIBUTES_LOW_BYTE] & _TRANSACTIONAL_BIT
               for topic in body.topic_data for data in topic.partition_data)


def _endpoints(services, answers: list[dict], listener: str) -> list[dict]:
    """KIP-951: where each leader named in a `current_leader` hint listens, on `listener`."""
    leaders = {answer["current_leader"]["leader_id"] for answer in answers if "current_leader" in answer}
    if not leaders:
        return []
    return [{"node_id": node_id, "host": host, "port": port, "rack": rack}
            for node_id, host, port, rack in broker_addresses(services, listener) if node_id in leaders]
