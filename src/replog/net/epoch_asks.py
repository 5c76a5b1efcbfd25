"""A follower's KIP-101 asks to one leader, sent together: Kafka's fetcher asks a leader where
the epochs of every partition it must truncate ended in one OffsetsForLeaderEpoch request.

Asked one partition at a time, a broker restarting with thousands of replicas sent thousands of
requests to each leader, and each cut short the fetch round parked on the same connection
(net/fetch_rounds.py), which then went out again with every partition in it.

The asks of one event-loop turn go out as one request, at most ASKS_PER_REQUEST_MAX of them;
later asks go in the next. Each asker gets its own partition's answer, or the request's failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from replog.replication.fetcher import EpochAsk

ASKS_PER_REQUEST_MAX = 1000

PartitionKey = tuple[str, int]

# asks -> each asked partition's answer (a send that cannot answer one raises)
SendAsks = Callable[[list[EpochAsk]], Awaitable[dict[PartitionKey, object]]]


class EpochAsks:
    """The asks to one leader. See the module docstring."""

    def __init__(self, send: SendAsks):
        self._send = send
        self._queued: list[tuple[EpochAsk, asyncio.Future]] = []  # bounded by the partitions followed from this leader
        self._flush: asyncio.Handle | None = None
        self._requests: set[asyncio.Task] = set()  # bounded: one per event-loop turn with asks, each answered at once

    async def epoch_end(self, ask: EpochAsk) -> object:
        loop = asyncio.get_running_loop()
        answer = loop.create_future()
        self._queued.append((ask, answer))
        if self._flush is None:
            self._flush = loop.call_soon(self._send_queued)
        return await answer

    def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for request in self._requests:
            request.cancel()
        for _, answer in self._queued:
            answer.cancel()
        self._queued.clear()

    def _send_queued(self) -> None:
        self._flush = None
        batch, self._queued = self._queued[:ASKS_PER_REQUEST_MAX], self._queued[ASKS_PER_REQUEST_MAX:]
        if self._queued:
            self._flush = asyncio.get_running_loop().call_soon(self._send_queued)
        batch = [(ask, answer) for ask, answer in batch if not answer.done()]  # an asker cancelled meanwhile
        if batch:
            request = asyncio.get_running_loop().create_task(self._request(batch))
            self._requests.add(request)
            request.add_done_callback(self._requests.discard)

    async def _request(self, batch: list[tuple[EpochAsk, asyncio.Future]]) -> None:
        """Answers every ask of `batch`: with its partition's answer or with the failure, which
        each asker (a fetcher) handles as it would the failure of a request of its own."""
        try:
            answers = await self._send([ask for ask, _ in batch])
        except asyncio.CancelledError:
            for _, answer in batch:
                answer.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - each fetcher decides what a failure means
            for _, answer in batch:
                if not answer.done():
                    answer.set_exception(error)
        else:
            for ask, answer in batch:
                if not answer.done():
                    answer.set_result(answers[ask.topic, ask.partition])
