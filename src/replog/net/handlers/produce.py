"""Produce: append each partition's record batches on its leader and answer per `acks`.

The record bytes stay opaque: the partition validates batch headers and CRCs and assigns
offsets in place, so each partition's bytes are copied once, into the writable buffer that
the log writes with one syscall. Partitions of one request are appended concurrently, so
acks=all waits for all of them at once. acks=0 gets no response at all.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from replog.replica.manager import UnknownTopicOrPartitionError

from ..codec import ApiKey, Request, build_response
from . import handles


async def _append(services, topic: str, partition_index: int, records: bytes | None, acks: int, timeout_ms: int) -> dict:
    answer = {"index": partition_index, "base_offset": -1, "log_append_time": None, "log_start_offset": -1, "record_errors": ()}
    if records is None:
        return answer | {"error_code": ErrorCode.invalid_record, "error_message": "null records"}
    try:
        partition = services.replicas.get_partition(topic, partition_index)
    except UnknownTopicOrPartitionError:
        return answer | {"error_code": services.unknown_partition_error(topic)}
    result = await partition.append_as_leader(bytearray(records), acks, timeout_ms)
    return answer | {"error_code": result.error_code, "base_offset": result.base_offset, "log_start_offset": result.log_start_offset}


@handles(ApiKey.PRODUCE, (3, 12))
async def produce(services, request: Request):
    body = request.body
    acks, timeout_ms = body.acks, int(body.timeout.total_seconds() * 1000)
    work = [
        (topic.name, _append(services, topic.name, data.index, data.records, acks, timeout_ms))
        for topic in body.topic_data
        for data in topic.partition_data
    ]
    answers = await asyncio.gather(*(coroutine for _, coroutine in work))
    if acks == 0:
        return None
    by_topic: dict[str, list[dict]] = {}
    for (topic, _), answer in zip(work, answers):
        by_topic.setdefault(topic, []).append(answer)
    return build_response(
        request,
        {
            "throttle_time": 0,
            "responses": [{"name": topic, "partition_responses": partitions} for topic, partitions in by_topic.items()],
        },
    )
