"""A small file system simulated in a broker process, for tests/clients/test_disk_full.py where
it cannot mount a real one (not root, no tmpfs).

Python imports this at start-up when its directory is on PYTHONPATH. With REPLOG_TEST_DISK_DIR
and REPLOG_TEST_DISK_BYTES set, the files below that directory share that many bytes: statvfs
of a path below it reports what they leave free, and a write (os.write, os.pwrite: all of
replog's storage writes) that would grow them past it is cut short where the space ends, or
fails with ENOSPC when none is left, as on a full file system. The embedded store's database
(written by sqlite's C code) counts towards the space but is never refused.
"""

import errno
import os

_DIRECTORY = os.environ.get("REPLOG_TEST_DISK_DIR")

if _DIRECTORY:
    _CAPACITY_BYTES = int(os.environ["REPLOG_TEST_DISK_BYTES"])
    _real_statvfs, _real_write, _real_pwrite = os.statvfs, os.write, os.pwrite

    def _inside(path: str) -> bool:
        return os.path.realpath(path).startswith(_DIRECTORY + os.sep)

    def _used_bytes() -> int:
        total = 0
        for directory, _, names in os.walk(_DIRECTORY):  # bounded by the files below it
            for name in names:
                try:
                    total += os.lstat(os.path.join(directory, name)).st_size
                except FileNotFoundError:
                    pass  # deleted meanwhile
        return total

    def _fitting(fd: int, data, position: int | None) -> memoryview:
        """The part of `data` the simulated file system takes at `position` of `fd` (the file
        offset if None); ENOSPC if none of it."""
        view = memoryview(data).cast("B")
        try:
            path = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return view
        if not _inside(path):
            return view
        end = (os.lseek(fd, 0, os.SEEK_CUR) if position is None else position) + len(view)
        growth_bytes = max(0, end - os.fstat(fd).st_size)
        left_bytes = _CAPACITY_BYTES - _used_bytes()
        if growth_bytes <= left_bytes:
            return view
        fits = max(0, len(view) - (growth_bytes - max(left_bytes, 0)))
        if fits == 0 and len(view):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return view[:fits]

    def _statvfs(path):
        real = _real_statvfs(path)
        if not _inside(os.fspath(path)):
            return real
        block = real.f_frsize
        free_blocks = max(0, _CAPACITY_BYTES - _used_bytes()) // block
        return os.statvfs_result((real.f_bsize, block, _CAPACITY_BYTES // block, free_blocks, free_blocks,
                                  real.f_files, real.f_ffree, real.f_favail, real.f_flag, real.f_namemax))

    def _write(fd, data):
        return _real_write(fd, _fitting(fd, data, None))

    def _pwrite(fd, data, position):
        return _real_pwrite(fd, _fitting(fd, data, position), position)

    os.statvfs, os.write, os.pwrite = _statvfs, _write, _pwrite
