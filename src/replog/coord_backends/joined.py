"""Transactions committed together: many small changes, one store round trip.

When a broker dies, shuts down or comes back, each of the thousands of partitions it shared
with this broker changes its ISR, each in a transaction of its own (check the leader node, set
the ISR). One at a time per store round trip, they held a broker's elections and fetches back
for tens of seconds at 10,000 partitions. So the transactions asked for while one is in flight
are committed as one, up to TRANSACTION_OPS_MAX operations (`JoinedCommits`).

A joined transaction is all-or-nothing like its parts, and one refused part (a fenced
leadership's BadVersion) refuses it whole: then each part is committed alone, so that only its
own fail (`commit_together`).
"""

from __future__ import annotations

import asyncio
import collections
from typing import TypeVar

from .base import TRANSACTION_OPS_MAX, Store, StoreError, TxnOp, commit_ops

T = TypeVar("T")


async def commit_together(store: Store, batch: list[tuple[T, list[TxnOp]]]) -> list[tuple[T, list[object] | BaseException]]:
    """Each item's writes committed, all in one transaction, and each item's outcome: its
    operations' results (Transaction.commit's), or its error. If the transaction fails, each
    item goes alone, so that only the ones at fault fail."""
    try:
        results = await commit_ops(store, [op for _, ops in batch for op in ops])
    except StoreError:
        outcomes = await asyncio.gather(*(commit_ops(store, ops) for _, ops in batch), return_exceptions=True)
        return [(item, outcome) for (item, _), outcome in zip(batch, outcomes)]
    split, start = [], 0
    for item, ops in batch:  # bounded by TRANSACTION_OPS_MAX
        split.append((item, results[start:start + len(ops)]))
        start += len(ops)
    return split


class JoinedCommits:
    """Commits transactions of a few operations each, joining those that wait while one is in
    flight (module docstring). One joined transaction is in flight at a time; a lone
    transaction goes out at once, as it would alone."""

    def __init__(self, store: Store, ops_max: int = TRANSACTION_OPS_MAX):
        self._store = store
        self._ops_max = ops_max
        # Bounded by the callers waiting: each leadership has at most one ISR write out.
        self._waiting: collections.deque[tuple[list[TxnOp], asyncio.Future]] = collections.deque()
        self._committer: asyncio.Task | None = None

    async def commit(self, ops: list[TxnOp]) -> list[object]:
        """`ops` committed all-or-nothing, perhaps with others' (Transaction.commit's results)."""
        if len(ops) > self._ops_max:
            return await commit_ops(self._store, ops)  # refused there, as it would be alone
        answer = asyncio.get_running_loop().create_future()
        self._waiting.append((ops, answer))
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_waiting(), name="joined-commits")
            self._committer.add_done_callback(self._committer_ended)
        return await answer

    async def close(self) -> None:
        if self._committer is not None:
            self._committer.cancel()
            await asyncio.gather(self._committer, return_exceptions=True)
        while self._waiting:  # bounded: nothing joins a closed committer's queue from here
            self._waiting.popleft()[1].cancel()

    async def _commit_waiting(self) -> None:
        """Ends once nothing waits; the next commit starts it again."""
        while self._waiting:
            batch: list[tuple[asyncio.Future, list[TxnOp]]] = []
            size = 0
            while self._waiting and size + len(self._waiting[0][0]) <= self._ops_max:
                ops, answer = self._waiting.popleft()
                if not answer.done():  # its caller gave up before it went out
                    batch.append((answer, ops))
                    size += len(ops)
            try:
                outcomes = await commit_together(self._store, batch) if batch else []
            except asyncio.CancelledError:
                for answer, _ in batch:  # closed: its callers are being stopped too
                    answer.cancel()
                raise
            except Exception as error:
                for answer, _ in batch:
                    if not answer.done():
                        answer.set_exception(error)
                raise
            for answer, outcome in outcomes:
                if answer.done():
                    continue
                if isinstance(outcome, BaseException):
                    answer.set_exception(outcome)
                else:
                    answer.set_result(outcome)

    def _committer_ended(self, committer: asyncio.Task) -> None:
        """An exception is a bug that must not leave callers waiting for commits nobody makes."""
        if committer.cancelled() or committer.exception() is None:
            return
        while self._waiting:  # bounded by the callers waiting
            answer = self._waiting.popleft()[1]
            if not answer.done():
                answer.set_exception(committer.exception())
