"""Reopening a 1 GiB partition after a crash, against reading the same file once.

    .venv/bin/python bench/log_recovery.py [--dir DIR] [--gib N]

Builds a partition log of N GiB (default 1) through Log.append, one idempotent producer writing
batches of 1 MiB (librdkafka's batch.size is about that) and, separately, of 16 KiB (the Java
producer's default), with the default segment.bytes (1 GiB), so the last GiB is one active
segment. Then it reopens the partition (ReplicaManager.start_replica: the log and its producer
state) in the states a restart finds on disk:

  killed, never flushed    the process was SIGKILLed before anything was flushed: no clean-shutdown
                           marker, recovery point at 0, no index and no producer snapshot on disk.
                           Every batch is checked and every header read.
  killed, torn tail        the same, with the last batch cut in half (a write the kill interrupted)
  killed after a flush     SIGKILLed after the log was flushed to its end (by the partition's
                           background flush, every log.flush.offset.checkpoint.interval.ms, or by
                           the recovery of an earlier crash): recovery point, indexes and producer
                           snapshot at the end
  clean restart            after SIGTERM: marker, indexes and producer snapshot on disk

The files are put back in the state before every round (a killed process is simulated by
dropping the Log without closing it: the files are exactly what a SIGKILL leaves, since every
write went through to the page cache). Beside each, "plain read" reads the .log file once in 1 MiB
reads into one reused buffer (`cat file > /dev/null` from Python). Each pair runs ROUNDS rounds,
alternating which side goes first; medians are printed. "warm": the file is in the page cache (a
process crash); "cold": its pages are dropped before every round with posix_fadvise(DONTNEED)
after an fsync (a host that rebooted), so both sides read from the disk.

Figures are printed, never asserted. The first line names the scan implementation in use.
"""

import argparse
import asyncio
import logging
import os
import shutil
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import crc32c

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replog.storage.log import LOG_SUFFIX, Log, LogConfig  # noqa: E402
from replog.replica.manager import ManagerConfig, ReplicaManager  # noqa: E402
from replog.replica.partition import Partition  # noqa: E402
from replog.storage.records import CODEC, HEADER_SIZE_BYTES  # noqa: E402
from tests.support.batches import build_batch  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
ROUNDS = 5
PRODUCER_ID = 4242
TOPIC = "bench"


def idempotent_batch(size_bytes: int, sequence: int) -> bytearray:
    """A one-record batch of an idempotent producer at `sequence`, `size_bytes` long."""
    batch = build_batch(payload_bytes=size_bytes - HEADER_SIZE_BYTES, max_timestamp=1_700_000_000_000,
                        producer_id=PRODUCER_ID, producer_epoch=0, base_sequence=sequence)
    assert len(batch) == size_bytes
    return batch


class PartitionFiles:
    """A partition's directory and the file states a restart may find in it."""

    def __init__(self, root: Path, batch_bytes: int, total_bytes: int):
        self.data_dir = root / f"{batch_bytes}"
        self.directory = self.data_dir / f"{TOPIC}-0"
        self.config = LogConfig(max_message_bytes=2 * MIB)
        log = Log(self.directory, self.config, time_ms)
        template = idempotent_batch(batch_bytes, 0)
        for sequence in range(total_bytes // batch_bytes):
            batch = bytearray(template)
            struct.pack_into(">i", batch, 53, sequence)
            struct.pack_into(">I", batch, 17, crc32c.crc32c(memoryview(batch)[21:]))
            log.append(batch, leader_epoch=0)
        self.log_path = log.segments[-1].log_path
        self.log_bytes = log.segments[-1].size_bytes
        self.last_batch_bytes = batch_bytes
        log.flush()  # durable, so that dropping pages for the cold rounds drops them all
        log.close_handles()
        self.killed = self._metadata()
        partition = self.open()
        asyncio.run(partition.flush_in_background())
        partition.log.close_handles()
        self.flushed = self._metadata()
        self.open().close()
        self.clean = self._metadata()
        with open(self.log_path, "rb") as file:
            file.seek(-batch_bytes, os.SEEK_END)
            self.last_batch = file.read()

    def _metadata(self) -> dict[str, bytes]:
        """Every file but the .log (which recovery leaves alone unless it cuts it)."""
        return {path.name: path.read_bytes() for path in self.directory.iterdir() if path.suffix != LOG_SUFFIX}

    def restore(self, metadata: dict[str, bytes], torn: bool = False) -> None:
        for path in self.directory.iterdir():
            if path.suffix != LOG_SUFFIX:
                path.unlink()
        for name, content in metadata.items():
            (self.directory / name).write_bytes(content)
        fd = os.open(self.log_path, os.O_WRONLY)
        try:
            os.pwrite(fd, self.last_batch, self.log_bytes - self.last_batch_bytes)  # if a torn round cut it
            if torn:
                os.ftruncate(fd, self.log_bytes - self.last_batch_bytes // 2)
        finally:
            os.close(fd)

    def open(self) -> Partition:
        manager = ReplicaManager(ManagerConfig(data_dir=self.data_dir, broker_id=0), time_ms)
        return manager.start_replica(TOPIC, 0, self.config, (0,), leader_epoch=0)

    def drop_cache(self) -> None:
        fd = os.open(self.log_path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def time_ms() -> int:
    return time.time_ns() // 1_000_000


def plain_read(partition: PartitionFiles) -> Callable[[], float]:
    def run() -> float:
        buffer = bytearray(MIB)
        fd = os.open(partition.log_path, os.O_RDONLY)
        started = time.perf_counter()
        position = 0
        while (count := os.preadv(fd, [buffer], position)) > 0:  # bounded by the file's size
            position += count
        elapsed = time.perf_counter() - started
        os.close(fd)
        return elapsed
    return run


def reopen(partition: PartitionFiles, metadata: dict[str, bytes], torn: bool = False) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        opened = partition.open()
        elapsed = time.perf_counter() - started
        opened.log.close_handles()
        partition.restore(metadata, torn)
        return elapsed
    return run


def median_pair_s(partition: PartitionFiles, cold: bool, plain: Callable[[], float],
                  recovery: Callable[[], float]) -> tuple[float, float]:
    """Median seconds of each side over ROUNDS rounds, the side going first alternating."""
    figures = {plain: [], recovery: []}
    for round_number in range(ROUNDS):
        order = (plain, recovery) if round_number % 2 == 0 else (recovery, plain)
        for run in order:
            if cold:
                partition.drop_cache()
            figures[run].append(run())
    return statistics.median(figures[plain]), statistics.median(figures[recovery])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where the files go (the disk measured)")
    parser.add_argument("--gib", type=int, default=1, help="size of each partition log")
    arguments = parser.parse_args()
    logging.getLogger("replog").setLevel(logging.ERROR)  # the torn rounds' cuts are expected
    root = Path(tempfile.mkdtemp(prefix="replog-bench-", dir=arguments.dir))
    print(f"batch scan: {CODEC.name}; {arguments.gib} GiB partition; median of {ROUNDS} rounds")
    print(f"{'batches':>8} {'cache':>5} {'state on disk':<24} {'plain read':>12} {'reopen':>9} {'reopen vs read':>15}")
    try:
        for batch_bytes in (MIB, 16 << 10):
            partition = PartitionFiles(root, batch_bytes, arguments.gib * GIB)
            size_gib = partition.log_path.stat().st_size / GIB
            cases = [("killed, never flushed", partition.killed, False), ("killed, torn tail", partition.killed, True),
                     ("killed after a flush", partition.flushed, False), ("clean restart", partition.clean, False)]
            for cold in (False, True):
                for label, metadata, torn in cases:
                    partition.restore(metadata, torn)
                    plain_s, reopen_s = median_pair_s(partition, cold, plain_read(partition),
                                                      reopen(partition, metadata, torn))
                    print(f"{batch_bytes >> 10:>6}Ki {'cold' if cold else 'warm':>5} {label:<24} "
                          f"{plain_s:>7.3f} s {size_gib / plain_s:>4.1f} GiB/s {reopen_s:>7.3f} s "
                          f"{plain_s / reopen_s:>14.0%}", flush=True)
            shutil.rmtree(partition.data_dir)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
