import os

import pytest

from replog.storage.checkpoint import (
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    LeaderEpochCache,
    OffsetCheckpoint,
    write_checkpoint,
)
from replog.storage.log import LEADER_EPOCH_FILE
from tests.support.log_fixtures import open_log
from tests.support.batches import build_batch


def test_offset_checkpoint_round_trips_in_kafka_text_format(tmp_path):
    checkpoint = OffsetCheckpoint(tmp_path / "replication-offset-checkpoint")
    checkpoint.write({("orders", 0): 42, ("clicks-eu", 11): 7})
    assert checkpoint.path.read_text() == "0\n2\norders 0 42\nclicks-eu 11 7\n"
    assert OffsetCheckpoint(checkpoint.path).read() == {("orders", 0): 42, ("clicks-eu", 11): 7}


def test_checkpoint_write_replaces_atomically_leaving_no_temp_file(tmp_path, monkeypatch):
    path = tmp_path / "replication-offset-checkpoint"
    OffsetCheckpoint(path).write({("t", 0): 1})
    real_replace = os.replace

    def crash_before_rename(src, dst):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", crash_before_rename)
    with pytest.raises(OSError):
        OffsetCheckpoint(path).write({("t", 0): 2})
    monkeypatch.setattr(os, "replace", real_replace)
    assert OffsetCheckpoint(path).read() == {("t", 0): 1}


@pytest.mark.parametrize("content", [
    "", "0\n", "1\n1\nt 0 5\n", "0\n2\nt 0 5\n", "0\n1\nt 0\n", "0\n1\nt x 5\n", "zero\n1\nt 0 5\n", "\xff\xfe",
])
def test_malformed_checkpoints_read_as_empty(tmp_path, content):
    path = tmp_path / "cp"
    path.write_text(content, errors="surrogateescape")
    assert OffsetCheckpoint(path).read() == {}


def test_missing_checkpoint_reads_as_empty_and_blank_lines_are_tolerated(tmp_path):
    assert OffsetCheckpoint(tmp_path / "absent").read() == {}
    (tmp_path / "cp").write_text("0\n1\n\nt 3 9\n\n")
    assert OffsetCheckpoint(tmp_path / "cp").read() == {("t", 3): 9}


@pytest.fixture
def cache(tmp_path):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    for epoch, start in [(1, 0), (3, 10), (6, 25)]:
        cache.assign(epoch, start)
    return cache


def test_epoch_cache_persists_every_change(cache, tmp_path):
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n6 25\n"
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == cache.entries


@pytest.mark.parametrize("requested, expected", [
    (6, (6, 40)),                               # latest epoch: the log end offset
    (3, (3, 25)),                               # start of the next epoch
    (4, (3, 25)),                               # unknown epoch between known ones: the one below
    (0, (0, 0)),                                # older than all known epochs
    (7, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
])
def test_end_offset_for_follows_kafka(cache, requested, expected):
    assert cache.end_offset_for(requested, log_end_offset=40) == expected


def test_assign_ignores_repeats_and_drops_contradicted_entries(cache):
    cache.assign(6, 30)
    assert cache.entries[-1] == (6, 25)
    cache.assign(5, 20)  # a lower epoch from a lower offset: later entries are contradicted
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]


def test_truncate_from_end_drops_epochs_starting_at_or_after(cache):
    cache.truncate_from_end(25)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_end(100)
    assert cache.entries == [(1, 0), (3, 10)]


def test_truncate_from_start_moves_the_epoch_in_force(cache):
    cache.truncate_from_start(12)
    assert cache.entries == [(3, 12), (6, 25)]
    cache.truncate_from_start(25)
    assert cache.entries == [(6, 25)]


def test_clear_empties_file_too(cache, tmp_path):
    cache.clear()
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == []
    write_checkpoint(tmp_path / "leader-epoch-checkpoint", ["1 x"])
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == []


def test_an_older_snapshot_written_late_does_not_overwrite_a_newer_one(tmp_path):
    """The HW checkpoint is written in a worker thread; a write still running at shutdown must
    not put back what the shutdown's own, later write replaced."""
    from replog.storage.checkpoint import OffsetCheckpoint

    checkpoint = OffsetCheckpoint(tmp_path / "replication-offset-checkpoint")
    older = checkpoint.snapshot({("t", 0): 5})
    checkpoint.snapshot({("t", 0): 9})()
    older()
    assert checkpoint.read() == {("t", 0): 9}


def test_a_new_leaders_epoch_is_written_with_its_first_append_not_before(tmp_path):
    """Kafka's makeLeader starts the epoch at the log end at once; its file is written by the
    epoch's first append, before the bytes, so that no record is ever in an epoch the file
    lacks, and an election costs no write of its own."""
    log = open_log(tmp_path / "t-0")
    path = tmp_path / "t-0" / LEADER_EPOCH_FILE
    log.leader_epoch_cache.begin_at_log_end(4, 0)
    assert log.leader_epoch_cache.end_offset_for(4, log.log_end_offset) == (4, 0)
    assert not path.exists()
    written_before_bytes = []
    real_append = log._segments[-1].append
    log._segments[-1].append = lambda *args: (written_before_bytes.append(path.read_text()), real_append(*args))[1]
    log.append(build_batch(record_count=2), leader_epoch=4)
    assert written_before_bytes == ["0\n1\n4 0\n"]
    log.close()


def test_a_new_leaders_epoch_contradicting_a_known_one_is_written_at_once(cache, tmp_path):
    cache.begin_at_log_end(5, 40)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n5 40\n"
    cache.begin_at_log_end(7, 50)
    assert (tmp_path / "leader-epoch-checkpoint").read_text() == "0\n3\n1 0\n3 10\n5 40\n"
    assert (cache.latest_epoch, cache.unsaved) == (7, True)
