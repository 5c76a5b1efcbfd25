"""Store requests joined: many small reads or transactions, one store round trip.

When a broker dies, shuts down or comes back, each of the thousands of partitions it shared
with this broker changes its ISR, each in a transaction of its own (check the leader node, set
the ISR), and the partitions it led elect new leaders, each reading its ISR and epoch counter
and committing its win. One at a time per store round trip, they held a broker's elections and
fetches back for tens of seconds at 10,000 partitions, and on etcd the flood of small requests
starved the server until sessions expired. So the requests asked for while others are in flight
are sent as one: up to TRANSACTION_OPS_MAX transaction operations (`JoinedCommits`), or nodes
read (`JoinedReads`). `JoinedStore` gives an election both, with up to
ELECTION_REQUESTS_IN_FLIGHT_MAX of each in flight.

Requests in flight at once may take effect in any order. That is safe for the same reason
several brokers' writes are: each write of a partition's state is fenced on the versions its
writer last read (an ISR write on the leader node's and the ISR's, an election on the epoch
counter's), and one partition's writes on one broker follow each other (an election, then its
leader's ISR writes one at a time).

A joined transaction is all-or-nothing like its parts, and one refused part (a fenced
leadership's BadVersion, a lost election's NodeExists) refuses it whole: then the parts that
write the path it was refused on are committed alone, so that only their own fail, and the rest
together again (`commit_together`).
"""

from __future__ import annotations

import abc
import asyncio
import collections
from typing import Generic, TypeVar

from replog.tasks import cancel_and_wait

from .base import (TRANSACTION_OPS_MAX, BadVersion, DataEvent, NodeExists, NoNode, NotEmpty, Store, StoreError, Transaction,
                   TxnOp, Watch, commit_ops)

T = TypeVar("T")
# Joined requests of elections and ISR writes in flight at once. One at a time, the store's
# round trip bounded them, not the broker's CPU: a few in flight make a large topic's creation
# and a restarted broker's return to every ISR faster (bench/scale.py measures both).
ELECTION_REQUESTS_IN_FLIGHT_MAX = 4
_REFUSALS = (BadVersion, NodeExists, NoNode, NotEmpty)  # of one operation, for its node's state
Asked = TypeVar("Asked")
Answer = TypeVar("Answer")


async def commit_together(store: Store, batch: list[tuple[T, list[TxnOp]]]) -> list[tuple[T, list[object] | BaseException]]:
    """Each item's writes committed, all in one transaction, and each item's outcome: its
    operations' results (Transaction.commit's), or its error.

    If the transaction is refused on a path (a node's state, as in a fenced leader's BadVersion),
    the items that write it are committed alone, so that only the ones at fault fail, and the
    others together again. Once as many items have been at fault as are left (a batch of
    elections mostly lost to a broker that raced them), or on any other failure (the store
    unreachable), each item left goes alone: a transaction apiece, as without joining."""
    outcomes: dict[int, list[object] | BaseException] = {}
    left = list(range(len(batch)))
    while left:  # bounded by the batch: each pass settles at least one item
        try:
            results = await commit_ops(store, [op for index in left for op in batch[index][1]])
        except StoreError as error:
            at_fault = [index for index in left if any(op.path == error.path for op in batch[index][1])] \
                if isinstance(error, _REFUSALS) else []
            alone = at_fault if at_fault and len(outcomes) + len(at_fault) < len(left) - len(at_fault) else left
            settled = await asyncio.gather(*(commit_ops(store, batch[index][1]) for index in alone), return_exceptions=True)
            outcomes.update(zip(alone, settled))
            left = [index for index in left if index not in outcomes]
            continue
        start = 0
        for index in left:
            ops = batch[index][1]
            outcomes[index] = results[start:start + len(ops)]
            start += len(ops)
        break
    return [(item, outcomes[index]) for index, (item, _) in enumerate(batch)]


class JoinedRequests(Generic[Asked, Answer], abc.ABC):
    """Sends what callers ask for, joining the asks that wait while requests are in flight, up
    to `size_max` in all. At most `in_flight_max` requests are in flight at a time; a lone ask
    goes out at once, as it would alone. A store error answers every ask of its request."""

    def __init__(self, store: Store, size_max: int, in_flight_max: int = 1):
        self._store = store
        self._size_max = size_max
        self._in_flight_max = in_flight_max
        # Bounded by the callers waiting: each has one ask out.
        self._waiting: collections.deque[tuple[Asked, int, asyncio.Future]] = collections.deque()
        self._senders: set[asyncio.Task] = set()  # each sends one request at a time

    async def _ask(self, asked: Asked, size: int) -> Answer:
        answer = asyncio.get_running_loop().create_future()
        self._waiting.append((asked, size, answer))
        if len(self._senders) < self._in_flight_max:
            sender = asyncio.create_task(self._send_waiting(), name=f"joined-{type(self).__name__}")
            self._senders.add(sender)
            sender.add_done_callback(self._sender_ended)
        return await answer

    @abc.abstractmethod
    async def _send(self, batch: list[Asked]) -> list[Answer | BaseException]:
        """One request for the whole batch, and each ask's answer or error, in order."""

    async def close(self) -> None:
        await cancel_and_wait(*self._senders)
        while self._waiting:  # bounded: nothing joins a closed queue from here
            self._waiting.popleft()[2].cancel()

    async def _send_waiting(self) -> None:
        """Ends once nothing waits; the next ask starts it again."""
        try:
            await self._send_each_waiting()
        finally:
            # Here, not in a done-callback: an ask that comes between this sender's end and the
            # callback would count it as sending, and wait for a request nobody sends.
            self._senders.discard(asyncio.current_task())

    async def _send_each_waiting(self) -> None:
        while self._waiting:
            batch: list[tuple[Asked, asyncio.Future]] = []
            size = 0
            while self._waiting and size + self._waiting[0][1] <= self._size_max:
                asked, asked_size, answer = self._waiting.popleft()
                if not answer.done():  # its caller gave up before it went out
                    batch.append((asked, answer))
                    size += asked_size
            try:
                outcomes = await self._send([asked for asked, _ in batch]) if batch else []
            except asyncio.CancelledError:
                for _, answer in batch:  # closed: its callers are being stopped too
                    answer.cancel()
                raise
            except StoreError as error:
                outcomes = [error] * len(batch)
            except Exception as error:
                for _, answer in batch:
                    if not answer.done():
                        answer.set_exception(error)
                raise
            for (_, answer), outcome in zip(batch, outcomes):
                if answer.done():
                    continue
                if isinstance(outcome, BaseException):
                    answer.set_exception(outcome)
                else:
                    answer.set_result(outcome)

    def _sender_ended(self, sender: asyncio.Task) -> None:
        """An exception is a bug that must not leave callers waiting for requests nobody sends."""
        if sender.cancelled() or sender.exception() is None:
            return
        while self._waiting:  # bounded by the callers waiting
            answer = self._waiting.popleft()[2]
            if not answer.done():
                answer.set_exception(sender.exception())


class JoinedCommits(JoinedRequests[list[TxnOp], list[object]]):
    """Commits transactions of a few operations each, joined (module docstring)."""

    def __init__(self, store: Store, ops_max: int = TRANSACTION_OPS_MAX, in_flight_max: int = 1):
        super().__init__(store, ops_max, in_flight_max)

    async def commit(self, ops: list[TxnOp]) -> list[object]:
        """`ops` committed all-or-nothing, perhaps with others' (Transaction.commit's results)."""
        if len(ops) > self._size_max:
            return await commit_ops(self._store, ops)  # refused there, as it would be alone
        return await self._ask(ops, len(ops))

    async def _send(self, batch: list[list[TxnOp]]) -> list[list[object] | BaseException]:
        return [outcome for _, outcome in await commit_together(self._store, [(None, ops) for ops in batch])]


class JoinedReads(JoinedRequests[str, tuple[bytes, int] | None]):
    """Reads single nodes, joined (module docstring): each answer is what Store.get would say."""

    def __init__(self, store: Store, nodes_max: int = TRANSACTION_OPS_MAX, in_flight_max: int = 1):
        super().__init__(store, nodes_max, in_flight_max)

    async def get(self, path: str) -> tuple[bytes, int]:
        """(data, version), as Store.get; raises NoNode."""
        node = await self._ask(path, 1)
        if node is None:
            raise NoNode(path)
        return node

    async def _send(self, batch: list[str]) -> list[tuple[bytes, int] | None]:
        return await self._store.get_many(batch)


class JoinedStore:
    """The reads and transactions thousands of partitions make at once when a topic is created
    or a broker leaves or comes back (elections, assignments read), joined with each other's;
    what an election needs of a Store (election.py). Watches are the store's own."""

    def __init__(self, store: Store):
        self._store = store
        self.reads = JoinedReads(store, in_flight_max=ELECTION_REQUESTS_IN_FLIGHT_MAX)
        self.commits = JoinedCommits(store, in_flight_max=ELECTION_REQUESTS_IN_FLIGHT_MAX)

    async def get(self, path: str) -> tuple[bytes, int]:
        if not self._store.reads_many_at_once:
            return await self._store.get(path)  # joined, they would only wait for each other
        return await self.reads.get(path)

    async def exists(self, path: str) -> int | None:
        try:
            return (await self.get(path))[1]
        except NoNode:
            return None

    def transaction(self) -> Transaction:
        return Transaction(self.commits.commit)

    async def watch_data(self, path: str) -> Watch[DataEvent]:
        return await self._store.watch_data(path)

    async def close(self) -> None:
        await self.reads.close()
        await self.commits.close()
