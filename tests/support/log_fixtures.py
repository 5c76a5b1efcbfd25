"""Shared helpers for log tests: a manual clock and a log opened in a temporary directory."""

from pathlib import Path

from replog.storage.log import Log, LogConfig


class ManualClock:
    """Milliseconds that move only when a test says so."""

    def __init__(self, now_ms: int = 1_000_000):
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, delta_ms: int) -> None:
        self.now_ms += delta_ms


def open_log(directory: Path, clock: ManualClock | None = None, *, closed_cleanly: bool = False, **config) -> Log:
    return Log(directory, LogConfig(**config), clock or ManualClock(), closed_cleanly=closed_cleanly)


def read_all(log: Log, offset: int, max_bytes: int = 1 << 30, max_offset: int | None = None) -> bytes:
    return b"".join(piece.read() for piece in log.read(offset, max_bytes, max_offset))


def background_flush(log: Log) -> bool:
    """What a partition's background flush does to its log, with the job run here instead of in
    another thread. Says whether the recovery point moved."""
    job = log.begin_flush()
    if job is None:
        return False  # nothing past the recovery point
    job.run()
    applied = log.complete_flush(job)
    log.checkpoint_recovery_point()
    return applied
