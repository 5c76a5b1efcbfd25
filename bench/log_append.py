"""Append and serve throughput of the partition log against plain syscalls on the same disk.

    .venv/bin/python bench/log_append.py [--dir DIR]

Append: the same pre-built v2 batch (16 KiB or 1 MiB, one record) appended over and over through
Log.append (validation, CRC32C, offset assignment, one pwrite) versus plain os.write of the same
bytes to a file, without fsync and with an fsync every 1 MiB (Log: flush.messages set so that it
flushes every 1 MiB of records).

Serve: 512 MiB of 16 KiB batches sent to a 127.0.0.1 socket: through Log.read (1 MiB per fetch,
as max.partition.fetch.bytes) and os.sendfile of each slice, the consumer resuming after the last
whole batch, versus os.sendfile of the whole segment file in 1 MiB steps.

Figures are printed, never asserted. The two sides of a pair are measured in ROUNDS alternating
rounds (plain, log, log, plain, plain, log, ...), and each side's median is reported: noise on a
shared machine (page-cache writeback, a neighbour's burst) then falls on both sides alike instead
of on whichever ran during it, and one lucky or unlucky run moves neither figure. The first line
names the batch-scan implementation in use (records.CODEC): compiled, or pure Python.
"""

import argparse
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replog.storage.log import Log, LogConfig  # noqa: E402
from replog.storage.records import CODEC, HEADER_SIZE_BYTES  # noqa: E402
from tests.support.batches import build_batch  # noqa: E402

MIB = 1 << 20
APPEND_TOTAL_BYTES = 256 * MIB
FSYNC_APPEND_TOTAL_BYTES = 32 * MIB
SERVE_TOTAL_BYTES = 512 * MIB
FETCH_MAX_BYTES = MIB
ROUNDS = 5


def one_record_batch(size_bytes: int) -> bytearray:
    batch = build_batch(payload_bytes=size_bytes - HEADER_SIZE_BYTES)
    assert len(batch) == size_bytes
    return batch


def mb_per_s(run: Callable[[], int]) -> float:
    """Runs `run` (which returns the bytes it moved) once."""
    started = time.perf_counter()
    moved_bytes = run()
    return moved_bytes / MIB / (time.perf_counter() - started)


def median_pair_mb_per_s(plain: Callable[[], int], through_log: Callable[[], int]) -> tuple[float, float]:
    """Median MB/s of each side over ROUNDS rounds; the side that goes first alternates, so that
    neither always runs on a cache or disk the other just warmed or dirtied."""
    figures = {plain: [], through_log: []}
    for round_number in range(ROUNDS):
        order = (plain, through_log) if round_number % 2 == 0 else (through_log, plain)
        for run in order:
            figures[run].append(mb_per_s(run))
    return statistics.median(figures[plain]), statistics.median(figures[through_log])


def plain_append(directory: Path, batch: bytearray, total_bytes: int, fsync_every_bytes: int | None) -> Callable[[], int]:
    def run() -> int:
        path = directory / "plain.bin"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        unsynced_bytes = 0
        for _ in range(total_bytes // len(batch)):
            os.write(fd, batch)
            unsynced_bytes += len(batch)
            if fsync_every_bytes is not None and unsynced_bytes >= fsync_every_bytes:
                os.fsync(fd)
                unsynced_bytes = 0
        os.close(fd)
        path.unlink()
        return total_bytes
    return run


def log_append(directory: Path, batch: bytearray, total_bytes: int, fsync_every_bytes: int | None) -> Callable[[], int]:
    flush_messages = max(fsync_every_bytes // len(batch), 1) if fsync_every_bytes else LogConfig.flush_messages
    config = LogConfig(flush_messages=flush_messages, max_message_bytes=2 * MIB)

    def run() -> int:
        log = Log(directory / "bench-0", config, lambda: 0)
        for _ in range(total_bytes // len(batch)):
            log.append(batch, 0)
        log.delete()
        return total_bytes
    return run


class Drain:
    """A loopback TCP connection whose far end reads and discards in a thread."""

    def __init__(self):
        listener = socket.create_server(("127.0.0.1", 0))
        self.sender = socket.create_connection(listener.getsockname())
        self._receiver, _ = listener.accept()
        listener.close()
        self._expected_bytes = 0
        self._done = threading.Event()
        self._start = threading.Event()

    def expect(self, total_bytes: int) -> None:
        self._expected_bytes = total_bytes
        self._done.clear()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        buffer = bytearray(4 * MIB)
        received_bytes = 0
        while received_bytes < self._expected_bytes:  # ends when everything sent has arrived
            count = self._receiver.recv_into(buffer)
            if count == 0:
                break
            received_bytes += count
        self._done.set()

    def wait(self) -> None:
        if not self._done.wait(timeout=120):
            raise RuntimeError("receiver did not get every byte")

    def close(self) -> None:
        self.sender.close()
        self._receiver.close()


def send_fully(sock: socket.socket, fd: int, position: int, size_bytes: int) -> None:
    end = position + size_bytes
    while position < end:  # blocking socket: each call moves at least one byte
        position += os.sendfile(sock.fileno(), fd, position, end - position)


def plain_serve(drain: Drain, path: Path) -> Callable[[], int]:
    def run() -> int:
        size_bytes = path.stat().st_size
        drain.expect(size_bytes)
        fd = os.open(path, os.O_RDONLY)
        for position in range(0, size_bytes, FETCH_MAX_BYTES):
            send_fully(drain.sender, fd, position, min(FETCH_MAX_BYTES, size_bytes - position))
        os.close(fd)
        drain.wait()
        return size_bytes
    return run


def log_serve(drain: Drain, log: Log, batch_size_bytes: int) -> Callable[[], int]:
    def run() -> int:
        # A consumer resumes after the last whole batch it got; the cut one is sent again.
        sent_bytes = 0
        offset = log.log_start_offset
        fetches = []
        while offset < log.log_end_offset:  # bounded: every fetch holds at least one whole batch
            slices = log.read(offset, FETCH_MAX_BYTES)
            fetched_bytes = sum(piece.size_bytes for piece in slices)
            fetches.append(slices)
            offset += fetched_bytes // batch_size_bytes
            sent_bytes += fetched_bytes
        drain.expect(sent_bytes)
        for slices in fetches:
            for piece in slices:
                send_fully(drain.sender, piece.fd, piece.position, piece.size_bytes)
        drain.wait()
        return offset * batch_size_bytes
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=Path.cwd(), help="where the files go (the disk measured)")
    directory = Path(tempfile.mkdtemp(prefix="replog-bench-", dir=parser.parse_args().dir))
    rows = []
    try:
        for batch_bytes in (16 * 1024, MIB):
            batch = one_record_batch(batch_bytes)
            for fsync_every_bytes, total_bytes in ((None, APPEND_TOTAL_BYTES), (MIB, FSYNC_APPEND_TOTAL_BYTES)):
                label = f"append {batch_bytes // 1024} KiB batches, {'fsync every 1 MiB' if fsync_every_bytes else 'no fsync'}"
                rows.append((label, *median_pair_mb_per_s(plain_append(directory, batch, total_bytes, fsync_every_bytes),
                                                          log_append(directory, batch, total_bytes, fsync_every_bytes))))
        batch_bytes = 16 * 1024
        log = Log(directory / "serve-0", LogConfig(), lambda: 0)
        batch = one_record_batch(batch_bytes)
        for _ in range(SERVE_TOTAL_BYTES // batch_bytes):
            log.append(batch, 0)
        drain = Drain()
        rows.append(("serve 512 MiB over 127.0.0.1, sendfile, 1 MiB fetches",
                     *median_pair_mb_per_s(plain_serve(drain, log.segments[0].log_path), log_serve(drain, log, batch_bytes))))
        drain.close()
        log.delete()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    # Which implementation validated the batches: the compiled one unless the build skipped it.
    print(f"batch scans: {CODEC.name}; each figure the median of {ROUNDS} rounds, plain and log interleaved")
    print(f"{'case':56} {'plain MB/s':>11} {'log MB/s':>10} {'log/plain':>10}")
    for label, plain, through_log in rows:
        print(f"{label:56} {plain:11.0f} {through_log:10.0f} {through_log / plain:10.0%}")


if __name__ == "__main__":
    main()
