"""What a machine's power loss leaves of a simulated broker's files.

While installed (a context manager around one schedule), the file calls replog's storage makes
are watched, in this process, for what they make durable:
- `os.fsync` of a file: its size then survives (a later truncation below it lowers that);
- `os.fsync` of a directory: the names created in it so far survive;
- a name made by `os.open` with O_CREAT, or by `os.replace` onto it, survives only once its
  directory was fsynced (a replaced file keeps the durable size of its source); a replace onto
  a name that was already durable is atomic: until the directory's fsync, the name holds either
  the new file or the durable bytes of the one it replaced, never neither (POSIX rename, and
  ext4's ordered mode).

`lose_unflushed(directory)` then does what the machine going down does to the files below
`directory`: each file keeps its durable bytes and a random part of the rest, torn at any byte,
and of the names created in a directory since its last fsync a random newest part vanishes
(or, for a name replaced over a durable one, goes back to that one's durable bytes).
The file system is one that keeps the order of writes across the files of a directory, as a
journaling one in ordered mode does (ext4's default): a log segment created after one that lost
bytes is gone too, with its indexes (replog's recovery, like Kafka's, reads the segments that
survive as the log's continuation, and the follower fetch path makes gaps between segments
legitimate, so a later segment surviving a torn earlier one would leave a hole no check could
tell apart). Deletions are taken as durable at once: a resurrected file is a model this
simulator does not attempt.

Everything random comes from the schedule's own generator, so a seed replays exactly.
"""

from __future__ import annotations

import contextlib
import os
import random
import stat
from pathlib import Path


class PageCache:
    def __init__(self, root: Path, rng: random.Random):
        self._root = str(root.resolve())
        self._rng = rng
        self._durable_size: dict[str, int] = {}
        # directory -> names created in it since its last fsync, oldest first
        self._unsynced_names: dict[str, dict[str, None]] = {}
        # directory -> durable names replaced in it since its last fsync -> the durable bytes they had
        self._replaced: dict[str, dict[str, bytes]] = {}

    @contextlib.contextmanager
    def installed(self):
        originals = {name: getattr(os, name) for name in ("fsync", "fdatasync", "ftruncate", "truncate", "open", "replace", "rename")}

        def fsync(fd):
            originals["fsync"](fd)
            self._synced(fd)

        def fdatasync(fd):
            originals["fdatasync"](fd)
            self._synced(fd)

        def ftruncate(fd, length):
            originals["ftruncate"](fd, length)
            self._cut(self._path_of(fd), length)

        def truncate(path, length):
            originals["truncate"](path, length)
            self._cut(os.path.abspath(path), length)

        def open_(path, flags, mode=0o777, *, dir_fd=None):
            path = os.path.abspath(path) if dir_fd is None else path
            created = dir_fd is None and flags & os.O_CREAT and not os.path.exists(path)
            fd = originals["open"](path, flags, mode, dir_fd=dir_fd)
            if created or (dir_fd is None and flags & os.O_TRUNC):
                self._created(path, 0)
            return fd

        def replace(source, target, **kwargs):
            replaced = self._durable_bytes(os.path.abspath(target))
            originals["replace"](source, target, **kwargs)
            self._moved(os.path.abspath(source), os.path.abspath(target), replaced)

        def rename(source, target, **kwargs):
            replaced = self._durable_bytes(os.path.abspath(target))
            originals["rename"](source, target, **kwargs)
            self._moved(os.path.abspath(source), os.path.abspath(target), replaced)

        patched = {"fsync": fsync, "fdatasync": fdatasync, "ftruncate": ftruncate, "truncate": truncate,
                   "open": open_, "replace": replace, "rename": rename}
        for name, function in patched.items():
            setattr(os, name, function)
        try:
            yield self
        finally:
            for name, function in originals.items():
                setattr(os, name, function)

    # -- what the watched calls tell -----------------------------------------------------------------

    def _mine(self, path: str | None) -> bool:
        return path is not None and path.startswith(self._root)

    @staticmethod
    def _path_of(fd: int) -> str | None:
        try:
            return os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return None

    def _synced(self, fd: int) -> None:
        path = self._path_of(fd)
        if not self._mine(path):
            return
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):
            self._unsynced_names.pop(path, None)
            self._replaced.pop(path, None)
        else:
            self._durable_size[path] = status.st_size

    def _cut(self, path: str | None, length: int) -> None:
        if self._mine(path):
            self._durable_size[path] = min(self._durable_size.get(path, 0), length)

    def _created(self, path: str, durable_size: int) -> None:
        if self._mine(path):
            self._durable_size[path] = durable_size
            self._unsynced_names.setdefault(os.path.dirname(path), {})[path] = None
            self._replaced.get(os.path.dirname(path), {}).pop(path, None)  # a new file, not a replacing one

    def _durable_bytes(self, path: str) -> bytes | None:
        """What a power loss would leave under `path` if its name is durable (None if not):
        the bytes it held when the name was last made durable, if replaced since."""
        directory = os.path.dirname(path)
        if not self._mine(path) or not os.path.exists(path):
            return None
        if path in self._replaced.get(directory, {}):
            return self._replaced[directory][path]
        if path in self._unsynced_names.get(directory, {}):
            return None
        with open(path, "rb") as file:
            return file.read(self._durable_size.get(path, 0))

    def _moved(self, source: str, target: str, replaced: bytes | None) -> None:
        """`source` renamed to `target`, which held the durable bytes `replaced` (None: a new name)."""
        self._created(target, self._durable_size.pop(source, 0))
        if replaced is not None:
            self._replaced.setdefault(os.path.dirname(target), {})[target] = replaced
        for names in (self._unsynced_names, self._replaced):
            names.get(os.path.dirname(source), {}).pop(source, None)

    # -- the power loss ------------------------------------------------------------------------------

    def lose_unflushed(self, directory: Path) -> list[str]:
        """Cut every file below `directory` to what may survive; what was lost, for the trace."""
        lost = []
        for current, _, files in sorted(os.walk(directory)):
            unsynced = [name for name in self._unsynced_names.pop(current, {}) if os.path.exists(name)]
            replaced = self._replaced.pop(current, {})
            vanish = unsynced[self._rng.randint(0, len(unsynced)):]
            for name in vanish:
                if name in replaced:
                    with open(name, "wb") as file:
                        file.write(replaced[name])
                    self._durable_size[name] = len(replaced[name])
                    lost.append(f"{os.path.relpath(name, directory)} back to what it replaced")
                else:
                    os.unlink(name)
                    lost.append(f"{os.path.relpath(name, directory)} vanished")
            truncated_segment = None  # the stem of the first segment that lost bytes
            for file_name in sorted(files):  # segments and their indexes in offset order
                path = os.path.join(current, file_name)
                if path in vanish:
                    continue
                stem, suffix = os.path.splitext(file_name)
                if truncated_segment is not None and stem.isdigit() and stem > truncated_segment:
                    os.unlink(path)
                    lost.append(f"{os.path.relpath(path, directory)} vanished")
                    continue
                size = os.stat(path).st_size
                durable = min(self._durable_size.get(path, 0), size)
                if size > durable:
                    kept = self._rng.randint(durable, size)
                    os.truncate(path, kept)
                    self._durable_size[path] = kept
                    if kept < size:
                        lost.append(f"{os.path.relpath(path, directory)} {size}->{kept}")
                        if suffix == ".log":
                            truncated_segment = stem
        return lost
