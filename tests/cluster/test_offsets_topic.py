"""__consumer_offsets made on first use over a stock etcd, whose transactions hold at most 128
operations: at its default 50 partitions it is made in steps, and every group finds its
coordinator."""

from __future__ import annotations

import asyncio
import time

import pytest
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
