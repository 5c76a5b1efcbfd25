"""The reassignment throttle (replica/throttle.py): a leader sends the replicas a move adds no
more than the rate on average, never holds back a replica in sync, and lets a throttled long
poll wait rather than wake at once."""

from __future__ import annotations

from replog.replica.partition import Partition, PartitionConfig
from replog.replica.throttle import ReplicationThrottle
from replog.storage.log import Log, LogConfig
from tests.support.producer_batches import producer_batch

LEADER, IN_SYNC, ADDED = 1, 2, 3
RATE_BYTES_PER_S = 1000
SLOW_RATE_BYTES_PER_S = 100  # below the test log's 4 batches of about 77 bytes


def test_the_allowance_accrues_at_the_rate_up_to_a_second_and_a_read_may_overdraw_it():
    throttle = ReplicationThrottle()
    assert throttle.allowance_bytes(RATE_BYTES_PER_S, now_ms=0) == RATE_BYTES_PER_S
    throttle.spent(1500)  # one batch larger than the balance: sent whole
    assert throttle.allowance_bytes(RATE_BYTES_PER_S, now_ms=400) == 0  # -500 + 400
    assert throttle.allowance_bytes(RATE_BYTES_PER_S, now_ms=700) == 200
    assert throttle.allowance_bytes(RATE_BYTES_PER_S, now_ms=60_000) == RATE_BYTES_PER_S  # no more than a second's


def leading(tmp_path) -> Partition:
    partition = Partition(Log(tmp_path / "moving-0", LogConfig(), lambda: 0), LEADER, 1, (LEADER, IN_SYNC, ADDED),
                          (LEADER, IN_SYNC), 0, PartitionConfig(), now_ms=0)
    for _ in range(4):
        partition.log.append(producer_batch(20), partition.leader_epoch)
        partition._after_local_append()
    return partition


def sent_bytes(partition: Partition, replica: int, now_ms: int) -> int:
    result = partition.read_for_follower(replica, 0, 1 << 20, now_ms, partition.leader_epoch)
    assert result.error_code == 0
    return sum(piece.size_bytes for piece in result.slices)


def test_an_added_replica_gets_no_more_than_the_throttle_allows_and_one_in_sync_is_never_held_back(tmp_path):
    partition = leading(tmp_path)
    partition.throttle([ADDED], ReplicationThrottle(), SLOW_RATE_BYTES_PER_S)
    try:
        first = sent_bytes(partition, ADDED, now_ms=0)
        assert 0 < first < partition.log.size_bytes  # a second's worth: the first batch (or more), not all
        assert sent_bytes(partition, ADDED, now_ms=0) == 0 and partition.throttles(ADDED, now_ms=0)
        assert sent_bytes(partition, IN_SYNC, now_ms=0) == partition.log.size_bytes
        assert not partition.throttles(IN_SYNC, now_ms=0)
        partition.update_isr((LEADER, IN_SYNC, ADDED))  # caught up and in sync: no longer throttled
        assert sent_bytes(partition, ADDED, now_ms=0) == partition.log.size_bytes
    finally:
        partition.close()


def test_without_a_rate_nothing_is_throttled(tmp_path):
    partition = leading(tmp_path)
    partition.throttle([ADDED], ReplicationThrottle(), None)
    try:
        assert sent_bytes(partition, ADDED, now_ms=0) == partition.log.size_bytes
    finally:
        partition.close()


def test_the_brokers_configured_rate_throttles_a_move_without_one_and_the_lower_rate_wins(tmp_path):
    throttle = ReplicationThrottle()
    assert throttle.rate_bytes_per_s(None) is None
    throttle.configured_rate_bytes_per_s = RATE_BYTES_PER_S
    assert (throttle.rate_bytes_per_s(None), throttle.rate_bytes_per_s(SLOW_RATE_BYTES_PER_S)) == (
        RATE_BYTES_PER_S, SLOW_RATE_BYTES_PER_S)
    partition = leading(tmp_path)
    throttle.configured_rate_bytes_per_s = SLOW_RATE_BYTES_PER_S
    partition.throttle([ADDED], throttle, None)  # the move has none: the broker's applies
    try:
        assert 0 < sent_bytes(partition, ADDED, now_ms=0) < partition.log.size_bytes
        throttle.configured_rate_bytes_per_s = None  # removed: applies at the next read
        assert sent_bytes(partition, ADDED, now_ms=0) == partition.log.size_bytes
    finally:
        partition.close()
