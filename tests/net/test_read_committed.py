"""read_committed through the Fetch and ListOffsets handlers, on a real leader partition: reads
stop at the last stable offset, answers list the aborted transactions whose records they carry
(and read_uncommitted's none), a parked read_committed fetch wakes when a marker moves the last
stable offset, and the latest offset of each isolation level is its own end. Requests are
encoded and answers decoded with kio, as a client's."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from replog.config import defaults
from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.fetch_sessions import FetchSessions
from replog.net.handlers import HANDLERS
from replog.obs import BrokerMetrics
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replica.results import READ_COMMITTED, READ_UNCOMMITTED
from replog.storage.control_batches import ControlType, Marker
from replog.storage.log import LogConfig
from replog.storage.segment import HeldSlice
from tests.support.log_fixtures import ManualClock
from tests.support.polling import eventually
from tests.support.producer_batches import producer_batch

TOPIC, LEADER = "orders", 1
TRANSACTIONAL = 0x10  # the batch attributes' transactional bit
COMMITTED_PRODUCER, ABORTED_PRODUCER, OPEN_PRODUCER = 4000, 4001, 4002
FETCH_VERSION, LIST_OFFSETS_VERSION = 12, 5
LATEST = -1
WAKE_BOUND_S = 20  # a parked fetch not woken would answer only at its max wait, far beyond this
MAX_WAIT_MS = 120_000


@pytest.fixture
async def leader(tmp_path):
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=LEADER), ManualClock())
    assert await manager.load_logs(TOPIC, [0], LogConfig()) == [None]
    partition = await manager.open_replica(TOPIC, 0, LogConfig(), (LEADER,), leader_epoch=0, isr=(LEADER,))
    services = SimpleNamespace(
        replicas=manager, now_ms=manager._clock, metrics=BrokerMetrics(), fetch_sessions=FetchSessions(),
        config=defaults(), authorizer=None, unknown_partition_error=lambda topic, index: ErrorCode.unknown_topic_or_partition)
    try:
        yield partition, services
    finally:
        await manager.shutdown()


async def append(partition, batch: bytearray) -> None:
    assert (await partition.append_as_leader(batch, acks=1, timeout_ms=1000)).error_code == ErrorCode.none


def transactional(producer_id: int, records: int) -> bytearray:
    return producer_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=0, attributes=TRANSACTIONAL)


async def end(partition, producer_id: int, control_type: ControlType) -> None:
    assert await partition.write_txn_marker(Marker(producer_id, 0, control_type, 0), timeout_ms=1000) == ErrorCode.none


async def ask(services, api_key: int, version: int, values: dict):
    body = codec.build(codec.request_schema(api_key, version), values)
    frame = codec.encode_request(api_key, version, 7, "consumer", body)
    answer = await HANDLERS[api_key](services, codec.decode_request(memoryview(frame)[4:], "PLAINTEXT", "User:ANONYMOUS", "127.0.0.1"))
    parts = codec.encode_response(api_key, version, 7, answer)
    raw = b"".join(part.read_from(0) if isinstance(part, HeldSlice) else bytes(part) for part in parts)
    return codec.decode_response(api_key, version, raw[4:])[1]


async def fetch_in_session(services, offset: int | None, isolation_level: int, session_id: int = 0, epoch: int = -1,
                           max_wait_ms: int = 0):
    """The answer to a consumer's fetch; `offset` None names no partition (an incremental
    fetch of a session with nothing changed)."""
    named = [] if offset is None else [
        {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                                         "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]
    return await ask(services, ApiKey.FETCH, FETCH_VERSION, {
        "replica_id": -1, "max_wait": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": isolation_level,
        "session_id": session_id, "session_epoch": epoch, "forgotten_topics_data": [], "rack_id": "", "topics": named})


async def fetch(services, offset: int, isolation_level: int, max_wait_ms: int = 0):
    answer = await fetch_in_session(services, offset, isolation_level, max_wait_ms=max_wait_ms)
    [partition] = answer.responses[0].partitions
    return partition


async def latest(services, isolation_level: int) -> int:
    answer = await ask(services, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
        "replica_id": -1, "isolation_level": isolation_level,
        "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST}]}]})
    [partition] = answer.topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return partition.offset


async def test_read_committed_stops_at_the_last_stable_offset_and_names_aborted_transactions(leader):
    partition, services = leader
    await append(partition, producer_batch(3))  # 0-2
    await append(partition, transactional(COMMITTED_PRODUCER, 2))  # 3-4
    await append(partition, transactional(ABORTED_PRODUCER, 2))  # 5-6
    await end(partition, ABORTED_PRODUCER, ControlType.ABORT)  # 7
    await append(partition, transactional(OPEN_PRODUCER, 2))  # 8-9, open
    await end(partition, COMMITTED_PRODUCER, ControlType.COMMIT)  # 10
    await append(partition, producer_batch(1))  # 11

    committed = await fetch(services, 0, READ_COMMITTED)
    assert (committed.error_code, committed.high_watermark, committed.last_stable_offset) == (ErrorCode.none, 12, 8)
    assert [(each.producer_id, each.first_offset) for each in committed.aborted_transactions] == [(ABORTED_PRODUCER, 5)]
    uncommitted = await fetch(services, 0, READ_UNCOMMITTED)
    assert (uncommitted.last_stable_offset, uncommitted.aborted_transactions) == (8, ())
    assert len(uncommitted.records) > len(committed.records), "read_committed's bytes end before the open transaction"
    assert (await latest(services, READ_COMMITTED), await latest(services, READ_UNCOMMITTED)) == (8, 12)

    at_the_end = await fetch(services, 8, READ_COMMITTED)
    assert (at_the_end.records, at_the_end.last_stable_offset) == (b"", 8)


async def test_a_parked_read_committed_fetch_wakes_when_a_marker_moves_the_last_stable_offset(leader):
    partition, services = leader
    await append(partition, transactional(OPEN_PRODUCER, 2))  # 0-1, open
    await append(partition, producer_batch(1))  # 2
    parked = asyncio.create_task(fetch(services, 0, READ_COMMITTED, MAX_WAIT_MS))
    await eventually(lambda: partition._watches.consumers, 10, "the read_committed fetch parked")
    await end(partition, OPEN_PRODUCER, ControlType.COMMIT)  # 3
    answer = await asyncio.wait_for(parked, WAKE_BOUND_S)
    assert (answer.last_stable_offset, answer.high_watermark, answer.aborted_transactions) == (4, 4, ())
    assert answer.records, "the committed transaction's records and the marker"


async def test_a_read_committed_session_carries_the_partition_when_its_last_stable_offset_moves(leader):
    partition, services = leader
    await append(partition, producer_batch(1))  # 0
    await append(partition, transactional(OPEN_PRODUCER, 2))  # 1-2, open
    opened = await fetch_in_session(services, 0, READ_COMMITTED, epoch=0)
    [first] = opened.responses[0].partitions
    assert (opened.session_id != 0, first.last_stable_offset) == (True, 1)

    at_the_end = await fetch_in_session(services, 1, READ_COMMITTED, opened.session_id, 1)  # read up to the LSO
    assert at_the_end.responses == (), "nothing to tell: no records below the LSO, nothing moved"
    await end(partition, OPEN_PRODUCER, ControlType.ABORT)  # 3
    moved = await fetch_in_session(services, None, READ_COMMITTED, opened.session_id, 2)
    [carried] = moved.responses[0].partitions
    assert (carried.last_stable_offset, [(each.producer_id, each.first_offset) for each in carried.aborted_transactions]) == (
        4, [(OPEN_PRODUCER, 1)])
