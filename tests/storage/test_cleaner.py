"""The log cleaner (storage/cleaner.py) on real log directories: what a pass keeps, what it
removes, what it never touches, and what a crash in the middle of one leaves."""

import os
import struct

import crc32c
import pytest

from replog.spark_io.records import Columns, OutgoingRecord, decode_batches, encode_batch
from replog.storage.cleaner import CLEANED_SUFFIX, cleaned_path
from replog.storage.batch_format import CODEC_ZSTD
from replog.storage.errors import InvalidRecordError, RecordTooLargeError
from replog.storage.log import LogConfig
from replog.storage.records import batch_headers
from replog.storage.segment import LOG_SUFFIX

from tests.support.log_fixtures import ManualClock, open_log, read_all
from tests.support.batches import bomb

DAY_MS = 24 * 3600 * 1000
MAP_BYTES = 64 << 20


def batch(*records: tuple[bytes | None, bytes | None], compression: str = "none", timestamp_ms: int = 1_000_000,
          producer_id: int = -1) -> bytearray:
    encoded = bytearray(encode_batch([OutgoingRecord(key, value, None) for key, value in records], compression,
                                     timestamp_ms))
    if producer_id >= 0:
        struct.pack_into(">qhi", encoded, 43, producer_id, 0, 0)
        struct.pack_into(">I", encoded, 17, crc32c.crc32c(bytes(encoded[21:])))
    return encoded


def contents(log, start: int = 0) -> list[tuple[int, bytes | None, bytes | None]]:
    columns = Columns(with_headers=False)
    decode_batches(read_all(log, start), start, 2**62, columns)
    return list(zip(columns.offsets, columns.keys, columns.values))


def latest_per_key(records):
    latest = {}
    for offset, key, value in records:
        latest[key] = (offset, key, value)
    return sorted(latest.values())


def committed(log) -> int:
    """Flush and roll, so that everything appended so far lies in whole segments below the
    recovery point: what a cleaner may clean once the high watermark is there too."""
    log.flush()
    return log.log_end_offset


def clean(log, high_watermark: int | None = None, map_max_bytes: int = MAP_BYTES,
          first_unstable_offset: int | None = None) -> bool:
    """One pass as the partition runs it, with the job run here rather than in another thread."""
    job = log.begin_clean(log.log_end_offset if high_watermark is None else high_watermark, map_max_bytes,
                          first_unstable_offset)
    if job is None:
        return False
    return log.complete_clean(job, job.run())


@pytest.fixture
def clock():
    return ManualClock()


def round_of(keys: int, round_: int) -> bytearray:
    return batch(*[(b"k%d" % k, b"v%d-%03d" % (k, round_)) for k in range(keys)])


def overwritten_log(tmp_path, clock, keys: int = 20, rounds: int = 30, **config):
    """A compacted log whose keys were each written `rounds` times, one batch per round, in
    segments of 4 rounds each, and one more batch in its active segment."""
    log = open_log(tmp_path / "t-0", clock, compact=True, segment_bytes=4 * len(round_of(keys, 0)), **config)
    overwrite(log, keys, range(rounds))
    return log


def overwrite(log, keys: int, rounds: range) -> None:
    for round_ in rounds:
        log.append(round_of(keys, round_), leader_epoch=0)
    log.append(batch((b"active", b"x")), leader_epoch=0)


def test_a_pass_keeps_the_latest_record_of_every_key_at_its_offset_and_shrinks_the_log(tmp_path, clock):
    log = overwritten_log(tmp_path, clock)
    before = contents(log)
    size_before = log.size_bytes
    committed(log)
    assert clean(log)
    after = contents(log)
    # Everything of the active segment stays; below it, only the latest record of each key.
    active_base = log.segments[-1].base_offset
    assert after == latest_per_key([r for r in before if r[0] < active_base]) + [r for r in before if r[0] >= active_base]
    assert log.size_bytes < size_before / 4
    assert (log.log_start_offset, log.log_end_offset) == (0, before[-1][0] + 1)
    # Reads at offsets that are gone start at the next batch that is there.
    assert contents(log, 1)[0][0] > 1
    assert not clean(log), "a second pass with nothing new to clean must not run"

    # Segments are merged by their sizes before cleaning: the next pass merges what this one shrank.
    overwrite(log, 20, range(30, 60))
    committed(log)
    segments_before = len(log.segments)
    assert clean(log)
    assert len(log.segments) < segments_before - 4  # the first pass's 8 shrunk segments are now one or two
    after = contents(log)
    log.close()
    reopened = open_log(tmp_path / "t-0", clock, compact=True)
    assert contents(reopened) == after
    assert not any(path.name.endswith(CLEANED_SUFFIX) for path in (tmp_path / "t-0").iterdir())


def test_compressed_batches_are_rewritten_in_their_codec(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, compact=True, segment_bytes=400)
    log.append(batch((b"a", b"1"), (b"b", b"1"), (b"c", b"1"), compression="gzip"), leader_epoch=0)
    log.append(batch((b"a", b"2"), compression="gzip"), leader_epoch=0)
    log.append(batch((b"pad", b"x" * 300)), leader_epoch=0)  # rolls: what comes before is closed
    log.append(batch((b"tail", b"x")), leader_epoch=0)
    committed(log)
    assert clean(log)
    assert contents(log) == [(1, b"b", b"1"), (2, b"c", b"1"), (3, b"a", b"2"), (4, b"pad", b"x" * 300),
                             (5, b"tail", b"x")]
    first = batch_headers(read_all(log, 0, max_offset=3))[0]
    assert (first.base_offset, first.last_offset_delta, first.record_count, first.compression_codec) == (0, 2, 2, 1)


def test_tombstones_stay_for_delete_retention_then_go_and_keyless_records_go(tmp_path, clock):
    settings = dict(segment_bytes=300, delete_retention_ms=DAY_MS, min_cleanable_dirty_ratio=0)
    log = open_log(tmp_path / "t-0", clock, **settings)
    # Written before the topic became compact: a compacted log's leader refuses keyless records.
    log.append(batch((b"a", b"1"), (b"b", b"1"), (None, b"keyless"), timestamp_ms=clock()), leader_epoch=0)
    log.update_config(LogConfig(compact=True, **settings))
    log.append(batch((b"a", None), timestamp_ms=clock()), leader_epoch=0)
    log.append(batch((b"pad", b"x" * 200), timestamp_ms=clock()), leader_epoch=0)
    log.append(batch((b"tail", b"x"), timestamp_ms=clock()), leader_epoch=0)
    committed(log)
    assert clean(log)
    assert contents(log) == [(1, b"b", b"1"), (3, b"a", None), (4, b"pad", b"x" * 200), (5, b"tail", b"x")]
    clock.advance(DAY_MS + 1)
    log.append(batch((b"pad", b"y" * 200), timestamp_ms=clock()), leader_epoch=0)  # new dirty data, a new segment
    log.append(batch((b"tail", b"y"), timestamp_ms=clock()), leader_epoch=0)
    committed(log)
    assert clean(log)
    assert [(offset, key) for offset, key, _ in contents(log)] == [(1, b"b"), (5, b"tail"), (6, b"pad"), (7, b"tail")]


def test_nothing_at_or_above_the_high_watermark_or_recovery_point_is_cleaned(tmp_path, clock):
    log = overwritten_log(tmp_path, clock)
    before = contents(log)
    bases = [segment.base_offset for segment in log.segments]
    assert not clean(log), "nothing is flushed yet: the recovery point is 0"
    committed(log)
    high_watermark = bases[3] + 1
    assert clean(log, high_watermark)
    after = contents(log)
    assert [r for r in after if r[0] >= bases[3]] == [r for r in before if r[0] >= bases[3]]
    assert [r for r in after if r[0] < bases[3]] == latest_per_key([r for r in before if r[0] < bases[3]])


def test_the_last_batch_of_each_producer_stays_as_an_empty_batch(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, compact=True, segment_bytes=400)
    log.append(batch((b"a", b"1"), producer_id=7), leader_epoch=0)
    log.append(batch((b"a", b"2"), producer_id=7), leader_epoch=0)
    log.append(batch((b"a", b"3"), (b"pad", b"x" * 250)), leader_epoch=0)
    log.append(batch((b"tail", b"x")), leader_epoch=0)
    committed(log)
    assert clean(log)
    headers = batch_headers(read_all(log, 0))
    # Offset 0 stays too, empty: the first batch of epoch 0.
    assert [(h.base_offset, h.record_count) for h in headers] == [(0, 0), (1, 0), (2, 2), (4, 1)]
    assert contents(log) == [(2, b"a", b"3"), (3, b"pad", b"x" * 250), (4, b"tail", b"x")]


def test_a_log_truncated_or_closed_during_a_pass_refuses_its_result(tmp_path, clock):
    log = overwritten_log(tmp_path, clock)
    end = committed(log)
    job = log.begin_clean(end, MAP_BYTES, None)
    result = job.run()
    log.truncate_to(end - 1)
    assert not log.complete_clean(job, result)
    assert not any(path.name.endswith(CLEANED_SUFFIX) for path in (tmp_path / "t-0").iterdir())
    job = log.begin_clean(end - 1, MAP_BYTES, None)
    result = job.run()
    log.close()
    assert not log.complete_clean(job, result)


def test_a_crash_after_a_merge_renamed_its_segment_leaves_a_log_without_the_merged_ones(tmp_path, clock):
    """The swap renames the merged segment over the group's first, then deletes the rest: a crash
    between leaves segments the merged one holds, which opening deletes."""
    log = overwritten_log(tmp_path, clock)
    committed(log)
    assert clean(log)
    overwrite(log, 20, range(30, 60))
    before = contents(log)
    end = committed(log)
    job = log.begin_clean(end, MAP_BYTES, None)
    result = job.run()
    merged = next(cleaned for cleaned in result.cleaned if len(cleaned.replaced) > 1)
    directory = tmp_path / "t-0"
    first_log = directory / f"{merged.base_offset:020d}{LOG_SUFFIX}"
    for index_path in directory.glob(f"{merged.base_offset:020d}.*index"):
        index_path.unlink()
    os.replace(cleaned_path(first_log), first_log)
    log.close_handles()  # the crash: nothing else happened

    reopened = open_log(directory, clock, compact=True)
    after = contents(reopened)
    assert {offset: (key, value) for offset, key, value in after}.items() <= {o: (k, v) for o, k, v in before}.items()
    assert latest_per_key(after) == latest_per_key(before)
    assert not any(path.name.endswith(CLEANED_SUFFIX) for path in directory.iterdir())
    assert [s.base_offset for s in reopened.segments] == sorted({s.base_offset for s in reopened.segments})


def test_a_small_key_map_cleans_in_steps(tmp_path, clock):
    log = overwritten_log(tmp_path, clock, rounds=40)
    before = contents(log)
    committed(log)
    passes = 0
    while clean(log, map_max_bytes=1):  # each pass maps one segment
        passes += 1
        assert passes < 20
    assert passes > 1
    active_base = log.segments[-1].base_offset
    assert contents(log) == latest_per_key([r for r in before if r[0] < active_base]) + [
        r for r in before if r[0] >= active_base]


def test_a_log_that_is_not_compacted_is_never_cleaned(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, segment_bytes=200)
    for value in range(10):
        log.append(batch((b"a", b"%d" % value)), leader_epoch=0)
    assert log.begin_clean(committed(log), MAP_BYTES, None) is None


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_a_compacted_log_refuses_a_record_without_a_key_and_writes_nothing(tmp_path, clock, compression):
    log = open_log(tmp_path / "t-0", clock, compact=True)
    log.append(batch((b"a", b"1"), compression=compression), leader_epoch=0)
    with pytest.raises(InvalidRecordError) as refused:
        log.append(batch((b"b", b"1"), (None, b"keyless"), compression=compression), leader_epoch=0)
    assert refused.value.rejected.indexes == (1,)
    assert contents(log) == [(0, b"a", b"1")]
    plain = open_log(tmp_path / "u-0", clock)
    plain.append(batch((None, b"keyless")), leader_epoch=0)
    assert contents(plain) == [(0, None, b"keyless")]


def test_the_first_batch_of_each_leader_epoch_stays_as_an_empty_batch(tmp_path, clock):
    """A follower copying the log learns each epoch's start from its first batch: were it
    removed, the follower would place the epoch later, and answer OffsetForLeaderEpoch with an
    offset above a divergent replica's tail, which would then keep it."""
    log = open_log(tmp_path / "t-0", clock, compact=True, segment_bytes=400)
    log.append(batch((b"a", b"1")), leader_epoch=0)
    log.append(batch((b"a", b"2")), leader_epoch=1)
    log.append(batch((b"a", b"3")), leader_epoch=1)
    log.append(batch((b"a", b"4"), (b"pad", b"x" * 250)), leader_epoch=2)
    log.append(batch((b"tail", b"x")), leader_epoch=2)
    committed(log)
    assert clean(log)
    headers = batch_headers(read_all(log, 0))
    assert [(h.base_offset, h.partition_leader_epoch, h.record_count) for h in headers] == [
        (0, 0, 0), (1, 1, 0), (3, 2, 2), (5, 2, 1)]
    assert contents(log) == [(3, b"a", b"4"), (4, b"pad", b"x" * 250), (5, b"tail", b"x")]


def test_a_bomb_the_log_took_before_its_leader_validated_fails_the_pass_in_bounded_memory(tmp_path, clock):
    """A log may hold a batch appended before leaders read every record (a follower copies what
    its leader held): cleaning decompresses it no further than the append path would, and the
    pass fails (the manager logs it and goes on) rather than inflate it whole."""
    log = open_log(tmp_path / "t-0", clock, compact=True, segment_bytes=1 << 14)
    held = bomb(CODEC_ZSTD, 256 << 20)
    log.append_as_follower(held)
    log.append(batch((b"a", b"1")), leader_epoch=0)
    log.roll()
    committed(log)
    with pytest.raises(RecordTooLargeError, match=f"records inflate past {64 * (1024 * 1024 + 12)} bytes"):
        clean(log)


HOUR_MS = 3600 * 1000


def test_a_log_dirty_for_longer_than_max_compaction_lag_is_cleaned_below_its_dirty_ratio(tmp_path, clock):
    log = overwritten_log(tmp_path, clock, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=HOUR_MS)
    committed(log)
    assert clean(log), "all of it dirty: past any ratio"
    overwrite(log, 20, range(30, 34))  # one segment's worth, written now, beside the cleaned ones
    before = contents(log)
    committed(log)
    assert not clean(log), "too little dirty, and not for long"
    clock.advance(HOUR_MS + 1)
    assert clean(log)
    active_base = log.segments[-1].base_offset
    assert contents(log) == latest_per_key([r for r in before if r[0] < active_base]) + [
        r for r in before if r[0] >= active_base]


def test_a_compacted_log_rolls_its_active_segment_by_max_compaction_lag(tmp_path, clock):
    log = open_log(tmp_path / "t-0", clock, compact=True, max_compaction_lag_ms=HOUR_MS)
    clock.advance(DAY_MS)
    log.append(batch((b"a", b"1"), timestamp_ms=clock() - HOUR_MS - 1), leader_epoch=0)
    log.append(batch((b"a", b"2"), timestamp_ms=clock()), leader_epoch=0)
    assert [segment.base_offset for segment in log.segments] == [0, 1]


def test_records_younger_than_min_compaction_lag_stay_uncleaned(tmp_path, clock):
    log = overwritten_log(tmp_path, clock, min_compaction_lag_ms=HOUR_MS)
    before = contents(log)
    committed(log)
    assert not clean(log)
    clock.advance(HOUR_MS)
    assert clean(log)
    active_base = log.segments[-1].base_offset
    assert contents(log) == latest_per_key([r for r in before if r[0] < active_base]) + [
        r for r in before if r[0] >= active_base]
