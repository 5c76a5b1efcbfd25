"""A controlled shutdown that begins while the broker's store session is in doubt (the store
restarting): the hand-over waits for the session rather than skip at once. Skipped, the leader
stayed in charge of a partition whose followers could no longer reach it (it had deregistered),
shrank its ISR to itself, and when it went no replica was left that could lead."""

from __future__ import annotations

import asyncio

import pytest

from replog.coord_backends import SessionState, paths
from tests.replication.one_broker import OTHER, TOPIC, WAIT_S, one_broker
from tests.support.polling import eventually

LAG_MS = 600_000  # OTHER, which never fetches, stays in the ISR: there is someone to hand over to
NO_SHRINK_WINDOW_S = 3


@pytest.fixture
async def leading(tmp_path):
    async with one_broker(tmp_path, replica_lag_time_max_ms=LAG_MS) as running:
        await running.create_partition()
        await running.wait_for_working_leader("the first leader")
        yield running


async def test_a_hand_over_waits_for_a_session_in_doubt_and_then_hands_over(leading):
    session = leading.broker.store._session
    session.publish(SessionState.SUSPENDED)
    listeners = len(session._watches)
    hand_over = asyncio.create_task(leading.broker.hosted.hand_over(WAIT_S))
    await eventually(lambda: hand_over.done() or len(session._watches) > listeners, WAIT_S,
                     "the hand-over to wait for the session, or to give up")
    session.publish(SessionState.CONNECTED)
    await hand_over
    assert await leading.peer.exists(paths.leader(TOPIC, 0)) is None, "the leadership was not handed over"
    assert await leading.isr() == (OTHER,)


async def test_a_hand_over_abandoned_leaves_the_isr_as_it_was(leading):
    """The session stays away past the hand-over's deadline, then returns and a follower
    departs: the leaving leader's ISR upkeep has stopped, so it shrinks nobody out (the
    partition goes with its session, to a replica still in the ISR)."""
    leading.broker.store._session.publish(SessionState.SUSPENDED)
    await leading.broker.hosted.hand_over(0.5)
    assert (await leading.leader_record())[0].leader == leading.broker.broker_id
    leading.broker.store._session.publish(SessionState.CONNECTED)
    await leading.peer.delete(paths.broker(OTHER))
    await eventually(lambda: OTHER not in (leading.broker.metadata.registered or {OTHER}), WAIT_S,
                     "the broker to see the follower's registration gone")
    # A running upkeep shrinks a departed follower out at once (within milliseconds); this
    # bounded look for what must not happen gives it far longer.
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(eventually(lambda: _isr_shrunk(leading), WAIT_S, "a shrink"), NO_SHRINK_WINDOW_S)


async def _isr_shrunk(leading) -> bool:
    return OTHER not in await leading.isr()
