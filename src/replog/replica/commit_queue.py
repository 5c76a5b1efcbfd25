"""The acks=all commit queue of a leader partition: one entry
(last offset, future) per acks=-1 append waiting for the high watermark to pass its last
offset, in offset order because appends are. Every HW advance resolves the entries it passed;
the commit "thread" is thus not a loop but the advance itself.

Concurrency: owned by one event loop.
"""

from __future__ import annotations

import asyncio
import collections
from typing import NamedTuple

from kio.schema.errors import ErrorCode

# An acks=-1 request holds a slot until committed or timed out. Requests in flight are bounded
# by connections x in-flight requests each, so this is only reached when the HW is stuck; then
# refusing (before appending, so that a retry duplicates nothing) beats growing without end.
COMMIT_QUEUE_CAPACITY = 10_000


class _PendingCommit(NamedTuple):
    last_offset: int
    done: asyncio.Future


class CommitQueue:
    def __init__(self) -> None:
        self._queue: collections.deque[_PendingCommit] = collections.deque()

    def __len__(self) -> int:
        return len(self._queue)

    def full(self) -> bool:
        """Whether another entry would pass COMMIT_QUEUE_CAPACITY, once entries whose requester
        stopped waiting (timed out, disconnected) are dropped from the front: the oldest time
        out first, so this is where they gather."""
        queue = self._queue
        while queue and queue[0].done.done():  # bounded by COMMIT_QUEUE_CAPACITY
            queue.popleft()
        return len(queue) >= COMMIT_QUEUE_CAPACITY

    async def wait(self, last_offset: int, timeout_ms: int) -> ErrorCode:
        """The outcome `commit` gives the entry of `last_offset`; REQUEST_TIMED_OUT after `timeout_ms`."""
        done = asyncio.get_running_loop().create_future()
        self._queue.append(_PendingCommit(last_offset, done))
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await done
        except TimeoutError:
            return ErrorCode.request_timed_out

    def commit(self, high_watermark: int, outcome: ErrorCode) -> None:
        """Answer the entries below `high_watermark` with `outcome`."""
        queue = self._queue
        while queue and queue[0].last_offset < high_watermark:  # bounded by COMMIT_QUEUE_CAPACITY
            pending = queue.popleft()
            if not pending.done.done():
                pending.done.set_result(outcome)

    def fail_all(self) -> None:
        """Leadership ended: every entry is answered NOT_LEADER_OR_FOLLOWER."""
        while self._queue:  # bounded by COMMIT_QUEUE_CAPACITY
            pending = self._queue.popleft()
            if not pending.done.done():
                pending.done.set_result(ErrorCode.not_leader_or_follower)
