"""ReplicaManager: start/close replicas, restarts keep data and HW, periodic chores."""

import asyncio
import logging
import os
import random
import threading

import pytest

from replog.storage.checkpoint import OffsetCheckpoint
from replog.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE, recorded_cleanly_closed
from replog.storage.log import LogConfig
from replog.storage.partition_metadata import tagged_topic_id
from replog.replica.manager import (
    HIGH_WATERMARK_CHECKPOINT_FILE,
    ManagerConfig,
    ReplicaManager,
    UnknownTopicOrPartitionError,
)
from replog.replica.partition import Partition, ReplicaState
from replog.replica.producer_state import SNAPSHOT_SUFFIX
from tests.support.polling import eventually
from tests.sim.disk import PageCache
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock
from tests.support.batches import build_batch

BROKER, FOLLOWER = 1, 2
WAIT_S = 5


def make_manager(data_dir, clock=None, **intervals) -> ReplicaManager:
    return ReplicaManager(ManagerConfig(data_dir=data_dir, broker_id=BROKER, **intervals), clock or ManualClock())


def read_all(partition) -> bytes:
    return b"".join(piece.read() for piece in partition.read_for_consumer(0, 1 << 30).slices)


async def test_restart_keeps_data_high_watermark_and_producer_state(tmp_path):
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER, FOLLOWER), leader_epoch=3)
    await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=0), 1, 1000)
    await partition.append_as_leader(producer_batch(2), acks=1, timeout_ms=1000)
    partition.record_follower_fetch(FOLLOWER, 4, now_ms=1)
    committed = read_all(partition)
    await manager.shutdown()
    assert OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE).read() == {("orders", 0): 4}

    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER, FOLLOWER), leader_epoch=3)
    assert (partition.high_watermark, partition.log_end_offset) == (4, 6)
    assert read_all(partition) == committed
    retry = await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=0), 1, 10)
    assert (retry.error_code, retry.base_offset, partition.log_end_offset) == (0, 0, 6)
    await manager.shutdown()


async def test_a_loaded_log_opens_on_the_settings_given_to_the_open(tmp_path):
    """Topic settings changed between the load (before the election) and the open."""
    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(segment_bytes=1000)) == [None]
    partition = await manager.open_replica("orders", 0, LogConfig(segment_bytes=5000), (BROKER, FOLLOWER), leader_epoch=0)
    assert partition.log.config.segment_bytes == 5000
    assert partition.log.append(build_batch(payload_bytes=3000), leader_epoch=0) == (0, 0)  # more than the old size
    await manager.shutdown()


async def test_checkpointed_high_watermark_is_capped_by_the_log_end(tmp_path):
    OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE).write({("orders", 0): 99})
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER, FOLLOWER), leader_epoch=0)
    assert partition.high_watermark == 0
    await manager.shutdown()


async def test_unknown_partition_is_an_error_with_kafkas_code(tmp_path):
    manager = make_manager(tmp_path)
    manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    with pytest.raises(UnknownTopicOrPartitionError) as raised:
        manager.get_partition("orders", 1)
    assert raised.value.error_code == 3
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.close_replica("payments", 0)
    await manager.shutdown()


async def test_close_keeps_the_data_and_close_with_delete_removes_it(tmp_path):
    manager = make_manager(tmp_path)
    for partition_id in (0, 1):
        started = manager.start_replica("orders", partition_id, LogConfig(), (BROKER,), leader_epoch=0)
        await started.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
    manager.close_replica("orders", 0)
    await manager.delete_replica("orders", 1)
    assert (tmp_path / "orders-0").is_dir()
    assert not (tmp_path / "orders-1").exists()
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.get_partition("orders", 0)
    manager.checkpoint_high_watermarks()
    assert OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE).read() == {("orders", 0): 3}

    reopened = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    recreated = manager.start_replica("orders", 1, LogConfig(), (BROKER,), leader_epoch=1)
    assert (reopened.log_end_offset, recreated.log_end_offset) == (3, 0)
    await manager.shutdown()


async def test_a_deleted_replica_leaves_the_checkpoint_file_at_once(tmp_path):
    """A crash before the next periodic checkpoint must not leave the deleted replica's HW for
    one created again under its name."""
    manager = make_manager(tmp_path)
    started = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await started.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
    manager.checkpoint_high_watermarks()
    await manager.delete_replica("orders", 0)
    assert OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE).read() == {}
    await manager.shutdown()


async def test_starting_a_hosted_replica_again_takes_the_new_epoch(tmp_path):
    manager = make_manager(tmp_path)
    first = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    again = manager.start_replica("orders", 0, LogConfig(), (BROKER, FOLLOWER), leader_epoch=2, isr=(BROKER,))
    assert again is first
    assert (again.leader_epoch, again.assigned_replicas, again.isr) == (2, (BROKER, FOLLOWER), {BROKER})
    with pytest.raises(ValueError):
        manager.start_replica("orders", 7, LogConfig(), (FOLLOWER,), leader_epoch=0)
    await manager.shutdown()


async def test_shutdown_leaves_clean_logs_and_producer_snapshots(tmp_path):
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=0), 1, 1000)
    await manager.shutdown()
    assert recorded_cleanly_closed(tmp_path) == {"orders-0"}
    assert [path.name for path in (tmp_path / "orders-0").glob("*" + SNAPSHOT_SUFFIX)] == [f"{4:020d}{SNAPSHOT_SUFFIX}"]
    assert manager.partitions == ()


def _files_of(directory) -> dict[str, tuple[int, int]]:
    """Each file's (inode, mtime in ns): a checkpoint is replaced by a rename, so a write shows."""
    return {path.name: (path.stat().st_ino, path.stat().st_mtime_ns) for path in directory.iterdir()}


@pytest.mark.parametrize("written", [False, True])
async def test_a_log_untouched_since_its_clean_open_closes_without_writing(tmp_path, written):
    """A broker of 10,000 idle replicas rewrote every log's producer snapshot and recovery
    point at each shutdown, four fsyncs a log, and took seconds to exit."""
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    if written:
        await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=0), 1, 1000)
    await manager.shutdown()
    before = _files_of(tmp_path / "orders-0")

    manager = make_manager(tmp_path)
    manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await manager.shutdown()
    assert recorded_cleanly_closed(tmp_path) == {"orders-0"}
    assert _files_of(tmp_path / "orders-0") == before

    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await partition.append_as_leader(producer_batch(2, producer_id=8, producer_epoch=0, base_sequence=0), 1, 1000)
    end = partition.log_end_offset
    await manager.shutdown()
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    assert partition.log.recovery_point == end
    assert set(partition.producer_state.producers) == ({7, 8} if written else {8})
    assert (tmp_path / "orders-0" / f"{end:020d}{SNAPSHOT_SUFFIX}").exists()
    await manager.shutdown()


async def test_shutdown_closes_the_logs_off_the_event_loop_and_past_a_failed_one(tmp_path, monkeypatch):
    manager = make_manager(tmp_path)
    for partition in range(40):  # more than one batch of closes
        manager.start_replica("orders", partition, LogConfig(), (BROKER,), leader_epoch=0)
    loop_thread = threading.get_ident()
    closed_on: dict[int, int] = {}
    close_files = Partition.close_files

    def recorded(partition: Partition) -> None:
        if partition.partition_id == 7:
            raise OSError("the disk went away")
        closed_on[partition.partition_id] = threading.get_ident()
        close_files(partition)

    monkeypatch.setattr(Partition, "close_files", recorded)
    await manager.shutdown()
    assert sorted(closed_on) == [partition for partition in range(40) if partition != 7]
    assert loop_thread not in closed_on.values(), "a log was closed on the event loop"
    assert recorded_cleanly_closed(tmp_path) == {f"orders-{partition}" for partition in closed_on}  # not orders-7
    assert OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE).read().keys() == {("orders", p) for p in range(40)}


def opened_clean(caplog, name: str) -> bool:
    topic, _, partition = name.rpartition("-")
    lines = [record.getMessage() for record in caplog.records
             if record.getMessage().startswith(f"opened log topic={topic} partition={partition} ")]
    assert len(lines) == 1, lines
    return " clean=True " in lines[0]


async def test_a_start_trusts_only_the_logs_the_last_clean_stop_recorded(tmp_path, caplog):
    """One record per data directory (Kafka's LogManager): a start takes it, so that a crash
    from then on finds none, and a stop records the logs it closed and the listed ones it
    never opened, never a log a crashed life left behind."""
    caplog.set_level(logging.DEBUG, logger="replog.storage.log")
    manager = make_manager(tmp_path)
    for partition in range(3):
        manager.start_replica("orders", partition, LogConfig(), (BROKER,), leader_epoch=0)
    await manager.shutdown()
    assert recorded_cleanly_closed(tmp_path) == {"orders-0", "orders-1", "orders-2"}
    caplog.clear()
    restarted = make_manager(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    restarted.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    assert opened_clean(caplog, "orders-0")
    # A crash now: no stop records anything, and nothing is trusted at the next start.
    caplog.clear()
    after_crash = make_manager(tmp_path)
    for partition in (0, 1):
        after_crash.start_replica("orders", partition, LogConfig(), (BROKER,), leader_epoch=2)
    assert not opened_clean(caplog, "orders-0") and not opened_clean(caplog, "orders-1")
    after_crash.start_replica("orders", 3, LogConfig(), (BROKER,), leader_epoch=0)
    after_crash.close_replica("orders", 1)
    await after_crash.shutdown()
    # orders-2, left unopened by the crashed life, is not vouched for.
    assert recorded_cleanly_closed(tmp_path) == {"orders-0", "orders-1", "orders-3"}


async def test_a_replica_closed_with_its_files_later_stops_serving_now_and_closes_off_the_loop_at_shutdown(tmp_path, monkeypatch):
    """A controlled shutdown's hand-over: thousands of leaders stop taking writes at once, and
    their fsyncs must not hold the event loop."""
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    closed_on: list[int] = []
    close_files = Partition.close_files
    monkeypatch.setattr(Partition, "close_files", lambda replica: closed_on.append(threading.get_ident()) or close_files(replica))
    manager.close_replica("orders", 0, files_later=True)
    assert manager.hosted("orders", 0) is None and partition.state is ReplicaState.CLOSED
    assert closed_on == []
    await manager.shutdown()
    assert len(closed_on) == 1 and closed_on[0] != threading.get_ident()
    assert recorded_cleanly_closed(tmp_path) == {"orders-0"}


async def test_periodic_task_checkpoints_high_watermarks(tmp_path):
    manager = make_manager(tmp_path, high_watermark_checkpoint_interval_ms=10)
    manager.start()
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await partition.append_as_leader(producer_batch(5), acks=1, timeout_ms=1000)
    checkpoint = OffsetCheckpoint(tmp_path / HIGH_WATERMARK_CHECKPOINT_FILE)

    async def checkpointed() -> bool:
        return checkpoint.read() == {("orders", 0): 5}

    await eventually(checkpointed, WAIT_S, "the HW checkpoint task to write HW 5")
    await manager.shutdown()


async def test_periodic_retention_deletes_expired_segments_below_the_high_watermark(tmp_path):
    clock = ManualClock()
    manager = make_manager(tmp_path, clock, retention_check_interval_ms=10)
    config = LogConfig(segment_bytes=200, retention_ms=1000)
    partition = manager.start_replica("orders", 0, config, (BROKER,), leader_epoch=0)
    for _ in range(4):
        await partition.append_as_leader(producer_batch(1, payload_bytes=100), acks=1, timeout_ms=1000)
    assert partition.log_start_offset == 0
    clock.advance(5000)
    manager.start()

    async def retained() -> bool:
        return partition.log_start_offset == 3  # every segment but the active one

    await eventually(retained, WAIT_S, "the retention task to delete expired segments")
    assert partition.list_offsets(-2).offset == 3
    await manager.shutdown()


async def test_background_flush_makes_a_crashed_replica_reopen_from_its_flushed_end(tmp_path, caplog):
    manager = make_manager(tmp_path, recovery_point_checkpoint_interval_ms=10)
    manager.start()
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    for sequence in range(0, 40, 4):
        await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=sequence),
                                         acks=1, timeout_ms=1000)
    recovery_points = OffsetCheckpoint(tmp_path / "orders-0" / "recovery-point-offset-checkpoint")

    async def flushed() -> bool:
        return recovery_points.read() == {("orders", 0): 40}

    await eventually(flushed, WAIT_S, "the background flush to move the recovery point to the log end")
    assert (tmp_path / "orders-0" / f"{40:020d}{SNAPSHOT_SUFFIX}").exists()
    # Killed: the chores stop and the files stay as they are, with no clean shutdown.
    await manager._chores.close()
    partition.log.close_handles()

    with caplog.at_level(logging.DEBUG, logger="replog.replica"):
        reopened = make_manager(tmp_path).start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    assert reopened.log_end_offset == 40
    assert "from='snapshot at 40' batches_read=0" in caplog.text
    assert reopened.producer_state.producers[7].last_sequence == 39
    reopened.log.close_handles()


@pytest.mark.parametrize("while_flushing", [False, True])
async def test_a_replica_deleted_around_a_background_flush_is_gone_without_error(tmp_path, while_flushing):
    manager = make_manager(tmp_path)
    partition = manager.start_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await partition.append_as_leader(producer_batch(4, producer_id=7, producer_epoch=0, base_sequence=0), 1, 1000)
    if while_flushing:
        flushing = asyncio.create_task(partition.flush_in_background())
        await asyncio.sleep(0)  # into its thread
        await manager.delete_replica("orders", 0)
        await flushing
    else:
        await manager.delete_replica("orders", 0)
        await partition.flush_in_background()
    assert not (tmp_path / "orders-0").exists()


def test_intervals_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="retention_check_interval_ms"):
        ManagerConfig(data_dir=tmp_path, broker_id=1, retention_check_interval_ms=0)


async def test_a_log_of_an_earlier_topic_of_the_same_name_is_deleted_and_the_new_one_tagged(tmp_path):
    """A broker away and unassigned while the topic was deleted kept its log: the new topic of
    the name, with another id, must not serve it (simulator seed 2666)."""
    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="first") == [None]
    old = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await old.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
    await manager.shutdown()

    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="first") == [None]  # the same topic: kept
    kept = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    assert kept.log_end_offset == 3
    await manager.shutdown()

    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="second") == [None]
    new = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    assert (new.log_end_offset, new.high_watermark) == (0, 0)
    assert tagged_topic_id(manager.log_directory("orders", 0)) == "second"
    await manager.shutdown()


async def test_logs_loaded_together_each_have_their_own_outcome(tmp_path, monkeypatch):
    """A broker's start loads its logs many to a worker-thread job: a log of an earlier topic
    among them is deleted and loaded anew, and one that cannot be opened fails alone."""
    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0, 1], LogConfig(), topic_id="first") == [None, None]
    for partition in (0, 1):
        started = await manager.open_replica("orders", partition, LogConfig(), (BROKER,), leader_epoch=0)
        await started.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)
    await manager.shutdown()
    (tmp_path / "orders-1" / "partition.metadata").write_text("version: 0\ntopic_id: earlier\n")

    manager = make_manager(tmp_path)
    real_new_log = manager._new_log
    opened: list[str] = []

    def new_log(directory, log_config):
        opened.append(directory.name)
        if directory.name == "orders-2":
            raise OSError(f"injected: {directory} unreadable")
        return real_new_log(directory, log_config)

    monkeypatch.setattr(manager, "_new_log", new_log)
    outcomes = await manager.load_logs("orders", [0, 1, 2, 3], LogConfig(), topic_id="first")
    assert [type(outcome) for outcome in outcomes] == [type(None), type(None), OSError, type(None)]
    assert "orders-2" in str(outcomes[2])
    kept = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    replaced = await manager.open_replica("orders", 1, LogConfig(), (BROKER,), leader_epoch=1)
    assert (kept.log_end_offset, replaced.log_end_offset) == (3, 0)
    assert tagged_topic_id(manager.log_directory("orders", 1)) == "first"
    assert opened == ["orders-0", "orders-2", "orders-3", "orders-1"], "the earlier topic's log once deleted, after the others"
    again, = await manager.load_logs("orders", [2], LogConfig(), topic_id="first")
    assert isinstance(again, OSError) and "orders-2" in str(again)
    await manager.shutdown()


async def test_a_log_made_before_topics_had_ids_is_kept_and_tagged(tmp_path):
    manager = make_manager(tmp_path)
    untagged = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await untagged.append_as_leader(producer_batch(2), acks=1, timeout_ms=1000)
    await manager.shutdown()
    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="now") == [None]
    partition = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    assert partition.log_end_offset == 2
    assert tagged_topic_id(manager.log_directory("orders", 0)) == "now"
    await manager.shutdown()


async def test_a_torn_tag_reads_as_none_and_its_log_is_kept_and_tagged_again(tmp_path):
    """A tag waits for the log's flush, so a power loss may tear it: a torn id must not pass for
    another topic's, whose log would be deleted, records and all."""
    manager = make_manager(tmp_path)
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="abcdef") == [None]
    partition = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=0)
    await partition.append_as_leader(producer_batch(2), acks=1, timeout_ms=1000)
    await manager.shutdown()
    tag = manager.log_directory("orders", 0) / "partition.metadata"
    tag.write_text(tag.read_text()[:-4])  # "topic_id: ab": torn inside the id
    manager = make_manager(tmp_path)
    assert tagged_topic_id(manager.log_directory("orders", 0)) is None
    assert await manager.load_logs("orders", [0], LogConfig(), topic_id="abcdef") == [None]
    partition = await manager.open_replica("orders", 0, LogConfig(), (BROKER,), leader_epoch=1)
    assert partition.log_end_offset == 2
    assert tagged_topic_id(manager.log_directory("orders", 0)) == "abcdef"
    await manager.shutdown()


async def test_a_prepared_replica_directory_is_made_durably_off_the_event_loop(tmp_path, monkeypatch):
    """A start-replica makes the log's directory before the partition shows in the store: its
    name must be synced into the data directory as a new log's is (a log that opens in an
    existing directory does not sync it again), and not on the event loop, which thousands
    of them at once held behind the file system's journal."""
    import replog.replica.manager as manager_module

    synced: list[tuple[object, bool]] = []
    sync = manager_module.fsync_directory
    monkeypatch.setattr(manager_module, "fsync_directory", lambda directory: (
        synced.append((directory, threading.current_thread() is threading.main_thread())), sync(directory)))
    manager = make_manager(tmp_path)
    try:
        await manager.prepare_replica("orders", 0)
        assert manager.log_directory("orders", 0).is_dir()
        assert synced == [(tmp_path, False)]
        await manager.prepare_replica("orders", 0)
        assert len(synced) == 1, "an existing directory synced again"
    finally:
        await manager.shutdown()


async def test_a_directory_sync_is_shared_by_every_caller_that_asked_before_it_began(tmp_path, monkeypatch):
    import replog.replica.manager as manager_module

    began: list[threading.Event] = []

    def held_fsync(directory) -> None:
        release = threading.Event()
        began.append(release)
        assert release.wait(WAIT_S)

    monkeypatch.setattr(manager_module, "fsync_directory", held_fsync)
    shared = manager_module.DirectorySync(tmp_path)
    first = asyncio.ensure_future(shared.sync())
    await eventually(lambda: asyncio.sleep(0, len(began) == 1), WAIT_S, "the first fsync begun")
    later = [asyncio.ensure_future(shared.sync()) for _ in range(50)]
    await asyncio.sleep(0)
    began[0].set()
    await asyncio.wait_for(first, WAIT_S)
    await eventually(lambda: asyncio.sleep(0, len(began) == 2), WAIT_S, "the second fsync begun")
    assert not any(task.done() for task in later), "a caller returned on an fsync that began before it asked"
    began[1].set()
    await asyncio.wait_for(asyncio.gather(*later), WAIT_S)
    assert len(began) == 2


async def test_new_logs_loaded_together_cost_one_fsync_that_of_their_data_directory(tmp_path, monkeypatch):
    """A new log's tag, and its directory's name, were three fsyncs per log, which loading
    10,000 new logs waited on: the tag, contents and name, now waits for the log's first flush,
    and the directories' names for one fsync of the data directory."""
    manager = make_manager(tmp_path)
    fsyncs = []
    fsync = os.fsync

    def counted(fd: int) -> None:
        fsyncs.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(os, "fsync", counted)
    partitions = list(range(32))
    assert await manager.load_logs("orders", partitions, LogConfig(), topic_id="now") == [None] * len(partitions)
    assert fsyncs == [str(tmp_path)]
    assert all(tagged_topic_id(manager.log_directory("orders", partition)) == "now" for partition in partitions)


def _flush_in_the_background(log) -> None:
    job = log.begin_flush()
    job.run()
    assert log.complete_flush(job)


@pytest.mark.parametrize("flush", [lambda log: log.flush(), _flush_in_the_background], ids=["flush", "background"])
@pytest.mark.parametrize("seed", range(10))
async def test_a_logs_tag_survives_a_power_loss_once_the_log_is_flushed(tmp_path, seed, flush):
    """The tag, contents and name, is made durable by the log's next flush, the append path's or
    the background one, for a new log (whose first segment's name waits for that flush too) as
    for one made before topics had ids."""
    with PageCache(tmp_path, random.Random(seed)).installed() as cache:
        manager = make_manager(tmp_path)
        assert await manager.load_logs("orders", [0], LogConfig()) == [None]  # untagged, every name synced at shutdown
        await manager.open_replica("orders", 0, LogConfig(), (BROKER, FOLLOWER), leader_epoch=0)
        await manager.shutdown()
        manager = make_manager(tmp_path)
        assert await manager.load_logs("orders", [0, 1], LogConfig(), topic_id="now") == [None, None]
        for partition in (0, 1):
            started = await manager.open_replica("orders", partition, LogConfig(), (BROKER,), leader_epoch=1)
            await started.append_as_leader(producer_batch(1), acks=1, timeout_ms=1000)
            flush(started.log)
        cache.lose_unflushed(tmp_path)
    assert [tagged_topic_id(manager.log_directory("orders", partition)) for partition in (0, 1)] == ["now", "now"]
