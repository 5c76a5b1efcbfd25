"""A stock etcd, whose transactions hold at most 128 operations: __consumer_offsets made on first
use at its default 50 partitions, in steps, so that every group finds its coordinator; and a
topic creation too large for it refused with a Kafka error while the broker keeps serving."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.broker_process import BrokerProcess
from tests.conftest import ServerProcess, unique_root

STOCK_ETCD_MAX_TXN_OPS = "128"
WAIT_S = 120


@pytest.fixture
def stock_etcd(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLOG_ETCD_MAX_TXN_OPS", STOCK_ETCD_MAX_TXN_OPS)
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


def test_a_topic_creation_the_store_refuses_gets_a_kafka_error_and_the_broker_serves_on(stock_etcd, tmp_path):
    broker = BrokerProcess(tmp_path / "broker", coord_url=f"etcd://{stock_etcd.address}{unique_root()}")
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        with pytest.raises(KafkaException) as refused:
            admin.create_topics([NewTopic("too-big", 100, 1)])["too-big"].result(WAIT_S)
        error = refused.value.args[0]
        assert error.code() == KafkaError.POLICY_VIOLATION
        assert "too many operations in txn request" in error.str()
        # The same broker, on the same connection, goes on serving: the topic grown in steps.
        admin.create_topics([NewTopic("grown", 20, 1)])["grown"].result(WAIT_S)
        admin.create_partitions([NewPartitions("grown", 40)])["grown"].result(WAIT_S)
        topics = admin.list_topics(timeout=WAIT_S).topics
        assert "too-big" not in topics
        assert len(topics["grown"].partitions) == 40
    finally:
        broker.stop()
