"""The data directory lock: one holder at a time, named to whoever is refused."""

import os

import pytest

from replog.storage.data_dir_lock import LOCK_FILE_NAME, DataDirectoryInUse, DataDirectoryLock


def test_a_second_lock_is_refused_naming_the_holder_until_the_first_is_released(tmp_path):
    # Both in this process: flock locks belong to open file descriptions, so this is the same
    # refusal another process gets.
    held = DataDirectoryLock(tmp_path)
    with pytest.raises(DataDirectoryInUse) as refused:
        DataDirectoryLock(tmp_path)
    assert refused.value.holder_pid == os.getpid()
    assert str(refused.value) == (f"data directory {tmp_path} is in use by process {os.getpid()} "
                                  f"(lock {tmp_path / LOCK_FILE_NAME}): another broker is running on it")

    held.release()
    DataDirectoryLock(tmp_path).release()
    assert (tmp_path / LOCK_FILE_NAME).exists()  # never deleted: see the module docstring


def test_a_holder_that_wrote_no_pid_is_reported_as_unnamed(tmp_path):
    held = DataDirectoryLock(tmp_path)
    (tmp_path / LOCK_FILE_NAME).write_bytes(b"")  # as between the holder's flock and its write
    try:
        with pytest.raises(DataDirectoryInUse) as refused:
            DataDirectoryLock(tmp_path)
    finally:
        held.release()
    assert refused.value.holder_pid is None
    assert "in use by another process" in str(refused.value) and "names no process" in str(refused.value)


def test_a_stale_pid_left_by_a_dead_holder_is_replaced(tmp_path):
    (tmp_path / LOCK_FILE_NAME).write_text("99999999999\n")
    held = DataDirectoryLock(tmp_path)
    try:
        assert (tmp_path / LOCK_FILE_NAME).read_text() == f"{os.getpid()}\n"
    finally:
        held.release()
