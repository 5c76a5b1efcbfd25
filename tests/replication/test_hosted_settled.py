"""The broker's start waits for its hosted partitions' first elections (HostedPartitions.
wait_until_settled): until every one has led, followed or lost, or its deadline; then it says
how many had not."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from replog.replication.hosted import HostedPartitions

NEVER_S = 0.2  # the deadline of a wait that one partition never settles in


def _hosted(*settled: bool) -> tuple[HostedPartitions, list[asyncio.Event]]:
    hosted = HostedPartitions(SimpleNamespace(broker_id=1, store=None, joined_or_store=None, replicas=None), config=None)
    events = [asyncio.Event() for _ in settled]
    for partition, (event, done) in enumerate(zip(events, settled)):
        if done:
            event.set()
        hosted.leaderships[("topic", partition)] = SimpleNamespace(settled=event)
    return hosted, events


async def test_a_broker_whose_partitions_all_settled_waits_for_none():
    hosted, _ = _hosted(True, True, True)
    assert await hosted.wait_until_settled(timeout_s=3600) == 0
    assert await _hosted()[0].wait_until_settled(timeout_s=3600) == 0


async def test_the_partitions_not_settled_by_the_deadline_are_counted():
    hosted, events = _hosted(True, False, False, False)
    loop = asyncio.get_running_loop()
    loop.call_soon(events[3].set)  # settles while the wait is on
    # Hosted after the wait began: not one it waits for.
    loop.call_soon(hosted.leaderships.__setitem__, ("topic", 9), SimpleNamespace(settled=asyncio.Event()))
    assert await hosted.wait_until_settled(timeout_s=NEVER_S) == 2


async def test_the_wait_ends_as_the_last_partition_settles():
    hosted, events = _hosted(False, False)
    waiting = asyncio.create_task(hosted.wait_until_settled(timeout_s=3600))
    for event in events:
        asyncio.get_running_loop().call_soon(event.set)
    assert await asyncio.wait_for(waiting, 10) == 0  # long before the wait's own deadline
