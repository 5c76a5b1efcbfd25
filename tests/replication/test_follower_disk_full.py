"""A follower whose data directory runs out of space: its fetcher neither fetches what it could
not append nor fills the log with warnings, backs off, and catches up with its leader by itself
once the disk takes writes again. Wired in-process as test_follower.py's Cluster."""

import errno
import logging
import os

from replog.replica.partition import Partition
from replog.replication import fetcher as fetcher_module
from replog.storage.disk_space import DiskSpace
from replog.storage.log import Log
from tests.support.polling import eventually
from tests.replication.test_follower import A, B, WAIT_S, Cluster, message, now_ms
from tests.support.log_fixtures import ManualClock, read_all

MIN_FREE_BYTES = 1 << 20


def open_follower(cluster: Cluster, space: DiskSpace) -> Partition:
    log = Log(cluster.root / f"broker-{B}" / "orders-0", cluster.log_config, ManualClock())
    follower = Partition(log, B, 1, (A, B), (A,), 0, cluster.config, now_ms(), leader_id=A, disk_space=space)
    cluster.replicas[B] = follower
    return follower


def counting_fetches(cluster: Cluster) -> list[int]:
    asked: list[int] = []
    make_fetch = cluster.fetch_from

    def fetch_from(follower, leader):
        fetch = make_fetch(follower, leader)

        async def counted(spec):
            asked.append(spec.fetch_offset)
            return await fetch(spec)
        return counted

    cluster.fetch_from = fetch_from
    return asked


def fetcher_warnings(caplog) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == fetcher_module.logger.name
            and record.levelno >= logging.WARNING]


async def test_a_follower_short_of_space_waits_without_fetching_and_catches_up_once_space_returns(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger=fetcher_module.logger.name)
    cluster = Cluster(tmp_path)
    try:
        leader = cluster.open(A, leader=A, epoch=1, assigned=(A, B), isr=(A,))
        for stamp in range(3):
            await leader.append_as_leader(message(stamp), acks=1, timeout_ms=1000)
        space = DiskSpace(tmp_path, MIN_FREE_BYTES)
        space.update(MIN_FREE_BYTES // 4)  # below half the threshold: followers append nothing
        follower = open_follower(cluster, space)
        asked = counting_fetches(cluster)
        cluster.start_fetcher(B)

        async def backed_off_thrice() -> bool:
            return len([record for record in caplog.records if "fetch from leader failed" in record.getMessage()]) >= 3

        await eventually(backed_off_thrice, WAIT_S, "the fetcher to back off three times")
        assert asked == [] and follower.log_end_offset == 0
        assert not fetcher_warnings(caplog), "the disk state's own line says it; no line per backoff"

        space.update(MIN_FREE_BYTES // 2)  # produce still refused here, followers append again

        async def caught_up() -> bool:
            return follower.log_end_offset == leader.log_end_offset

        await eventually(caught_up, WAIT_S, "the follower to catch up")
        assert read_all(follower.log, 0) == read_all(leader.log, 0)
    finally:
        await cluster.shutdown()


async def test_a_follower_append_the_disk_fails_is_retried_with_one_line_for_it(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    cluster = Cluster(tmp_path)
    try:
        leader = cluster.open(A, leader=A, epoch=1, assigned=(A, B), isr=(A,))
        await leader.append_as_leader(message(1, count=2), acks=1, timeout_ms=1000)
        follower = open_follower(cluster, DiskSpace(tmp_path, 0))
        real_pwrite = os.pwrite
        failed = []

        def pwrite(fd, data, position):
            if len(failed) < 3:
                failed.append(position)
                raise OSError(errno.ENOSPC, "No space left on device")
            return real_pwrite(fd, data, position)

        monkeypatch.setattr(os, "pwrite", pwrite)
        cluster.start_fetcher(B)

        async def caught_up() -> bool:
            return follower.log_end_offset == leader.log_end_offset

        await eventually(caught_up, WAIT_S, "the follower to catch up after three failed appends")
        assert failed == [0, 0, 0], "retried from the same offset, nothing torn left in between"
        assert read_all(follower.log, 0) == read_all(leader.log, 0)
        assert not fetcher_warnings(caplog)
        failures = [record.getMessage() for record in caplog.records if record.levelno == logging.WARNING
                    and record.getMessage().startswith("log directory write failed")]
        assert len(failures) == 3 and len(set(failures)) == 1, "one text: the repeat filter keeps one line"
        assert failures[0].endswith("writing=follower append error=ENOSPC")
    finally:
        monkeypatch.undo()
        await cluster.shutdown()
