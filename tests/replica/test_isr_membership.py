"""Who may join the ISR, and what the HW counts meanwhile (docs/design.md §5.1, §5.3, §5.4).

A leader over the embedded store with one follower, FOLLOWER, whose fetches the tests record
directly (Partition.record_follower_fetch, as the Fetch handler does). The ISR upkeep's checks
are called one at a time, under manual clocks, so that "not admitted" is a fact, not a wait.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from replog.config import defaults
from replog.coord_backends import CoordinationUnavailable, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, ReplicaAssignment
from replog.net import codec
from replog.net.codec import SUPPORTED_VERSIONS, ApiKey
from replog.net.fetch_requests import encode_fetch_request
from replog.net.handlers.fetch import fetch as fetch_handler
from replog.net.leader_connections import follower_client_id
from replog.obs import BrokerMetrics
from replog.replication.commit import IsrMaintainer
from replog.replication.election import leader_election
from replog.storage.log import Log, LogConfig
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replica.partition import FetchFrom, Partition, PartitionConfig
from replog.storage.records import batch_headers
from replog.replication.fetcher import FetchSpec
from tests.support.fetch_answers import decode_answer
from tests.support.followers import client_id_of, life_of, registered
from tests.support.polling import eventually
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock

TOPIC = "members"
LEADER, FOLLOWER, OTHER = 1, 2, 3
LAG_MS = 60_000  # the periodic check (every LAG_MS / 2) never comes within a test
WAIT_S = 10


class Leading:
    def __init__(self, store: MemoryStore, partition: Partition, maintainer: IsrMaintainer, clock: ManualClock):
        self.store, self.partition, self.maintainer, self.clock = store, partition, maintainer, clock

    async def isr_in_store(self) -> tuple[int, ...]:
        return IsrRecord.decode((await self.store.get(paths.isr(TOPIC, 0)))[0]).isr

    def fetch(self, offset: int) -> None:
        """FOLLOWER fetches from `offset`, naming the leader's epoch, as its fetcher does."""
        error = self.partition.record_follower_fetch(FOLLOWER, offset, self.clock(), self.partition.leader_epoch)
        assert error == 0

    def append(self, records: int) -> None:
        self.partition.log.append(producer_batch(records), self.partition.leader_epoch)
        self.partition._after_local_append()


async def elect(tmp_path, *, alive: tuple[int, ...], replicas: tuple[int, ...] = (LEADER, FOLLOWER),
                old_records: int = 0, checkpointed_hw: int = 0, registered: set[int] | None = None,
                gone: set[int] | None = None):
    """LEADER elected; of the other replicas only those `alive` are in the ISR (the election
    keeps live members). `old_records` already in the log from an earlier epoch, with the HW
    checkpointed at `checkpointed_hw`, make a leader whose HW may lag its epoch's start offset."""
    store = MemoryStore()
    await store.start()
    await store.create(paths.replicas(TOPIC, 0), ReplicaAssignment(replicas).encode(), make_parents=True)
    for broker in alive:
        await store.create(paths.broker(broker), ephemeral=True, make_parents=True)
    clock = ManualClock(now_ms=0)
    log = Log(tmp_path / f"{TOPIC}-0", LogConfig(), clock)
    if old_records:
        log.append(producer_batch(old_records), 0)
    won = await leader_election(store, TOPIC, 0, LEADER)
    partition = Partition(log, LEADER, won.isr.leader_epoch, won.assigned, won.isr.isr, checkpointed_hw,
                          PartitionConfig(), now_ms=clock())
    maintainer = IsrMaintainer(store, partition, won.leader_version, won.isr_version,
                               replica_lag_time_max_ms=LAG_MS, clock_ms=clock, on_fenced=_never,
                               registered_brokers=lambda: registered,
                               presumed_gone=lambda broker: broker in (gone or ()))
    return Leading(store, partition, maintainer, clock)


async def _never() -> None:
    raise AssertionError("the leader was fenced")


@pytest.fixture
async def closing():
    opened: list[Leading] = []
    yield opened
    for leading in opened:
        await leading.maintainer.stop()
        leading.partition.close()
        await leading.store.close()


async def test_the_hw_counts_a_follower_while_the_write_adding_it_is_in_flight(tmp_path, closing):
    """KIP-497: once the ISR write lands, the follower is electable; nothing it lacks
    may have been acknowledged meanwhile."""
    leading = await elect(tmp_path, alive=())
    closing.append(leading)
    assert leading.partition.isr == {LEADER}
    written, release = asyncio.Event(), asyncio.Event()
    original_commit = leading.store._commit

    async def held_commit(ops):
        written.set()
        await release.wait()
        return await original_commit(ops)

    leading.store._commit = held_commit
    leading.fetch(0)  # caught up with the HW (0): it may join
    check = asyncio.create_task(leading.maintainer.check())
    await asyncio.wait_for(written.wait(), WAIT_S)
    leading.append(5)
    assert leading.partition.high_watermark == 0, "acknowledged records the joining follower lacks"
    release.set()
    assert await asyncio.wait_for(check, WAIT_S)
    assert leading.partition.isr == {LEADER, FOLLOWER} and await leading.isr_in_store() == (LEADER, FOLLOWER)
    leading.fetch(5)
    assert leading.partition.high_watermark == 5


async def test_a_write_whose_reply_was_lost_keeps_counting_the_follower_until_the_leader_is_fenced(tmp_path, closing):
    """The write adding FOLLOWER applied and its reply was lost: the store names FOLLOWER in
    sync (electable), so nothing it lacks may be acknowledged, and the retry meets BadVersion."""
    leading = await elect(tmp_path, alive=())
    closing.append(leading)
    original_commit = leading.store._commit

    async def reply_lost(ops):
        await original_commit(ops)
        raise CoordinationUnavailable("injected: applied, reply lost")

    leading.store._commit = reply_lost
    leading.fetch(0)
    with pytest.raises(CoordinationUnavailable):
        await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)
    leading.append(3)
    assert leading.partition.high_watermark == 0, "acknowledged records an electable follower lacks"
    leading.store._commit = original_commit
    assert not await leading.maintainer.check()
    assert leading.partition.fenced
    leading.append(2)
    assert leading.partition.high_watermark == 0


async def test_a_write_that_failed_before_applying_is_settled_by_the_next_one(tmp_path, closing):
    """The outcome is unknown until a later write at the same ISR version succeeds: then the
    failed one never applied, and a follower that stopped fetching meanwhile is not counted."""
    leading = await elect(tmp_path, alive=())
    closing.append(leading)
    original_commit = leading.store._commit

    async def failing_commit(ops):
        raise CoordinationUnavailable("injected: not applied")

    leading.store._commit = failing_commit
    leading.fetch(0)
    with pytest.raises(CoordinationUnavailable):
        await leading.maintainer.check()
    leading.append(3)
    assert leading.partition.high_watermark == 0
    leading.store._commit = original_commit
    leading.clock.advance(LAG_MS + 1)  # FOLLOWER has not fetched since: it may not join
    assert await leading.maintainer.check()
    assert leading.partition.isr == {LEADER} and await leading.isr_in_store() == (LEADER,)
    assert leading.partition.high_watermark == 3


async def test_a_follower_joins_only_at_the_start_of_the_leaders_epoch(tmp_path, closing):
    """KAFKA-7128 (docs/design.md §5.3): the new leader's HW (4) lags the start of its epoch (10), held there
    by OTHER, in the ISR and not fetching yet; FOLLOWER at 7 is past that HW but may lack
    records the previous leader acknowledged."""
    leading = await elect(tmp_path, alive=(OTHER,), replicas=(LEADER, FOLLOWER, OTHER), old_records=10, checkpointed_hw=4)
    closing.append(leading)
    assert leading.partition.isr == {LEADER, OTHER} and leading.partition.high_watermark == 4
    leading.fetch(7)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, OTHER)
    leading.fetch(10)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER, OTHER)


async def test_a_dead_follower_is_not_put_back_into_the_isr(tmp_path, closing):
    """Shrunk after its last fetch, a follower never rejoins without fetching again, whatever
    the offset it last fetched from."""
    leading = await elect(tmp_path, alive=(FOLLOWER,))
    closing.append(leading)
    leading.fetch(0)
    leading.clock.advance(LAG_MS + 1)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    for _ in range(3):  # its last offset (0) is still the HW: that is no reason to take it back
        leading.clock.advance(LAG_MS)
        assert await leading.maintainer.check()
        assert await leading.isr_in_store() == (LEADER,)
    leading.fetch(0)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)


async def test_a_fetch_that_qualifies_a_follower_adds_it_without_waiting_for_the_periodic_check(tmp_path, closing):
    leading = await elect(tmp_path, alive=())
    closing.append(leading)
    leading.maintainer.start()
    leading.fetch(0)

    async def joined() -> bool:
        return await leading.isr_in_store() == (LEADER, FOLLOWER)

    await eventually(joined, WAIT_S, "the follower added on its fetch")  # the periodic check is LAG_MS/2 away


async def test_a_member_that_fetches_from_below_the_hw_is_shrunk_out_at_once(tmp_path, closing):
    """It came back without records it had acknowledged (its machine lost unflushed writes):
    it must not stay electable until replica.lag.time.max.ms has passed."""
    leading = await elect(tmp_path, alive=(FOLLOWER,))
    closing.append(leading)
    leading.append(5)
    leading.fetch(5)
    assert leading.partition.high_watermark == 5
    leading.maintainer.start()
    leading.fetch(2)

    async def shrunk() -> bool:
        return await leading.isr_in_store() == (LEADER,)

    await eventually(shrunk, WAIT_S, "the member without committed records shrunk out")  # the periodic check is LAG_MS/2 away
    assert leading.partition.isr == {LEADER}


async def test_a_follower_whose_registration_went_rejoins_only_by_a_fetch_of_its_next_life(tmp_path, closing):
    """Its broker may come back having lost or truncated records it had fetched: what the
    leader remembers of its fetches before it went must not take it back into the ISR."""
    registered = {LEADER, FOLLOWER}
    leading = await elect(tmp_path, alive=(FOLLOWER,), registered=registered)
    closing.append(leading)
    leading.append(5)
    leading.fetch(5)
    registered.discard(FOLLOWER)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    registered.add(FOLLOWER)  # registered again at once, and fetched within the lag time
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    leading.fetch(5)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)


async def test_a_fetch_from_a_followers_earlier_life_does_not_take_its_next_life_back_into_the_isr(tmp_path, closing):
    """KIP-903: a fetch its broker sent before a restart that lost unflushed writes reaches the
    leader after the restart (it sat in a paused leader's socket, or in a parked fetch): the
    records it claims are gone, so it qualifies nothing (simulator seed 430)."""
    registered = {LEADER, FOLLOWER}
    leading = await elect(tmp_path, alive=(FOLLOWER,), registered=registered)
    closing.append(leading)
    leading.append(5)
    registered.discard(FOLLOWER)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    registered.add(FOLLOWER)
    error = leading.partition.read_for_follower(FOLLOWER, 5, 1 << 20, leading.clock(), leading.partition.leader_epoch,
                                                FetchFrom.EARLIER).error_code
    assert error == 0
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,), "an earlier life's fetch put the follower back in the ISR"
    leading.fetch(5)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)


async def test_a_parked_fetch_counts_when_it_arrives_and_not_again_after_its_wait(tmp_path, closing):
    """A follower's fetch parked by its leader may outlive the replica that sent it: removed
    from the assignment and added back meanwhile (two reassignments), the follower's next
    replica starts empty. Read again after its wait, the fetch must not be recorded again (as
    Kafka's DelayedFetch): simulator seed 1375 took the empty replica into the ISR on it."""
    leading = await elect(tmp_path, alive=(), replicas=(LEADER, FOLLOWER, OTHER))
    closing.append(leading)
    leading.append(5)
    partition = leading.partition
    partition.log.tag_topic_id(uuid.uuid4().hex)  # followers name it by id
    services = SimpleNamespace(replicas=SimpleNamespace(get_partition=lambda topic, partition_id: partition,
                                                        topic_of_id=lambda topic_id: TOPIC),
                               metadata=registered(FOLLOWER), now_ms=leading.clock, metrics=BrokerMetrics(),
                               config=defaults(), authorizer=None)
    version = SUPPORTED_VERSIONS[ApiKey.FETCH][1]
    wire = encode_fetch_request(version, 1, client_id_of(FOLLOWER), replica_id=FOLLOWER, max_wait_ms=60_000,
                                min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                specs=[FetchSpec(TOPIC, 0, 5, partition.leader_epoch, 1 << 20, 60_000, partition.topic_id)])
    request = dataclasses.replace(codec.decode_request(memoryview(wire)[4:]), overtaken=codec.Overtaken())
    parked = asyncio.create_task(fetch_handler(services, request))

    async def recorded() -> bool:
        return partition.follower_log_end_offset(FOLLOWER) == 5

    await eventually(recorded, WAIT_S, "the fetch recorded on arrival")
    partition.reassign((LEADER, OTHER), leading.clock())
    partition.reassign((LEADER, OTHER, FOLLOWER), leading.clock())
    request.overtaken.set()  # the follower's next request came: the parked fetch reads again and answers
    await asyncio.wait_for(parked, WAIT_S)
    assert partition.followers_ready_to_join(leading.clock(), LAG_MS) == frozenset(), \
        "a fetch of the removed replica qualified the one added back"


def fetch_request(client_id: str | None, offset: int, leader_epoch: int) -> codec.Request:
    """A fetch naming FOLLOWER's replica id, from `offset`, on a connection with `client_id`."""
    wire = encode_fetch_request(SUPPORTED_VERSIONS[ApiKey.FETCH][1] - 1, 1, client_id, replica_id=FOLLOWER, max_wait_ms=0,
                                min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                                specs=[FetchSpec(TOPIC, 0, offset, leader_epoch, 1 << 20, 0)])
    return codec.decode_request(memoryview(wire)[4:])


def leader_services(leading: Leading, metadata: SimpleNamespace) -> SimpleNamespace:
    partition = leading.partition
    return SimpleNamespace(replicas=SimpleNamespace(get_partition=lambda topic, partition_id: partition),
                           metadata=metadata, now_ms=leading.clock, metrics=BrokerMetrics(), config=defaults(),
                           authorizer=None)


REFUSED = (ErrorCode.topic_authorization_failed, -1, b"")
READ_AS_A_CONSUMERS = (ErrorCode.none, 0, b"")  # the HW is 0: nothing below it
POSING = [
    ("rdkafka", REFUSED),  # a plain client naming a replica id
    (follower_client_id(FOLLOWER, None), REFUSED),  # a follower's client id without a life
    (follower_client_id(OTHER, life_of(OTHER)), REFUSED),  # another broker's registered life
    # A life of the broker never seen registered: what a restarted follower's is, until its
    # registration is seen.
    (follower_client_id(FOLLOWER, "0123456789abcdef"), READ_AS_A_CONSUMERS),
]
POSING_CLIENT_IDS = [client_id for client_id, _ in POSING]


@pytest.mark.parametrize("client_id,expected", POSING)
async def test_a_client_posing_as_a_follower_moves_neither_the_hw_nor_the_isr(tmp_path, closing, client_id, expected):
    """Only a connection of the broker's registered life is its follower's (KIP-903's broker
    epoch, where Kafka checks CLUSTER_ACTION): any client may name a replica id and a client id."""
    leading = await elect(tmp_path, alive=(FOLLOWER,))
    closing.append(leading)
    partition = leading.partition
    leading.append(5)
    assert (partition.high_watermark, partition.isr) == (0, {LEADER, FOLLOWER}), "FOLLOWER has fetched nothing yet"
    services = leader_services(leading, registered(FOLLOWER, OTHER))
    for offset in (5, 0):  # claims to hold everything; asks for what is past the HW
        _, _, [answer] = decode_answer(await fetch_handler(services, fetch_request(client_id, offset, partition.leader_epoch)),
                                       SUPPORTED_VERSIONS[ApiKey.FETCH][1] - 1)
        assert (answer.error_code, answer.high_watermark, answer.records) == expected
    assert partition.high_watermark == 0, "a client posing as the follower moved the high watermark"
    assert partition.follower_log_end_offset(FOLLOWER) < 0


@pytest.mark.parametrize("client_id", POSING_CLIENT_IDS)
async def test_a_client_posing_as_a_follower_out_of_the_isr_does_not_take_it_back(tmp_path, closing, client_id):
    leading = await elect(tmp_path, alive=())
    closing.append(leading)
    partition = leading.partition
    leading.append(5)
    services = leader_services(leading, registered(FOLLOWER, OTHER))
    await fetch_handler(services, fetch_request(client_id, 5, partition.leader_epoch))
    assert partition.followers_ready_to_join(leading.clock(), LAG_MS) == frozenset(), \
        "a client posing as the follower made it ready to join the ISR"
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)

    await fetch_handler(services, fetch_request(client_id_of(FOLLOWER), 5, partition.leader_epoch))
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER), "the follower's own fetch counts"


async def test_a_fetch_of_an_earlier_life_of_the_follower_is_answered_and_not_recorded(tmp_path, closing):
    """A fetch its broker's earlier life sent, reaching the leader after the restart: answered as
    before this broker told lives apart, the records it claims not counted (KIP-903)."""
    leading = await elect(tmp_path, alive=(FOLLOWER,))
    closing.append(leading)
    leading.append(5)
    metadata = registered(FOLLOWER)
    metadata.lives[FOLLOWER].appendleft("earlier-life")
    services = leader_services(leading, metadata)
    request = fetch_request(follower_client_id(FOLLOWER, "earlier-life"), 0, leading.partition.leader_epoch)
    _, _, [answer] = decode_answer(await fetch_handler(services, request), SUPPORTED_VERSIONS[ApiKey.FETCH][1] - 1)
    assert (answer.error_code, len(answer.records) > 0) == (ErrorCode.none, True)
    assert leading.partition.follower_log_end_offset(FOLLOWER) < 0, "an earlier life's fetch was recorded"
    await fetch_handler(services, fetch_request(client_id_of(FOLLOWER), 5, leading.partition.leader_epoch))
    assert leading.partition.high_watermark == 5


async def test_a_fetch_of_a_life_whose_registration_is_not_seen_yet_is_read_as_a_consumers(tmp_path, closing):
    """A restarted broker fetches before it registers: its new life cannot be told from a
    client's guess until the leader sees its registration, so its fetches read what a consumer
    may (the restarted follower catches up to the HW meanwhile) and are not recorded; once the
    registration is seen, they are the follower's."""
    leading = await elect(tmp_path, alive=(FOLLOWER,))
    closing.append(leading)
    partition = leading.partition
    leading.append(5)
    metadata = registered(FOLLOWER)
    services = leader_services(leading, metadata)
    version = SUPPORTED_VERSIONS[ApiKey.FETCH][1] - 1
    await fetch_handler(services, fetch_request(client_id_of(FOLLOWER), 5, partition.leader_epoch))
    assert partition.high_watermark == 5
    leading.append(3)  # past the HW: the follower's life that fetched to 5 is gone
    restarted = follower_client_id(FOLLOWER, "restarted-life")
    _, _, [answer] = decode_answer(await fetch_handler(services, fetch_request(restarted, 0, partition.leader_epoch)), version)
    assert (answer.error_code, answer.high_watermark) == (ErrorCode.none, 5)
    assert batch_headers(answer.records)[-1].last_offset == 4, "read past the high watermark"
    assert partition.follower_log_end_offset(FOLLOWER) == 5, "an unseen life's fetch was recorded"
    metadata.brokers[FOLLOWER] = dataclasses.replace(metadata.brokers[FOLLOWER], life_id="restarted-life")
    metadata.lives[FOLLOWER].append("restarted-life")
    await fetch_handler(services, fetch_request(restarted, 8, partition.leader_epoch))
    assert (partition.follower_log_end_offset(FOLLOWER), partition.high_watermark) == (8, 8)


async def test_a_follower_presumed_gone_is_shrunk_out_at_once_while_still_registered(tmp_path, closing):
    """Its process refused a connection (its session lives on until it times out): acks=all
    stops waiting for it now, and it joins again by a fetch once no longer presumed gone."""
    gone: set[int] = set()
    leading = await elect(tmp_path, alive=(FOLLOWER,), registered={LEADER, FOLLOWER}, gone=gone)
    closing.append(leading)
    leading.append(5)
    leading.fetch(5)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)
    gone.add(FOLLOWER)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    gone.discard(FOLLOWER)  # a restarted process answers the probe
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER,)
    leading.fetch(5)
    assert await leading.maintainer.check()
    assert await leading.isr_in_store() == (LEADER, FOLLOWER)


async def test_a_wall_clock_step_does_not_shrink_the_isr(tmp_path):
    """ISR durations are measured on a monotonic clock, log times on the wall clock."""
    wall, monotonic = ManualClock(now_ms=1_000_000), ManualClock(now_ms=0)
    manager = ReplicaManager(ManagerConfig(tmp_path, LEADER), wall, monotonic)
    partition = manager.start_replica(TOPIC, 0, LogConfig(), (LEADER, FOLLOWER), 0, (LEADER, FOLLOWER), PartitionConfig())
    try:
        wall.advance(3_600_000)  # an NTP step of an hour
        assert partition.out_of_sync_replicas(monotonic(), LAG_MS) == frozenset()
        monotonic.advance(LAG_MS + 1)
        assert partition.out_of_sync_replicas(monotonic(), LAG_MS) == {FOLLOWER}
    finally:
        await manager.shutdown()
