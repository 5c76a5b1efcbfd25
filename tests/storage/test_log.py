import dataclasses
import os

import pytest

from replog.storage.errors import (InvalidRecordError, KafkaStorageError, OffsetOutOfRangeError, RecordListTooLargeError,
                                   RecordTooLargeError)
from replog.storage.log import LogConfig
from replog.storage.records import validate_batches
from tests.support.log_fixtures import ManualClock, open_log, read_all
from tests.support.batches import build_batch

# Each test runs once per append-path codec (conftest.CODECS).
pytestmark = pytest.mark.usefixtures("log_codec")


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "orders-3"


def offsets_in(data: bytes) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h in validate_batches(data, 1 << 30)]


def test_append_assigns_consecutive_offsets_and_returns_range(log_dir):
    log = open_log(log_dir)
    assert log.append(build_batch(record_count=3), leader_epoch=0) == (0, 2)
    assert log.append(build_batch(record_count=2), leader_epoch=0) == (3, 4)
    assert (log.log_start_offset, log.log_end_offset) == (0, 5)
    assert offsets_in(read_all(log, 0)) == [(0, 2), (3, 4)]


def test_a_leader_append_takes_one_batch_only_and_writes_nothing_of_more(log_dir):
    log = open_log(log_dir)
    with pytest.raises(InvalidRecordError, match="only one record batch per partition is accepted: 77 bytes follow"):
        log.append(build_batch(record_count=2) + build_batch(record_count=1), leader_epoch=0)
    assert log.log_end_offset == 0 and read_all(log, 0) == b""


def test_one_append_is_one_write_of_the_callers_bytes(log_dir, monkeypatch):
    log = open_log(log_dir)
    calls = []
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, pos: calls.append(len(data)) or real_pwrite(fd, data, pos))
    log.append(build_batch(payload_bytes=100), leader_epoch=0)
    assert calls == [161]


def test_read_returns_the_batch_containing_the_offset(log_dir):
    log = open_log(log_dir)
    log.append(build_batch(record_count=5), leader_epoch=0)
    log.append(build_batch(record_count=5), leader_epoch=0)
    assert offsets_in(read_all(log, 7)) == [(5, 9)]
    assert offsets_in(read_all(log, 4)) == [(0, 4), (5, 9)]


def test_read_returns_whole_first_batch_beyond_max_bytes_and_may_cut_the_last(log_dir):
    log = open_log(log_dir)
    for _ in range(3):
        log.append(build_batch(payload_bytes=139), leader_epoch=0)  # 200 bytes each
    assert len(read_all(log, 0, max_bytes=10)) == 200
    assert len(read_all(log, 0, max_bytes=450)) == 450
    assert len(read_all(log, 1, max_bytes=1000)) == 400


def test_read_without_min_one_message_returns_nothing_of_a_first_batch_beyond_max_bytes(log_dir):
    """A fetch answer's later partitions (KIP-74): no first batch beyond their share, nor a cut one."""
    log = open_log(log_dir)
    for _ in range(3):
        log.append(build_batch(payload_bytes=139), leader_epoch=0)  # 200 bytes each
    assert log.read(0, 199, min_one_message=False) == []
    assert log.read(0, 0, min_one_message=False) == []
    assert sum(piece.size_bytes for piece in log.read(0, 450, min_one_message=False)) == 450


def test_read_stops_before_max_offset(log_dir):
    log = open_log(log_dir, segment_bytes=500)
    for _ in range(6):
        log.append(build_batch(record_count=2, payload_bytes=139), leader_epoch=0)
    assert offsets_in(read_all(log, 0, max_offset=6)) == [(0, 1), (2, 3), (4, 5)]
    assert read_all(log, 6, max_offset=6) == b""
    assert len(log.read(0, 1 << 20)) == len(log.segments)


def test_read_outside_the_log_is_out_of_range(log_dir):
    log = open_log(log_dir)
    log.append(build_batch(), leader_epoch=0)
    assert log.read(1, 100) == []
    with pytest.raises(OffsetOutOfRangeError) as error:
        log.read(2, 100)
    assert error.value.error_code == 1


def test_segments_roll_on_size_and_are_named_by_base_offset(log_dir):
    log = open_log(log_dir, segment_bytes=450)
    for _ in range(5):
        log.append(build_batch(record_count=2, payload_bytes=139), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 4, 8]
    assert sorted(p.name for p in log_dir.glob("*.log")) == [
        "00000000000000000000.log", "00000000000000000004.log", "00000000000000000008.log"]


def test_segments_roll_when_batch_timestamps_span_segment_ms(log_dir):
    log = open_log(log_dir, segment_ms=1000)
    log.append(build_batch(max_timestamp=5000), leader_epoch=0)
    log.append(build_batch(max_timestamp=6000), leader_epoch=0)
    log.append(build_batch(max_timestamp=6001), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_segments_roll_by_the_clock_when_the_first_batch_has_no_timestamp(log_dir):
    clock = ManualClock()
    log = open_log(log_dir, clock, segment_ms=1000, message_timestamp_after_max_ms=10**9)
    log.append(build_batch(max_timestamp=-1), leader_epoch=0)
    clock.advance(1000)
    log.append(build_batch(max_timestamp=-1), leader_epoch=0)
    # a later batch's own timestamp does not replace the clock for this segment
    log.append(build_batch(max_timestamp=10**9), leader_epoch=0)
    clock.advance(1)
    log.append(build_batch(max_timestamp=-1), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 3]


def test_segments_roll_before_an_offset_would_not_fit_the_index(log_dir):
    log = open_log(log_dir)
    log.append_as_follower(build_batch(base_offset=0))
    log.append_as_follower(build_batch(base_offset=2**31 - 1))
    log.append_as_follower(build_batch(base_offset=2**31))
    assert [s.base_offset for s in log.segments] == [0, 2**31]


def test_explicit_roll_skips_an_empty_active_segment(log_dir):
    log = open_log(log_dir)
    log.roll()
    log.append(build_batch(), leader_epoch=0)
    log.roll()
    log.roll()
    assert [s.base_offset for s in log.segments] == [0, 1]


def test_oversized_batches_and_appends_are_rejected(log_dir):
    log = open_log(log_dir, max_message_bytes=100, segment_bytes=150)
    with pytest.raises(RecordTooLargeError):
        log.append(build_batch(payload_bytes=50), leader_epoch=0)
    assert log.log_end_offset == 0
    log = open_log(log_dir, max_message_bytes=200, segment_bytes=150)
    with pytest.raises(RecordListTooLargeError):
        log.append(build_batch(payload_bytes=100), leader_epoch=0)
    assert log.log_end_offset == 0


def test_index_entries_every_interval_bytes(log_dir):
    log = open_log(log_dir, index_interval_bytes=300)
    for _ in range(10):
        log.append(build_batch(payload_bytes=139, max_timestamp=10), leader_epoch=0)
    segment = log.segments[0]
    # an entry once more than 300 bytes passed since the last: every second 200-byte batch
    assert segment.offset_index.keys == [2, 4, 6, 8]
    assert segment.offset_index.values == [400, 800, 1200, 1600]
    log.close()
    assert (log_dir / "00000000000000000000.index").stat().st_size == 4 * 8
    assert (log_dir / "00000000000000000000.timeindex").stat().st_size == 4 * 12


def test_an_append_of_several_batches_indexes_them_as_one_by_one_appends_do(tmp_path):
    together = open_log(tmp_path / "together-0", index_interval_bytes=300)
    one_by_one = open_log(tmp_path / "one_by_one-0", index_interval_bytes=300)
    batches = [build_batch(payload_bytes=139, max_timestamp=ts, base_offset=offset)
               for offset, ts in enumerate((10, 30, 20, 50, 40))]
    together.append_as_follower(batches[0])
    together.append_as_follower(bytearray(b"".join(batches[1:])))
    for batch in batches:
        one_by_one.append_as_follower(batch)
    for log in (together, one_by_one):
        segment = log.segments[0]
        assert (segment.offset_index.keys, segment.offset_index.values) == ([2, 4], [400, 800])
        assert segment.time_index.keys == [30, 50]
        assert (segment.next_offset, segment.max_timestamp, segment.first_batch_timestamp) == (5, 50, 10)


def test_a_flush_fsyncs_the_active_segment_but_writes_its_indexes_only_at_roll(log_dir):
    log = open_log(log_dir, index_interval_bytes=0, flush_messages=1)
    for _ in range(3):
        log.append(build_batch(payload_bytes=139), leader_epoch=0)
    assert log.recovery_point == 3
    index_path = log_dir / "00000000000000000000.index"
    # recovery rebuilds an active segment's indexes after any crash, so a flush leaves them be
    assert not index_path.exists() or index_path.stat().st_size == 0
    log.roll()
    assert index_path.stat().st_size == 2 * 8


def test_offset_for_timestamp_finds_first_batch_not_older(log_dir):
    log = open_log(log_dir, segment_bytes=700, index_interval_bytes=150)
    timestamps = [100, 300, 200, 400, 400, 500, 50, 600]
    for ts in timestamps:
        log.append(build_batch(max_timestamp=ts, payload_bytes=139), leader_epoch=0)
    assert log.offset_for_timestamp(0) == (0, 100)
    assert log.offset_for_timestamp(250) == (1, 300)
    assert log.offset_for_timestamp(301) == (3, 400)
    assert log.offset_for_timestamp(550) == (7, 600)
    assert log.offset_for_timestamp(601) is None


def test_a_log_append_time_log_stamps_and_indexes_batches_with_its_clock(log_dir):
    clock = ManualClock(5_000)
    log = open_log(log_dir, clock, message_timestamp_type="LogAppendTime", index_interval_bytes=0)
    for created in (9_000, 100, 7_000):  # CreateTimes a CreateTime log would index instead
        log.append(build_batch(max_timestamp=created, payload_bytes=139), leader_epoch=0)
        clock.advance(1_000)
    headers = validate_batches(read_all(log, 0), 1 << 30)
    assert [(h.attributes, h.max_timestamp) for h in headers] == [(0x08, 5_000), (0x08, 6_000), (0x08, 7_000)]
    assert log.offset_for_timestamp(5_500) == (1, 6_000)
    assert log.offset_for_timestamp(7_001) is None


def test_message_timestamp_type_changes_on_an_open_log_from_the_next_append(log_dir):
    log = open_log(log_dir, ManualClock(5_000))
    log.append(build_batch(max_timestamp=100), leader_epoch=0)
    log.update_config(LogConfig(message_timestamp_type="LogAppendTime"))
    log.append(build_batch(max_timestamp=100), leader_epoch=0)
    headers = validate_batches(read_all(log, 0), 1 << 30)
    assert [(h.attributes, h.max_timestamp) for h in headers] == [(0, 100), (0x08, 5_000)]


def test_follower_append_keeps_offsets_and_epochs_and_allows_gaps(log_dir):
    log = open_log(log_dir)
    log.append_as_follower(build_batch(record_count=2, base_offset=0, leader_epoch=1)
                           + build_batch(record_count=1, base_offset=5, leader_epoch=3))
    assert log.log_end_offset == 6
    assert offsets_in(read_all(log, 3)) == [(5, 5)]
    assert log.leader_epoch_cache.entries == [(1, 0), (3, 5)]
    with pytest.raises(InvalidRecordError):
        log.append_as_follower(build_batch(base_offset=5))
    assert log.log_end_offset == 6


def test_a_follower_fetch_larger_than_a_segment_is_appended_across_segments(log_dir):
    """segment.bytes lowered below the follower's fetch size: the follower keeps replicating
    (found by the simulator, seed 22 before the fix: RecordListTooLargeError on every fetch)."""
    log = open_log(log_dir, segment_bytes=450)
    fetched = b"".join(build_batch(record_count=2, payload_bytes=139, base_offset=2 * index, leader_epoch=1)
                       for index in range(5))  # 200 bytes each: 1000 bytes, two batches per segment
    assert log.append_as_follower(fetched) == (0, 9)
    assert [segment.base_offset for segment in log.segments] == [0, 4, 8]
    assert read_all(log, 0) == fetched
    with pytest.raises(RecordListTooLargeError):
        log.append_as_follower(build_batch(payload_bytes=500, base_offset=10))
    assert log.log_end_offset == 10


def test_a_follower_fetch_of_megabyte_batches_larger_than_a_segment(log_dir):
    """At librdkafka's batch size: four 1 MiB batches into 2.5 MiB segments go in two runs."""
    log = open_log(log_dir, segment_bytes=5 << 19)
    fetched = b"".join(build_batch(payload_bytes=1 << 20, base_offset=offset, leader_epoch=3) for offset in range(4))
    assert log.append_as_follower(fetched) == (0, 3)
    assert [segment.base_offset for segment in log.segments] == [0, 2]
    assert read_all(log, 0) == fetched


def test_a_follower_fetch_that_fails_part_way_keeps_the_epochs_of_what_it_wrote(log_dir, monkeypatch):
    log = open_log(log_dir, segment_bytes=450)
    fetched = b"".join(build_batch(payload_bytes=139, base_offset=offset, leader_epoch=1 + offset // 2) for offset in range(4))
    monkeypatch.setattr(log, "_roll_and_append", lambda *args: (_ for _ in ()).throw(OSError("injected: disk full")))
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(fetched)
    assert log.log_end_offset == 2  # the first run, two batches of epoch 1
    assert log.leader_epoch_cache.entries == [(1, 0)]


def test_a_segment_active_again_after_truncation_rolls_by_the_current_settings(log_dir):
    """segment.bytes raised while a later segment was active, then a truncation back into the
    earlier one: it takes appends up to the new size (found by the simulator, seed 2560 before
    the fix: every follower fetch failed on the old 450 bytes)."""
    log = open_log(log_dir, segment_bytes=450)
    for _ in range(3):
        log.append(build_batch(payload_bytes=139), leader_epoch=0)  # 200 bytes each: segments at 0 and 2
    assert [segment.base_offset for segment in log.segments] == [0, 2]
    log.update_config(dataclasses.replace(log.config, segment_bytes=2000))
    log.truncate_to(1)
    assert log.append_as_follower(b"".join(build_batch(payload_bytes=139, base_offset=offset) for offset in range(1, 6))) == (1, 5)
    assert [segment.base_offset for segment in log.segments] == [0]


def test_leader_append_records_epoch_starts(log_dir):
    log = open_log(log_dir)
    log.append(build_batch(record_count=2), leader_epoch=0)
    log.append(build_batch(), leader_epoch=0)
    log.append(build_batch(), leader_epoch=4)
    assert log.leader_epoch_cache.entries == [(0, 0), (4, 3)]
    assert log.leader_epoch_cache.end_offset_for(0, log.log_end_offset) == (0, 3)
    assert log.leader_epoch_cache.end_offset_for(4, log.log_end_offset) == (4, 4)


def test_truncate_to_removes_the_batch_containing_the_offset_and_all_after(log_dir):
    log = open_log(log_dir, segment_bytes=450, index_interval_bytes=0)
    for epoch in range(6):
        log.append(build_batch(record_count=2, payload_bytes=139), leader_epoch=epoch)
    log.truncate_to(5)
    assert log.log_end_offset == 4
    assert [s.base_offset for s in log.segments] == [0, 4] or [s.base_offset for s in log.segments] == [0]
    assert offsets_in(read_all(log, 0)) == [(0, 1), (2, 3)]
    assert [e.epoch for e in log.leader_epoch_cache.entries] == [0, 1]
    assert log.append(build_batch(), leader_epoch=9) == (4, 4)
    assert offsets_in(read_all(log, 0)) == [(0, 1), (2, 3), (4, 4)]


def test_truncate_fully_and_start_at_empties_the_log(log_dir):
    log = open_log(log_dir)
    log.append(build_batch(record_count=3), leader_epoch=2)
    log.truncate_fully_and_start_at(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert log.leader_epoch_cache.entries == []
    assert log.append(build_batch(), leader_epoch=3) == (50, 50)
    log.close()
    reopened = open_log(log_dir)
    assert (reopened.log_start_offset, reopened.log_end_offset) == (50, 51)


def test_retention_by_bytes_deletes_oldest_segments_but_never_the_active_one(log_dir):
    log = open_log(log_dir, segment_bytes=450, retention_bytes=500)
    for _ in range(7):
        log.append(build_batch(record_count=2, payload_bytes=139), leader_epoch=0)
    assert [s.base_offset for s in log.segments] == [0, 4, 8, 12]
    assert log.delete_retained_segments() == 2
    assert (log.log_start_offset, log.log_end_offset) == (8, 14)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(7, 100)
    assert not (log_dir / "00000000000000000000.log").exists()


def test_retention_by_time_uses_segment_max_timestamp_and_the_high_watermark(log_dir):
    clock = ManualClock(now_ms=10_000)
    log = open_log(log_dir, clock, segment_bytes=250, retention_ms=1000)
    for ts in [1000, 2000, 9500, 9600]:
        log.append(build_batch(max_timestamp=ts, payload_bytes=139), leader_epoch=0)
    assert log.delete_retained_segments(high_watermark=0) == 0
    assert log.delete_retained_segments() == 2
    assert log.log_start_offset == 2
    clock.advance(100_000)
    assert log.delete_retained_segments() == 1
    assert [s.base_offset for s in log.segments] == [3]


def test_flush_messages_forces_fsync_and_advances_recovery_point(log_dir, monkeypatch):
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: fsyncs.append(fd) or real_fsync(fd))
    log = open_log(log_dir, flush_messages=3)
    log.append(build_batch(record_count=2), leader_epoch=0)
    fsyncs.clear()
    assert log.recovery_point == 0
    log.append(build_batch(record_count=1), leader_epoch=0)
    assert log.recovery_point == 3
    assert log.segments[0].fd in fsyncs


def test_flush_ms_flushes_when_due(log_dir):
    clock = ManualClock()
    log = open_log(log_dir, clock, flush_ms=500)
    log.append(build_batch(), leader_epoch=0)
    assert log.recovery_point == 0
    clock.advance(500)
    log.flush_if_due()
    assert log.recovery_point == 1


def test_flush_ms_flushes_on_the_append_that_finds_it_due(log_dir):
    clock = ManualClock()
    log = open_log(log_dir, clock, flush_ms=500)
    log.append(build_batch(), leader_epoch=0)
    clock.advance(499)
    log.append(build_batch(), leader_epoch=0)
    assert log.recovery_point == 0
    clock.advance(1)
    log.append(build_batch(), leader_epoch=0)
    assert log.recovery_point == 3
    # the interval counts from that flush
    clock.advance(499)
    log.append_as_follower(build_batch(base_offset=3))
    assert log.recovery_point == 3
    clock.advance(1)
    log.append_as_follower(build_batch(base_offset=4))
    assert log.recovery_point == 5


def test_default_policy_leaves_flushing_to_the_os(log_dir, monkeypatch):
    log = open_log(log_dir)
    log.append(build_batch(), leader_epoch=0)  # a new epoch is checkpointed: once per epoch
    monkeypatch.setattr(os, "fsync", lambda fd: pytest.fail("fsync on the append path"))
    for _ in range(100):
        log.append(build_batch(), leader_epoch=0)
    assert log.recovery_point == 0


def test_explicit_flush_up_to_an_offset_is_checkpointed(log_dir):
    log = open_log(log_dir, segment_bytes=200)
    for _ in range(4):
        log.append(build_batch(payload_bytes=100), leader_epoch=0)
    log.flush(2)
    assert log.recovery_point == 2
    log.checkpoint_recovery_point()
    assert "orders 3 2" in (log_dir / "recovery-point-offset-checkpoint").read_text()


def test_clean_close_and_reopen_keeps_everything(log_dir):
    log = open_log(log_dir, segment_bytes=450, index_interval_bytes=100)
    for ts in range(7):
        log.append(build_batch(record_count=2, payload_bytes=139, max_timestamp=ts * 10), leader_epoch=1)
    before = read_all(log, 0)
    log.close()
    reopened = open_log(log_dir, segment_bytes=450, index_interval_bytes=100, closed_cleanly=True)
    assert read_all(reopened, 0) == before
    assert (reopened.log_end_offset, reopened.recovery_point) == (14, 14)
    assert reopened.offset_for_timestamp(35) == (8, 40)
    assert reopened.append(build_batch(), leader_epoch=1) == (14, 14)


def test_an_epoch_past_the_log_end_is_dropped_at_open_and_written_before_the_next_bytes(log_dir):
    """An idle partition's entry at its log end goes at each open without a checkpoint write;
    the file still holds it until the next append writes the entries first, so that records
    of the earlier epoch appended there are never taken for the dropped one's after a crash."""
    checkpoint = log_dir / "leader-epoch-checkpoint"
    log = open_log(log_dir)
    log.append_as_follower(build_batch(record_count=2, base_offset=0, leader_epoch=3))
    log.leader_epoch_cache.assign(5, 2)  # led at epoch 5, and nothing came
    log.close()
    written = checkpoint.read_text()
    reopened = open_log(log_dir)
    assert reopened.leader_epoch_cache.entries == [(3, 0)]
    assert checkpoint.read_text() == written  # no write at open
    reopened.append_as_follower(build_batch(record_count=2, base_offset=2, leader_epoch=3))
    reopened.close_handles()  # killed: no close
    after_crash = open_log(log_dir)
    assert after_crash.leader_epoch_cache.entries == [(3, 0)]
    assert after_crash.leader_epoch_cache.end_offset_for(3, after_crash.log_end_offset) == (3, 4)


def test_a_new_log_writes_no_recovery_point_until_it_has_one_to_keep(log_dir):
    """Absent, the checkpoint means offset 0, which is all a new log could say: writing it
    cost a new log most of its open (thousands open when a topic is created)."""
    checkpoint = log_dir / "recovery-point-offset-checkpoint"
    log = open_log(log_dir)
    assert not checkpoint.exists()
    log.append(build_batch(record_count=2), leader_epoch=0)
    log.flush()
    log.close_handles()  # killed: no close, and no checkpoint written since the open
    after_crash = open_log(log_dir)  # recovers from 0, finding both records
    assert after_crash.log_end_offset == 2
    assert checkpoint.exists()  # the rescan found something to keep
    after_crash.close_handles()
    assert open_log(log_dir).log_end_offset == 2


def test_clean_reopen_does_not_rescan_old_segments(log_dir):
    # A flipped byte deep inside a closed segment is only found by a full rescan: after a clean
    # shutdown it must stay unnoticed (no rescan), after a crash it is found.
    log = open_log(log_dir, segment_bytes=450, index_interval_bytes=0)
    for _ in range(4):
        log.append(build_batch(record_count=2, payload_bytes=139), leader_epoch=0)
    log.close()
    with open(log_dir / "00000000000000000000.log", "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    assert open_log(log_dir, segment_bytes=450, index_interval_bytes=0, closed_cleanly=True).log_end_offset == 8


def test_log_directory_must_be_named_topic_partition(tmp_path):
    with pytest.raises(ValueError):
        open_log(tmp_path / "no_partition")


def test_config_rejects_values_below_kafka_minimums():
    with pytest.raises(ValueError):
        LogConfig(segment_bytes=10)
    assert LogConfig().max_message_bytes == 1048588


def test_a_roll_leaves_its_directory_fsync_to_the_next_flush(tmp_path, monkeypatch):
    """A slow disk must not stall the event loop: rolling (on the append path, on the event loop)
    does not fsync the directory; the next flush does, the background one in its worker thread."""
    from replog.storage import background_io

    synced: list[object] = []
    monkeypatch.setattr(background_io, "fsync_directory", lambda directory: synced.append(directory))
    log = open_log(tmp_path / "t-0", segment_bytes=200)
    synced.clear()
    for _ in range(3):
        log.append(build_batch(payload_bytes=100), leader_epoch=0)
    assert len(log.segments) > 1 and synced == []
    job = log.begin_flush()
    job.run()
    assert synced == [log.directory] and log.complete_flush(job)
    log.flush()
    assert synced == [log.directory], "a directory already synced is not synced again"
    log.close()


def test_a_held_slice_read_in_pieces_is_its_bytes_from_where_a_send_stopped(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(3):
        log.append(build_batch(payload_bytes=1000), leader_epoch=0)
    [held] = log.hold(log.read(0, 1 << 20))
    whole = held.read_from(0)
    pieces = list(held.pieces_from(700, 512))
    assert b"".join(pieces) == whole[700:]
    assert all(len(piece) == 512 for piece in pieces[:-1]) and 0 < len(pieces[-1]) <= 512
    held.close()


def test_held_slices_outlive_their_segments_deletion_and_know_when_a_truncation_rewrote_them(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=200, retention_ms=1)
    log.append(build_batch(payload_bytes=100, max_timestamp=1), leader_epoch=0)
    log.append(build_batch(payload_bytes=100, max_timestamp=1), leader_epoch=0)  # rolls: the first segment is closed
    first = log.hold(log.read(0, 1, max_offset=1))
    expected = b"".join(piece.read() for piece in log.read(0, 1, max_offset=1))
    tail = log.hold(log.read(1, 1 << 20))
    log._clock.advance(10)
    assert log.delete_retained_segments() == 1
    assert first[0].current() and first[0].read_from(0) == expected, "a deleted segment's bytes stay readable"
    log.truncate_to(1)
    assert not tail[0].current(), "the truncated range holds other bytes from now on"
    for held in first + tail:
        held.close()


def test_the_page_cache_behind_the_tail_is_dropped_in_steps_and_the_bytes_stay(log_dir, monkeypatch):
    from replog.storage import segment
    monkeypatch.setattr(segment, "PAGE_CACHE_TAIL_BYTES", 1000)
    monkeypatch.setattr(segment, "PAGE_CACHE_EVICTION_STEP_BYTES", 500)
    advised = []
    real_fadvise = os.posix_fadvise
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, offset, length, advice: advised.append((offset, length, advice))
                        or real_fadvise(fd, offset, length, advice))
    log = open_log(log_dir)
    log.append(build_batch(payload_bytes=1339), leader_epoch=0)  # 1400 bytes: 400 behind the tail
    assert log.take_page_cache_eviction() is None
    log.append(build_batch(payload_bytes=39), leader_epoch=0)  # 1500: 500 behind, one step
    eviction = log.take_page_cache_eviction()
    assert log.take_page_cache_eviction() is None  # taken: due again a step later
    descriptors = len(os.listdir("/proc/self/fd"))
    eviction.run()
    assert advised == [(0, 500, os.POSIX_FADV_DONTNEED)]
    assert len(os.listdir("/proc/self/fd")) == descriptors - 1  # its own descriptor, closed
    log.append(build_batch(payload_bytes=439), leader_epoch=0)  # 2000: a step past the last one
    log.take_page_cache_eviction().run()
    assert advised[-1] == (0, 1000, os.POSIX_FADV_DONTNEED)
    assert offsets_in(read_all(log, 0)) == [(0, 0), (1, 1), (2, 2)]
