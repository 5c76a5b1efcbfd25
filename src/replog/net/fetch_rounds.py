"""A follower's fetches from one leader, sent together: Kafka's ReplicaFetcherThread asks a
leader for every partition it follows there in one Fetch request.

Each partition has its own ReplicaFetcher (replication/fetcher.py), which asks for one
partition at a time. Sent as requests of their own on the one connection to the leader, a
long-polling fetch of an idle partition held every answer behind it for up to its max wait,
since a connection's responses leave in request order: one idle partition slowed acks=all on
every busy partition the same follower fetched from that leader to a round trip per 500 ms.

So the asks are gathered into rounds: one request carrying every partition whose fetcher waits
for an answer, which the leader answers as soon as any of them has data, or after one max wait.
A partition's reply goes to its fetcher when it says something: records, an error, or, once the
fetcher's own max wait has passed (when the leader would have answered a fetch of that
partition alone), a high watermark or log start other than the last reply its fetcher got.
Otherwise the partition rides along in the next round, with its wait started again: the leader
still hears from the follower every max wait, which keeps it in the ISR, but an idle
partition's fetcher is not woken at all (10,000 idle partitions woke 13,000 fetchers a second
on each broker).

A partition that asks again while a round is parked at the leader (it was answered, with
records say, and wants the next ones) goes out at once, in a new round with every other waiting
partition: the leader cuts a parked fetch short when a later request arrives on its connection
(net/framing.py), so the new round is not held behind the old one. At most
ROUNDS_IN_FLIGHT_MAX rounds are out at a time.

A partition's first ask (its fetcher just started following this leader) cuts nothing: it goes
out with the next round, once the parked one is answered, at most a max wait later, as a
partition added to Kafka's ReplicaFetcherThread joins its next fetch. When a topic of
thousands of partitions is created, or a broker restarts, fetchers start one after another for
seconds; each first ask cut the parked round, and the leader read every partition of the
follower's round again for each of them (a quarter of each broker's CPU while 1,000 partitions
were created).
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Awaitable, Callable

from replog.replication.fetcher import UNKNOWN_TOPIC_OR_PARTITION, FetchReply, FetchSpec

# Two: the parked round and the one that cuts it short; a third ask waits for the cut round.
ROUNDS_IN_FLIGHT_MAX = 2
# What was told to partitions not asking at the moment, kept up to this many (see FetchRounds._told).
TOLD_SLACK = 1024
# Kafka's replica.fetch.response.max.bytes: a round's answer is bounded as a whole, yet its
# first partition with data always gets a whole batch (KIP-74).
ROUND_MAX_BYTES = 10 * 1024 * 1024

PartitionKey = tuple[str, int]
# A partition the leader's answer left out: its fetcher re-reads who leads it.
_NOT_ANSWERED = FetchReply(UNKNOWN_TOPIC_OR_PARTITION, -1, -1, b"")
# (specs, max_wait_ms, max_bytes) -> each asked partition's reply
SendRound = Callable[[list[FetchSpec], int, int], Awaitable[dict[PartitionKey, FetchReply]]]


class _Ask:
    """One fetcher's outstanding ask."""

    __slots__ = ("spec", "key", "first", "answer", "deadline_s", "rounds_out")

    def __init__(self, spec: FetchSpec, first: bool, loop: asyncio.AbstractEventLoop):
        self.spec = spec
        self.key: PartitionKey = spec.topic, spec.partition
        self.first = first  # nothing told to its partition yet: it does not cut a parked round
        self.answer: asyncio.Future[FetchReply] = loop.create_future()
        self.deadline_s = loop.time() + spec.max_wait_ms / 1000
        self.rounds_out = 0  # rounds in flight that carry it


_deadline = operator.attrgetter("deadline_s")


class FetchRounds:
    """The rounds to one leader. See the module docstring."""

    def __init__(self, send_round: SendRound, name: str):
        self._send_round = send_round
        self._name = name
        self._asks: dict[PartitionKey, _Ask] = {}  # bounded by the partitions followed from this leader
        # (high watermark, log start) of the last reply each partition's fetcher got: at most
        # TOLD_SLACK more than the partitions asking (_forget_stale_told)
        self._told: dict[PartitionKey, tuple[int, int]] = {}
        self._rounds_in_flight = 0
        self._changed = asyncio.Event()
        self._sender: asyncio.Task | None = None

    async def fetch(self, spec: FetchSpec) -> FetchReply:
        """The leader's answer for `spec`'s partition, as a fetch of it alone would have it."""
        key = spec.topic, spec.partition
        ask = _Ask(spec, key not in self._told, asyncio.get_running_loop())
        replaced = self._asks.get(key)
        if replaced is not None:
            replaced.answer.cancel()  # a fetcher has one ask at a time: that one's fetcher is gone
        self._asks[ask.key] = ask
        self._changed.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_rounds(), name=f"fetch-rounds-{self._name}")
            self._sender.add_done_callback(self._sender_ended)
        try:
            reply = await ask.answer
        except BaseException:
            self._told.pop(ask.key, None)  # its fetcher may be gone: its next ask is answered at its wait
            raise
        finally:
            if self._asks.get(ask.key) is ask:
                del self._asks[ask.key]
                self._changed.set()  # the sender ends once nobody asks
        self._told[ask.key] = reply.high_watermark, reply.log_start_offset
        if len(self._told) > len(self._asks) + TOLD_SLACK:
            self._forget_stale_told()
        return reply

    def _forget_stale_told(self) -> None:
        """Drop what was told to partitions that do not ask now: mostly fetchers stopped between
        asks (partitions no longer followed from this leader); one that was only busy gets its
        next idle reply at its wait."""
        self._told = {key: told for key, told in self._told.items() if key in self._asks}

    def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
        for ask in self._asks.values():
            ask.answer.cancel()
        self._asks.clear()
        self._told.clear()

    def _sender_ended(self, sender: asyncio.Task) -> None:
        """A sender ends by itself only when nobody asks; an exception is a bug that must not
        leave fetchers waiting for rounds nobody sends."""
        if sender.cancelled() or sender.exception() is None:
            return
        for ask in self._asks.values():
            if not ask.answer.done():
                ask.answer.set_exception(sender.exception())

    async def _send_rounds(self) -> None:
        """Ends when no fetcher asks; the next ask starts it again. Each round is a task of this
        one's group, which a round's failure never ends (_round hands it to its asks).

        An ask may come while the group winds down (its last round's task finishing after the
        loop saw nobody ask): this sender is not done then, so no other starts, and it goes on
        for that ask (simulator seed 1898: a follower that never fetched from its leader again)."""
        while self._asks or self._rounds_in_flight:
            async with asyncio.TaskGroup() as rounds:
                while self._asks or self._rounds_in_flight:  # each turn waits for an ask or a round's end
                    waiting = [ask for ask in self._asks.values() if not ask.answer.done()]
                    unsent = [ask for ask in waiting if ask.rounds_out == 0]
                    if unsent and (self._rounds_in_flight == 0 or self._rounds_in_flight < ROUNDS_IN_FLIGHT_MAX
                                   and not all(ask.first for ask in unsent)):
                        # Counted out before the task runs, so that this loop's next turn sees them sent.
                        self._rounds_in_flight += 1
                        for ask in waiting:
                            ask.rounds_out += 1
                        rounds.create_task(self._round(sorted(waiting, key=_deadline)))
                        continue
                    self._changed.clear()
                    await self._changed.wait()

    async def _round(self, asks: list[_Ask]) -> None:
        loop = asyncio.get_running_loop()
        try:
            # One whole wait, not the first asker's remaining one: asks made at different times
            # each ended a round at their own deadline, and with thousands of partitions rounds
            # of every partition went out every few milliseconds though none had data.
            wait_ms = min(ask.spec.max_wait_ms for ask in asks)
            replies = await self._send_round([ask.spec for ask in asks], wait_ms, ROUND_MAX_BYTES)
        except Exception as error:  # noqa: BLE001 - each fetcher decides what a failure means
            for ask in asks:
                if not ask.answer.done():
                    ask.answer.set_exception(error)
        else:
            now_s = loop.time()
            for ask in asks:
                reply = replies.get(ask.key, _NOT_ANSWERED)
                if ask.answer.done():
                    continue
                if reply.error_code or reply.records:
                    ask.answer.set_result(reply)
                elif now_s >= ask.deadline_s:
                    if self._told.get(ask.key) != (reply.high_watermark, reply.log_start_offset):
                        ask.answer.set_result(reply)
                    else:
                        ask.deadline_s = now_s + ask.spec.max_wait_ms / 1000
        finally:
            self._rounds_in_flight -= 1
            for ask in asks:
                ask.rounds_out -= 1
            self._changed.set()
