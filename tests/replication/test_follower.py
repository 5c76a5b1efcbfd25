"""Followers and their fetch loop, wired in-process to a leader Partition (no network).

The fetch callable calls the leader's `read_for_follower` (long-polling with `wait_for_readable`
as the broker's Fetch handler does) and returns the slices' bytes; the epoch callable calls the
leader's `end_offset_for_epoch`. The KIP-101 scenarios are set up step by step (`replicate_once`)
so that each follower's HW lags exactly as in the KIP; each would fail with the classic design's
blind truncation to the HW (docs/design.md §6.2). Waits for what must happen are bounded polls
of a condition.
"""

import asyncio
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kio.schema.errors import ErrorCode

from replog.replication.fetcher import FetcherConfig, FetcherState, FetchReply, FetchSpec, ReplicaFetcher
from replog.storage.log import Log, LogConfig
from replog.replica.partition import EpochEndOffset, Partition, PartitionConfig, ReplicaState
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock, read_all
from tests.support.polling import eventually

A, B, C = 1, 2, 3
WAIT_S = 5  # bound on waits for things that must happen
SHORT_S = 0.05  # bound on waits for things that must not happen
FAST = FetcherConfig(max_wait_ms=20, backoff_ms=1, backoff_max_ms=4)


def now_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def message(stamp: int, count: int = 1, producer_id: int = -1, sequence: int = -1) -> bytearray:
    """A batch told apart from others by its timestamp."""
    return producer_batch(count, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                          base_sequence=sequence, max_timestamp=stamp)


class Cluster:
    """Replicas of one partition on brokers A, B, C, each in its own directory, and their fetchers."""

    def __init__(self, root, min_insync_replicas: int = 1, log_config: LogConfig = LogConfig()):
        self.root = root
        self.config = PartitionConfig(min_insync_replicas=min_insync_replicas)
        self.log_config = log_config
        self.replicas: dict[int, Partition] = {}
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self.unreachable: set[int] = set()  # leaders whose callables raise ConnectionError
        self.problems: list[tuple[int, int]] = []  # (broker, error code) reported by fetchers
        self.epoch_asks: list[int] = []  # the follower of each OffsetForLeaderEpoch sent

    def open(self, broker: int, leader: int, epoch: int, assigned=(A, B, C), isr=None,
             high_watermark: int = 0) -> Partition:
        log = Log(self.root / f"broker-{broker}" / "orders-0", self.log_config, ManualClock())
        replica = Partition(log, broker, epoch, assigned, assigned if isr is None else isr, high_watermark,
                            self.config, now_ms(), leader_id=leader)
        self.replicas[broker] = replica
        return replica

    def crash(self, broker: int) -> int:
        """Stop `broker` without a clean close; returns its HW, as its checkpoint would hold it."""
        replica = self.replicas.pop(broker)
        replica.log.close_handles()
        return replica.high_watermark

    def fetch_from(self, follower: int, leader: int):
        async def fetch(spec: FetchSpec) -> FetchReply:
            if leader in self.unreachable:
                raise ConnectionError(f"broker {leader} unreachable")
            source = self.replicas[leader]
            result = self._read(source, follower, spec)
            if result.error_code == ErrorCode.none and not result.slices and spec.max_wait_ms:
                await source.wait_for_readable(spec.fetch_offset, spec.max_wait_ms / 1000, for_follower=True)
                result = self._read(source, follower, spec)
            return FetchReply(result.error_code, result.high_watermark, result.log_start_offset,
                              b"".join(piece.read() for piece in result.slices))
        return fetch

    @staticmethod
    def _read(source: Partition, follower: int, spec: FetchSpec):
        return source.read_for_follower(follower, spec.fetch_offset, spec.max_bytes, now_ms(),
                                        spec.current_leader_epoch)

    def epoch_end_from(self, follower: int, leader: int):
        async def epoch_end(topic, partition, leader_epoch, current_leader_epoch):
            self.epoch_asks.append(follower)
            if leader in self.unreachable:
                raise ConnectionError(f"broker {leader} unreachable")
            return self.replicas[leader].end_offset_for_epoch(leader_epoch, current_leader_epoch)
        return epoch_end

    def start_fetcher(self, follower: int, config: FetcherConfig = FAST) -> ReplicaFetcher:
        replica = self.replicas[follower]
        fetcher = ReplicaFetcher(replica, self.fetch_from(follower, replica.leader_id),
                                 self.epoch_end_from(follower, replica.leader_id), config, now_ms,
                                 on_leader_problem=lambda p, error: self.problems.append((p.local_broker_id, error)))
        fetcher.start()
        self.fetchers[follower] = fetcher
        return fetcher

    async def stop_fetcher(self, follower: int) -> None:
        await self.fetchers.pop(follower).stop()

    async def shutdown(self) -> None:
        for follower in list(self.fetchers):
            await self.stop_fetcher(follower)
        for replica in self.replicas.values():
            if replica.state is not ReplicaState.CLOSED:
                replica.close()


@pytest.fixture
async def cluster(tmp_path):
    built = Cluster(tmp_path)
    yield built
    await built.shutdown()


def log_bytes(replica: Partition, end: int | None = None) -> bytes:
    return read_all(replica.log, replica.log_start_offset, max_offset=end)


def replicate_once(leader: Partition, follower: Partition) -> None:
    """One fetch round by hand: the follower learns the leader's HW as of this fetch."""
    result = leader.read_for_follower(follower.local_broker_id, follower.log_end_offset, 1 << 20, now_ms(),
                                      follower.leader_epoch)
    assert result.error_code == ErrorCode.none
    follower.append_as_follower(b"".join(piece.read() for piece in result.slices), result.high_watermark,
                                result.log_start_offset)


def caught_up(leader: Partition, *followers: Partition) -> bool:
    return all(f.log_end_offset == leader.log_end_offset and f.high_watermark == leader.high_watermark
               for f in followers)


# -- catching up and committing ------------------------------------------------------------------


async def test_followers_catch_up_with_identical_logs_and_producer_state(cluster):
    leader, followers = cluster.open(A, A, 0), [cluster.open(b, A, 0) for b in (B, C)]
    for sequence in range(30):
        await leader.append_as_leader(message(sequence, count=2, producer_id=7, sequence=2 * sequence), 1, 1000)
    for broker in (B, C):
        cluster.start_fetcher(broker)
    await eventually(lambda: caught_up(leader, *followers) and leader.high_watermark == 60,
                     WAIT_S, "every follower caught up and the HW at 60")
    for follower in followers:
        assert log_bytes(follower) == log_bytes(leader)
        assert follower.log.leader_epoch_cache.entries == leader.log.leader_epoch_cache.entries
        assert follower.producer_state.producers[7].batches == leader.producer_state.producers[7].batches


async def test_a_fetch_answer_ending_in_a_cut_batch_is_appended_up_to_it(cluster):
    """max_bytes cuts the leader's answer at a byte, not a batch (Kafka semantics): the follower
    takes the whole batches and the next fetch brings the cut one whole."""
    leader, follower = cluster.open(A, A, 0, isr=(A, B)), cluster.open(B, A, 0, isr=(A, B))
    for stamp in range(4):
        await leader.append_as_leader(message(stamp, count=3), 1, 1000)
    batch_bytes = len(message(0, count=3))
    cluster.start_fetcher(B, FetcherConfig(max_bytes=batch_bytes + batch_bytes // 2, max_wait_ms=20, backoff_ms=1,
                                           backoff_max_ms=4))
    await eventually(lambda: caught_up(leader, follower) and leader.high_watermark == 12,
                     WAIT_S, "the follower caught up and the HW at 12")
    assert log_bytes(follower) == log_bytes(leader)
    assert cluster.fetchers[B].state is FetcherState.FETCHING


async def test_acks_all_completes_only_once_every_isr_follower_fetched_past_it(tmp_path):
    cluster = Cluster(tmp_path, min_insync_replicas=2)
    try:
        leader = cluster.open(A, A, 0)
        cluster.open(B, A, 0), cluster.open(C, A, 0)
        append = asyncio.create_task(leader.append_as_leader(message(1), -1, 10_000))
        cluster.start_fetcher(B)
        await eventually(lambda: cluster.replicas[B].log_end_offset == 1, WAIT_S, "broker B's log end at 1")
        done, _ = await asyncio.wait([append], timeout=SHORT_S)
        assert not done, "C is in the ISR and has not fetched: nothing is committed"
        cluster.start_fetcher(C)
        assert (await asyncio.wait_for(append, WAIT_S)).error_code == ErrorCode.none
        assert leader.high_watermark == 1
        await cluster.stop_fetcher(C)
        leader.update_isr({A, B})  # what ISR maintenance does once C lags
        result = await asyncio.wait_for(leader.append_as_leader(message(2), -1, 10_000), WAIT_S)
        assert (result.error_code, result.base_offset) == (ErrorCode.none, 1)
        leader.update_isr({A})
        result = await leader.append_as_leader(message(3), -1, 10_000)
        assert result.error_code == ErrorCode.not_enough_replicas
    finally:
        await cluster.shutdown()


async def test_follower_high_watermark_never_moves_backwards(cluster):
    leader, follower = cluster.open(A, A, 0, assigned=(A, B)), cluster.open(B, A, 0, assigned=(A, B))
    seen = []
    fetch = cluster.fetch_from(B, A)

    async def watching_fetch(spec):
        seen.append(follower.high_watermark)
        return await fetch(spec)

    fetcher = ReplicaFetcher(follower, watching_fetch, cluster.epoch_end_from(B, A), FAST, now_ms)
    fetcher.start()
    cluster.fetchers[B] = fetcher
    for stamp in range(40):
        await leader.append_as_leader(message(stamp), 1, 1000)
        await asyncio.sleep(0)
    await eventually(lambda: caught_up(leader, follower) and leader.high_watermark == 40,
                     WAIT_S, "the follower caught up and the HW at 40")
    assert seen == sorted(seen) and seen[-1] <= 40
    # A reply from a leader whose HW lags ours (a new leader) must not move it back.
    follower.append_as_follower(b"", 3, 0)
    assert follower.high_watermark == 40


# -- KIP-101: the cases blind truncation to the HW gets wrong -------------------------------------


async def test_restarted_follower_keeps_committed_data_its_hw_had_not_reached(cluster):
    """KIP-101 scenario 1: B has m2, but learned HW 1 only; the leader acknowledged m2 (HW 2).
    Truncating to its HW on restart, B would drop m2, and lose it for good once it leads."""
    leader = cluster.open(A, A, 0, assigned=(A, B))
    follower = cluster.open(B, A, 0, assigned=(A, B))
    await leader.append_as_leader(message(1), 1, 1000)
    replicate_once(leader, follower)  # B gets m1
    await leader.append_as_leader(message(2), 1, 1000)
    replicate_once(leader, follower)  # B's fetch at 1 commits m1 and gets m2 with HW 1
    leader.record_follower_fetch(B, 2, now_ms())  # commits m2; B crashes before the answer
    assert (leader.high_watermark, follower.high_watermark, follower.log_end_offset) == (2, 1, 2)
    m2 = _stamped(leader, 1)
    hw = cluster.crash(B)
    follower = cluster.open(B, A, 0, assigned=(A, B), high_watermark=hw)
    fetcher = cluster.start_fetcher(B)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING, WAIT_S, "the fetcher fetching")
    assert follower.log_end_offset == 2, "B must keep m2, which the leader committed"
    await cluster.stop_fetcher(B)
    cluster.crash(A)  # the leader dies; B takes over and still has m2
    follower.become_follower(A, 0, now_ms())  # same leader announced again: harmless
    follower.become_leader(1, (A, B), {B}, now_ms())
    assert follower.log_end_offset == 2 and follower.high_watermark <= 2
    assert _stamped(follower, 1) == m2


def _stamped(replica: Partition, offset: int) -> bytes:
    return read_all(replica.log, offset, max_offset=offset + 1)


async def test_restarted_old_leader_drops_its_divergent_tail_instead_of_keeping_it(cluster):
    """KIP-101 scenario 2: A holds m1, m2 with HW 2; B lost m2 in a crash and, back first, leads at
    epoch 1 and writes m3 at offset 1. Cut to its HW 2, A would keep m2 at offset 1 where B has
    m3: the replicas would differ forever. KIP-101 cuts A where epoch 0 ended on B: offset 1."""
    leader = cluster.open(A, A, 0, assigned=(A, B))
    follower = cluster.open(B, A, 0, assigned=(A, B))
    await leader.append_as_leader(message(1), 1, 1000)
    await leader.append_as_leader(message(2), 1, 1000)
    replicate_once(leader, follower)
    leader.record_follower_fetch(B, 2, now_ms())
    assert leader.high_watermark == 2
    a_hw = cluster.crash(A)
    b_hw = cluster.crash(B)
    lost = Log(cluster.root / f"broker-{B}" / "orders-0", LogConfig(), ManualClock())
    lost.truncate_to(1)  # m2 had not reached B's disk
    lost.close()
    new_leader = cluster.open(B, B, 1, assigned=(A, B), isr={B}, high_watermark=b_hw)
    await new_leader.append_as_leader(message(3), 1, 1000)
    old_leader = cluster.open(A, B, 1, assigned=(A, B), high_watermark=a_hw)
    assert old_leader.high_watermark == 2, "blind truncation would keep offset 1 (m2)"
    fetcher = cluster.start_fetcher(A)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING and caught_up(new_leader, old_leader),
                     WAIT_S, "the fetcher fetching, caught up with the new leader")
    assert log_bytes(old_leader) == log_bytes(new_leader)
    assert old_leader.log.leader_epoch_cache.entries == new_leader.log.leader_epoch_cache.entries


async def test_truncation_repeats_while_the_leader_names_an_epoch_the_follower_lacks(cluster):
    """The follower's epochs 0, 2 and the leader's 0, 1, 3: asked about 2, the leader answers
    epoch 1, unknown here; the follower cuts to where its epoch 0 ended and asks about 0."""
    leader = cluster.open(A, A, 0, assigned=(A, B), isr={A})
    follower = cluster.open(B, A, 0, assigned=(A, B))
    await leader.append_as_leader(message(1), 1, 1000)
    replicate_once(leader, follower)
    leader.become_leader(1, (A, B), {A}, now_ms())
    await leader.append_as_leader(message(2), 1, 1000)  # offset 1 at epoch 1 on A only
    follower.log.append(message(20), 2)  # offset 1 at epoch 2 on B only (a leader A never knew of)
    leader.become_leader(3, (A, B), {A}, now_ms())
    follower.become_follower(A, 3, now_ms())
    fetcher = cluster.start_fetcher(B)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING and caught_up(leader, follower),
                     WAIT_S, "the fetcher fetching, caught up with the leader")
    assert log_bytes(follower) == log_bytes(leader)


async def test_an_empty_leader_epoch_answer_falls_back_to_the_high_watermark(cluster):
    follower = cluster.open(B, A, 4, assigned=(A, B))
    for stamp in range(3):
        follower.log.append(message(stamp), 4)
    follower.append_as_follower(b"", 2, 0)
    result = follower.truncate_for_new_leader(follower_answer(-1, -1))
    assert (result.truncated_to, result.complete, follower.log_end_offset) == (2, True, 2)


def follower_answer(epoch: int, end_offset: int) -> EpochEndOffset:
    return EpochEndOffset(ErrorCode.none, epoch, end_offset)


# -- leader changes and fencing ------------------------------------------------------------------


async def test_failover_truncates_the_old_leaders_unacknowledged_tail(tmp_path):
    cluster = Cluster(tmp_path, min_insync_replicas=2)
    try:
        old = cluster.open(A, A, 0)
        cluster.open(B, A, 0), cluster.open(C, A, 0)
        for broker in (B, C):
            cluster.start_fetcher(broker)
        committed = await asyncio.wait_for(old.append_as_leader(message(1, count=3), -1, 10_000), WAIT_S)
        assert committed.error_code == ErrorCode.none
        await eventually(lambda: caught_up(old, cluster.replicas[B], cluster.replicas[C]),
                         WAIT_S, "B and C caught up with the old leader")
        for broker in (B, C):
            await cluster.stop_fetcher(broker)
        tail = asyncio.create_task(old.append_as_leader(message(2, count=2), -1, 10_000))
        await eventually(lambda: old.log_end_offset == 5, WAIT_S, "the old leader's log end at 5")
        old.become_follower(B, 1, now_ms())
        assert (await asyncio.wait_for(tail, WAIT_S)).error_code == ErrorCode.not_leader_or_follower
        assert old.log_end_offset == 5, "become_follower does not truncate; the leader decides"
        new = cluster.replicas[B]
        new.become_leader(1, (A, B, C), {B, C}, now_ms())
        cluster.replicas[C].become_follower(B, 1, now_ms())
        for broker in (A, C):
            cluster.start_fetcher(broker)
        result = await asyncio.wait_for(new.append_as_leader(message(3), -1, 10_000), WAIT_S)
        assert (result.error_code, result.base_offset) == (ErrorCode.none, 3)
        new.update_isr({A, B, C})
        await eventually(lambda: caught_up(new, old, cluster.replicas[C]),
                         WAIT_S, "the old leader and C caught up with the new leader")
        assert log_bytes(old) == log_bytes(new) == log_bytes(cluster.replicas[C])
        assert old.log_end_offset == 4
    finally:
        await cluster.shutdown()


async def test_a_fetcher_with_a_stale_epoch_is_fenced_and_stops(cluster):
    leader = cluster.open(A, A, 2, assigned=(A, B))
    cluster.open(B, A, 1, assigned=(A, B))
    fetcher = cluster.start_fetcher(B)
    await eventually(lambda: fetcher.stopped, WAIT_S, "the fetcher stopped")
    assert cluster.problems == [(B, ErrorCode.fenced_leader_epoch)]
    assert leader.follower_log_end_offset(B) == -1, "a fenced fetch records nothing"


async def test_a_leader_epoch_bump_during_fetching_stops_the_fetcher(cluster):
    leader = cluster.open(A, A, 0, assigned=(A, B))
    cluster.open(B, A, 0, assigned=(A, B))
    fetcher = cluster.start_fetcher(B)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING, WAIT_S, "the fetcher fetching")
    leader.become_leader(1, (A, B), {A, B}, now_ms())
    await leader.append_as_leader(message(1), 1, 1000)
    await eventually(lambda: fetcher.stopped, WAIT_S, "the fetcher stopped")
    assert cluster.problems == [(B, ErrorCode.fenced_leader_epoch)]


async def test_a_leader_that_became_follower_is_reported(cluster):
    leader = cluster.open(A, A, 0, assigned=(A, B, C))
    cluster.open(B, A, 0, assigned=(A, B, C))
    fetcher = cluster.start_fetcher(B)
    await eventually(lambda: fetcher.state is FetcherState.FETCHING, WAIT_S, "the fetcher fetching")
    leader.become_follower(C, 1, now_ms())
    await eventually(lambda: fetcher.stopped, WAIT_S, "the fetcher stopped")
    assert cluster.problems == [(B, ErrorCode.not_leader_or_follower)]


# -- retention, connection failures, lifecycle ---------------------------------------------------


async def test_follower_behind_the_leaders_log_start_restarts_there(tmp_path):
    cluster = Cluster(tmp_path, log_config=LogConfig(segment_bytes=200, retention_bytes=400))
    try:
        leader = cluster.open(A, A, 0, assigned=(A, B), isr={A})
        for stamp in range(20):
            await leader.append_as_leader(message(stamp), 1, 1000)
        assert leader.delete_retained_segments() > 0 and leader.log_start_offset > 0
        follower = cluster.open(B, A, 0, assigned=(A, B))
        # One batch per fetch, so that the follower's segments split where the leader's do.
        cluster.start_fetcher(B, FetcherConfig(max_bytes=1, max_wait_ms=20, backoff_ms=1))
        await eventually(lambda: caught_up(leader, follower), WAIT_S, "the follower caught up")
        assert follower.log_start_offset == leader.log_start_offset
        assert log_bytes(follower) == log_bytes(leader)
        # Retention moves the leader's start again: the follower drops the segments below it.
        for stamp in range(20, 40):
            await leader.append_as_leader(message(stamp), 1, 1000)
        leader.delete_retained_segments()
        await eventually(lambda: caught_up(leader, follower) and follower.log_start_offset == leader.log_start_offset,
                         WAIT_S, "the follower caught up, at the leader's log start")
        assert log_bytes(follower) == log_bytes(leader)
    finally:
        await cluster.shutdown()


async def test_connection_errors_are_retried_with_capped_backoff(cluster):
    leader = cluster.open(A, A, 0, assigned=(A, B))
    follower = cluster.open(B, A, 0, assigned=(A, B))
    await leader.append_as_leader(message(1), 1, 1000)
    cluster.unreachable.add(A)
    fetcher = cluster.start_fetcher(B)
    await asyncio.sleep(SHORT_S)  # several failed attempts, each backing off
    # It holds nothing, so it skipped the handshake: these were fetches.
    assert fetcher.state is FetcherState.FETCHING and fetcher._backoff_ms == FAST.backoff_max_ms
    cluster.unreachable.clear()
    await eventually(lambda: caught_up(leader, follower), WAIT_S, "the follower caught up")
    assert fetcher._backoff_ms == FAST.backoff_ms


async def test_a_follower_holding_nothing_fetches_without_the_handshake(cluster):
    """A new partition's follower holds no record and no epoch: the KIP-101 handshake could cut
    nothing, so it is not sent (at scale, each one cut short the fetch round parked at the
    leader). A follower holding records asks first."""
    leader = cluster.open(A, A, 0, assigned=(A, B, C))
    cluster.open(B, A, 0, assigned=(A, B, C))
    await leader.append_as_leader(message(1), 1, 1000)
    cluster.start_fetcher(B)
    await eventually(lambda: caught_up(leader, cluster.replicas[B]), WAIT_S, "B caught up")
    assert cluster.epoch_asks == []
    await cluster.stop_fetcher(B)
    cluster.start_fetcher(B)
    await eventually(lambda: cluster.fetchers[B].state is FetcherState.FETCHING, WAIT_S, "B's fetcher fetching")
    assert cluster.epoch_asks == [B]


async def test_stop_cancels_a_long_poll_and_is_final(cluster):
    cluster.open(A, A, 0, assigned=(A, B))
    cluster.open(B, A, 0, assigned=(A, B))
    fetcher = cluster.start_fetcher(B, FetcherConfig(max_wait_ms=60_000))
    await eventually(lambda: fetcher.state is FetcherState.FETCHING, WAIT_S, "the fetcher fetching")
    await asyncio.wait_for(cluster.stop_fetcher(B), WAIT_S)
    assert fetcher.stopped and cluster.problems == []


async def test_stop_passes_on_the_cancellation_of_its_caller(cluster):
    """A leadership stopped while it was stopping its fetcher must stop: swallowing the
    cancellation left it waiting for events for ever, and its broker's state-change listener
    waiting for it (found by the simulator)."""
    cluster.open(A, A, 0, assigned=(A, B))
    cluster.open(B, A, 0, assigned=(A, B))
    fetcher = cluster.start_fetcher(B, FetcherConfig(max_wait_ms=60_000))
    await eventually(lambda: fetcher.state is FetcherState.FETCHING, WAIT_S, "the fetcher fetching")
    stopping = asyncio.create_task(cluster.stop_fetcher(B))
    await asyncio.sleep(0)  # it has cancelled the fetcher's task and waits for its end
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert stopping.cancelled()


# -- the follower state ---------------------------------------------------------------------------


async def test_a_follower_refuses_clients(cluster):
    follower = cluster.open(B, A, 0, assigned=(A, B))
    assert (await follower.append_as_leader(message(1), 1, 1000)).error_code == ErrorCode.not_leader_or_follower
    assert follower.read_for_consumer(0, 1000).error_code == ErrorCode.not_leader_or_follower
    assert follower.end_offset_for_epoch(0).error_code == ErrorCode.not_leader_or_follower
    assert follower.read_for_follower(A, 0, 1000, now_ms()).error_code == ErrorCode.not_leader_or_follower


async def test_illegal_transitions_raise(cluster):
    leader = cluster.open(A, A, 3, assigned=(A, B))
    with pytest.raises(ValueError):
        leader.become_follower(B, 3, now_ms())  # two leaders at one epoch
    with pytest.raises(ValueError):
        leader.become_follower(A, 4, now_ms())
    with pytest.raises(RuntimeError):
        leader.append_as_follower(b"", 0, 0)
    leader.become_follower(B, 4, now_ms())
    with pytest.raises(ValueError):
        leader.become_follower(A + 2, 4, now_ms())  # another leader at the same epoch
    with pytest.raises(ValueError):
        leader.become_leader(4, (A, B), {A}, now_ms())
    with pytest.raises(RuntimeError):
        leader.update_isr({A})
    leader.close()
    with pytest.raises(RuntimeError):
        leader.become_follower(B, 5, now_ms())
    with pytest.raises(RuntimeError):
        leader.become_leader(5, (A, B), {A}, now_ms())


# -- random interleavings ------------------------------------------------------------------------

APPEND, FETCH, ELECT = "append", "fetch", "elect"
operations = st.lists(st.one_of(
    st.tuples(st.just(APPEND), st.integers(1, 3)),  # records in the batch
    st.tuples(st.just(FETCH), st.sampled_from((A, B, C))),
    st.tuples(st.just(ELECT), st.sampled_from((A, B, C))),
), max_size=60)


def handshake(leader: Partition, follower: Partition) -> None:
    """The fetcher's KIP-101 rounds, run synchronously."""
    for _ in range(FAST.truncation_rounds_max):
        answer = leader.end_offset_for_epoch(follower.latest_epoch, follower.leader_epoch)
        if follower.truncate_for_new_leader(answer).complete:
            return
    raise AssertionError("truncation did not converge")


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_random_appends_fetches_and_leader_changes_keep_committed_data(ops):
    """Three replicas, ISR always all three (so any replica is a clean leader). Invariants: the
    committed prefix (below the largest HW any leader reached) never changes and every replica
    holds it up to its own end; each replica's HW never moves backwards; at the end, once all
    have caught up, the logs are byte-identical."""
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_random_run(Path(root), ops))


async def _random_run(root: Path, ops) -> None:
    cluster = Cluster(root)
    leader_id, epoch = A, 0
    cluster.open(A, A, 0)
    for broker in (B, C):
        cluster.open(broker, A, 0)
    truncated = {B: False, C: False}  # whether each follower has done its handshake this epoch
    committed = b""
    high_watermarks = {broker: 0 for broker in (A, B, C)}
    try:
        for stamp, (kind, argument) in enumerate(ops):
            leader = cluster.replicas[leader_id]
            if kind == APPEND:
                result = await leader.append_as_leader(message(stamp, count=argument), 1, 1000)
                assert result.error_code == ErrorCode.none
            elif kind == FETCH and argument != leader_id:
                follower = cluster.replicas[argument]
                if not truncated[argument]:
                    handshake(leader, follower)
                    truncated[argument] = True
                replicate_once(leader, follower)
            elif kind == ELECT and argument != leader_id:
                epoch += 1
                leader.become_follower(argument, epoch, now_ms())
                cluster.replicas[argument].become_leader(epoch, (A, B, C), {A, B, C}, now_ms())
                leader_id = argument
                truncated = {broker: False for broker in (A, B, C) if broker != leader_id}
                for broker in truncated:
                    if broker != leader.local_broker_id:
                        cluster.replicas[broker].become_follower(leader_id, epoch, now_ms())
            committed = _check_invariants(cluster, leader_id, committed, high_watermarks)
        leader = cluster.replicas[leader_id]
        for broker in truncated:
            if not truncated[broker]:
                handshake(leader, cluster.replicas[broker])
        # Catch everyone up: a round for the data, one for the leader to see it fetched, one to
        # tell every follower the HW.
        for _ in range(3):
            for broker in truncated:
                replicate_once(leader, cluster.replicas[broker])
        _check_invariants(cluster, leader_id, committed, high_watermarks)
        assert len({log_bytes(replica) for replica in cluster.replicas.values()}) == 1
        assert {replica.high_watermark for replica in cluster.replicas.values()} == {leader.log_end_offset}
    finally:
        await cluster.shutdown()


def _check_invariants(cluster: Cluster, leader_id: int, committed: bytes, high_watermarks: dict) -> bytes:
    leader = cluster.replicas[leader_id]
    leader_committed = log_bytes(leader, leader.high_watermark)
    assert leader_committed.startswith(committed) or committed.startswith(leader_committed), \
        "an offset below the HW now holds other data"
    committed = max(committed, leader_committed, key=len)
    assert log_bytes(leader).startswith(committed), "the leader lost committed data"
    for broker, replica in cluster.replicas.items():
        assert replica.high_watermark >= high_watermarks[broker], f"HW of {broker} moved backwards"
        high_watermarks[broker] = replica.high_watermark
        held = log_bytes(replica)
        assert committed.startswith(held) or held.startswith(committed), f"{broker} diverged below the HW"
    return committed
