"""A leader answers a follower's fetch only for the topic id its log is tagged with (Fetch v13,
KIP-516): a replica of a deleted topic of the same name, on a broker that missed the deletion,
neither copies the new topic's records nor counts toward its ISR (simulator seed 1592: it
kept the deleted topic's records and joined the new topic's ISR)."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog.config import defaults
from replog.net import codec
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION, FetchedPartition
from replog.net.fetch_requests import encode_fetch_request
from replog.net.handlers.fetch import fetch as fetch_handler
from replog.obs import BrokerMetrics
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replication.fetcher import FetchSpec
from replog.storage.log import LogConfig
from tests.support.fetch_answers import decode_answer
from tests.support.followers import client_id_of, registered
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock

TOPIC = "orders"
LEADER, FOLLOWER = 1, 2
LAG_MS = 10_000
NEW, OLD = uuid.uuid4(), uuid.uuid4()


async def fetch(manager: ReplicaManager, topic_id: uuid.UUID, partition: int, offset: int) -> FetchedPartition:
    """A follower's fetch as replog's followers send it, answered by the leader's handler."""
    services = SimpleNamespace(
        replicas=manager, now_ms=manager._clock, metrics=BrokerMetrics(), config=defaults(), authorizer=None,
        metadata=registered(FOLLOWER),
        unknown_partition_error=lambda topic, partition: ErrorCode.unknown_topic_or_partition)
    wire = encode_fetch_request(FIRST_TOPIC_ID_VERSION, 1, client_id_of(FOLLOWER), replica_id=FOLLOWER,
                                max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                specs=[FetchSpec(TOPIC, partition, offset, 0, 1 << 20, 0, topic_id.hex)])
    _, _, [answer] = decode_answer(await fetch_handler(services, codec.decode_request(memoryview(wire)[4:])))
    return answer


async def test_a_follower_naming_another_topic_id_is_refused_and_neither_copies_nor_counts(tmp_path):
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=LEADER), ManualClock())
    assert await manager.load_logs(TOPIC, [0], LogConfig(), topic_id=NEW.hex) == [None]
    leader = await manager.open_replica(TOPIC, 0, LogConfig(), (LEADER, FOLLOWER), leader_epoch=0, isr=(LEADER,))
    await leader.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
    # A partition of the name still of the deleted topic: this broker has not replaced it yet.
    assert await manager.load_logs(TOPIC, [1], LogConfig(), topic_id=OLD.hex) == [None]
    await manager.open_replica(TOPIC, 1, LogConfig(), (LEADER, FOLLOWER), leader_epoch=0, isr=(LEADER,))
    try:
        refused = [await fetch(manager, OLD, 0, 3), await fetch(manager, uuid.uuid4(), 0, 3), await fetch(manager, NEW, 1, 0)]
        assert [answer.error_code for answer in refused] == [
            ErrorCode.inconsistent_topic_id, ErrorCode.unknown_topic_id, ErrorCode.inconsistent_topic_id]
        assert [answer.records for answer in refused] == [b"", b"", b""]
        assert leader.follower_log_end_offset(FOLLOWER) < 0, "a refused fetch counted as the follower's position"
        assert leader.followers_ready_to_join(manager._clock(), LAG_MS) == frozenset()

        copied = await fetch(manager, NEW, 0, 0)
        assert (copied.error_code, copied.topic, len(copied.records) > 0) == (ErrorCode.none, NEW.hex, True)
        caught_up = await fetch(manager, NEW, 0, 3)
        assert caught_up.error_code == ErrorCode.none
        assert leader.follower_log_end_offset(FOLLOWER) == 3
        assert leader.followers_ready_to_join(manager._clock(), LAG_MS) == {FOLLOWER}
    finally:
        await manager.shutdown()


async def test_a_topic_id_is_looked_up_while_a_partition_of_it_is_hosted(tmp_path):
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=LEADER), ManualClock())
    for partition in (0, 1):
        assert await manager.load_logs(TOPIC, [partition], LogConfig(), topic_id=NEW.hex) == [None]
        await manager.open_replica(TOPIC, partition, LogConfig(), (LEADER,), leader_epoch=0)
    untagged = await manager.open_replica("untagged", 0, LogConfig(), (LEADER,), leader_epoch=0)
    try:
        assert (manager.topic_of_id(NEW.hex), untagged.topic_id) == (TOPIC, None)
        manager.close_replica(TOPIC, 0)
        assert manager.topic_of_id(NEW.hex) == TOPIC
        await manager.delete_replica(TOPIC, 1)
        assert manager.topic_of_id(NEW.hex) is None
    finally:
        await manager.shutdown()
