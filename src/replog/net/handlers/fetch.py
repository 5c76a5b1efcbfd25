"""Fetch: consumers read committed data, with long polling; followers (replica_id >= 0) read
up to the log end and report their position, which is how the leader learns their LEO.

Long poll (`max_wait_ms`, `min_bytes`): read every partition; if that gives fewer than
`min_bytes`, register one ReadWaiter with all of them and wait, up to the deadline, for the
first to have data, then read again. `max_bytes` bounds the whole response except that the
first partition with data always returns at least one whole batch (KIP-74), so an oversized
batch never stalls a consumer. Partitions in error carry empty, never null, records: some
clients cannot parse null there.

Fetch sessions (KIP-227) are declined: the response's session id is 0, so clients keep
sending full fetch requests.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.partition import FetchResult, ReadWaiter

from ..codec import ApiKey, Request, build_response
from . import handles

NO_EPOCH = -1


def _read(services, topic: str, fetch: object, replica_id: int, byte_budget: int, now_ms: int) -> tuple[object | None, FetchResult | int]:
    try:
        partition = services.replicas.get_partition(topic, fetch.partition)
    except UnknownTopicOrPartitionError:
        return None, services.unknown_partition_error(topic)
    epoch = getattr(fetch, "current_leader_epoch", NO_EPOCH)
    if replica_id >= 0:
        return partition, partition.read_for_follower(replica_id, fetch.fetch_offset, byte_budget, now_ms, epoch)
    return partition, partition.read_for_consumer(fetch.fetch_offset, byte_budget, epoch)


def _read_all(services, body, now_ms: int) -> tuple[list, int]:
    """(per partition: (topic, fetch, partition or None, result), total bytes read)."""
    remaining_bytes = getattr(body, "max_bytes", 0x7FFFFFFF)
    results, total_bytes = [], 0
    for topic in body.topics:
        for fetch in topic.partitions:
            # KIP-74: with the budget spent, later partitions read nothing; the first always may.
            budget = min(fetch.partition_max_bytes, remaining_bytes) if total_bytes else fetch.partition_max_bytes
            partition, result = _read(services, topic.topic, fetch, body.replica_id, max(budget, 0), now_ms)
            size = sum(piece.size_bytes for piece in result.slices) if isinstance(result, FetchResult) else 0
            total_bytes += size
            remaining_bytes -= size
            results.append((topic.topic, fetch, partition, result))
    return results, total_bytes


def _partition_answer(fetch, result: FetchResult | int) -> dict:
    if not isinstance(result, FetchResult):
        return {"partition_index": fetch.partition, "error_code": result, "high_watermark": -1, "last_stable_offset": -1,
                "log_start_offset": -1, "aborted_transactions": (), "preferred_read_replica": -1, "records": b""}
    return {
        "partition_index": fetch.partition,
        "error_code": result.error_code,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": (),
        "preferred_read_replica": -1,
        "records": b"".join(piece.read() for piece in result.slices),
    }


@handles(ApiKey.FETCH, (4, 12))
async def fetch(services, request: Request):
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    results, total_bytes = _read_all(services, body, services.now_ms())
    if total_bytes < body.min_bytes and loop.time() < deadline and not _any_error(results):
        with ReadWaiter() as waiter:
            for _, fetch, partition, _ in results:
                if partition is not None:
                    waiter.watch(partition, fetch.fetch_offset, for_follower=body.replica_id >= 0)
            await waiter.wait(max(0.0, deadline - loop.time()))
        results, _ = _read_all(services, body, services.now_ms())
    by_topic: dict[str, list[dict]] = {}
    for topic, fetch, _, result in results:
        by_topic.setdefault(topic, []).append(_partition_answer(fetch, result))
    return build_response(
        request,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
        },
    )


def _any_error(results: list) -> bool:
    return any(not isinstance(result, FetchResult) or result.error_code for *_, result in results)
