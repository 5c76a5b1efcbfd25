"""A follower's fetches from one leader go out together (net/fetch_rounds.py), against a fake
leader that answers a round as the broker's Fetch handler does: at once when any asked
partition has data, when a later round arrives (the connection's cut), or after the wait."""

from __future__ import annotations

import asyncio

import pytest

from replog.net.fetch_rounds import FetchRounds, RoundAnswer, RoundChanges
from replog.replication.fetcher import FetchReply, FetchSpec
from tests.support.polling import eventually

WAIT_S = 10
LONG_POLL_MS = 60_000  # a wait no test sits out: only data, a cut or the test's end ends it


class FakeLeader:
    def __init__(self) -> None:
        self.records: dict[tuple[str, int], bytes] = {}  # what the next round gives each partition
        self.rounds: list[list[tuple[str, int]]] = []  # the partitions each round asked for
        self.parked_at_arrival: list[int] = []  # per round, how many were out at the leader when it came
        self._out = 0
        self.waits_ms: list[int] = []  # each round's max wait
        self.failure: Exception | None = None
        self.high_watermark = 0
        self._changed = asyncio.Event()

    def append(self, partition: int, records: bytes) -> None:
        self.records["t", partition] = records
        self._changed.set()

    async def send_round(self, specs: list[FetchSpec], changes: RoundChanges, max_wait_ms: int, max_bytes: int) -> RoundAnswer:
        asked = [(spec.topic, spec.partition) for spec in specs]
        self.rounds.append(asked)
        self.waits_ms.append(max_wait_ms)
        self.parked_at_arrival.append(self._out)
        self._changed.set()  # a later request overtakes a parked one
        self._changed = changed = asyncio.Event()
        if self.failure is not None:
            raise self.failure
        self._out += 1
        try:
            if not any(key in self.records for key in asked):
                try:
                    await asyncio.wait_for(changed.wait(), max_wait_ms / 1000)
                except TimeoutError:
                    pass
            return RoundAnswer({key: FetchReply(0, self.high_watermark, 0, self.records.pop(key, b"")) for key in asked})
        finally:
            self._out -= 1


class SessionLeader(FakeLeader):
    """Answers as a fetch session does: it keeps the asked partitions up to date from each
    round's changes alone, and checks them against the round's specs (a round whose changes
    are wrong fails); its answers carry only the partitions with records or with a high
    watermark other than it last told, and say what it last told of the others."""

    def __init__(self) -> None:
        super().__init__()
        self.held: dict[tuple[str, int], FetchSpec] = {}
        self.told: dict[tuple[str, int], int] = {}
        self.changes: list[RoundChanges] = []
        self.carried: list[list[int]] = []  # the partitions each answer carried
        self._base: object | None = None

    async def send_round(self, specs: list[FetchSpec], changes: RoundChanges, max_wait_ms: int, max_bytes: int) -> RoundAnswer:
        self.changes.append(changes)
        if changes.base is not None and changes.base is self._base:
            for removed in changes.removed:
                del self.held[removed.topic, removed.partition]
            self.held.update(((added.topic, added.partition), added) for added in changes.added)
        else:
            self.held = {(each.topic, each.partition): each for each in specs}
        self._base = changes.token
        assert self.held == {(each.topic, each.partition): each for each in specs}, "changes that miss what the round asks"
        full = await super().send_round(specs, changes, max_wait_ms, max_bytes)
        carried = {key: reply for key, reply in full.replies.items() if reply.records or self.told.get(key) != reply.high_watermark}
        self.told.update((key, reply.high_watermark) for key, reply in carried.items())
        self.carried.append(sorted(partition for _, partition in carried))
        return RoundAnswer(carried, lambda asked: FetchReply(0, self.told[asked.topic, asked.partition], 0, b""))


def spec(partition: int, max_wait_ms: int = LONG_POLL_MS) -> FetchSpec:
    return FetchSpec("t", partition, 0, 0, 1 << 20, max_wait_ms)


async def answered_once(leader: FakeLeader, rounds: FetchRounds, partition: int) -> None:
    """Its fetcher has had an answer: its next ask is not its first."""
    leader.append(partition, b"first")
    assert (await asyncio.wait_for(rounds.fetch(spec(partition)), WAIT_S)).records == b"first"


async def test_an_idle_partition_does_not_hold_the_answers_of_a_busy_one():
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    idle = asyncio.ensure_future(rounds.fetch(spec(0)))
    for n in range(5):
        leader.append(1, b"batch %d" % n)
        answered = await asyncio.wait_for(rounds.fetch(spec(1)), WAIT_S)
        assert answered.records == b"batch %d" % n
    assert not idle.done()  # an empty answer before its wait says nothing: it rides along
    assert all(("t", 0) in asked for asked in leader.rounds)
    leader.append(0, b"at last")
    assert (await asyncio.wait_for(idle, WAIT_S)).records == b"at last"
    rounds.close()


async def test_an_idle_partition_is_answered_at_its_own_wait_only_with_news():
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    # A first ask learns the high watermark once its wait is over...
    answered = await asyncio.wait_for(rounds.fetch(spec(0, max_wait_ms=20)), WAIT_S)
    assert answered == FetchReply(0, 0, 0, b"")
    # ...and later asks only when it moved: its fetcher sleeps while rounds keep going out.
    again = asyncio.ensure_future(rounds.fetch(spec(0, max_wait_ms=20)))
    rounds_before = len(leader.rounds)

    async def three_more_rounds() -> bool:
        return len(leader.rounds) >= rounds_before + 3

    await eventually(three_more_rounds, WAIT_S, "rounds at the idle partition's wait")
    assert not again.done()
    leader.high_watermark = 5
    assert await asyncio.wait_for(again, WAIT_S) == FetchReply(0, 5, 0, b"")
    rounds.close()


async def test_a_partition_asking_again_while_a_round_is_parked_goes_out_at_once_with_the_others():
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    await answered_once(leader, rounds, 1)
    parked = asyncio.ensure_future(rounds.fetch(spec(0)))

    async def second_round_out() -> bool:
        return len(leader.rounds) == 2

    await eventually(second_round_out, WAIT_S, "the round of partition 0, which parks")
    leader.records["t", 1] = b"ready"  # no wake-up: only the new round can find it
    answered = await asyncio.wait_for(rounds.fetch(spec(1)), WAIT_S)
    assert answered.records == b"ready"
    assert leader.rounds[1:3] == [[("t", 0)], [("t", 0), ("t", 1)]]
    assert leader.parked_at_arrival[2] == 1  # it cut the parked round short
    assert not parked.done()
    rounds.close()
    with pytest.raises(asyncio.CancelledError):
        await parked


async def test_a_partitions_first_ask_waits_for_the_parked_round_instead_of_cutting_it():
    """Fetchers start one after another for seconds when thousands of partitions are created or
    a broker restarts: each first ask cut the parked round, and the leader read the follower's
    every partition again."""
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    parked = asyncio.ensure_future(rounds.fetch(spec(0, max_wait_ms=300)))

    async def first_round_out() -> bool:
        return bool(leader.rounds)

    await eventually(first_round_out, WAIT_S, "the first round, which parks")
    leader.records["t", 1] = b"ready"  # no wake-up: only a round that carries it finds it
    answered = await asyncio.wait_for(rounds.fetch(spec(1)), WAIT_S)
    assert answered.records == b"ready"
    # Sent once the parked round was answered, at its wait, which also answered partition 0.
    assert leader.rounds[:2] == [[("t", 0)], [("t", 1)]]
    assert leader.parked_at_arrival[:2] == [0, 0]
    assert (await parked).records == b""
    rounds.close()


async def test_every_round_waits_a_whole_max_wait_however_long_its_asks_have_waited():
    """A round that waited only for its oldest ask's remaining time made thousands of idle
    partitions, asked at different times, send a round of all of them every few milliseconds."""
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    await answered_once(leader, rounds, 1)
    parked = asyncio.ensure_future(rounds.fetch(spec(0)))
    loop = asyncio.get_running_loop()
    asked_at = loop.time()

    async def round_out_a_while_ago() -> bool:
        return len(leader.rounds) == 2 and loop.time() > asked_at + 0.01

    await eventually(round_out_a_while_ago, WAIT_S, "the round of partition 0, parked for 10 ms")
    leader.records["t", 1] = b"ready"
    await asyncio.wait_for(rounds.fetch(spec(1)), WAIT_S)  # its round cut the parked one
    assert leader.waits_ms[1:3] == [LONG_POLL_MS, LONG_POLL_MS]
    rounds.close()
    with pytest.raises(asyncio.CancelledError):
        await parked


async def test_a_failed_round_fails_every_ask_in_it_and_the_next_asks_go_out_again():
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "test")
    leader.failure = ConnectionError("leader gone")
    outcomes = await asyncio.gather(rounds.fetch(spec(0)), rounds.fetch(spec(1)), return_exceptions=True)
    assert [type(outcome) for outcome in outcomes] == [ConnectionError, ConnectionError]
    leader.failure = None
    leader.append(0, b"back")
    assert (await asyncio.wait_for(rounds.fetch(spec(0)), WAIT_S)).records == b"back"
    rounds.close()


async def test_a_partition_the_answer_leaves_out_is_unknown_to_its_fetcher():
    async def forgetful(specs, changes, max_wait_ms, max_bytes):
        return RoundAnswer({})

    rounds = FetchRounds(forgetful, "test")
    assert (await asyncio.wait_for(rounds.fetch(spec(0)), WAIT_S)).error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    rounds.close()


@pytest.mark.parametrize("turns", range(6))
async def test_an_ask_made_while_the_sender_winds_down_still_goes_out(turns):
    """The only ask goes (its fetcher restarted at a new epoch) while its round is parked; the
    round ends, and the fetcher's next ask comes `turns` event-loop turns later: at one of
    them, the sender had left its loop but not yet ended, and no round ever went out for it
    (simulator seed 1898)."""
    leader = FakeLeader()
    rounds = FetchRounds(leader.send_round, "t")
    try:
        first = asyncio.create_task(rounds.fetch(spec(0)))

        async def parked() -> bool:
            return len(leader.rounds) == 1

        await eventually(parked, WAIT_S, "the first round at the leader")
        first.cancel()
        leader.append(0, b"records")  # the parked round answers
        for _ in range(turns):
            await asyncio.sleep(0)  # an interleaving, not a wait for anything
        reply = await asyncio.wait_for(rounds.fetch(spec(0, max_wait_ms=10)), WAIT_S)
        assert reply.error_code == 0 and len(leader.rounds) == 2
    finally:
        rounds.close()


async def test_a_fetcher_cancelled_as_its_answer_comes_costs_the_others_nothing():
    """The round's answer is taken before the cancelled fetcher runs again to withdraw its ask
    (simulator seed 1289): the others in the round still get theirs, and later asks go out."""
    leader = FakeLeader()
    answer: asyncio.Future[RoundAnswer] = asyncio.get_running_loop().create_future()

    async def send_round(specs, changes, max_wait_ms, max_bytes) -> RoundAnswer:
        if not answer.done():  # the first round waits for the test's answer, in one turn
            leader.rounds.append([(each.topic, each.partition) for each in specs])
            return await answer
        return await leader.send_round(specs, changes, max_wait_ms, max_bytes)

    rounds = FetchRounds(send_round, "t")
    try:
        cancelled = asyncio.create_task(rounds.fetch(spec(0)))
        other = asyncio.create_task(rounds.fetch(spec(1)))

        async def parked() -> bool:
            return len(leader.rounds) == 1 and len(leader.rounds[0]) == 2

        await eventually(parked, WAIT_S, "one round of both partitions at the leader")
        answer.set_result(RoundAnswer({("t", partition): FetchReply(0, 0, 0, b"records") for partition in (0, 1)}))
        cancelled.cancel()  # its fetcher goes in the same turn
        assert (await asyncio.wait_for(other, WAIT_S)).records == b"records"
        leader.append(0, b"again")
        assert (await asyncio.wait_for(rounds.fetch(spec(0)), WAIT_S)).records == b"again"
    finally:
        rounds.close()


async def test_a_round_that_fails_unexpectedly_leaves_the_next_asks_going_out():
    """A failure in taking an answer ends the sender, and fails the asks it held; the round it
    had started meanwhile never ran. The next asks still go out (simulator seed 1289: a
    follower whose fetches from one leader waited forever)."""
    leader = FakeLeader()

    class Unreadable(dict):
        def get(self, *_):
            raise RuntimeError("an answer the rounds cannot take")

    async def send_round(specs, changes, max_wait_ms, max_bytes) -> RoundAnswer:
        if len(leader.rounds) == 0:
            leader.rounds.append([])
            return RoundAnswer(Unreadable())
        return await leader.send_round(specs, changes, max_wait_ms, max_bytes)

    rounds = FetchRounds(send_round, "t")
    try:
        outcomes = await asyncio.gather(rounds.fetch(spec(0)), rounds.fetch(spec(1)), return_exceptions=True)
        assert all(isinstance(outcome, BaseException) for outcome in outcomes), outcomes
        leader.append(0, b"after")
        assert (await asyncio.wait_for(rounds.fetch(spec(0)), WAIT_S)).records == b"after"
    finally:
        rounds.close()


async def test_each_round_names_only_what_changed_since_the_round_before():
    leader = SessionLeader()
    rounds = FetchRounds(leader.send_round, "test")
    try:
        await answered_once(leader, rounds, 1)
        idle = asyncio.ensure_future(rounds.fetch(spec(0)))

        async def second_round_out() -> bool:
            return len(leader.rounds) == 2

        await eventually(second_round_out, WAIT_S, "the round of partition 0, which parks")
        leader.records["t", 1] = b"ready"
        assert (await asyncio.wait_for(rounds.fetch(spec(1)), WAIT_S)).records == b"ready"
        named = [([(each.partition, each.fetch_offset) for each in changes.added], [each.partition for each in changes.removed])
                 for changes in leader.changes[:3]]
        assert named == [([(1, 0)], []), ([(0, 0)], [1]), ([(1, 0)], [])]
        assert leader.changes[0].base is None
        assert [changes.base for changes in leader.changes[1:3]] == [changes.token for changes in leader.changes[:2]]
        assert not idle.done()
        leader.append(0, b"at last")
        assert (await asyncio.wait_for(idle, WAIT_S)).records == b"at last"
    finally:
        rounds.close()


async def test_news_an_incremental_answer_carried_before_an_asks_wait_is_given_once_it_is_over():
    """A high watermark told before the fetcher's wait is over waits for it; the session does not
    tell it again, so the rounds keep it meanwhile."""
    leader = SessionLeader()
    rounds = FetchRounds(leader.send_round, "test")
    try:
        assert await asyncio.wait_for(rounds.fetch(spec(0, max_wait_ms=20)), WAIT_S) == FetchReply(0, 0, 0, b"")
        again = asyncio.ensure_future(rounds.fetch(spec(0, max_wait_ms=2_000)))
        leader.high_watermark = 5
        leader.append(1, b"busy")
        assert (await asyncio.wait_for(rounds.fetch(spec(1, max_wait_ms=2_000)), WAIT_S)).records == b"busy"
        assert not again.done(), "told before its wait was over"
        assert leader.carried[-1] == [0, 1]
        assert await asyncio.wait_for(again, WAIT_S) == FetchReply(0, 5, 0, b"")
        assert leader.carried[-1] == [], "given at a later round's end, which did not carry it"
    finally:
        rounds.close()


async def test_news_told_while_a_fetcher_was_not_asking_reaches_its_next_ask():
    """A fetcher gives up its ask while a round carrying it is parked (its fetcher restarts), and
    asks again at the same offset; the parked round's answer tells the high watermark it moved
    to, and the session does not tell it again: the new ask gets it at its wait all the same."""
    leader = SessionLeader()
    rounds = FetchRounds(leader.send_round, "test")
    try:
        assert await asyncio.wait_for(rounds.fetch(spec(0, max_wait_ms=20)), WAIT_S) == FetchReply(0, 0, 0, b"")
        given_up = asyncio.ensure_future(rounds.fetch(spec(0, max_wait_ms=300)))

        async def parked() -> bool:
            return len(leader.rounds) == 2

        await eventually(parked, WAIT_S, "the round of the ask given up, parked")
        given_up.cancel()
        leader.high_watermark = 5
        again = asyncio.ensure_future(rounds.fetch(spec(0, max_wait_ms=300)))  # a first ask: after the parked round
        assert await asyncio.wait_for(again, WAIT_S) == FetchReply(0, 5, 0, b"")
        assert leader.carried[1:] == [[0], []], "told by the parked round's answer only"
    finally:
        rounds.close()
