"""DiskSpace: the data directory's free space and the state it puts the broker in, one line per
change of state, appends counted between readings, and the watch that reads it again."""

import asyncio
import errno
import logging
import threading

import pytest

from replog.storage import disk_space
from replog.storage.disk_space import DiskSpace, DiskSpaceState

MIN_FREE_BYTES = 1000
WAIT_S = 5


def lines(caplog) -> list[tuple[int, str]]:
    return [(record.levelno, record.getMessage().split(" dir=")[0]) for record in caplog.records
            if record.name == disk_space.logger.name]


def test_each_state_is_entered_with_a_warning_and_left_with_an_info_line(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=disk_space.logger.name)
    space = DiskSpace(tmp_path, MIN_FREE_BYTES)
    seen = []
    for free_bytes in (5000, 1000, 999, 600, 500, 499, 10, 700, 999, 1000, 4000):
        space.update(free_bytes)
        seen.append((space.state, space.refuses_produce, space.refuses_appends))
    ok, produce, appends = (DiskSpaceState.OK, False, False), (DiskSpaceState.PRODUCE_REFUSED, True, False), \
        (DiskSpaceState.APPENDS_REFUSED, True, True)
    assert seen == [ok, ok, produce, produce, produce, appends, appends, produce, produce, ok, ok]
    assert lines(caplog) == [
        (logging.WARNING, "free space below log.dir.min.free.bytes: produce refused with KAFKA_STORAGE_ERROR until "
                          "space returns"),
        (logging.WARNING, "free space below half of log.dir.min.free.bytes: produce, follower appends and group "
                          "coordinator writes refused with KAFKA_STORAGE_ERROR until space returns"),
        (logging.INFO, "free space back above half of log.dir.min.free.bytes: follower appends and group coordinator "
                       "writes resumed, produce still refused"),
        (logging.INFO, "free space back above log.dir.min.free.bytes: produce resumed"),
    ]
    assert space.free_bytes == 4000


def test_a_fall_straight_past_half_and_a_return_straight_above_are_one_line_each(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger=disk_space.logger.name)
    space = DiskSpace(tmp_path, MIN_FREE_BYTES)
    space.update(0)
    space.update(MIN_FREE_BYTES)
    assert [level for level, _ in lines(caplog)] == [logging.WARNING, logging.INFO]


def test_appends_count_against_the_last_reading_without_reading_again(tmp_path):
    readings = []
    space = DiskSpace(tmp_path, MIN_FREE_BYTES, free_bytes_of=lambda directory: readings.append(directory) or 1500)
    space.check()
    space.wrote(400)
    assert (space.state, space.free_bytes) == (DiskSpaceState.OK, 1100)
    space.wrote(200)
    assert (space.state, space.free_bytes) == (DiskSpaceState.PRODUCE_REFUSED, 900)
    space.wrote(500)
    assert space.state is DiskSpaceState.APPENDS_REFUSED
    assert readings == [tmp_path], "one reading, at the check"


def test_nothing_is_refused_before_the_first_reading_or_with_a_threshold_of_zero(tmp_path):
    unchecked = DiskSpace(tmp_path, MIN_FREE_BYTES)
    unchecked.wrote(10**12)
    assert unchecked.free_bytes is None and not unchecked.refuses_produce
    never = DiskSpace(tmp_path, 0)
    never.update(0)
    assert never.state is DiskSpaceState.OK


def test_the_real_reading_is_the_file_systems_free_space(tmp_path):
    space = DiskSpace(tmp_path, MIN_FREE_BYTES)
    space.check()
    assert space.free_bytes > 0


async def test_the_watch_reads_again_until_cancelled_and_outlives_a_failed_reading(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(disk_space, "CHECK_INTERVAL_S", 0.001)
    readings = iter([5000, OSError(errno.EIO, "injected"), 10, 10, 10, 5000])
    last = [5000]

    def read(directory):
        reading = next(readings, last[0])
        if isinstance(reading, Exception):
            raise reading
        last[0] = reading
        return reading

    space = DiskSpace(tmp_path, MIN_FREE_BYTES, free_bytes_of=read)
    watch = asyncio.create_task(space.watch())
    try:
        async with asyncio.timeout(WAIT_S):
            while space.state is not DiskSpaceState.APPENDS_REFUSED:  # bounded by the timeout
                await asyncio.sleep(0.001)
            while space.state is not DiskSpaceState.OK:  # bounded by the timeout
                await asyncio.sleep(0.001)
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
    assert watch.cancelled()
    assert any("free space of the log directory not read" in record.getMessage() and "error=EIO" in record.getMessage()
               for record in caplog.records)


async def test_an_append_made_while_a_reading_is_taken_is_not_undone_by_it(tmp_path, monkeypatch, caplog):
    """The reading is taken in a worker thread: an append on the event loop meanwhile may be
    missing from it. Taken as it came, it would put the free space back above the threshold
    for one interval, and the state would flap (two lines each way)."""
    caplog.set_level(logging.INFO, logger=disk_space.logger.name)
    monkeypatch.setattr(disk_space, "CHECK_INTERVAL_S", 0.001)
    reading_started, appended = threading.Event(), threading.Event()
    readings = []

    def read(directory):
        readings.append(directory)
        if len(readings) == 1:
            reading_started.set()
            appended.wait(WAIT_S)
            return 1100  # taken before the append reached the file system
        return 800

    space = DiskSpace(tmp_path, MIN_FREE_BYTES, free_bytes_of=read)
    space.update(1100)
    watch = asyncio.create_task(space.watch())
    try:
        await asyncio.to_thread(reading_started.wait, WAIT_S)
        space.wrote(300)
        appended.set()
        async with asyncio.timeout(WAIT_S):
            while len(readings) < 3:  # bounded by the timeout
                await asyncio.sleep(0.001)
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
    assert space.state is DiskSpaceState.PRODUCE_REFUSED
    assert [level for level, _ in lines(caplog)] == [logging.WARNING], "refused once, never back in between"


def test_a_negative_threshold_is_refused(tmp_path):
    with pytest.raises(ValueError, match="log.dir.min.free.bytes"):
        DiskSpace(tmp_path, -1)
