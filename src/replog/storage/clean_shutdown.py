"""Which logs of a data directory were closed cleanly, recorded as Kafka's LogManager does: in one
file per data directory, not one per log, so that a start costs one fsync however many logs the
directory holds. (A marker per log cost every open a directory fsync for its removal, a large
share of the time many logs took to open.)

    <data_dir>/.clean-shutdown   the names of the log directories closed cleanly: a checkpoint
                                 file (checkpoint.py), written when the broker stops, after its
                                 logs closed; removed, durably, at the next start before any log
                                 opens, so that a crash from then on finds none

A log whose name is listed had its files flushed and its recovery point written when it closed,
so its next open trusts them (log.py); any other is recovered from its recovery point. The list,
not the file's presence, is what vouches: a broker opens only the logs it hosts, and a log that
a crashed life left unopened must not be vouched for by the next life's clean stop. Within a
life, the replica manager keeps the set: the logs listed at its start and not opened since,
and the logs it closed cleanly since.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from replog.storage.checkpoint import fsync_directory, read_checkpoint, write_checkpoint

CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


def recorded_cleanly_closed(data_dir: Path) -> set[str]:
    """The log directories the last stop recorded as closed cleanly (none if unreadable: then
    every log recovers)."""
    return {name for (name,) in read_checkpoint(data_dir / CLEAN_SHUTDOWN_FILE, 1)}


def take_cleanly_closed(data_dir: Path) -> set[str]:
    """recorded_cleanly_closed, and the file gone, durably, on return."""
    path = data_dir / CLEAN_SHUTDOWN_FILE
    if not path.exists():
        return set()
    names = recorded_cleanly_closed(data_dir)
    path.unlink()
    fsync_directory(data_dir)
    return names


def record_cleanly_closed(data_dir: Path, names: Collection[str]) -> None:
    write_checkpoint(data_dir / CLEAN_SHUTDOWN_FILE, sorted(names))
