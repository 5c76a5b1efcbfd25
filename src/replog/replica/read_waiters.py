"""Long polls on partitions: a ReadWaiter is registered with any number of partitions and woken
by the first whose readable end passes its fetch offset (the high watermark for consumers, the
log end for followers); each partition keeps its waiters in ReadWatches.

Concurrency: owned by one event loop.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

# Long-polling fetches waiting on one partition; beyond this a fetch is answered at once.
WATCHES_PER_PARTITION_MAX = 10_000


class Watched(Protocol):
    """A partition, as a ReadWaiter watches it (replica/partition.py)."""

    def add_watch(self, waiter: ReadWaiter, fetch_offset: int, for_follower: bool) -> None: ...

    def remove_watch(self, waiter: ReadWaiter) -> None: ...


class ReadWaiter:
    """One long-polling fetch: registered with its partitions, woken by the first with data.

    Use as a context manager so that it leaves every partition it watched, whatever happens.
    """

    def __init__(self) -> None:
        self._woken = asyncio.Event()
        self._watched: list[Watched] = []

    def watch(self, partition: Watched, fetch_offset: int, for_follower: bool = False) -> None:
        """Be woken once `partition` has data from `fetch_offset` on (for a consumer: below the HW;
        for a follower: below the LEO), at once if it already has or is closed."""
        self._watched.append(partition)
        partition.add_watch(self, fetch_offset, for_follower)

    def wake(self) -> None:
        self._woken.set()

    async def wait(self, timeout_s: float) -> bool:
        """Whether some watched partition became readable (or closed) within `timeout_s`."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._woken.wait()
        except TimeoutError:
            return False
        return True

    def __enter__(self) -> ReadWaiter:
        return self

    def __exit__(self, *exc_info) -> None:
        for partition in self._watched:  # bounded by the partitions of one fetch
            partition.remove_watch(self)
        self._watched.clear()


class ReadWatches:
    """The waiters of one partition, by the offset each waits to pass: consumers' (woken by the
    high watermark) and followers' (woken by the log end)."""

    __slots__ = ("consumers", "followers")

    def __init__(self) -> None:
        self.consumers: dict[ReadWaiter, int] = {}
        self.followers: dict[ReadWaiter, int] = {}

    def add(self, waiter: ReadWaiter, fetch_offset: int, for_follower: bool, readable_end: int, open_: bool) -> None:
        """Keep `waiter` until the readable end passes `fetch_offset`; wake it at once if it has
        already, if the partition is not `open_` to reads, or if the partition has its fill of
        waiters."""
        watches = self.followers if for_follower else self.consumers
        if not open_ or fetch_offset < readable_end or len(watches) >= WATCHES_PER_PARTITION_MAX:
            waiter.wake()
        else:
            watches[waiter] = fetch_offset

    def remove(self, waiter: ReadWaiter) -> None:
        self.consumers.pop(waiter, None)
        self.followers.pop(waiter, None)

    def wake_consumers(self, high_watermark: int) -> None:
        _wake_passed(self.consumers, high_watermark)

    def wake_followers(self, log_end_offset: int) -> None:
        _wake_passed(self.followers, log_end_offset)

    def wake_all(self) -> None:
        for waiter in [*self.consumers, *self.followers]:  # bounded by 2 x WATCHES_PER_PARTITION_MAX
            waiter.wake()
        self.consumers.clear()
        self.followers.clear()


def _wake_passed(watches: dict[ReadWaiter, int], readable_end: int) -> None:
    woken = [waiter for waiter, fetch_offset in watches.items() if fetch_offset < readable_end]
    for waiter in woken:  # bounded by WATCHES_PER_PARTITION_MAX
        del watches[waiter]
        waiter.wake()
