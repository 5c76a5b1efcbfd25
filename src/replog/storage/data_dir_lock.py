"""The lock that makes a data directory belong to one broker process at a time.

Owns `<data_dir>/.lock` (Kafka's name for it): an exclusive, non-blocking `flock` on it, held
from before anything else reads or writes the directory (crash recovery, checkpoints, the
embedded store's sqlite file, the clean-shutdown record) until the broker has stopped. A second
broker on the directory is refused before it touches a file, whatever its store.

The file holds the holder's pid, written once the lock is held, so that a refused process can
name it. The pid is only a report: the flock decides. A holder between its flock and its write
leaves the file empty (or a dead holder's pid), and a refusal says the file names nobody.

The file is never deleted: a process that unlinked it while a second one waited to open it
would let a third lock a new file of the same name while the second still held the old one.
The kernel drops the lock when the holder exits, SIGKILL included, so a restart after a crash
takes it at once.

flock locks belong to open file descriptions, so a second lock is refused within the holding
process too (two brokers in one process on one directory). Not safe across threads.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE_NAME = ".lock"
PID_BYTES_MAX = 32  # far more than any pid's digits


class DataDirectoryInUse(Exception):
    """Another broker (this process or another) holds the data directory's lock."""

    def __init__(self, data_dir: Path, lock_path: Path, holder_pid: int | None):
        self.data_dir = data_dir
        self.lock_path = lock_path
        self.holder_pid = holder_pid
        if holder_pid is None:
            holder = f"another process (lock {lock_path} names no process)"
        else:
            holder = f"process {holder_pid} (lock {lock_path})"
        super().__init__(f"data directory {data_dir} is in use by {holder}: another broker is running on it")


class DataDirectoryUnusable(Exception):
    """The data directory cannot be created, or its lock file cannot be opened."""

    def __init__(self, data_dir: Path, error: OSError):
        self.data_dir = data_dir
        super().__init__(f"data directory {data_dir}: {_what_is_wrong(data_dir, error)}")


def _what_is_wrong(data_dir: Path, error: OSError) -> str:
    # mkdir says only "File exists" or "Not a directory"; the operator needs the path at fault.
    for path in (data_dir, *data_dir.parents):
        # os.path's checks, unlike Path's, answer False rather than raise where stat is denied.
        if os.path.exists(path) and not os.path.isdir(path):
            where = "" if path == data_dir else f"{path} "
            return f"{where}is a file, not a directory; give log.dirs (--data-dir) a directory"
    return f"cannot create it or its lock file {data_dir / LOCK_FILE_NAME}: {error.strerror}"


class DataDirectoryLock:
    """Held from construction until `release`; creates the directory if it is missing. See the
    module docstring."""

    def __init__(self, data_dir: Path):
        self.path = data_dir / LOCK_FILE_NAME
        try:
            data_dir.mkdir(parents=True, exist_ok=True)
            # Neither O_TRUNC nor a write before the flock: the holder's pid must survive a refusal.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as error:
            raise DataDirectoryUnusable(data_dir, error) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder_pid = _pid_in(fd)
            os.close(fd)
            raise DataDirectoryInUse(data_dir, self.path, holder_pid) from None
        except BaseException:
            os.close(fd)
            raise
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def release(self) -> None:
        """Drop the lock (idempotent); the file stays."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _pid_in(fd: int) -> int | None:
    """The pid the holder wrote, or None when the file holds none (empty, torn or unreadable)."""
    try:
        text = os.pread(fd, PID_BYTES_MAX, 0).decode("ascii").strip()
        return int(text) if text.isdigit() else None
    except (OSError, UnicodeDecodeError):
        return None
