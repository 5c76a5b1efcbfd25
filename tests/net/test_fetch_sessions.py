"""Fetch sessions (KIP-227, net/fetch_sessions.py): a follower names its partitions once, then only
what changed, and its leader answers only the partitions with something to say; every round
still counts as the follower's fetch of every partition of the session. Both ends are the real
ones: the follower's FetcherSession writes the requests as replog's followers send them, and a
real ReplicaManager's partitions answer through the real Fetch handler."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog.config import defaults
from replog.net import codec
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION, FetchedPartition
from replog.net.fetch_requests import encode_fetch_request
from replog.net.fetch_rounds import RoundChanges
from replog.net.fetch_sessions import FetcherSession, FetchSessions, SessionRequest
from replog.net.handlers.fetch import fetch as fetch_handler
from replog.obs import BrokerMetrics
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replication.fetcher import FetchSpec
from replog.storage.log import Log, LogConfig
from tests.support.fetch_answers import decode_answer
from tests.support.followers import client_id_of, registered
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock

TOPIC = "orders"
TOPIC_ID = uuid.uuid4()
LEADER, FOLLOWER = 1, 2
LAG_MS = 10_000
PARTITIONS = 4


class Exchange(SimpleNamespace):
    sent: SessionRequest  # what the follower's request named
    carried: list[FetchedPartition]  # what the leader's answer carried
    answered: list[FetchedPartition] | None  # what the follower's rounds get of it
    session_id: int
    error: int


async def exchange(services, fetcher: FetcherSession, offsets: dict[int, int], max_wait_ms: int = 0,
                   follower: int = FOLLOWER, client_id: str | None = None) -> Exchange:
    """One round: the follower asks for the partitions of `offsets`, at those offsets; on a
    connection of its registered life unless `client_id` says otherwise."""
    specs = [FetchSpec(TOPIC, partition, offset, 0, 1 << 20, max_wait_ms, TOPIC_ID.hex) for partition, offset in offsets.items()]
    sent = fetcher.request(specs, by_id=True)
    wire = encode_fetch_request(FIRST_TOPIC_ID_VERSION, 1, client_id or client_id_of(follower), replica_id=follower,
                                max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                specs=sent.sent, session_id=sent.session_id, session_epoch=sent.epoch, forgotten=sent.forgotten)
    error, session_id, carried = decode_answer(await fetch_handler(services, codec.decode_request(memoryview(wire)[4:])))
    return Exchange(sent=sent, carried=carried, answered=filled_in(fetcher, sent, fetcher.answered(sent, session_id, error, carried)),
                    session_id=session_id, error=error)


def filled_in(fetcher: FetcherSession, sent: SessionRequest, answered: tuple[list[FetchedPartition], bool] | None):
    """Every asked partition's answer, as the follower's rounds read it: an incremental answer's
    left-out partitions as the session last told them."""
    if answered is None:
        return None
    carried, complete = answered
    if complete:
        return carried
    by_key = {(found.topic, found.partition): found for found in carried}
    return [by_key.get((spec.topic_id, spec.partition)) or fetcher.last_told(spec) for spec in sent.specs]


def partitions_of(found: list[FetchedPartition]) -> list[int]:
    return sorted(each.partition for each in found)


async def leading(tmp_path, sessions: FetchSessions, followers: tuple[int, ...] = (FOLLOWER,),
                  config: LogConfig = LogConfig()):
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=LEADER), ManualClock())
    leaders = []
    for partition in range(PARTITIONS):
        assert await manager.load_logs(TOPIC, [partition], config, topic_id=TOPIC_ID.hex) == [None]
        leaders.append(await manager.open_replica(TOPIC, partition, config, (LEADER, *followers), leader_epoch=0,
                                                  isr=(LEADER, *followers)))
    services = SimpleNamespace(
        replicas=manager, now_ms=manager._clock, metrics=BrokerMetrics(), fetch_sessions=sessions, config=defaults(),
        metadata=registered(*followers),
        unknown_partition_error=lambda topic, partition: ErrorCode.unknown_topic_or_partition, authorizer=None)
    return manager, leaders, services


async def test_a_session_names_what_changed_answers_what_has_news_and_counts_every_partition(tmp_path):
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    fetcher = FetcherSession()
    try:
        await leaders[1].append_as_leader(producer_batch(3), acks=0, timeout_ms=1000)
        opened = await exchange(services, fetcher, {partition: 0 for partition in range(PARTITIONS)})
        assert (opened.sent.epoch, opened.error, len(sessions)) == (0, 0, 1)
        assert opened.session_id != 0
        assert partitions_of(opened.carried) == [0, 1, 2, 3], "a session's first fetch is a full one"
        assert [len(found.records) > 0 for found in opened.answered] == [False, True, False, False]

        # Partition 1's follower copied its 3 records; nothing else moved.
        moved = await exchange(services, fetcher, {0: 0, 1: 3, 2: 0, 3: 0})
        assert [(spec.partition, spec.fetch_offset) for spec in moved.sent.sent] == [(1, 3)]
        assert moved.sent.forgotten == []
        assert partitions_of(moved.carried) == [1], "only the partition whose high watermark moved"
        assert moved.carried[0].high_watermark == 3
        assert [(found.partition, found.high_watermark, found.records) for found in moved.answered] == [
            (0, 0, b""), (1, 3, b""), (2, 0, b""), (3, 0, b"")]

        idle = await exchange(services, fetcher, {0: 0, 1: 3, 2: 0, 3: 0})
        assert (moved.error, idle.error) == (0, 0)
        assert (idle.sent.sent, idle.carried) == ([], []), "an idle round names nothing and carries nothing"
        assert [(found.partition, found.high_watermark) for found in idle.answered] == [(0, 0), (1, 3), (2, 0), (3, 0)]

        # Every round counted as the follower's fetch of every partition of the session, named or not.
        manager._clock.advance(LAG_MS * 2)
        await exchange(services, fetcher, {0: 0, 1: 3, 2: 0, 3: 0})
        now_ms = manager._clock()
        assert [leader.out_of_sync_replicas(now_ms, LAG_MS) for leader in leaders] == [frozenset()] * PARTITIONS
        assert [leader.follower_log_end_offset(FOLLOWER) for leader in leaders] == [0, 3, 0, 0]

        await leaders[2].append_as_leader(producer_batch(2), acks=0, timeout_ms=1000)
        records = await exchange(services, fetcher, {0: 0, 1: 3, 2: 0})
        assert records.error == 0
        assert [(spec.partition, spec.topic_id) for spec in records.sent.forgotten] == [(3, TOPIC_ID.hex)]
        assert partitions_of(records.carried) == [2]
        assert records.carried[0].records and records.carried[0].high_watermark == 0
        assert partitions_of(records.answered) == [0, 1, 2]
        assert sessions.cached_partitions == 3
    finally:
        await manager.shutdown()


async def test_a_partition_quiet_for_one_follower_tells_it_of_a_high_watermark_another_moved(tmp_path):
    """A session's caught-up partitions are not read each round; whatever else moves them (here
    the other follower catching up, which advances the high watermark) makes them read again."""
    third = FOLLOWER + 1
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions, followers=(FOLLOWER, third))
    one, other = FetcherSession(), FetcherSession()
    try:
        await leaders[0].append_as_leader(producer_batch(3), acks=0, timeout_ms=1000)
        everything_at = {partition: 0 for partition in range(PARTITIONS)}
        for fetcher, follower in ((one, FOLLOWER), (other, third)):
            copied = await exchange(services, fetcher, everything_at, follower=follower)
            assert copied.answered[0].records
        caught_up = await exchange(services, one, {**everything_at, 0: 3}, follower=FOLLOWER)
        assert caught_up.carried == [], "the other lags: the high watermark stays 0"
        idle = await exchange(services, one, {**everything_at, 0: 3}, follower=FOLLOWER)
        assert (idle.sent.sent, idle.carried) == ([], [])

        assert (await exchange(services, other, {**everything_at, 0: 3}, follower=third)).carried[0].high_watermark == 3
        told = await exchange(services, one, {**everything_at, 0: 3}, follower=FOLLOWER)
        assert told.sent.sent == []
        assert [(found.partition, found.high_watermark) for found in told.carried] == [(0, 3)]
        assert (await exchange(services, one, {**everything_at, 0: 3}, follower=FOLLOWER)).carried == []

        leaders[1].become_follower(third, 1, manager._clock())  # a quiet partition's leadership moves
        moved = await exchange(services, one, {**everything_at, 0: 3}, follower=FOLLOWER)
        assert [(found.partition, found.error_code) for found in moved.carried] == [(1, ErrorCode.not_leader_or_follower)]
    finally:
        await manager.shutdown()


async def test_an_idle_round_does_not_visit_the_partitions_its_session_holds_quiet(tmp_path, monkeypatch):
    """A round costs what its partitions with news cost: one that finds every partition of the
    session held quiet looks at none of them, yet counts as the follower's fetch of each."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    log_end_reads = []
    log_end_offset = Log.log_end_offset
    monkeypatch.setattr(Log, "log_end_offset", property(lambda log: log_end_reads.append(log) or log_end_offset.fget(log)))
    try:
        await exchange(services, fetcher, offsets)
        log_end_reads.clear()
        manager._clock.advance(LAG_MS * 2)
        idle = await exchange(services, fetcher, offsets)
        assert (idle.error, idle.carried) == (0, [])
        assert log_end_reads == [], "no partition of an idle round is looked at"
        now_ms = manager._clock()
        assert [leader.out_of_sync_replicas(now_ms, LAG_MS) for leader in leaders] == [frozenset()] * PARTITIONS
    finally:
        await manager.shutdown()


async def test_a_follower_whose_session_stops_asking_falls_out_of_sync(tmp_path):
    """A session's requests count as the follower's fetches of what it holds quiet; once they
    stop coming, the follower lags as if it had stopped fetching, and a session closed lets go
    of every partition it held."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        await exchange(services, fetcher, offsets)
        await exchange(services, fetcher, offsets)
        manager._clock.advance(LAG_MS + 1)
        now_ms = manager._clock()
        assert [leader.out_of_sync_replicas(now_ms, LAG_MS) for leader in leaders] == [frozenset({FOLLOWER})] * PARTITIONS
        session = sessions._sessions[fetcher._id]
        assert all(cached.held_by is not None for cached in session.partitions.values())
        sessions._close(fetcher._id)
        assert [leader.followers[FOLLOWER].quiet for leader in leaders] == [None] * PARTITIONS
    finally:
        await manager.shutdown()


async def test_a_client_posing_as_the_follower_neither_gets_a_session_nor_keeps_the_follower_in_sync(tmp_path):
    """Its fetches were taken as the follower's: a session it opened held the partitions quiet
    for the follower, and each of its requests counted as the follower's fetch of them, so a
    follower that had stopped stayed in the ISR. Nor may it continue or close the follower's
    session, whose id it may have guessed."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    follower, posing = FetcherSession(), FetcherSession()
    offsets = {partition: 0 for partition in range(PARTITIONS)}
    try:
        await exchange(services, follower, offsets)
        assert len(sessions) == 1 and follower._id
        for _ in range(3):
            refused = await exchange(services, posing, offsets, client_id="rdkafka")
            assert (refused.error, refused.session_id) == (0, 0)
            assert [found.error_code for found in refused.carried] == [ErrorCode.topic_authorization_failed] * PARTITIONS
        assert len(sessions) == 1, "the poser got a session"
        manager._clock.advance(LAG_MS + 1)
        await exchange(services, posing, offsets, client_id="rdkafka")
        now_ms = manager._clock()
        assert [leader.out_of_sync_replicas(now_ms, LAG_MS) for leader in leaders] == [frozenset({FOLLOWER})] * PARTITIONS, \
            "the poser's fetches kept the follower in sync"

        guessed = FetcherSession()
        guessed._id, guessed._epoch = follower._id, follower._epoch  # the follower's session, at its next epoch
        await exchange(services, guessed, offsets, client_id="rdkafka")
        assert (await exchange(services, follower, offsets)).error == 0, "the poser moved the follower's session on"
    finally:
        await manager.shutdown()


async def test_a_fetch_of_the_follower_outside_its_session_ends_the_sessions_hold(tmp_path):
    """A follower that reconnects opens a new session while the old one still holds its
    partitions quiet: the new one's reads end the old one's holds, and the old one would read
    them again."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    old, new, offsets = FetcherSession(), FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        await exchange(services, old, offsets)
        old_session = sessions._sessions[old._id]
        assert old_session.unquiet == {}, "every partition held quiet"
        await exchange(services, new, offsets)
        assert sorted(key[1] for key in old_session.unquiet) == list(range(PARTITIONS))
        new_session = sessions._sessions[new._id]
        assert [leader.followers[FOLLOWER].quiet.session for leader in leaders] == [new_session] * PARTITIONS
        await leaders[3].append_as_leader(producer_batch(2), acks=0, timeout_ms=1000)
        moved = await exchange(services, new, offsets)
        assert partitions_of(moved.carried) == [3] and moved.carried[0].records
    finally:
        await manager.shutdown()


async def test_a_follower_shrunk_out_of_the_isr_is_read_again_and_may_rejoin(tmp_path):
    """Only an in-sync follower's partition is held quiet: one taken out of the ISR must fetch
    to rejoin it, so its session reads it again."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        await exchange(services, fetcher, offsets)
        leaders[0].update_isr({LEADER})
        manager._clock.advance(LAG_MS * 2)
        assert leaders[0].followers_ready_to_join(manager._clock(), LAG_MS) == frozenset()
        await exchange(services, fetcher, offsets)
        assert leaders[0].followers_ready_to_join(manager._clock(), LAG_MS) == {FOLLOWER}
        assert [leader.followers[FOLLOWER].quiet is None for leader in leaders] == [True, False, False, False]
    finally:
        await manager.shutdown()


async def test_retention_under_a_partition_held_quiet_tells_its_follower_the_new_log_start(tmp_path):
    """A log start that retention moves is news for a follower caught up with the partition,
    though nothing reads it: the session reads it again and tells the follower."""
    sessions = FetchSessions()
    # A segment of one batch each, and nothing kept beyond the active segment.
    manager, leaders, services = await leading(tmp_path, sessions, config=LogConfig(segment_bytes=100, retention_bytes=1))
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        for _ in range(3):
            await leaders[0].append_as_leader(producer_batch(2), acks=0, timeout_ms=1000)
        while (copied := await exchange(services, fetcher, offsets)).answered[0].records:
            offsets[0] += 2  # each answer holds at least one whole batch of 2 records
        assert offsets[0] == 6
        await exchange(services, fetcher, offsets)  # the high watermark the follower's fetch at 6 moved
        assert (await exchange(services, fetcher, offsets)).carried == []
        assert sessions._sessions[fetcher._id].unquiet == {}, "every partition held quiet"

        assert leaders[0].delete_retained_segments() == 2
        moved = await exchange(services, fetcher, offsets)
        assert [(found.partition, found.log_start_offset, found.records) for found in moved.carried] == [(0, 4, b"")]
    finally:
        await manager.shutdown()


async def test_a_refused_session_request_makes_the_round_go_again_and_the_next_open_a_new_session(tmp_path):
    sessions = FetchSessions()
    manager, _, services = await leading(tmp_path, sessions)
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        first = await exchange(services, fetcher, offsets)
        fetcher._epoch += 1  # as if a request of the session had been lost on the way
        refused = await exchange(services, fetcher, offsets)
        assert (refused.error, refused.carried, refused.answered) == (ErrorCode.invalid_fetch_session_epoch, [], None)
        reopened = await exchange(services, fetcher, offsets)
        assert (reopened.sent.session_id, reopened.sent.epoch) == (first.session_id, 0), "closes the old session"
        assert reopened.session_id not in (0, first.session_id)
        assert partitions_of(reopened.carried) == [0, 1, 2, 3]
        assert len(sessions) == 1

        sessions._close(reopened.session_id)  # evicted, say
        gone = await exchange(services, fetcher, offsets)
        assert (gone.error, gone.answered) == (ErrorCode.fetch_session_id_not_found, None)
    finally:
        await manager.shutdown()


async def test_a_sessions_requests_are_served_in_order_one_at_a_time(tmp_path):
    """replog's followers keep two rounds in flight: the second overtakes the parked first, which
    must answer before the second reads, or the session's epochs and what it told would go out
    of order."""
    sessions = FetchSessions()
    manager, leaders, services = await leading(tmp_path, sessions)
    fetcher, offsets = FetcherSession(), {partition: 0 for partition in range(PARTITIONS)}
    try:
        await exchange(services, fetcher, offsets)
        parked = asyncio.create_task(exchange(services, fetcher, offsets, max_wait_ms=60_000))
        await _until(lambda: sessions._sessions[fetcher._id].turn is not None and not parked.done())
        second = asyncio.create_task(exchange(services, fetcher, offsets, max_wait_ms=60_000))
        await asyncio.sleep(0)  # the second waits for the first, which still waits for records
        assert not second.done()
        await leaders[0].append_as_leader(producer_batch(1), acks=0, timeout_ms=1000)
        first, then = await asyncio.wait_for(asyncio.gather(parked, second), 10)
        assert (first.error, then.error) == (0, 0)
        assert [first.sent.epoch, then.sent.epoch] == [1, 2]
        assert partitions_of(first.carried) == [0] and first.carried[0].records
        assert partitions_of(then.carried) == [0] and then.carried[0].records, "its fetch offset was still 0"
    finally:
        await manager.shutdown()


async def _until(condition) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0)


def _body(partitions: int, session_id: int = 0, epoch: int = 0, topic: str = TOPIC, replica_id: int = FOLLOWER):
    fetches = tuple(SimpleNamespace(partition=index, fetch_offset=0, partition_max_bytes=1) for index in range(partitions))
    return SimpleNamespace(session_id=session_id, session_epoch=epoch, topics=(SimpleNamespace(topic=topic, partitions=fetches),),
                           forgotten_topics_data=(), replica_id=replica_id)


async def _open(sessions: FetchSessions, partitions: int, by_follower: bool) -> int:
    async with sessions.fetch(_body(partitions, replica_id=FOLLOWER if by_follower else -1), False) as context:
        return context.session_id


async def test_the_cache_is_bounded_and_followers_take_the_slots_of_consumers():
    clock = ManualClock()
    sessions = FetchSessions(clock_s=lambda: clock() / 1000, slots=2, partitions_max=10)
    consumer = await _open(sessions, 2, by_follower=False)
    follower = await _open(sessions, 2, by_follower=True)
    assert 0 not in (consumer, follower)
    assert await _open(sessions, 2, by_follower=False) == 0, "no slot for another consumer: declined, not evicting"
    second_follower = await _open(sessions, 2, by_follower=True)
    assert second_follower != 0 and consumer not in sessions._sessions, "a follower takes a consumer's slot"
    assert await _open(sessions, 2, by_follower=True) == 0, "every slot a follower's, used lately"
    clock.advance(120_000)
    assert await _open(sessions, 2, by_follower=False) != 0, "a session idle that long gives up its slot"
    assert len(sessions) == 2

    assert await _open(sessions, 11, by_follower=True) == 0, "more partitions than the cache holds"
    grown = await _open(FetchSessions(partitions_max=10), 1, by_follower=True)
    assert grown != 0
    small = FetchSessions(partitions_max=3)
    opened = await _open(small, 3, by_follower=True)
    async with small.fetch(_body(1, opened, 1, topic="other"), False) as refused:
        assert refused == ErrorCode.fetch_session_id_not_found, "a session may not outgrow the cache"
    assert len(small) == 0 and small.cached_partitions == 0


def found(spec: FetchSpec, high_watermark: int) -> FetchedPartition:
    return FetchedPartition(spec.topic_id, spec.partition, 0, high_watermark, high_watermark, 0, b"")


def test_a_fetchers_session_opens_once_goes_outside_it_meanwhile_and_recovers_from_a_lost_one():
    fetcher = FetcherSession()
    specs = [FetchSpec(TOPIC, partition, 0, 0, 1 << 20, 500, TOPIC_ID.hex) for partition in range(2)]
    opening = fetcher.request(specs, by_id=True)
    meanwhile = fetcher.request(specs, by_id=True)  # a second round while the opening one is out
    assert (opening.session_id, opening.epoch, meanwhile.session_id, meanwhile.epoch) == (0, 0, 0, -1)
    assert fetcher.answered(meanwhile, 0, 0, [found(spec, 0) for spec in specs]) == ([found(spec, 0) for spec in specs], True)
    declined = fetcher.answered(opening, 0, 0, [found(spec, 0) for spec in specs])  # no slot for it
    assert declined == ([found(spec, 0) for spec in specs], True)
    assert fetcher.request(specs, by_id=True).epoch == 0, "a declined session is asked for again"

    assert fetcher.request(specs, by_id=True).epoch == -1, "and meanwhile fetches outside any"

    fetcher = FetcherSession()
    opening = fetcher.request(specs, by_id=True)
    fetcher.answered(opening, 77, 0, [found(spec, 5) for spec in specs])
    first, second = fetcher.request(specs, by_id=True), fetcher.request(specs, by_id=True)
    assert [(each.session_id, each.epoch, each.sent) for each in (first, second)] == [(77, 1, []), (77, 2, [])]
    assert fetcher.answered(first, 77, ErrorCode.fetch_session_id_not_found, []) is None
    assert fetcher.answered(second, 77, ErrorCode.fetch_session_id_not_found, []) is None, "the same lost session"
    reopening = fetcher.request(specs, by_id=True)
    assert (reopening.session_id, reopening.epoch, reopening.sent) == (77, 0, specs), "closes 77, opens anew"
    assert fetcher.answered(reopening, 78, 0, [found(spec, 5) for spec in specs]) == ([found(spec, 5) for spec in specs], True)
    assert fetcher.request(specs, by_id=True)[:2] == (78, 1)


def test_a_fetchers_session_names_a_rounds_changes_without_comparing_every_partition(monkeypatch):
    """A round's changes (FetchRounds) name what the session's next request sends, when the round
    before is the last the session sent; otherwise every partition is compared."""
    compared = []
    compare = FetcherSession._compare
    monkeypatch.setattr(FetcherSession, "_compare", lambda *args: compared.append(1) or compare(*args))
    fetcher = FetcherSession()
    specs = [FetchSpec(TOPIC, partition, 0, 0, 1 << 20, 500, TOPIC_ID.hex) for partition in range(4)]
    opening = RoundChanges(None, object(), specs, [])
    fetcher.answered(fetcher.request(specs, True, opening), 77, 0, [found(spec, 0) for spec in specs])

    moved = specs[1]._replace(fetch_offset=5)
    second = RoundChanges(opening.token, object(), [moved], [specs[3]])
    sent = fetcher.request([specs[0], moved, specs[2]], True, second)
    assert (sent.session_id, sent.epoch, sent.sent, sent.forgotten) == (77, 1, [moved], [specs[3]])
    idle = fetcher.request([specs[0], moved, specs[2]], True, RoundChanges(second.token, object(), [], []))
    assert (idle.epoch, idle.sent, idle.forgotten) == (2, [], [])
    assert compared == []

    # Changes from a round the session did not send last: the request compares.
    stray = RoundChanges(object(), object(), [], [])
    assert fetcher.request([specs[0], moved], True, stray).forgotten == [specs[2]]
    # Changes that leave the session holding another number of partitions than asked: likewise.
    short = RoundChanges(stray.token, object(), [], [])
    assert fetcher.request([specs[0], moved, specs[3]], True, short).sent == [specs[3]]
    assert compared == [1, 1]
