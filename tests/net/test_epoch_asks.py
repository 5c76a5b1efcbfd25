"""A follower's OffsetForLeaderEpoch asks to one leader go out together (net/epoch_asks.py)."""

from __future__ import annotations

import asyncio

import pytest

from replog.net.epoch_asks import ASKS_PER_REQUEST_MAX, EpochAsks
from replog.replication.fetcher import EpochAsk

WAIT_S = 10


class FakeLeader:
    def __init__(self) -> None:
        self.requests: list[list[EpochAsk]] = []
        self.failure: Exception | None = None

    async def send(self, asks: list[EpochAsk]) -> dict:
        self.requests.append(asks)
        if self.failure is not None:
            raise self.failure
        return {(ask.topic, ask.partition): ("end of", ask.partition, ask.leader_epoch) for ask in asks}


def ask(partition: int, epoch: int = 3) -> EpochAsk:
    return EpochAsk("t", partition, epoch, epoch)


async def test_the_asks_of_one_turn_go_in_one_request_and_each_gets_its_own_answer():
    leader = FakeLeader()
    asks = EpochAsks(leader.send)
    answers = await asyncio.wait_for(asyncio.gather(*(asks.epoch_end(ask(n, epoch=n)) for n in range(50))), WAIT_S)
    assert answers == [("end of", n, n) for n in range(50)]
    assert [len(request) for request in leader.requests] == [50]


async def test_a_request_carries_at_most_the_bound_and_the_rest_go_next():
    leader = FakeLeader()
    asks = EpochAsks(leader.send)
    answers = await asyncio.wait_for(
        asyncio.gather(*(asks.epoch_end(ask(n)) for n in range(ASKS_PER_REQUEST_MAX + 1))), WAIT_S)
    assert len(answers) == ASKS_PER_REQUEST_MAX + 1
    assert [len(request) for request in leader.requests] == [ASKS_PER_REQUEST_MAX, 1]


async def test_a_failed_request_fails_each_of_its_asks_and_the_next_asks_go_out_again():
    leader = FakeLeader()
    asks = EpochAsks(leader.send)
    leader.failure = ConnectionError("leader gone")
    outcomes = await asyncio.gather(asks.epoch_end(ask(0)), asks.epoch_end(ask(1)), return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [ConnectionError, ConnectionError]
    leader.failure = None
    assert await asyncio.wait_for(asks.epoch_end(ask(0)), WAIT_S) == ("end of", 0, 3)


async def test_close_cancels_the_asks_still_waiting():
    release = asyncio.Event()

    async def hanging(batch: list[EpochAsk]) -> dict:
        await release.wait()
        return {}

    asks = EpochAsks(hanging)
    sent = asyncio.ensure_future(asks.epoch_end(ask(0)))
    for _ in range(2):  # its turn, then the turn that sends it: its request is out, unanswered
        await asyncio.sleep(0)
    queued = asyncio.ensure_future(asks.epoch_end(ask(1)))
    await asyncio.sleep(0)  # asked, not yet sent
    asks.close()
    for waiting in (sent, queued):
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, WAIT_S)
