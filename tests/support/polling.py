"""Bounded waits for tests: poll a condition with a deadline, never sleep to synchronise."""

from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator, Awaitable, Callable, TypeVar

T = TypeVar("T")
POLL_INTERVAL_S = 0.02


async def eventually(condition: Callable[[], Awaitable[bool]], timeout_s: float, what: str) -> None:
    """Return once `condition()` is true; fail naming `what` if it is not within `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not await condition():
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


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 30) -> T:
    """`eventually` for tests without an event loop (real clients' blocking APIs): the first
    true value `condition()` returns."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(POLL_INTERVAL_S)
    return value
