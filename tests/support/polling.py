"""Bounded waits for tests: poll a condition with a deadline, never sleep to synchronise."""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import AsyncIterator, Awaitable, Callable, TypeVar

T = TypeVar("T")
POLL_INTERVAL_S = 0.02
# A blocking wait's polls slow down to this: a condition that asks brokers over the network costs
# them a request per poll, and cluster tests share two cores with those brokers.
POLL_INTERVAL_MAX_S = 0.2


async def eventually(condition: Callable[[], bool | Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Return once `condition()` (a plain or an async callable) is true; fail naming `what` if it
    is not within `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await _value(condition()):
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(POLL_INTERVAL_S)


async def next_within(events: AsyncIterator[T], timeout_s: float = 10) -> T:
    return await asyncio.wait_for(anext(events), timeout_s)


async def first_matching(events: AsyncIterator[T], predicate: Callable[[T], bool], timeout_s: float = 10) -> T:
    """The first event satisfying `predicate`, skipping others, within `timeout_s` overall."""
    async with asyncio.timeout(timeout_s):
        async for event in events:
            if predicate(event):
                return event
    raise AssertionError("event stream ended before a matching event")


async def _value(outcome):
    return await outcome if inspect.isawaitable(outcome) else outcome


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 30) -> T:
    """`eventually` for tests without an event loop (real clients' blocking APIs, broker
    processes): the first true value `condition()` returns. Polls every POLL_INTERVAL_S at first,
    doubling up to POLL_INTERVAL_MAX_S."""
    deadline = time.monotonic() + timeout_s
    interval_s = POLL_INTERVAL_S
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
        interval_s = min(2 * interval_s, POLL_INTERVAL_MAX_S)
    return value
