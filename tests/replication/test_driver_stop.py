"""A partition's leadership driver ends when stopped, even as one of its tasks fails."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from replog.coord_backends import SessionState
from replog.replication import driver
from replog.replication.driver import LeadershipContext, PartitionLeadership


async def test_stop_ends_the_driver_when_a_task_of_it_fails_as_it_is_cancelled(monkeypatch):
    """Python 3.11's TaskGroup drops the cancellation of its task when a child fails meanwhile;
    the driver ran on, and stop() waited for it forever (simulator seed 2543)."""
    started = asyncio.Event()

    async def watching_forever(self):
        started.set()
        await asyncio.Event().wait()

    failures = []

    async def failing_when_cancelled(self):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            if failures:
                raise  # once only: a driver that survived stop() can still be ended below
            failures.append("failed")
            raise ValueError("the replica is not assigned here") from None

    monkeypatch.setattr(PartitionLeadership, "_read_watch", watching_forever)
    monkeypatch.setattr(PartitionLeadership, "_consume_events", failing_when_cancelled)
    context = LeadershipContext(1, SimpleNamespace(session_state=SessionState.CONNECTED),
                                replicas=SimpleNamespace(hosted=lambda topic, partition: None), connections=None,
                                config={}, now_ms=lambda: 0, leadership_changed=lambda: None)
    leadership = driver.PartitionLeadership(context, "t", 0, lambda: {})
    leadership.start()
    await asyncio.wait_for(started.wait(), 5)
    stopping = asyncio.ensure_future(leadership.stop())
    done, _ = await asyncio.wait([stopping], timeout=5)
    if not done:
        leadership._task.cancel()  # lands, this time: the test ends, and fails
        await stopping
    assert done, "stop() did not end the driver"
