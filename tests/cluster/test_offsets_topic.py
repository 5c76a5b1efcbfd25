"""A stock etcd (transactions of at most 128 operations, requests of at most 1.5 MiB):
__consumer_offsets made on first use at its default 50 partitions, so that every group finds
its coordinator; and a topic creation too large for it refused with a Kafka error while the
broker keeps serving."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.servers import ServerProcess, unique_root

WAIT_S = 120
ETCD_REQUEST_BYTES_MAX = 1_572_864  # etcd's default --max-request-bytes, 1.5 MiB


@pytest.fixture
def stock_etcd(tmp_path):
    server = ServerProcess("etcd", tmp_path / "etcd")
    server.start()
    yield server
    server.stop()


async def coordinators(port: int, groups: list[str]) -> dict[str, int]:
    async with await BrokerConnection.open("127.0.0.1", port, request_timeout_s=WAIT_S) as connection:
        deadline = time.monotonic() + WAIT_S
        while True:  # until every group has a coordinator, within WAIT_S
            answer = await connection.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": groups})
            found = {entry.key: entry.node_id for entry in answer.coordinators if entry.error_code == ErrorCode.none}
            if len(found) == len(groups):
                return found
            assert time.monotonic() < deadline, f"coordinators found for {sorted(found)} only"
            await asyncio.sleep(0.2)


def test_offsets_topic_of_50_partitions_is_made_on_a_stock_etcd(stock_etcd, tmp_path):
    broker = BrokerProcess(tmp_path / "broker", coord_url=f"etcd://{stock_etcd.address}{unique_root()}")
    broker.start()
    try:
        # Enough groups to land on most of the 50 partitions ("polygenelubricants" on partition 0).
        groups = ["polygenelubricants"] + [f"group-{index}" for index in range(50)]
        assert set(asyncio.run(coordinators(broker.port, groups)).values()) == {0}
        assert not [line for line in broker.output if "too many operations" in line]
    finally:
        broker.stop()


async def create_topics(port: int, topics: list[dict]) -> list:
    """CreateTopics at the highest version both sides speak: a flexible one, whose strings may
    be longer than the 32 KiB that librdkafka's version allows."""
    async with await BrokerConnection.open("127.0.0.1", port, request_timeout_s=WAIT_S) as connection:
        answer = await connection.request(ApiKey.CREATE_TOPICS, None, {
            "topics": [{"assignments": [], "configs": [], **topic} for topic in topics],
            "timeout": WAIT_S * 1000, "validate_only": False})
        return [(topic.error_code, topic.error_message) for topic in answer.topics]


def test_a_topic_creation_the_store_refuses_gets_a_kafka_error_and_the_broker_serves_on(stock_etcd, tmp_path):
    broker = BrokerProcess(tmp_path / "broker", coord_url=f"etcd://{stock_etcd.address}{unique_root()}")
    broker.start()
    try:
        # A valid config value too big for one etcd request.
        pairs = ",".join(f"{partition}:0" for partition in range(200_000))
        assert len(pairs) > ETCD_REQUEST_BYTES_MAX
        too_big = {"name": "too-big", "num_partitions": 1, "replication_factor": 1,
                   "configs": [{"name": "follower.replication.throttled.replicas", "value": pairs}]}
        [(code, message)] = asyncio.run(create_topics(broker.port, [too_big]))
        assert code == ErrorCode.policy_violation
        assert "request is too large" in message
        # The same broker goes on serving, and creates the name after all, at sizes that take
        # many transactions.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("too-big", 20, 1)])["too-big"].result(WAIT_S)
        admin.create_partitions([NewPartitions("too-big", 300)])["too-big"].result(WAIT_S)
        assert len(admin.list_topics(timeout=WAIT_S).topics["too-big"].partitions) == 300
    finally:
        broker.stop()
