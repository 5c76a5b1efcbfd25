"""Which logs may have lost unflushed writes: those open when the machine went down, told apart
from a process crash by the boot id the data directory records."""

from __future__ import annotations

from replog.storage.log import Log, LogConfig
from replog.storage.unclean_reboot import (
    BOOT_ID_FILE,
    forget_lost_writes,
    lost_unflushed_writes,
    mark_logs_after_reboot,
)
from tests.support.log_fixtures import ManualClock
from tests.support.batches import build_batch


def crashed_log(data_dir, name: str):
    """A log written to and never closed, as a crash leaves it."""
    log = Log(data_dir / name, LogConfig(), ManualClock(now_ms=0))
    log.append(build_batch(), leader_epoch=0)
    log.close_handles()
    return data_dir / name


def closed_log(data_dir, name: str):
    log = Log(data_dir / name, LogConfig(), ManualClock(now_ms=0))
    log.append(build_batch(), leader_epoch=0)
    log.close()
    return data_dir / name


NONE_CLOSED_CLEANLY: frozenset[str] = frozenset()


def test_a_process_crash_under_the_same_boot_marks_nothing(tmp_path):
    mark_logs_after_reboot(tmp_path, "boot-a", NONE_CLOSED_CLEANLY)
    crashed = crashed_log(tmp_path, "t-0")
    assert mark_logs_after_reboot(tmp_path, "boot-a", NONE_CLOSED_CLEANLY) == []
    assert not lost_unflushed_writes(crashed)


def test_a_machine_restart_marks_the_logs_not_recorded_as_closed_cleanly(tmp_path):
    mark_logs_after_reboot(tmp_path, "boot-a", NONE_CLOSED_CLEANLY)
    crashed, closed = crashed_log(tmp_path, "t-0"), closed_log(tmp_path, "t-1")
    (tmp_path / "not-a-log").mkdir()
    assert mark_logs_after_reboot(tmp_path, "boot-b", {closed.name}) == [crashed]
    assert lost_unflushed_writes(crashed) and not lost_unflushed_writes(closed)
    assert "boot-b" in (tmp_path / BOOT_ID_FILE).read_text()


def test_the_mark_outlives_another_crash_until_forgotten(tmp_path):
    mark_logs_after_reboot(tmp_path, "boot-a", NONE_CLOSED_CLEANLY)
    crashed = crashed_log(tmp_path, "t-0")
    mark_logs_after_reboot(tmp_path, "boot-b", NONE_CLOSED_CLEANLY)
    # The broker crashed again before its replica left the ISR: same boot, still marked.
    assert mark_logs_after_reboot(tmp_path, "boot-b", NONE_CLOSED_CLEANLY) == []
    assert lost_unflushed_writes(crashed)
    forget_lost_writes(crashed)
    assert not lost_unflushed_writes(crashed)
    forget_lost_writes(crashed)  # idempotent


def test_without_a_boot_id_every_unclean_stop_counts_as_a_machine_restart(tmp_path):
    crashed = crashed_log(tmp_path, "t-0")
    assert mark_logs_after_reboot(tmp_path, None, NONE_CLOSED_CLEANLY) == [crashed]
    assert not (tmp_path / BOOT_ID_FILE).exists()


def test_a_log_survives_its_mark_being_opened(tmp_path):
    """The log's own stray-file cleanup must not take the mark away before the ISR exit."""
    mark_logs_after_reboot(tmp_path, "boot-a", NONE_CLOSED_CLEANLY)
    crashed = crashed_log(tmp_path, "t-0")
    mark_logs_after_reboot(tmp_path, "boot-b", NONE_CLOSED_CLEANLY)
    Log(crashed, LogConfig(), ManualClock(now_ms=0)).close()
    assert lost_unflushed_writes(crashed)
