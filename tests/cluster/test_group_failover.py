"""A group's coordinator killed (SIGKILL) or stopped (SIGTERM) while the group consumes in a 3-broker cluster: the
leadership of its __consumer_offsets partition moves, the new leader loads the group's offsets
from its replica of the log, and the group carries on from them. Nothing committed before the
kill is lost: every commit was acknowledged by all in-sync replicas (acks=-1)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.support.group_clients import GROUP_SETTINGS, confluent_consumer, poll_round, poll_until

from .conftest import QUICK_SETTINGS, SHARED_SERVERS, _running_cluster

PARTITIONS = 6
RECORDS = 300
WAIT_S = 90


@pytest.fixture(params=["zk", "etcd"])
def group_cluster(request, tmp_path):
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS, settings=QUICK_SETTINGS + GROUP_SETTINGS)


def coordinator_of(bootstrap_port: int, group: str) -> int:
    async def find() -> int:
        deadline = time.monotonic() + WAIT_S
        async with await BrokerConnection.open("127.0.0.1", bootstrap_port) as connection:
            while time.monotonic() < deadline:  # until the offsets topic has a leader for the group
                answer = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
                if answer.error_code == ErrorCode.none:
                    return answer.node_id
                await asyncio.sleep(0.1)
        raise AssertionError(f"no coordinator for {group} within {WAIT_S}s")

    return asyncio.run(find())


def committed(consumer, topic: str) -> dict[int, int]:
    partitions = consumer.committed([TopicPartition(topic, index) for index in range(PARTITIONS)], timeout=WAIT_S)
    return {partition.partition: partition.offset for partition in partitions}


@pytest.mark.parametrize("ending", ["kill", "stop"])
def test_group_survives_its_coordinators_end_with_its_committed_offsets(group_cluster, ending):
    """`kill`: SIGKILL, the partition's leadership moves once the broker's session ends;
    `stop`: SIGTERM, whose controlled shutdown hands leadership over first, and the old
    coordinator drops the group while still running."""
    bootstrap = group_cluster.bootstrap
    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(WAIT_S)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    values = [str(index) for index in range(RECORDS)]
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % PARTITIONS)
    assert producer.flush(WAIT_S) == 0
    coordinator = coordinator_of(group_cluster.brokers[0].port, group)
    consumers = [confluent_consumer(bootstrap, group, topic, {"log_level": 0}) for _ in range(2)]
    read: dict[int, list[str]] = {}
    try:
        poll_until(consumers, read, lambda: sum(map(len, read.values())) >= RECORDS // 2, "half the records read")
        before = committed(consumers[0], topic)
        assert sum(offset for offset in before.values() if offset > 0) >= RECORDS // 2
        getattr(group_cluster.brokers[coordinator], ending)()
        after = committed(consumers[0], topic)  # from the new coordinator, before anyone commits again
        assert coordinator_of(next(b.port for b in group_cluster.brokers.values() if b.running), group) != coordinator
        assert after == before
        poll_until(consumers, read, lambda: len(set(v for vs in read.values() for v in vs)) == RECORDS,
                   "every record read after the failover")
        poll_round(consumers, read)
        assert committed(consumers[0], topic) == {index: RECORDS // PARTITIONS for index in range(PARTITIONS)}
    finally:
        for consumer in consumers:
            consumer.close()
