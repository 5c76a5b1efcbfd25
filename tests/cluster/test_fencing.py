"""Fencing across broker processes: a leader whose coordination session is in doubt takes no
writes, leads on without a leader change when the same session comes back, and a leader paused
past its session acknowledges nothing afterwards that the new leader lacks."""

from __future__ import annotations

import asyncio

from replog.net.client import BrokerConnection, BrokerUnavailable
from tests.support.harness import (
    create_topic,
    fully_in_sync,
    leader_of,
    record_batch,
    settled_view,
    stop_and_check,
)
from tests.cluster.test_replication import produce_numbered
from tests.support.polling import eventually, wait_until

NOT_LEADER_OR_FOLLOWER = 6
WAIT_S = 60


async def produce_error(connection: BrokerConnection, topic: str, value: bytes) -> int:
    return int((await connection.produce(topic, 0, bytes(record_batch(value)), -1, 2000)).error_code)


async def test_a_leader_takes_no_writes_while_its_session_is_suspended_and_leads_on_when_it_returns(private_cluster):
    cluster = private_cluster
    create_topic(cluster, "suspended")
    assert len(produce_numbered(cluster.bootstrap, "suspended", 0, 50)) == 50
    await asyncio.to_thread(wait_until, lambda: fully_in_sync(cluster, "suspended"), "all three replicas in the ISR")
    before = await asyncio.to_thread(settled_view, cluster, "suspended")
    leader = before.leader_id

    async with await BrokerConnection.open("127.0.0.1", cluster.brokers[leader].port) as connection:
        await asyncio.to_thread(cluster.server.stop)

        async def refused() -> bool:
            return await produce_error(connection, "suspended", b"while suspended") == NOT_LEADER_OR_FOLLOWER

        await eventually(refused, WAIT_S, "the leader to refuse writes while its session is suspended")
        await asyncio.to_thread(cluster.server.start)

        async def accepted() -> bool:
            return await produce_error(connection, "suspended", b"after reconnect") == 0

        await eventually(accepted, WAIT_S, "the leader to take writes again once its session is back")
    after = await asyncio.to_thread(settled_view, cluster, "suspended")
    assert (after.leader_id, after.leader_epoch) == (leader, before.leader_epoch), "a spurious leader change"


async def test_a_leader_paused_past_its_session_acknowledges_nothing_the_new_leader_lacks(private_cluster):
    cluster = private_cluster
    create_topic(cluster, "paused")
    acknowledged = produce_numbered(cluster.bootstrap, "paused", 0, 100)
    await asyncio.to_thread(wait_until, lambda: fully_in_sync(cluster, "paused"), "all three replicas in the ISR")
    zombie = await asyncio.to_thread(leader_of, cluster, "paused")
    async with await BrokerConnection.open("127.0.0.1", cluster.brokers[zombie].port) as connection:
        cluster.brokers[zombie].pause()
        try:
            # Sits in the paused leader's socket until it runs again.
            zombie_produce = asyncio.create_task(produce_error(connection, "paused", b"zombie"))
            await asyncio.to_thread(wait_until, lambda: leader_of(cluster, "paused", excluded=(zombie,)) not in (-1, zombie),
                                    "another broker to lead once the paused leader's session expired")
            survivors = ",".join(broker.bootstrap for broker_id, broker in cluster.brokers.items() if broker_id != zombie)
            acknowledged += await asyncio.to_thread(produce_numbered, survivors, "paused", 100, 100)
        finally:
            cluster.brokers[zombie].resume()
        try:
            assert await zombie_produce != 0, "the paused leader acknowledged a write after its session expired"
        except BrokerUnavailable:
            pass  # it dropped the connection instead of answering: nothing acknowledged either
    assert sorted(int(value) for value in acknowledged) == list(range(200))
    problems = await asyncio.to_thread(stop_and_check, cluster, "paused", frozenset(str(n).encode() for n in acknowledged))
    assert problems == []
