"""Partition: acks, the commit queue, the high watermark, reads, long polls, fencing, offsets.

Followers are simulated through the AR/ISR API and `record_follower_fetch`. A check that
something does NOT happen waits a short bounded time; nothing synchronises by sleeping.
"""

import asyncio
import threading

import pytest

from kio.schema.errors import ErrorCode

from replog.storage.batch_format import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, NewRecord, encode_batch
from replog.storage.log import Log, LogConfig
from replog.storage.records import validate_batches
from replog.replica.partition import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    Partition,
    PartitionConfig,
    ReadWaiter,
    ReplicaState,
)
from tests.support.producer_batches import producer_batch, timed_batch
from tests.support.log_fixtures import ManualClock

LEADER, FOLLOWER, OTHER = 1, 2, 3
WAIT_S = 5  # bound on waits for things that must happen
SHORT_S = 0.05  # bound on waits for things that must not happen


def make_partition(directory, assigned=(LEADER,), isr=None, min_insync_replicas=1, leader_epoch=0,
                   high_watermark=0, name="orders-0", clock=None, **log_settings) -> Partition:
    log = Log(directory / name, LogConfig(**log_settings), clock or ManualClock())
    return Partition(log, LEADER, leader_epoch, assigned, assigned if isr is None else isr, high_watermark,
                     PartitionConfig(min_insync_replicas=min_insync_replicas), now_ms=0)


def close_unless_closed(partition: Partition) -> None:
    if partition.state is ReplicaState.LEADER:
        partition.close()


@pytest.fixture
def single(tmp_path):
    partition = make_partition(tmp_path)
    yield partition
    close_unless_closed(partition)


@pytest.fixture
def replicated(tmp_path):
    """Leader with one follower in the ISR that has fetched nothing yet; min.insync.replicas 2."""
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER), min_insync_replicas=2)
    yield partition
    close_unless_closed(partition)


def records(count=1, **fields) -> bytearray:
    return producer_batch(count, **fields)


def consumer_bytes(result) -> bytes:
    return b"".join(piece.read() for piece in result.slices)


async def still_pending(task: asyncio.Task) -> bool:
    done, _ = await asyncio.wait([task], timeout=SHORT_S)
    return not done


async def test_acks_1_and_0_answer_after_the_local_append(single):
    first = await single.append_as_leader(records(3), acks=1, timeout_ms=1000)
    second = await single.append_as_leader(records(2), acks=0, timeout_ms=1000)
    assert (first.error_code, first.base_offset, first.log_append_time_ms) == (0, 0, -1)
    assert (second.error_code, second.base_offset) == (0, 3)
    assert single.high_watermark == single.log_end_offset == 5


async def test_acks_all_with_only_the_leader_in_sync_commits_at_once(single):
    result = await single.append_as_leader(records(2), acks=-1, timeout_ms=1000)
    assert (result.error_code, result.base_offset) == (0, 0)
    assert single.high_watermark == 2


async def test_acks_all_waits_until_a_follower_fetch_advances_the_high_watermark(replicated):
    task = asyncio.create_task(replicated.append_as_leader(records(4), acks=-1, timeout_ms=10_000))
    assert await still_pending(task)
    assert replicated.record_follower_fetch(FOLLOWER, 2, now_ms=1) == ErrorCode.none
    assert replicated.high_watermark == 2
    assert await still_pending(task)
    replicated.record_follower_fetch(FOLLOWER, 4, now_ms=2)
    result = await asyncio.wait_for(task, WAIT_S)
    assert (result.error_code, result.base_offset) == (0, 0)
    assert replicated.high_watermark == 4


async def test_acks_all_times_out_if_the_follower_never_catches_up(replicated):
    result = await replicated.append_as_leader(records(), acks=-1, timeout_ms=20)
    assert result.error_code == ErrorCode.request_timed_out
    assert replicated.log_end_offset == 1  # appended all the same, as in Kafka
    assert replicated.high_watermark == 0


async def test_acks_all_with_too_small_an_isr_is_refused_before_appending(tmp_path):
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER), isr=(LEADER,), min_insync_replicas=2)
    result = await partition.append_as_leader(records(), acks=-1, timeout_ms=1000)
    assert result.error_code == ErrorCode.not_enough_replicas
    assert partition.log_end_offset == 0
    assert (await partition.append_as_leader(records(), acks=1, timeout_ms=1000)).error_code == 0
    partition.close()


async def test_isr_shrinking_below_min_insync_before_commit_fails_the_append(replicated):
    task = asyncio.create_task(replicated.append_as_leader(records(), acks=-1, timeout_ms=10_000))
    assert await still_pending(task)
    replicated.update_isr({LEADER})
    result = await asyncio.wait_for(task, WAIT_S)
    assert result.error_code == ErrorCode.not_enough_replicas_after_append
    assert replicated.high_watermark == 1  # committed by the smaller ISR, just not acknowledged
    assert replicated.catch_up_replicas == {FOLLOWER}


async def test_abandoned_commits_leave_the_queue(replicated):
    for _ in range(3):
        assert (await replicated.append_as_leader(records(), acks=-1, timeout_ms=1)).error_code == 7
    task = asyncio.create_task(replicated.append_as_leader(records(), acks=-1, timeout_ms=10_000))
    assert await still_pending(task)
    assert len(replicated._commit_queue) == 1
    replicated.record_follower_fetch(FOLLOWER, 4, now_ms=1)
    assert (await asyncio.wait_for(task, WAIT_S)).base_offset == 3


async def test_high_watermark_never_moves_backwards(tmp_path):
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER, OTHER), min_insync_replicas=1)
    await partition.append_as_leader(records(10), acks=1, timeout_ms=1000)
    partition.record_follower_fetch(FOLLOWER, 8, now_ms=1)
    partition.record_follower_fetch(OTHER, 6, now_ms=1)
    assert partition.high_watermark == 6
    partition.record_follower_fetch(OTHER, 3, now_ms=2)  # a follower truncated its log
    partition.update_isr({LEADER, FOLLOWER})
    assert partition.high_watermark == 8
    partition.update_isr({LEADER, FOLLOWER, OTHER})  # a lagging replica re-admitted
    assert partition.high_watermark == 8
    partition.become_leader(1, (LEADER, FOLLOWER, OTHER), (LEADER, FOLLOWER, OTHER), now_ms=3)  # LEOs unknown
    assert partition.high_watermark == 8
    partition.close()


async def test_consumers_never_read_at_or_above_the_high_watermark(replicated):
    await replicated.append_as_leader(records(2), acks=1, timeout_ms=1000)
    await replicated.append_as_leader(records(3), acks=1, timeout_ms=1000)
    assert consumer_bytes(replicated.read_for_consumer(0, 1 << 20)) == b""
    replicated.record_follower_fetch(FOLLOWER, 2, now_ms=1)
    result = replicated.read_for_consumer(0, 1 << 20)
    assert (result.error_code, result.high_watermark, result.last_stable_offset) == (0, 2, 2)
    assert consumer_bytes(result) == bytes(replicated.log.read(0, 1 << 20, max_offset=2)[0].read())
    assert len(consumer_bytes(result)) == len(records(2))
    # Between HW and LEO: empty, not out of range (as Kafka; see read_for_consumer).
    between = replicated.read_for_consumer(3, 1 << 20)
    assert (between.error_code, between.slices) == (0, [])
    assert replicated.read_for_consumer(6, 1 << 20).error_code == ErrorCode.offset_out_of_range
    assert replicated.read_for_consumer(-1, 1 << 20).error_code == ErrorCode.offset_out_of_range


async def test_followers_read_up_to_the_log_end_and_their_fetch_is_recorded(replicated):
    await replicated.append_as_leader(records(2), acks=1, timeout_ms=1000)
    result = replicated.read_for_follower(FOLLOWER, 0, 1 << 20, now_ms=5)
    assert len(consumer_bytes(result)) == len(records(2))
    assert result.high_watermark == 0
    assert replicated.read_for_follower(FOLLOWER, 2, 1 << 20, now_ms=6).high_watermark == 2
    assert replicated.follower_log_end_offset(FOLLOWER) == 2
    assert replicated.read_for_follower(FOLLOWER, 3, 1 << 20, now_ms=7).error_code == ErrorCode.offset_out_of_range


async def test_fetch_from_a_replica_not_assigned_is_refused(replicated):
    assert replicated.read_for_follower(OTHER, 0, 100, now_ms=1).error_code == ErrorCode.not_leader_or_follower
    result = replicated.read_for_follower(OTHER, 0, 100, now_ms=1, current_leader_epoch=0)
    assert result.error_code == ErrorCode.unknown_leader_epoch


async def test_requests_from_other_leader_epochs_are_fenced(tmp_path):
    partition = make_partition(tmp_path, leader_epoch=5)
    assert partition.read_for_consumer(0, 100, current_leader_epoch=4).error_code == ErrorCode.fenced_leader_epoch
    assert partition.read_for_consumer(0, 100, current_leader_epoch=6).error_code == ErrorCode.unknown_leader_epoch
    assert partition.read_for_consumer(0, 100, current_leader_epoch=5).error_code == ErrorCode.none
    assert partition.read_for_consumer(0, 100).error_code == ErrorCode.none
    assert partition.list_offsets(LATEST_TIMESTAMP, current_leader_epoch=4).error_code == 74
    assert partition.end_offset_for_epoch(5, current_leader_epoch=6).error_code == 75  # UNKNOWN_LEADER_EPOCH
    partition.close()


async def test_long_poll_wakes_on_append(single):
    waiting = asyncio.create_task(single.wait_for_readable(0, timeout_s=WAIT_S))
    assert await still_pending(waiting)
    await single.append_as_leader(records(), acks=1, timeout_ms=1000)
    assert await asyncio.wait_for(waiting, WAIT_S) is True
    assert not single._watches.consumers


async def test_long_poll_times_out_without_data(single):
    assert await single.wait_for_readable(0, timeout_s=SHORT_S) is False
    assert not single._watches.consumers


async def test_long_poll_answers_at_once_when_data_is_already_readable(single):
    await single.append_as_leader(records(), acks=1, timeout_ms=1000)
    assert await asyncio.wait_for(single.wait_for_readable(0, timeout_s=WAIT_S), WAIT_S) is True


async def test_consumer_long_poll_waits_for_the_high_watermark_not_the_log_end(replicated):
    consumer = asyncio.create_task(replicated.wait_for_readable(0, timeout_s=WAIT_S))
    follower = asyncio.create_task(replicated.wait_for_readable(0, timeout_s=WAIT_S, for_follower=True))
    await replicated.append_as_leader(records(), acks=1, timeout_ms=1000)
    assert await asyncio.wait_for(follower, WAIT_S) is True
    assert await still_pending(consumer)
    replicated.record_follower_fetch(FOLLOWER, 1, now_ms=1)
    assert await asyncio.wait_for(consumer, WAIT_S) is True


async def test_one_waiter_watches_several_partitions(tmp_path):
    first = make_partition(tmp_path, name="orders-0")
    second = make_partition(tmp_path, name="orders-1")
    with ReadWaiter() as waiter:
        waiter.watch(first, 0)
        waiter.watch(second, 0)
        waiting = asyncio.create_task(waiter.wait(WAIT_S))
        assert await still_pending(waiting)
        await second.append_as_leader(records(), acks=1, timeout_ms=1000)
        assert await asyncio.wait_for(waiting, WAIT_S) is True
    assert not first._watches.consumers and not second._watches.consumers
    first.close()
    second.close()


async def test_close_fails_waiting_appends_and_wakes_long_polls(replicated):
    append = asyncio.create_task(replicated.append_as_leader(records(), acks=-1, timeout_ms=10_000))
    poll = asyncio.create_task(replicated.wait_for_readable(1, timeout_s=WAIT_S))
    assert await still_pending(append)
    replicated.close()
    assert (await asyncio.wait_for(append, WAIT_S)).error_code == ErrorCode.not_leader_or_follower
    assert await asyncio.wait_for(poll, WAIT_S) is True
    assert (await replicated.append_as_leader(records(), acks=1, timeout_ms=10)).error_code == 6
    assert replicated.read_for_consumer(0, 100).error_code == 6


async def test_idempotent_retry_is_acknowledged_with_the_original_offset(single):
    first = await single.append_as_leader(records(2, producer_id=9, producer_epoch=0, base_sequence=0), -1, 1000)
    await single.append_as_leader(records(1), acks=1, timeout_ms=1000)
    retry = await single.append_as_leader(records(2, producer_id=9, producer_epoch=0, base_sequence=0), -1, 1000)
    assert (first.base_offset, retry.base_offset, retry.error_code) == (0, 0, 0)
    assert single.log_end_offset == 3
    gap = await single.append_as_leader(records(1, producer_id=9, producer_epoch=0, base_sequence=5), 1, 1000)
    assert (gap.error_code, gap.base_offset) == (45, -1)


async def test_duplicate_waits_for_the_commit_of_its_original(replicated):
    batch = records(1, producer_id=9, producer_epoch=0, base_sequence=0)
    original = asyncio.create_task(replicated.append_as_leader(bytearray(batch), acks=-1, timeout_ms=10_000))
    retry = asyncio.create_task(replicated.append_as_leader(bytearray(batch), acks=-1, timeout_ms=10_000))
    assert await still_pending(retry)
    replicated.record_follower_fetch(FOLLOWER, 1, now_ms=1)
    results = await asyncio.wait_for(asyncio.gather(original, retry), WAIT_S)
    assert [(r.error_code, r.base_offset) for r in results] == [(0, 0), (0, 0)]
    assert replicated.log_end_offset == 1


async def test_invalid_batches_and_acks_are_refused(single):
    corrupt = records()
    corrupt[-1] ^= 0xFF
    assert (await single.append_as_leader(corrupt, acks=1, timeout_ms=10)).error_code == 2
    assert (await single.append_as_leader(records(), acks=2, timeout_ms=10)).error_code == 21
    assert single.log_end_offset == 0


async def test_list_offsets_answers_committed_offsets_only(replicated):
    await replicated.append_as_leader(records(2, max_timestamp=100), acks=1, timeout_ms=1000)
    await replicated.append_as_leader(records(2, max_timestamp=200), acks=1, timeout_ms=1000)
    replicated.record_follower_fetch(FOLLOWER, 2, now_ms=1)
    assert replicated.list_offsets(EARLIEST_TIMESTAMP)[:3] == (0, -1, 0)
    assert replicated.list_offsets(LATEST_TIMESTAMP)[:3] == (0, -1, 2)
    assert replicated.list_offsets(50) == (0, 100, 0, 0)
    assert replicated.list_offsets(150)[:3] == (0, -1, -1)  # in a batch above the HW
    replicated.record_follower_fetch(FOLLOWER, 4, now_ms=2)
    assert replicated.list_offsets(150) == (0, 200, 2, 0)


async def test_list_offsets_max_timestamp_answers_the_first_record_with_the_largest_timestamp(replicated):
    """KIP-734 (ListOffsets v7): the record itself, not its batch. As in Kafka, the largest
    timestamp is the log's, and a record above the HW is not answered to consumers. -4, the
    earliest local offset, is the log start without tiered storage."""
    assert replicated.list_offsets(MAX_TIMESTAMP)[:3] == (0, -1, -1), "an empty log"
    await replicated.append_as_leader(timed_batch([100, 300, 200, 300]), acks=1, timeout_ms=1000)
    replicated.record_follower_fetch(FOLLOWER, 4, now_ms=1)
    assert replicated.list_offsets(MAX_TIMESTAMP) == (0, 300, 1, 0)
    assert replicated.list_offsets(EARLIEST_LOCAL_TIMESTAMP)[:3] == (0, -1, 0)
    await replicated.append_as_leader(timed_batch([250, 400, 300]), acks=1, timeout_ms=1000)
    assert replicated.list_offsets(MAX_TIMESTAMP)[:3] == (0, -1, -1), "the largest is above the HW"
    assert replicated.list_offsets(MAX_TIMESTAMP, any_replica=True)[:3] == (0, 400, 5)
    replicated.record_follower_fetch(FOLLOWER, 7, now_ms=2)
    assert replicated.list_offsets(MAX_TIMESTAMP)[:3] == (0, 400, 5)


async def test_a_log_append_time_topic_answers_and_lists_offsets_by_the_append_time(tmp_path):
    clock = ManualClock(5_000)
    partition = make_partition(tmp_path, clock=clock, message_timestamp_type="LogAppendTime")
    try:
        first = await partition.append_as_leader(records(2, max_timestamp=100), acks=1, timeout_ms=1000)
        clock.advance(1_000)
        created = [NewRecord(None, b"a", timestamp_ms=100), NewRecord(None, b"b", timestamp_ms=7_000)]
        second = await partition.append_as_leader(encode_batch(created, 100, CODEC_ZSTD), acks=-1, timeout_ms=1000)
        assert (first.base_offset, first.log_append_time_ms, second.base_offset, second.log_append_time_ms) == (
            0, 5_000, 2, 6_000)
        assert partition.list_offsets(50) == (0, 5_000, 0, 0)
        assert partition.list_offsets(5_500) == (0, 6_000, 2, 0), "every record of a batch has its append time"
    finally:
        partition.close()


async def test_a_batch_is_stored_in_the_topics_compression_type_whatever_the_producer_sent(tmp_path):
    partition = make_partition(tmp_path, compression_type="zstd")
    try:
        for batch in (records(3), encode_batch([NewRecord(b"k", b"v" * 100)], 0, CODEC_LZ4), records(1)):
            assert (await partition.append_as_leader(batch, acks=1, timeout_ms=1000)).error_code == 0
        fetched = consumer_bytes(partition.read_for_consumer(0, 1 << 20))
        assert [(h.base_offset, h.compression_codec) for h in validate_batches(fetched, 1 << 20)] == [
            (0, CODEC_ZSTD), (3, CODEC_ZSTD), (4, CODEC_ZSTD)]
    finally:
        partition.close()


async def test_any_replica_answers_list_offsets_from_its_own_log_end(replicated):
    """Kafka's debugging replica id: a follower answers too, and "latest" is the log end, past
    the HW; epochs are still fenced."""
    await replicated.append_as_leader(records(3), acks=1, timeout_ms=1000)
    assert replicated.list_offsets(LATEST_TIMESTAMP)[:3] == (0, -1, 0), "consumers see the HW"
    assert replicated.list_offsets(LATEST_TIMESTAMP, any_replica=True)[:3] == (0, -1, 3)
    replicated.become_follower(FOLLOWER, 1, now_ms=1)
    assert replicated.list_offsets(LATEST_TIMESTAMP).error_code == ErrorCode.not_leader_or_follower
    assert replicated.list_offsets(LATEST_TIMESTAMP, any_replica=True)[:3] == (0, -1, 3)
    assert replicated.list_offsets(EARLIEST_TIMESTAMP, any_replica=True)[:3] == (0, -1, 0)
    assert replicated.list_offsets(LATEST_TIMESTAMP, current_leader_epoch=0, any_replica=True).error_code == 74


async def test_end_offset_for_epoch_follows_kip_101(single):
    await single.append_as_leader(records(3), acks=1, timeout_ms=1000)
    single.become_leader(2, (LEADER,), (LEADER,), now_ms=0)
    await single.append_as_leader(records(2), acks=1, timeout_ms=1000)
    single.become_leader(4, (LEADER,), (LEADER,), now_ms=0)
    assert single.end_offset_for_epoch(0) == (0, 0, 3)
    assert single.end_offset_for_epoch(1) == (0, 0, 3)  # largest epoch <= 1 is 0
    assert single.end_offset_for_epoch(2) == (0, 2, 5)
    assert single.end_offset_for_epoch(4) == (0, 4, 5)  # the current epoch, before any append in it
    with pytest.raises(ValueError):
        single.become_leader(3, (LEADER,), (LEADER,), now_ms=0)


def test_isr_must_hold_the_leader_within_the_assignment(tmp_path):
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER))
    with pytest.raises(ValueError):
        partition.update_isr({FOLLOWER})
    with pytest.raises(ValueError):
        partition.update_isr({LEADER, OTHER})
    partition.close()


async def test_followers_are_out_of_sync_once_not_caught_up_for_the_lag_time(tmp_path):
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER, OTHER))
    lag_ms = 100
    assert partition.out_of_sync_replicas(now_ms=lag_ms, replica_lag_time_max_ms=lag_ms) == set()
    await partition.append_as_leader(records(4), acks=1, timeout_ms=1000)
    partition.record_follower_fetch(FOLLOWER, 4, now_ms=50)  # caught up at 50
    partition.record_follower_fetch(OTHER, 2, now_ms=50)  # behind
    assert partition.out_of_sync_replicas(now_ms=101, replica_lag_time_max_ms=lag_ms) == {OTHER}
    await partition.append_as_leader(records(2), acks=1, timeout_ms=1000)
    partition.record_follower_fetch(OTHER, 4, now_ms=120)  # has what the leader had at its fetch at 50
    partition.record_follower_fetch(FOLLOWER, 5, now_ms=160)  # behind the LEO of 6 since 50
    assert partition.out_of_sync_replicas(now_ms=151, replica_lag_time_max_ms=lag_ms) == {FOLLOWER, OTHER}
    partition.update_isr({LEADER, FOLLOWER})
    assert partition.out_of_sync_replicas(now_ms=400, replica_lag_time_max_ms=lag_ms) == {FOLLOWER}
    partition.close()


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_timestamp_lookup_inflates_no_more_than_its_bound(single, monkeypatch, codec):
    """A producer controls what its compressed records inflate to; the lookup stays bounded and
    falls back to the batch (None) rather than inflating past LOOKUP_UNCOMPRESSED_BYTES_MAX."""
    from replog.storage import batch_format

    batch = encode_batch([NewRecord(None, b"\0" * (256 << 10), timestamp_ms=1_000 + i) for i in range(2)], 1_000, codec)
    single.log.append(batch, 0)
    assert batch_format.first_record_at_or_after(single.log.read(0, 1)[0].read(), 1_001) == (1, 1_001)
    monkeypatch.setattr(batch_format, "LOOKUP_UNCOMPRESSED_BYTES_MAX", 1 << 18)
    assert batch_format.first_record_at_or_after(single.log.read(0, 1)[0].read(), 1_001) is None


async def test_a_fenced_leader_takes_no_writes_and_holds_its_high_watermark(replicated):
    pending = asyncio.create_task(replicated.append_as_leader(records(2), acks=-1, timeout_ms=5000))
    await asyncio.sleep(0)  # let the append reach the commit queue
    replicated.fence()
    refused = await replicated.append_as_leader(records(1), acks=1, timeout_ms=1000)
    assert refused.error_code == ErrorCode.not_leader_or_follower
    assert replicated.read_for_follower(FOLLOWER, 2, 1 << 20, now_ms=1).error_code == ErrorCode.none
    assert replicated.high_watermark == 0, "a fenced leader must not commit on its followers' word"
    assert await still_pending(pending), "an acks=-1 append must not be acknowledged while fenced"
    replicated.lift_fence()
    assert replicated.high_watermark == 2
    assert (await asyncio.wait_for(pending, WAIT_S)).error_code == ErrorCode.none
    assert (await replicated.append_as_leader(records(1), acks=1, timeout_ms=1000)).error_code == ErrorCode.none


async def test_a_fenced_leader_that_becomes_follower_fails_its_waiting_appends(replicated):
    pending = asyncio.create_task(replicated.append_as_leader(records(1), acks=-1, timeout_ms=5000))
    await asyncio.sleep(0)
    replicated.fence()
    replicated.become_follower(FOLLOWER, 1, now_ms=1)
    assert (await asyncio.wait_for(pending, WAIT_S)).error_code == ErrorCode.not_leader_or_follower
    assert not replicated.fenced
    replicated.close()


async def test_a_new_leader_whose_high_watermark_lags_its_epoch_start_lists_no_latest_offset(tmp_path):
    """KIP-207: the new leader's HW (learnt lazily as a follower) may be below what the previous
    leader reported; until it reaches the epoch's start offset ListOffsets must not go back."""
    partition = make_partition(tmp_path, assigned=(LEADER, FOLLOWER))
    await partition.append_as_leader(records(3, max_timestamp=100), acks=1, timeout_ms=1000)
    partition.become_follower(FOLLOWER, 1, now_ms=1)
    partition.become_leader(2, (LEADER, FOLLOWER), (LEADER, FOLLOWER), now_ms=2)
    assert partition.high_watermark == 0 and partition.log_end_offset == 3
    assert partition.list_offsets(LATEST_TIMESTAMP).error_code == ErrorCode.offset_not_available
    assert partition.list_offsets(100).error_code == ErrorCode.offset_not_available
    assert partition.list_offsets(EARLIEST_TIMESTAMP)[:3] == (0, -1, 0)
    partition.record_follower_fetch(FOLLOWER, 3, now_ms=3)
    assert partition.list_offsets(LATEST_TIMESTAMP)[:3] == (0, -1, 3)
    partition.close()


async def test_appends_drop_the_page_cache_behind_the_log_tail_in_another_thread(single, monkeypatch):
    from replog.storage import segment
    monkeypatch.setattr(segment, "PAGE_CACHE_TAIL_BYTES", 1)
    monkeypatch.setattr(segment, "PAGE_CACHE_EVICTION_STEP_BYTES", 1)
    evicted_in = []
    real_run = segment.PageCacheEviction.run
    monkeypatch.setattr(segment.PageCacheEviction, "run",
                        lambda eviction: evicted_in.append(threading.get_ident()) or real_run(eviction))
    appended = records(3)
    assert (await single.append_as_leader(appended, acks=1, timeout_ms=1000)).error_code == ErrorCode.none
    await asyncio.wait_for(single._local.page_cache.running, WAIT_S)
    assert len(evicted_in) == 1 and evicted_in[0] != threading.get_ident()  # not the event loop's thread
    assert consumer_bytes(single.read_for_consumer(0, 1 << 20)) == bytes(appended)
