"""A follower's fetches from one leader go out together (net/fetch_rounds.py), against a fake
leader that answers a round as the broker's Fetch handler does: at once when any asked
partition has data, when a later round arrives (the connection's cut), or after the wait."""

from __future__ import annotations

import asyncio

import pytest

from replog.net.fetch_rounds import FetchRounds
from replog.replication.fetcher import FetchReply, FetchSpec
from tests.polling import eventually

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

    async def send_round(self, specs: list[FetchSpec], max_wait_ms: int, max_bytes: int) -> dict:
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
            return {key: FetchReply(0, self.high_watermark, 0, self.records.pop(key, b"")) for key in asked}
        finally:
            self._out -= 1


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
    async def forgetful(specs, max_wait_ms, max_bytes):
        return {}

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
