"""A full or failing disk under the log: a write that fails part-way is taken back and answered
KafkaStorageError, nothing torn stays in a file, and the log takes appends again once the disk
does. The failures are injected into the os calls storage makes (a write cut short where the
space ends, then ENOSPC, as a full file system answers)."""

import errno
import os

import pytest

from replog.storage.checkpoint import LeaderEpochCache, write_checkpoint
from replog.storage.errors import KafkaStorageError
from replog.storage.index import OffsetIndex
from tests.support.log_fixtures import open_log, read_all
from tests.support.batches import build_batch


@pytest.fixture
def log_dir(tmp_path):
    return tmp_path / "orders-3"


class FullDisk:
    """os.pwrite/os.write while the disk is full: the first write of a log segment stops
    after `room_bytes`, and every write after it fails with ENOSPC."""

    def __init__(self, monkeypatch, room_bytes: int):
        self.room_bytes = room_bytes
        self.calls = 0
        real_pwrite, real_write = os.pwrite, os.write

        def pwrite(fd, data, position):
            self.calls += 1
            if self.calls == 1:
                return real_pwrite(fd, memoryview(data)[:self.room_bytes], position)
            raise OSError(errno.ENOSPC, "No space left on device")

        def write(fd, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(os, "pwrite", pwrite)
        monkeypatch.setattr(os, "write", write)
        self._undo = lambda: (monkeypatch.setattr(os, "pwrite", real_pwrite), monkeypatch.setattr(os, "write", real_write))

    def freed(self) -> None:
        self._undo()


def test_a_write_that_fails_half_way_is_taken_back_and_the_log_takes_appends_once_the_disk_does(log_dir, monkeypatch):
    log = open_log(log_dir)
    first = build_batch(record_count=3, payload_bytes=500)
    log.append(first, leader_epoch=0)
    size_before = os.path.getsize(log.segments[-1].log_path)
    disk = FullDisk(monkeypatch, room_bytes=300)
    with pytest.raises(KafkaStorageError) as refused:
        log.append(build_batch(record_count=2, payload_bytes=600), leader_epoch=0)
    assert refused.value.error_code == 56 and refused.value.reason == "ENOSPC"
    assert disk.calls == 2, "the rest of the short write was tried, and failed with the reason"
    assert os.path.getsize(log.segments[-1].log_path) == size_before, "the partial batch was taken back"
    assert log.log_end_offset == 3

    disk.freed()
    later = build_batch(record_count=2, payload_bytes=600)
    assert log.append(later, leader_epoch=0) == (3, 4)
    assert read_all(log, 0) == bytes(first) + bytes(later)
    log.close_handles()
    reopened = open_log(log_dir)  # after a crash: every batch re-validated, nothing to cut
    assert reopened.log_end_offset == 5 and read_all(reopened, 0) == bytes(first) + bytes(later)


def test_a_short_write_whose_rest_goes_in_is_an_append(log_dir, monkeypatch):
    log = open_log(log_dir)
    real_pwrite = os.pwrite
    calls = []

    def pwrite(fd, data, position):
        calls.append(len(data))
        return real_pwrite(fd, memoryview(data)[:100] if len(calls) == 1 else data, position)

    monkeypatch.setattr(os, "pwrite", pwrite)
    batch = build_batch(payload_bytes=400)
    assert log.append(batch, leader_epoch=0) == (0, 0)
    assert calls == [len(batch), len(batch) - 100]
    monkeypatch.undo()
    assert read_all(log, 0) == bytes(batch)


def test_a_follower_append_that_fails_is_taken_back_too(log_dir, monkeypatch):
    log = open_log(log_dir)
    FullDisk(monkeypatch, room_bytes=100)
    with pytest.raises(KafkaStorageError):
        log.append_as_follower(build_batch(payload_bytes=400, leader_epoch=2))
    monkeypatch.undo()
    assert log.log_end_offset == 0 and os.path.getsize(log.segments[-1].log_path) == 0
    assert log.leader_epoch_cache.entries == []


def test_a_failed_flush_keeps_the_records_and_is_made_before_the_next_appends_bytes(log_dir, monkeypatch):
    """flush.messages=1: the fsync after a write fails (EIO). The records are in the log (the
    caller counts them, and refuses the producer); the flush is owed, and an append while it
    still fails writes nothing."""
    log = open_log(log_dir, flush_messages=1)
    real_fsync = os.fsync
    failing = [True]

    def fsync(fd):
        if failing[0]:
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(KafkaStorageError) as refused:
        log.append(build_batch(), leader_epoch=0)
    assert refused.value.reason == "EIO"
    assert log.log_end_offset == 1 and log.recovery_point == 0, "written, not flushed"
    with pytest.raises(KafkaStorageError):
        log.append(build_batch(), leader_epoch=0)
    assert log.log_end_offset == 1, "nothing written while the owed flush fails"

    failing[0] = False
    assert log.append(build_batch(), leader_epoch=0) == (1, 1)
    assert log.recovery_point == 2


def test_a_checkpoint_cut_short_is_not_renamed_into_place(tmp_path, monkeypatch):
    path = tmp_path / "replication-offset-checkpoint"
    write_checkpoint(path, ["orders 0 5"])
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:4]))
    with pytest.raises(OSError) as failed:
        write_checkpoint(path, ["orders 0 7", "orders 1 9"])
    assert failed.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert path.read_text() == "0\n1\norders 0 5\n", "the old checkpoint stands"


def test_leader_epochs_a_failed_write_did_not_save_are_written_by_the_next_save(tmp_path, monkeypatch):
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    monkeypatch.setattr(os, "write", lambda fd, data: (_ for _ in ()).throw(OSError(errno.ENOSPC, "full")))
    with pytest.raises(OSError):
        cache.assign(2, 10)
    monkeypatch.undo()
    assert cache.unsaved
    cache.save_if_unsaved()
    assert LeaderEpochCache(tmp_path / "leader-epoch-checkpoint").entries == [(1, 0), (2, 10)]


def test_index_entries_cut_short_are_written_again_by_the_next_persist(tmp_path, monkeypatch):
    index = OffsetIndex(tmp_path / "00000000000000000000.index", 0)
    index.keys += [10, 20, 30]
    index.values += [100, 200, 300]
    real_pwrite = os.pwrite
    monkeypatch.setattr(os, "pwrite", lambda fd, data, position: real_pwrite(fd, data[:5], position))
    with pytest.raises(OSError):
        index.persist(fsync=False)
    monkeypatch.undo()
    index.persist(fsync=False)
    loaded = OffsetIndex(index.path, 0)
    loaded.load()
    assert (loaded.keys, loaded.values) == ([10, 20, 30], [100, 200, 300])
