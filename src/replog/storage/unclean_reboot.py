"""Which logs may have lost writes the OS had not flushed: those not closed cleanly before the
machine itself went down (power loss, kernel panic, a VM reset).

A broker killed by a signal loses nothing it wrote: its writes sit in the page cache, which
outlives the process, and recovery finds every whole batch. A machine that goes down loses what
the page cache held, and replog, like Kafka, does not fsync each write by default: replication is
the durability. A log that was an ISR member may then lack records acknowledged with acks=all,
and electing it would lose them, so it must leave the ISR before its replica starts and rejoin
by fetching, like any follower (KIP-966 takes a broker back from an unclean shutdown out of every
ISR for the same reason). A process crash is told apart from a machine restart by the kernel's
boot id, recorded in the data directory at each start; where the boot id cannot be read, every
unclean stop counts as a machine restart.

    <data_dir>/boot-id                                the boot id of the last start here (a
                                                      checkpoint file of one entry)
    <data_dir>/<topic>-<partition>/.unclean-reboot    this log may have lost unflushed writes;
                                                      removed once its replica left the ISR

The per-log marker, not the boot id, carries the duty across starts: a broker that crashes again
before its replicas left the ISR still finds it at its next start, under the same boot id.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from replog.storage.checkpoint import fsync_directory, read_checkpoint, write_checkpoint
from replog.storage.segment import LOG_SUFFIX

BOOT_ID_FILE = "boot-id"
UNCLEAN_REBOOT_FILE = ".unclean-reboot"
KERNEL_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def current_boot_id() -> str | None:
    """The kernel's id of this boot; None where the platform has none."""
    try:
        return KERNEL_BOOT_ID.read_text().strip() or None
    except OSError:
        return None


def mark_logs_after_reboot(data_dir: Path, boot_id: str | None, closed_cleanly: Collection[str]) -> list[Path]:
    """At a broker's start, before any log opens: if the machine restarted since the last start
    on `data_dir` (or that cannot be known), mark every log not named in `closed_cleanly` (the
    last stop's record, clean_shutdown.py). Returns the log directories marked now."""
    recorded_path = data_dir / BOOT_ID_FILE
    entries = read_checkpoint(recorded_path, 1)
    recorded = entries[0][0] if len(entries) == 1 else None
    marked: list[Path] = []
    if boot_id is None or recorded != boot_id:
        for log_dir in sorted(data_dir.iterdir()):  # bounded by the partitions on this disk
            if (log_dir.is_dir() and log_dir.name not in closed_cleanly
                    and not (log_dir / UNCLEAN_REBOOT_FILE).exists() and any(log_dir.glob("*" + LOG_SUFFIX))):
                (log_dir / UNCLEAN_REBOOT_FILE).touch()
                fsync_directory(log_dir)
                marked.append(log_dir)
    if boot_id is not None and recorded != boot_id:
        # Only once the marks are durable: a crash in between must find the reboot again.
        write_checkpoint(recorded_path, [boot_id])
    return marked


def lost_unflushed_writes(log_dir: Path) -> bool:
    return (log_dir / UNCLEAN_REBOOT_FILE).exists()


def forget_lost_writes(log_dir: Path) -> None:
    """The replica has left the ISR (or needs not): from now on it rejoins like any follower."""
    try:
        (log_dir / UNCLEAN_REBOOT_FILE).unlink()
    except FileNotFoundError:
        return
    fsync_directory(log_dir)
