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
Otherwise the partition rides along in the next round: the leader still hears from the follower
every max wait, which keeps it in the ISR, but an idle partition's fetcher is not woken at all
(10,000 idle partitions woke 13,000 fetchers a second on each broker).

A round costs what changed in it, not what it carries. Each names how its asks differ from the
round before (RoundChanges), which a fetch session sends as they are (FetcherSession.request),
and an incremental answer of a session carries only the partitions with news (RoundAnswer), so
only those, and the asks still owed news from an earlier answer, are looked at. A follower of
3,300 idle partitions spent 15-20 ms of its event loop on each round to each leader comparing,
filling in and looking at every one of them; half of a broker's idle CPU at 10,000 partitions.

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
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from replog.replication.fetcher import FetchReply, FetchSpec

# Two: the parked round and the one that cuts it short; a third ask waits for the cut round.
ROUNDS_IN_FLIGHT_MAX = 2
# What was told to partitions not asking at the moment, kept up to this many (see FetchRounds._told).
TOLD_SLACK = 1024
# Kafka's replica.fetch.response.max.bytes: a round's answer is bounded as a whole, yet its
# first partition with data always gets a whole batch (KIP-74).
ROUND_MAX_BYTES = 10 * 1024 * 1024

PartitionKey = tuple[str, int]
# A partition the leader's answer left out: its fetcher re-reads who leads it.
_NOT_ANSWERED = FetchReply(ErrorCode.unknown_topic_or_partition, -1, -1, b"")


class RoundChanges(NamedTuple):
    """How a round's asks differ from those of the round before it (`base`; None: none went
    out before): the asks made since (new partitions, or new offsets), and the partitions asked
    then and no longer. A fetch session names only these (FetcherSession.request)."""

    base: object | None
    token: object  # this round's, the `base` of the next one's changes
    added: list[FetchSpec]
    removed: list[FetchSpec]  # the specs last asked


class RoundAnswer(NamedTuple):
    """The leader's answer to a round. `told` None: every asked partition's reply is in
    `replies`, and one left out is unknown to the leader. Otherwise the answer is a fetch
    session's incremental one, which leaves out the partitions with nothing new since the
    session last told them, and `told(spec)` is that last reply."""

    replies: dict[PartitionKey, FetchReply]
    told: Callable[[FetchSpec], FetchReply | None] | None = None


# (specs, their changes since the round before, max_wait_ms, max_bytes) -> the answer
SendRound = Callable[[list[FetchSpec], RoundChanges, int, int], Awaitable[RoundAnswer]]


class _Ask:
    """One fetcher's outstanding ask."""

    __slots__ = ("spec", "key", "first", "answer", "deadline_s")

    def __init__(self, spec: FetchSpec, first: bool, loop: asyncio.AbstractEventLoop):
        self.spec = spec
        self.key: PartitionKey = spec.topic, spec.partition
        self.first = first  # nothing told to its partition yet: it does not cut a parked round
        self.answer: asyncio.Future[FetchReply] = loop.create_future()
        # Until then, what the leader tells of its partition without records or an error waits.
        self.deadline_s = loop.time() + spec.max_wait_ms / 1000


_max_wait_ms = operator.attrgetter("spec.max_wait_ms")


class FetchRounds:
    """The rounds to one leader. See the module docstring."""

    def __init__(self, send_round: SendRound, name: str):
        self._send_round = send_round
        self._name = name
        # Every fetcher's ask until its fetch returns, and those not answered yet, in the order
        # asked: bounded by the partitions followed from this leader.
        self._asks: dict[PartitionKey, _Ask] = {}
        self._waiting: dict[PartitionKey, _Ask] = {}
        # How the waiting asks differ from those of the newest round (RoundChanges).
        self._added: dict[PartitionKey, FetchSpec] = {}
        self._removed: dict[PartitionKey, FetchSpec] = {}
        self._newest: object | None = None  # the newest round's token
        self._newest_out = False  # whether it is still in flight: then only `_added` is unsent
        # Waiting asks that may be owed a high watermark or log start other than their fetcher's
        # last (told before the deadline, or while the fetcher was not asking), looked at at the
        # first round end past the deadline, as a fetch of the partition alone would be answered.
        self._pending: dict[PartitionKey, _Ask] = {}
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
            self._settle(replaced)
            replaced.answer.cancel()  # a fetcher has one ask at a time: that one's fetcher is gone
        self._asks[key] = self._waiting[key] = self._pending[key] = ask
        self._added[key] = spec
        self._removed.pop(key, None)
        self._changed.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_rounds(), name=f"fetch-rounds-{self._name}")
            self._sender.add_done_callback(self._sender_ended)
        try:
            reply = await ask.answer
        except BaseException:
            self._told.pop(key, None)  # its fetcher may be gone: its next ask is answered at its wait
            raise
        finally:
            self._settle(ask)
            if self._asks.get(key) is ask:
                del self._asks[key]
                self._changed.set()  # the sender ends once nobody asks
        self._told[key] = reply.high_watermark, reply.log_start_offset
        if len(self._told) > len(self._asks) + TOLD_SLACK:
            self._forget_stale_told()
        return reply

    def _settle(self, ask: _Ask) -> None:
        """`ask` is answered, failed or given up: it waits no more, and the next round leaves
        its partition out (forgets it, if a round carried it), unless it is asked again."""
        key = ask.key
        if self._waiting.get(key) is not ask:
            return
        del self._waiting[key]
        self._pending.pop(key, None)
        if self._added.get(key) is ask.spec:  # asked since the newest round went out: no round carried it
            del self._added[key]
        else:
            self._removed[key] = ask.spec

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
        for tracked in (self._asks, self._waiting, self._added, self._removed, self._pending, self._told):
            tracked.clear()

    def _sender_ended(self, sender: asyncio.Task) -> None:
        """A sender ends by itself only when nobody asks; an exception is a bug that must not
        leave fetchers waiting for rounds nobody sends."""
        if sender.cancelled() or sender.exception() is None:
            return
        for ask in list(self._waiting.values()):
            if not ask.answer.done():
                ask.answer.set_exception(sender.exception())
            self._settle(ask)

    async def _send_rounds(self) -> None:
        """Ends when no fetcher asks; the next ask starts it again. Each round is a task of this
        one's group, which a round's failure never ends (_round hands it to its asks).

        An ask may come while the group winds down (its last round's task finishing after the
        loop saw nobody ask): this sender is not done then, so no other starts, and it goes on
        for that ask (the simulator found a follower that never fetched from its leader again)."""
        while self._asks or self._rounds_in_flight:
            try:
                async with asyncio.TaskGroup() as rounds:
                    while self._asks or self._rounds_in_flight:  # each turn waits for an ask or a round's end
                        if self._round_due():
                            self._start_round(rounds)
                            continue
                        self._changed.clear()
                        await self._changed.wait()
            finally:
                # No round runs once the group is over. One its failure cancelled before it ran
                # never counted itself back in, and left counted it held off every next sender's
                # rounds: a follower never fetched from its leader again (found by the simulator).
                self._rounds_in_flight, self._newest_out = 0, False

    def _round_due(self) -> bool:
        """Whether a waiting ask is in no round in flight, and may go out now: at once if
        no round is out; cutting the parked round short unless all such asks are first ones."""
        unsent = self._added if self._newest_out else self._waiting
        if not unsent:
            return False
        if self._rounds_in_flight == 0:
            return True
        return (self._rounds_in_flight < ROUNDS_IN_FLIGHT_MAX
                and not all(self._waiting[key].first for key in unsent))  # bounded by the asks not sent

    def _start_round(self, rounds: asyncio.TaskGroup) -> None:
        """A round of every waiting ask. Counted out before its task runs, so that the sender's
        next turn sees them sent."""
        token = object()
        changes = RoundChanges(self._newest, token, list(self._added.values()), list(self._removed.values()))
        self._newest, self._newest_out = token, True
        self._added.clear()
        self._removed.clear()
        self._rounds_in_flight += 1
        rounds.create_task(self._round(dict(self._waiting), changes))

    async def _round(self, asks: dict[PartitionKey, _Ask], changes: RoundChanges) -> None:
        loop = asyncio.get_running_loop()
        try:
            # One whole wait, not the first asker's remaining one: asks made at different times
            # each ended a round at their own deadline, and with thousands of partitions rounds
            # of every partition went out every few milliseconds though none had data.
            wait_ms = min(map(_max_wait_ms, asks.values()))
            answer = await self._send_round([ask.spec for ask in asks.values()], changes, wait_ms, ROUND_MAX_BYTES)
        except Exception as error:  # noqa: BLE001 - each fetcher decides what a failure means
            for ask in asks.values():
                if not ask.answer.done():
                    ask.answer.set_exception(error)
                    self._settle(ask)
        else:
            self._take(asks, answer, loop.time())
        finally:
            self._rounds_in_flight -= 1
            if changes.token is self._newest:
                self._newest_out = False
            self._changed.set()

    def _take(self, asks: dict[PartitionKey, _Ask], answer: RoundAnswer, now_s: float) -> None:
        """Hand each ask what the answer says of its partition, if it says something: records,
        an error, or past the ask's deadline a high watermark or log start its fetcher has not
        had. An incremental answer (RoundAnswer.told) says nothing new of what it leaves out,
        so only the partitions it carries are looked at, and the pending asks past their
        deadline: each new ask once (the session may have told its partition something while
        its fetcher was not asking), and those told news before it."""
        if answer.told is None:
            for key, ask in asks.items():  # bounded by the partitions followed from this leader
                self._look_at(ask, answer.replies.get(key, _NOT_ANSWERED), now_s)
            return
        for key, reply in answer.replies.items():  # bounded by the partitions followed from this leader
            ask = asks.get(key)
            if ask is not None:
                self._look_at(ask, reply, now_s)
        for key, ask in list(self._pending.items()):  # bounded by the waiting asks
            if key not in answer.replies and asks.get(key) is ask and now_s >= ask.deadline_s:
                self._look_at(ask, answer.told(ask.spec) or _NOT_ANSWERED, now_s)

    def _look_at(self, ask: _Ask, reply: FetchReply, now_s: float) -> None:
        if self._waiting.get(ask.key) is not ask:
            return
        if reply.error_code or reply.records:
            self._give(ask, reply)
        elif self._told.get(ask.key) == (reply.high_watermark, reply.log_start_offset):
            self._pending.pop(ask.key, None)
        elif now_s >= ask.deadline_s:
            self._give(ask, reply)
        else:
            self._pending[ask.key] = ask

    def _give(self, ask: _Ask, reply: FetchReply) -> None:
        # A fetcher cancelled as the answer came has its future cancelled at once, and settles
        # its ask only when it next runs.
        if not ask.answer.done():
            ask.answer.set_result(reply)
        self._settle(ask)
