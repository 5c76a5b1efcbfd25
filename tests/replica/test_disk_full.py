"""A partition on a data directory that runs out of space: produce refused below
log.dir.min.free.bytes and follower and group coordinator appends below half of it, with
KAFKA_STORAGE_ERROR and nothing appended; a write that fails anyway answered the same, in one
line, the partition usable once the disk takes writes again; and nothing acknowledged lost."""

import errno
import logging
import os

import pytest

from kio.schema.errors import ErrorCode

from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replica.partition import Partition, PartitionConfig
from replog.storage import disk_space as disk_space_module
from replog.storage.disk_space import DiskSpace
from replog.storage.errors import KafkaStorageError
from replog.storage.log import Log, LogConfig
from tests.support.polling import eventually
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock
from tests.support.batches import build_batch

LEADER, LEADER_ELSEWHERE = 1, 2
MIN_FREE_BYTES = 1000
ENOUGH, LOW, VERY_LOW = 5000, 800, 100  # free bytes: OK, PRODUCE_REFUSED, APPENDS_REFUSED
WAIT_S = 5


@pytest.fixture
def space(tmp_path):
    watched = DiskSpace(tmp_path, MIN_FREE_BYTES)
    watched.update(ENOUGH)
    return watched


def open_partition(directory, space: DiskSpace, leader_id: int = LEADER, **log_settings) -> Partition:
    log = Log(directory / "orders-0", LogConfig(**log_settings), ManualClock())
    assigned = (LEADER,) if leader_id == LEADER else (LEADER, leader_id)
    return Partition(log, LEADER, 0, assigned, assigned, 0, PartitionConfig(), now_ms=0, leader_id=leader_id,
                     disk_space=space)


def failed_write_lines(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.levelno >= logging.WARNING
            and record.getMessage().startswith("log directory write failed")]


def full_disk(monkeypatch) -> None:
    def pwrite(fd, data, position):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", pwrite)


async def test_below_the_threshold_produce_is_refused_and_the_broker_s_own_appends_are_not(tmp_path, space):
    partition = open_partition(tmp_path, space)
    try:
        space.update(LOW)
        refused = await partition.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
        assert refused.error_code == ErrorCode.kafka_storage_error and partition.log_end_offset == 0
        internal = await partition.append_as_leader(producer_batch(2), acks=1, timeout_ms=1000, internal=True)
        assert (internal.error_code, internal.base_offset) == (ErrorCode.none, 0)

        space.update(VERY_LOW)
        internal = await partition.append_as_leader(producer_batch(2), acks=1, timeout_ms=1000, internal=True)
        assert internal.error_code == ErrorCode.kafka_storage_error and partition.log_end_offset == 2

        space.update(ENOUGH)
        resumed = await partition.append_as_leader(producer_batch(1), acks=-1, timeout_ms=1000)
        assert (resumed.error_code, resumed.base_offset) == (ErrorCode.none, 2)
    finally:
        partition.close()


async def test_appends_count_their_bytes_so_the_refusal_starts_at_the_threshold(tmp_path, space):
    partition = open_partition(tmp_path, space)
    try:
        batch = producer_batch(1, payload_bytes=ENOUGH - MIN_FREE_BYTES)
        assert (await partition.append_as_leader(batch, acks=1, timeout_ms=1000)).error_code == ErrorCode.none
        assert space.refuses_produce, "no reading since: the append's own bytes took free space below the threshold"
        refused = await partition.append_as_leader(producer_batch(1), acks=1, timeout_ms=1000)
        assert refused.error_code == ErrorCode.kafka_storage_error
    finally:
        partition.close()


async def test_a_failed_write_is_answered_kafka_storage_error_in_one_line_and_the_partition_goes_on(
        tmp_path, space, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG, logger=disk_space_module.logger.name)
    partition = open_partition(tmp_path, space)
    try:
        first = await partition.append_as_leader(producer_batch(2), acks=-1, timeout_ms=1000)
        full_disk(monkeypatch)
        answers = [await partition.append_as_leader(producer_batch(1), acks=-1, timeout_ms=1000) for _ in range(3)]
        assert {answer.error_code for answer in answers} == {ErrorCode.kafka_storage_error}
        assert partition.log_end_offset == partition.high_watermark == 2
        warnings = failed_write_lines(caplog)
        assert len({record.getMessage() for record in warnings}) == 1, "identical lines: the repeat filter keeps one"
        assert warnings[0].getMessage().endswith(f"dir={tmp_path} writing=produce error=ENOSPC")
        assert not any(record.exc_info for record in warnings), "no traceback at WARNING"

        monkeypatch.undo()
        later = await partition.append_as_leader(producer_batch(1), acks=-1, timeout_ms=1000)
        assert (first.base_offset, later.error_code, later.base_offset) == (0, ErrorCode.none, 2)
    finally:
        partition.close()


async def test_records_written_before_a_failed_flush_are_the_duplicate_of_an_idempotent_retry(
        tmp_path, space, monkeypatch):
    """flush.messages=1 and the fsync fails: the producer is refused, but its records are in
    the log; its retry (same producer id, epoch and sequence) is answered with their offsets,
    not appended a second time."""
    partition = open_partition(tmp_path, space, flush_messages=1)
    try:
        await partition.append_as_leader(producer_batch(1), acks=1, timeout_ms=1000)  # the epoch's entry written
        monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EIO, "Input/output error")))
        batch = producer_batch(3, producer_id=7, producer_epoch=0, base_sequence=0)
        refused = await partition.append_as_leader(bytearray(batch), acks=1, timeout_ms=1000)
        refused_again = await partition.append_as_leader(bytearray(batch), acks=1, timeout_ms=1000)
        monkeypatch.undo()
        assert refused.error_code == ErrorCode.kafka_storage_error and partition.log_end_offset == 4
        assert refused_again.error_code == ErrorCode.kafka_storage_error, "not acknowledged while still unflushed"
        retried = await partition.append_as_leader(bytearray(batch), acks=-1, timeout_ms=1000)
        assert (retried.error_code, retried.base_offset) == (ErrorCode.none, 1)
        assert partition.log_end_offset == 4 and partition.log.recovery_point == 4
    finally:
        partition.close()


def test_a_follower_refuses_appends_only_below_half_the_threshold(tmp_path, space):
    follower = open_partition(tmp_path, space, leader_id=LEADER_ELSEWHERE)
    try:
        space.update(LOW)
        follower.append_as_follower(build_batch(record_count=2, leader_epoch=0), 2, 0)
        space.update(VERY_LOW)
        with pytest.raises(KafkaStorageError):
            follower.append_as_follower(build_batch(base_offset=2, leader_epoch=0), 3, 0)
        assert follower.log_end_offset == 2
    finally:
        follower.close()


def test_a_follower_fetch_written_part_way_leaves_the_producer_state_of_what_was_written(tmp_path, space, monkeypatch):
    """A fetch larger than a segment goes in as runs; the disk fills after the first run."""
    follower = open_partition(tmp_path, space, leader_id=LEADER_ELSEWHERE, segment_bytes=450)
    try:
        fetched = b"".join(build_batch(payload_bytes=139, base_offset=offset, producer_id=5 + offset, producer_epoch=0,
                                       base_sequence=0) for offset in range(4))
        monkeypatch.setattr(follower.log, "_roll_and_append",
                            lambda *args: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")))
        with pytest.raises(KafkaStorageError):
            follower.append_as_follower(fetched, 4, 0)
        assert follower.log_end_offset == 2
        assert sorted(follower.producer_state.producers) == [5, 6], "the producers of the run written, not the others"
    finally:
        monkeypatch.undo()
        follower.close()


async def test_a_chore_the_full_disk_fails_is_one_warning_line_without_a_traceback(tmp_path, monkeypatch, caplog):
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=LEADER, high_watermark_checkpoint_interval_ms=1),
                             ManualClock())
    manager.start_replica("orders", 0, LogConfig(), (LEADER,), leader_epoch=0)
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    manager.start()
    try:
        async def failed_twice() -> bool:
            return len(failed_write_lines(caplog)) >= 2

        await eventually(failed_twice, WAIT_S, "the checkpoint chore to fail twice")
    finally:
        monkeypatch.undo()
        await manager.shutdown()
    lines = failed_write_lines(caplog)
    assert lines[0].getMessage() == lines[1].getMessage() == (
        f"log directory write failed dir={tmp_path} writing=_checkpoint_high_watermarks_in_background error=ENOSPC")
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info
                and record.levelno >= logging.WARNING]
