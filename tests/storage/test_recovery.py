"""Crash recovery: a log whose process died (not opened as closed cleanly) and whose files were then
damaged the ways a crash or a disk damages them. Each is recovered to the last valid batch."""

import logging
import os

import pytest

from replog.storage.checkpoint import OffsetCheckpoint
from replog.storage.log import Log
from tests.support.log_fixtures import background_flush, open_log, read_all
from tests.support.batches import build_batch

# Each test runs once per append-path codec (conftest.CODECS).
pytestmark = pytest.mark.usefixtures("log_codec")

CONFIG = {"segment_bytes": 1000, "index_interval_bytes": 150}
BATCH_BYTES = 200
BATCHES_PER_SEGMENT = 5


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "orders-0"


def crashed_log(log_dir, batch_count: int = 12) -> tuple[list[bytes], list[int]]:
    """Append `batch_count` 200-byte batches of 2 records, then die without closing.
    Returns each batch's bytes as stored and the segment base offsets."""
    log = open_log(log_dir, **CONFIG)
    for i in range(batch_count):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61, max_timestamp=i * 10), leader_epoch=i)
    stored = read_all(log, 0)
    bases = [s.base_offset for s in log.segments]
    log.close_handles()
    return [stored[i:i + BATCH_BYTES] for i in range(0, len(stored), BATCH_BYTES)], bases


def segment_path(log_dir, base_offset: int, suffix: str = ".log"):
    return log_dir / f"{base_offset:020d}{suffix}"


def assert_recovered_to(log: Log, batches: list[bytes], batch_count: int) -> None:
    assert log.log_end_offset == 2 * batch_count
    assert read_all(log, 0) == b"".join(batches[:batch_count])
    assert log.recovery_point == log.log_end_offset
    assert [e.start_offset for e in log.leader_epoch_cache.entries] == [2 * i for i in range(batch_count)]
    # the recovered log takes appends where the valid data ends
    assert log.append(build_batch(), leader_epoch=99) == (2 * batch_count, 2 * batch_count)


def test_crash_without_damage_loses_nothing(log_dir):
    batches, _ = crashed_log(log_dir)
    assert_recovered_to(open_log(log_dir, **CONFIG), batches, 12)


@pytest.mark.parametrize("cut_bytes", [1, 100, BATCH_BYTES - 1])
def test_file_cut_in_the_middle_of_the_last_batch(log_dir, cut_bytes, caplog):
    batches, bases = crashed_log(log_dir)
    os.truncate(segment_path(log_dir, bases[-1]), 2 * BATCH_BYTES - cut_bytes)
    with caplog.at_level(logging.WARNING):
        log = open_log(log_dir, **CONFIG)
    assert_recovered_to(log, batches, 11)
    assert f"topic=orders partition=0 segment={bases[-1]} offset=22 position=200 bytes_cut={BATCH_BYTES - cut_bytes}" in caplog.text


@pytest.mark.parametrize("position_in_batch", [0, 9, 16, 17, 25, 61, 150, BATCH_BYTES - 1])
def test_flipped_byte_inside_a_batch_cuts_it_and_everything_after(log_dir, position_in_batch, caplog):
    batches, bases = crashed_log(log_dir)
    # third batch of the second segment; the third segment goes too
    with open(segment_path(log_dir, bases[1]), "r+b") as f:
        f.seek(2 * BATCH_BYTES + position_in_batch)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x10]))
    with caplog.at_level(logging.WARNING):
        log = open_log(log_dir, **CONFIG)
    assert_recovered_to(log, batches, BATCHES_PER_SEGMENT + 2)
    assert not segment_path(log_dir, bases[2]).exists()
    assert f"deleted segment after invalid batch topic=orders partition=0 segment={bases[2]}" in caplog.text


@pytest.mark.parametrize("tail_bytes", [1, 11, 61, 4096])
def test_zero_filled_tail_is_cut(log_dir, tail_bytes):
    batches, bases = crashed_log(log_dir)
    with open(segment_path(log_dir, bases[-1]), "ab") as f:
        f.write(bytes(tail_bytes))
    log = open_log(log_dir, **CONFIG)
    assert os.path.getsize(segment_path(log_dir, bases[-1])) == 2 * BATCH_BYTES
    assert_recovered_to(log, batches, 12)


def test_zero_filled_segment_tail_mid_log_keeps_the_data_before_it(log_dir):
    batches, bases = crashed_log(log_dir)
    with open(segment_path(log_dir, bases[0]), "r+b") as f:
        f.seek(3 * BATCH_BYTES)
        f.write(bytes(2 * BATCH_BYTES))
    assert_recovered_to(open_log(log_dir, **CONFIG), batches, 3)


def closed_log_index_entries(log_dir) -> list[tuple[list[int], list[int], list[int]]]:
    log = open_log(log_dir, **CONFIG)
    for i in range(12):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61, max_timestamp=i * 10), leader_epoch=0)
    entries = [(s.offset_index.keys[:], s.offset_index.values[:], s.time_index.keys[:]) for s in log.segments]
    log.close()
    return entries


def reopened_index_entries(log_dir) -> list[tuple[list[int], list[int], list[int]]]:
    log = open_log(log_dir, **CONFIG)
    assert log.log_end_offset == 24
    return [(s.offset_index.keys, s.offset_index.values, s.time_index.keys) for s in log.segments]


@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_deleted_index_is_rebuilt_after_clean_shutdown(log_dir, suffix):
    expected = closed_log_index_entries(log_dir)
    segment_path(log_dir, 0, suffix).unlink()
    assert reopened_index_entries(log_dir) == expected


@pytest.mark.parametrize("keep_bytes", [0, 5, 8, 13])
def test_truncated_index_is_rebuilt(log_dir, keep_bytes):
    expected = closed_log_index_entries(log_dir)
    os.truncate(segment_path(log_dir, 0, ".index"), keep_bytes)
    os.truncate(segment_path(log_dir, 10, ".timeindex"), keep_bytes)
    assert reopened_index_entries(log_dir) == expected


def test_index_pointing_at_wrong_positions_is_rebuilt(log_dir):
    expected = closed_log_index_entries(log_dir)
    path = segment_path(log_dir, 0, ".index")
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0x08  # last entry's position no longer a batch start
    path.write_bytes(raw)
    assert reopened_index_entries(log_dir) == expected


def test_index_of_a_crashed_log_is_rebuilt_from_the_log(log_dir):
    batches, bases = crashed_log(log_dir)
    segment_path(log_dir, bases[0], ".index").write_bytes(os.urandom(64))
    log = open_log(log_dir, **CONFIG)
    assert_recovered_to(log, batches, 12)
    assert log.segments[0].offset_index.values == [200, 400, 600, 800]


def test_flushed_segments_are_not_rescanned_after_a_crash(log_dir):
    log = open_log(log_dir, **CONFIG)
    for _ in range(12):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61), leader_epoch=0)
    log.flush(10)  # the first segment is durable
    log.checkpoint_recovery_point()
    log.close_handles()
    # damage the flushed segment where only a full rescan would look
    with open(segment_path(log_dir, 0), "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    # ...and tear the unflushed one
    os.truncate(segment_path(log_dir, 20), BATCH_BYTES + 7)
    log = open_log(log_dir, **CONFIG)
    assert log.log_end_offset == 22


def test_orphan_index_files_and_checkpoint_temp_files_are_removed(log_dir):
    crashed_log(log_dir)
    segment_path(log_dir, 77, ".index").write_bytes(b"x" * 8)
    (log_dir / "leader-epoch-checkpoint.tmp").write_text("garbage")
    # A segment's own indexes stay: the same files, not deleted and made again.
    kept = {path.name: path.stat().st_ino for path in log_dir.iterdir()
            if path.suffix in (".index", ".timeindex") and "77" not in path.name}
    open_log(log_dir, **CONFIG)
    assert not segment_path(log_dir, 77, ".index").exists()
    assert not (log_dir / "leader-epoch-checkpoint.tmp").exists()
    assert kept and {name: (log_dir / name).stat().st_ino for name in kept} == kept


def test_after_a_background_flush_a_crash_rescans_only_from_the_last_index_entry_below_it(log_dir, caplog):
    config = {"segment_bytes": 1 << 20, "index_interval_bytes": 150}
    log = open_log(log_dir, **config)
    for _ in range(10):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61), leader_epoch=0)
    assert background_flush(log)
    assert log.recovery_point == 20
    for _ in range(3):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61), leader_epoch=0)
    log.close_handles()
    # one active segment: index entries at 200, 400, ... 1800 were flushed with the data
    with open(segment_path(log_dir, 0), "r+b") as f:
        f.seek(BATCH_BYTES + 100)  # below the entry at 1800: trusted, not checked again
        f.write(b"\xff")
    os.truncate(segment_path(log_dir, 0), 12 * BATCH_BYTES + 7)  # the last batch, after the flush, is torn
    with caplog.at_level(logging.WARNING):
        log = open_log(log_dir, **config)
    assert log.log_end_offset == 24
    assert f"offset=24 position={12 * BATCH_BYTES} bytes_cut=7" in caplog.text


def test_a_background_flush_that_a_truncation_overtook_does_not_move_the_recovery_point(log_dir):
    log = open_log(log_dir, **CONFIG)
    for _ in range(4):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61), leader_epoch=0)
    job = log.begin_flush()
    log.truncate_to(2)  # a follower truncating while the fsyncs run
    log.append(build_batch(record_count=6, payload_bytes=BATCH_BYTES - 61), leader_epoch=1)
    job.run()
    assert not log.complete_flush(job)
    assert log.recovery_point == 0  # the flushed bytes past offset 2 are no longer the log's
    assert background_flush(log)
    assert log.recovery_point == 8


def test_with_flush_on_every_append_the_background_flush_still_saves_indexes_and_recovery_point(log_dir, caplog):
    config = {"segment_bytes": 1 << 20, "index_interval_bytes": 150, "flush_messages": 1}
    log = open_log(log_dir, **config)
    for _ in range(10):
        log.append(build_batch(record_count=2, payload_bytes=BATCH_BYTES - 61), leader_epoch=0)
    assert log.recovery_point == 20  # the append path flushed every batch
    assert background_flush(log)
    log.close_handles()
    assert OffsetCheckpoint(log_dir / "recovery-point-offset-checkpoint").read() == {("orders", 0): 20}
    with open(segment_path(log_dir, 0), "r+b") as f:
        f.seek(BATCH_BYTES + 100)  # below the last index entry: trusted, not checked again
        f.write(b"\xff")
    assert open_log(log_dir, **config).log_end_offset == 20
