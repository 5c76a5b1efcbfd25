"""ReplicaManager: the partitions this broker hosts, their data directory and periodic chores.

It routes; every ISR and high-watermark rule is in Partition (as Kafka's ReplicaManager leaves
them to Partition.scala). Layout of the data directory:

    <data_dir>/<topic>-<partition>/        one Log each (log.py), plus its producer snapshot
    <data_dir>/replication-offset-checkpoint  HW of every hosted partition (Kafka's file)
    <data_dir>/boot-id                        the machine's boot at the last start, and per log
                                              `.unclean-reboot` (unclean_reboot.py)
    <data_dir>/.clean-shutdown                the logs the last stop closed cleanly, present
                                              only between a clean stop and the next start
                                              (clean_shutdown.py)
    <data_dir>/.lock                          locked by the broker process using the directory
                                              (data_dir_lock.py), before this manager exists

Periodic tasks, each with its Kafka setting's interval (ManagerConfig):
    replica.high.watermark.checkpoint.interval.ms   write the HW checkpoint
    log.flush.offset.checkpoint.interval.ms         flush each log in the background (fsyncs off
                                                    the event loop), snapshot its producer state
                                                    and persist its recovery point
    log.flush.scheduler.interval.ms                 flush logs whose flush.ms has passed
    log.retention.check.interval.ms                 delete segments retention expired
    producer.id.expiration.check.interval.ms        forget silent producer ids
    log.cleaner.backoff.ms                          compact the compacted logs (storage/cleaner.py)
A failing chore is logged and retried at its next interval: a full or failing disk must not stop
the broker from serving what it can. A disk failure is one line, the same for every partition
(storage/disk_space.py's report_write_failure), not a traceback per partition and interval.
The data directory's free space (`disk_space`, watched by the broker) is handed to every
partition, which refuses appends by it.

Concurrency: owned by one event loop. Time for logic comes from the injected `clock` (ms); the
task intervals are the event loop's.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import shutil
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TypeVar

from kio.schema.errors import ErrorCode

from replog.config import SETTINGS, BrokerConfig
from replog.storage import clean_shutdown
from replog.storage.checkpoint import OffsetCheckpoint, fsync_directory
from replog.storage.disk_space import NOT_WATCHED, DiskSpace, report_write_failure
from replog.storage.errors import ReplicaError
from replog.storage.cleaner import Cleaned
from replog.storage.log import Log, LogConfig, make_log_directories
from replog.storage.partition_metadata import tagged_topic_id
from replog.storage import unclean_reboot
from replog.replica.throttle import ReplicationThrottle
from replog.replica.partition import Partition, PartitionConfig
from replog.tasks import TaskOwner

logger = logging.getLogger(__name__)
T = TypeVar("T")

HIGH_WATERMARK_CHECKPOINT_FILE = "replication-offset-checkpoint"
NEVER_MS = 2**63 - 1  # Kafka's Long.MAX_VALUE interval: the chore is off
LOGS_CLOSED_AT_ONCE = 16  # a few per worker thread: closing a log is mostly waiting on fsync


class UnknownTopicOrPartitionError(ReplicaError):
    """This broker hosts no replica of the requested partition."""

    error_code = ErrorCode.unknown_topic_or_partition


@dataclasses.dataclass(frozen=True)
class ManagerConfig:
    """Broker settings of the replica manager: Kafka's names, defaults and units.

    The intervals replog has no setting for (the HW checkpoint's, the flush scheduler's, the
    producer-id expiry check's) keep Kafka's defaults here; the others default as config.py says.
    """

    data_dir: Path
    broker_id: int
    high_watermark_checkpoint_interval_ms: int = 5_000
    recovery_point_checkpoint_interval_ms: int = SETTINGS["log.flush.offset.checkpoint.interval.ms"].default
    flush_scheduler_interval_ms: int = NEVER_MS  # Kafka's default: appends alone check flush.ms
    retention_check_interval_ms: int = SETTINGS["log.retention.check.interval.ms"].default
    producer_id_expiration_check_interval_ms: int = 600_000
    cleaner_backoff_ms: int = SETTINGS["log.cleaner.backoff.ms"].default  # NEVER_MS: the cleaner is off
    cleaner_map_max_bytes: int = SETTINGS["log.cleaner.dedupe.buffer.size"].default

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if field.name.endswith("_interval_ms") and getattr(self, field.name) < 1:
                raise ValueError(f"{field.name} must be >= 1, got {getattr(self, field.name)}")
        if self.broker_id < 0:
            raise ValueError(f"broker id must be >= 0, got {self.broker_id}")

    @classmethod
    def from_broker_config(cls, config: BrokerConfig, data_dir: Path, broker_id: int) -> ManagerConfig:
        """The manager's settings from a broker's; `data_dir` and `broker_id` are the ones the
        broker resolved (its locked directory; its id)."""
        return cls(
            data_dir=data_dir,
            broker_id=broker_id,
            retention_check_interval_ms=config["log.retention.check.interval.ms"],
            recovery_point_checkpoint_interval_ms=config["log.flush.offset.checkpoint.interval.ms"],
            cleaner_backoff_ms=config["log.cleaner.backoff.ms"] if config["log.cleaner.enable"] else NEVER_MS,
            cleaner_map_max_bytes=config["log.cleaner.dedupe.buffer.size"],
        )


class ReplicaManager:
    """The replicas hosted by one broker. See the module docstring."""

    def __init__(self, config: ManagerConfig, clock: Callable[[], int], monotonic_clock: Callable[[], int] | None = None,
                 boot_id: str | None = unclean_reboot.current_boot_id(),
                 log_flushed: Callable[[float], None] = lambda duration_s: None,
                 log_cleaned: Callable[[float, Cleaned | None], None] = lambda duration_s, cleaned: None,
                 disk_space: DiskSpace = NOT_WATCHED):
        """`clock`: wall-clock ms, for log timestamps, retention and producer expiry.
        `monotonic_clock`: ms for the durations of ISR rules (follower lag), which a step of
        the wall clock must not shrink or grow; `clock` where not given (tests' manual clocks).
        `boot_id`: the machine's current boot (the simulator's machines have their own).
        `log_flushed`: hears how long each flush of a log took, in the background or not (the
        broker's metrics); `log_cleaned`, how long each cleaning pass took and what it removed
        (None: it failed). `disk_space`: the data directory's free space, by which partitions
        refuse appends."""
        self.config = config
        self.disk_space = disk_space
        self._log_flushed = log_flushed
        self._log_cleaned = log_cleaned
        self.broker_id = config.broker_id
        # What this broker as a leader sends the replicas reassignments add (throttle.py).
        self.replication_throttle = ReplicationThrottle()
        self.data_dir = Path(config.data_dir)
        self._clock = clock
        self._monotonic_clock = monotonic_clock or clock
        self.data_dir.mkdir(parents=True, exist_ok=True)
        # Names of the log directories whose next open may trust their files: those the last
        # stop closed cleanly and not opened since, and those closed cleanly since.
        self._closed_cleanly = clean_shutdown.take_cleanly_closed(self.data_dir)
        for marked in unclean_reboot.mark_logs_after_reboot(self.data_dir, boot_id, self._closed_cleanly):
            logger.warning("log not closed before the machine restarted: it may have lost unflushed writes, and its replica "
                           "leaves the ISR before it starts broker=%d dir=%s", self.broker_id, marked)
        self._high_watermark_checkpoint = OffsetCheckpoint(self.data_dir / HIGH_WATERMARK_CHECKPOINT_FILE)
        # Read once: a partition started later takes its HW from here (brokerStartup, docs/design.md §3.1).
        self._checkpointed_high_watermarks = self._high_watermark_checkpoint.read()
        self._partitions: dict[tuple[str, int], Partition] = {}
        # The hosted partitions' topics by id, and how many of each are hosted: a follower's
        # fetch names its topic by id (Fetch v13), which the leader looks up here.
        self._hosted_topic_ids: dict[str, tuple[str, int]] = {}
        self._data_dir_sync = DirectorySync(self.data_dir)  # prepare_replica's new directories
        self._files_to_close: list[Partition] = []  # stopped serving, closed at shutdown (close_replica)
        self._opening: dict[tuple[str, int], asyncio.Future] = {}  # log opens in worker threads
        self._loaded: dict[tuple[str, int], Log] = {}  # by load_logs, for the replica's start
        self._chores = TaskOwner("periodic chore")
        # Told of every replica that starts, changes leadership or stops (after the change):
        # the group coordinator follows its __consumer_offsets partitions with it.
        self.on_replica_changed: Callable[[Partition], None] = lambda partition: None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        """Start the periodic tasks (needs a running event loop)."""
        if self._chores.keys():
            raise RuntimeError("replica manager already started")
        config = self.config
        chores = [
            (config.high_watermark_checkpoint_interval_ms, self._checkpoint_high_watermarks_in_background),
            (config.recovery_point_checkpoint_interval_ms, self._flush_in_background),
            (config.flush_scheduler_interval_ms, self._flush_due_logs),
            (config.retention_check_interval_ms, self.delete_retained_segments),
            (config.producer_id_expiration_check_interval_ms, self._remove_expired_producers),
            (config.cleaner_backoff_ms, self._clean_compacted_logs),
        ]
        for interval_ms, chore in chores:
            if interval_ms != NEVER_MS:
                self._chores.start(self._every(interval_ms, chore), name=chore.__name__)

    async def shutdown(self) -> None:
        """Stop the tasks, close every log cleanly, record which logs were (clean_shutdown.py),
        and write the HW checkpoint last, so that it holds each partition's final HW."""
        await self._chores.close()
        closing = list(self._partitions.values())
        for partition in closing:  # bounded by the hosted partitions
            partition.stop_serving()
        closing += self._files_to_close
        self._files_to_close = []
        # Each close is several fsyncs: in worker threads, LOGS_CLOSED_AT_ONCE at a time, as
        # Kafka's log manager closes its logs with a pool of threads (10,000 logs closed one
        # after the other kept a broker from exiting for most of a minute).
        unexpected: list[BaseException] = []
        for start in range(0, len(closing), LOGS_CLOSED_AT_ONCE):
            batch = closing[start:start + LOGS_CLOSED_AT_ONCE]
            outcomes = await asyncio.gather(*(asyncio.to_thread(partition.close_files) for partition in batch),
                                            return_exceptions=True)
            for partition, outcome in zip(batch, outcomes):
                if isinstance(outcome, OSError):
                    report_write_failure(self.data_dir, "close", outcome, f"{partition.topic}-{partition.partition_id}")
                elif isinstance(outcome, ReplicaError):
                    # One failed disk must not keep the other logs from closing cleanly.
                    logger.error("closing replica failed topic=%s partition=%d broker=%d epoch=%d",
                                 partition.topic, partition.partition_id, self.broker_id, partition.leader_epoch,
                                 exc_info=outcome)
                elif isinstance(outcome, BaseException):
                    unexpected.append(outcome)
                else:
                    self._closed_cleanly.add(partition.log.directory.name)
        for key in list(self._loaded):  # bounded by the partitions about to start
            self.close_loaded(*key)
        try:
            clean_shutdown.record_cleanly_closed(self.data_dir, self._closed_cleanly)
        except OSError:
            logger.exception("recording the logs closed cleanly failed: every log recovers at the next start "
                             "broker=%d", self.broker_id)
        self.checkpoint_high_watermarks()
        self._partitions.clear()
        self._hosted_topic_ids.clear()
        if unexpected:
            raise unexpected[0]
        logger.debug("replica manager shut down broker=%d", self.broker_id)

    # -- startReplica / closeReplica --------------------------------------------------------------

    def start_replica(self, topic: str, partition: int, log_config: LogConfig, assigned_replicas: Collection[int],
                      leader_epoch: int, isr: Collection[int] | None = None,
                      partition_config: PartitionConfig = PartitionConfig(), leader_id: int | None = None) -> Partition:
        """Open (recovering if need be) or create the replica's log and lead it at `leader_epoch`,
        or follow `leader_id` at that epoch when another broker leads (startReplica, docs/design.md §13).

        ISR defaults to all assigned replicas, as for a new topic in Kafka. Starting a replica
        that is already hosted moves it to the given leadership, epoch and assignment. The log
        is opened on the calling thread: the broker uses `open_replica`."""
        start = _ReplicaStart(topic, partition, log_config, tuple(assigned_replicas), leader_epoch, isr,
                              partition_config, leader_id)
        existing = self._partitions.get((topic, partition))
        if existing is not None:
            return self._restart(existing, start)
        self._check_assigned(start)
        return self._host(start, self._open(start, None))

    async def open_replica(self, topic: str, partition: int, log_config: LogConfig, assigned_replicas: Collection[int],
                           leader_epoch: int, isr: Collection[int] | None = None,
                           partition_config: PartitionConfig = PartitionConfig(),
                           leader_id: int | None = None) -> Partition:
        """start_replica with the log opened in a worker thread: recovering a large log must not
        stall the event loop, where the store session's keepalive runs.

        One open per partition at a time. A caller cancelled while its open runs leaves the log
        it opened closed (nothing hosts it), so that a later open finds it free."""
        start = _ReplicaStart(topic, partition, log_config, tuple(assigned_replicas), leader_epoch, isr,
                              partition_config, leader_id)
        key = (topic, partition)
        await self._opened_elsewhere([key])
        existing = self._partitions.get(key)
        if existing is not None:
            return self._restart(existing, start)
        self._check_assigned(start)
        loaded = self._loaded.pop(key, None)
        return self._host(start, await self._in_thread([key], lambda: self._open(start, loaded), _close_unclaimed))

    async def load_logs(self, topic: str, partitions: list[int], log_config: LogConfig,
                        topic_id: str | None = None) -> list[Exception | None]:
        """Open (recovering if need be) the logs of replicas about to start, for the startReplicas
        that follow their elections: as Kafka's LogManager, the broker loads its logs before it
        registers, and an elected leader serves at once rather than after a recovery. Each
        partition's outcome, in order: None once its log is loaded (or was already, or its
        replica is hosted), or the error its open raised.

        The logs are opened one after another in one worker-thread job (the caller runs a few
        such loads at once: replication/hosted.py).

        `topic_id`: the topic's id in the store (None: it has none). A log on disk tagged with
        another one is of an earlier topic of the same name, deleted while this broker was
        away and not assigned it (no close-replica reached it): deleted, not served as this
        topic's (docs/design.md §9.3). The logs opened are tagged with the id."""
        keys = [(topic, partition) for partition in partitions]
        opened, earlier_ids = await self._load_unopened(keys, log_config, topic_id)
        if earlier_ids:
            for (_, partition), earlier_id in earlier_ids.items():
                logger.warning("deleting a log of an earlier topic of the same name topic=%s partition=%d broker=%d "
                               "its_topic_id=%s topic_id=%s", topic, partition, self.broker_id, earlier_id, topic_id)
                await self.delete_replica(topic, partition)
            opened.update((await self._load_unopened(list(earlier_ids), log_config, topic_id))[0])
        return [outcome if isinstance(outcome := opened.get(key), Exception) else None for key in keys]

    async def _load_unopened(self, keys: list[tuple[str, int]], log_config: LogConfig, topic_id: str | None
                             ) -> tuple[dict[tuple[str, int], Log | Exception], dict[tuple[str, int], str]]:
        """_open_logs, in a worker thread, for those of `keys` neither hosted nor loaded once no
        other open of them runs; the logs opened are kept for their replicas' start."""
        await self._opened_elsewhere(keys)
        wanted = [key for key in keys if key not in self._partitions and key not in self._loaded]
        if not wanted:
            return {}, {}
        opened, earlier_ids = await self._in_thread(wanted, lambda: self._open_logs(wanted, log_config, topic_id),
                                                    _close_unclaimed_logs)
        self._loaded.update((key, log) for key, log in opened.items() if isinstance(log, Log))
        return opened, earlier_ids

    def _open_logs(self, keys: list[tuple[str, int]], log_config: LogConfig,
                   topic_id: str | None) -> tuple[dict[tuple[str, int], Log | Exception], dict[tuple[str, int], str]]:
        """In a worker thread: each log opened and tagged with `topic_id`, or the error its open
        raised; and apart, unopened, the ids of the logs tagged with another topic's."""
        opened: dict[tuple[str, int], Log | Exception] = {}
        earlier_ids: dict[tuple[str, int], str] = {}
        with contextlib.suppress(OSError):  # each log's open below meets it again, as its own error
            make_log_directories([self.log_directory(*key) for key in keys])
        for key in keys:  # bounded by the partitions loaded together
            directory = self.log_directory(*key)
            try:
                earlier_id = tagged_topic_id(directory)
                if topic_id is not None and earlier_id not in (None, topic_id):
                    earlier_ids[key] = earlier_id
                    continue
                log = self._new_log(directory, log_config)
                if topic_id is not None and log.topic_id != topic_id:  # untagged, or deleted and made again
                    log.tag_topic_id(topic_id)
                opened[key] = log
            except Exception as error:  # one unreadable log must not keep the others from loading
                opened[key] = error
        return opened, earlier_ids

    def close_loaded(self, topic: str, partition: int) -> None:
        """The replica will not start after all: close the log load_logs opened for it."""
        loaded = self._loaded.pop((topic, partition), None)
        if loaded is not None:
            loaded.close()
            self._closed_cleanly.add(loaded.directory.name)

    def _new_log(self, directory: Path, log_config: LogConfig) -> Log:
        """Open a log, in any thread (one open per log at a time): trusted if closed cleanly."""
        closed_cleanly = directory.name in self._closed_cleanly
        self._closed_cleanly.discard(directory.name)  # from here on, writes may come
        return Log(directory, log_config, self._clock, self._log_flushed, closed_cleanly=closed_cleanly)

    async def _opened_elsewhere(self, keys: list[tuple[str, int]]) -> None:
        while openings := {self._opening[key] for key in keys if key in self._opening}:  # each open ends: bounded by the openers
            await asyncio.wait(openings)

    async def _in_thread(self, keys: list[tuple[str, int]], open_: Callable[[], T],
                         close_unclaimed: Callable[[asyncio.Future], None]) -> T:
        """One open of a partition's files at a time, in a worker thread. A caller cancelled
        meanwhile leaves what it opened closed (`close_unclaimed`: nothing holds it), so a later
        open finds it free."""
        opening = asyncio.ensure_future(asyncio.to_thread(open_))
        for key in keys:
            self._opening[key] = opening

        def opened(_: asyncio.Future) -> None:
            for key in keys:
                if self._opening.get(key) is opening:
                    del self._opening[key]

        opening.add_done_callback(opened)
        try:
            return await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(close_unclaimed)
            raise

    def _restart(self, existing: Partition, start: "_ReplicaStart") -> Partition:
        if start.follows(self.broker_id):
            existing.become_follower(start.leader_id, start.leader_epoch, self._monotonic_clock())
        else:
            existing.become_leader(start.leader_epoch, start.assigned_replicas, start.isr_or_all, self._monotonic_clock())
        self.on_replica_changed(existing)
        return existing

    def _check_assigned(self, start: "_ReplicaStart") -> None:
        if self.broker_id not in start.assigned_replicas:
            raise ValueError(f"broker {self.broker_id} is not among the replicas {list(start.assigned_replicas)} "
                             f"of {start.topic}-{start.partition}")

    def _open(self, start: "_ReplicaStart", loaded: Log | None) -> Partition:
        """The replica's log (unless `loaded` already) and partition state, read from disk:
        any thread."""
        if loaded is None:
            log = self._new_log(self.log_directory(start.topic, start.partition), start.log_config)
        else:
            log = loaded
            log.update_config(start.log_config)  # the topic's settings may have changed since the load
        checkpointed_high_watermark = self._checkpointed_high_watermarks.get((start.topic, start.partition), 0)
        try:
            return Partition(log, self.broker_id, start.leader_epoch, start.assigned_replicas, start.isr_or_all,
                             checkpointed_high_watermark, start.partition_config, self._monotonic_clock(),
                             start.leader_id, disk_space=self.disk_space)
        except BaseException:
            # Nothing would hold the log, nor ever close it (its files stay open), and the next
            # open makes another: its descriptors go back now (a producer-state file that met
            # EMFILE; nothing was written since the load).
            log.close_handles()
            raise

    def _host(self, start: "_ReplicaStart", started: Partition) -> Partition:
        self._partitions[(start.topic, start.partition)] = started
        self._count_hosted(started, 1)
        logger.debug("started replica topic=%s partition=%d broker=%d epoch=%d hw=%d leo=%d",
                    start.topic, start.partition, self.broker_id, start.leader_epoch, started.high_watermark,
                    started.log_end_offset)
        self.on_replica_changed(started)
        return started

    def close_replica(self, topic: str, partition: int, *, files_later: bool = False) -> None:
        """Stop hosting the replica and keep its data (closeReplica; delete_replica
        removes it). `files_later`: only stop serving it now, and close its files with the rest
        at shutdown, in worker threads (a controlled shutdown's hand-over)."""
        closing = self.get_partition(topic, partition)
        self._unhost(closing)
        if files_later:
            closing.stop_serving()
            self._files_to_close.append(closing)
        else:
            closing.close()
            self._closed_cleanly.add(closing.log.directory.name)
        self._checkpointed_high_watermarks[(topic, partition)] = closing.high_watermark
        self.on_replica_changed(closing)

    async def prepare_replica(self, topic: str, partition: int) -> None:
        """startReplica of a partition the store does not show yet (an admin is adding it): make
        its log directory, so that a disk that cannot hold it fails the admin's wait rather than
        the partition's first election. In a worker thread: thousands come at once when a topic
        is created, and each directory's creation waits on the file system's journal, which the
        fsyncs of the logs being opened keep busy.

        Its name is synced into the data directory before the log is opened, as a log that makes
        its own directory does (a log opening in an existing one does not), by a sync that
        thousands of new directories share (DirectorySync): one each made a large topic's
        creation slower."""
        if await asyncio.to_thread(_made, self.log_directory(topic, partition)):
            await self._data_dir_sync.sync()

    async def delete_replica(self, topic: str, partition: int) -> None:
        """closeReplica with deletion, hosted or not: a broker drains its close-replica requests
        before it opens any replica, so a log deleted while it was down is only on disk. The
        files go in a worker thread: a log of many segments takes long to remove."""
        self._closed_cleanly.discard(self.log_directory(topic, partition).name)
        hosted = self.hosted(topic, partition)
        if hosted is not None:
            self._unhost(hosted)
            hosted.stop_for_deletion()
            self.on_replica_changed(hosted)
            await self._forget_high_watermark(topic, partition)
            await asyncio.to_thread(hosted.remove_files)
            return
        self.close_loaded(topic, partition)
        await self._forget_high_watermark(topic, partition)
        directory = self.log_directory(topic, partition)
        if directory.exists():
            await asyncio.to_thread(shutil.rmtree, directory)
            logger.info("deleted replica log topic=%s partition=%d broker=%d dir=%s", topic, partition, self.broker_id, directory)

    async def _forget_high_watermark(self, topic: str, partition: int) -> None:
        """Out of the checkpoint file too, before the files go: a replica recreated under the
        name (a topic deleted and created again, a partition moved back) must not start from
        the deleted one's HW after a crash, which would count its unacknowledged records as
        committed (the simulator found it: the file kept the entry until its next periodic write)."""
        if self._checkpointed_high_watermarks.pop((topic, partition), None) is not None:
            await self._checkpoint_high_watermarks_in_background()

    def lost_unflushed_writes(self, topic: str, partition: int) -> bool:
        """The log was open when the machine went down: it must not be elected before the
        replica has left the ISR (unclean_reboot.py)."""
        return unclean_reboot.lost_unflushed_writes(self.log_directory(topic, partition))

    async def forget_lost_writes(self, topic: str, partition: int) -> None:
        await asyncio.to_thread(unclean_reboot.forget_lost_writes, self.log_directory(topic, partition))

    def update_topic_config(self, topic: str, partition_settings: PartitionConfig, log_settings: LogConfig) -> None:
        """The topic's settings changed (IncrementalAlterConfigs): every hosted partition of it
        runs on them from its next request on, as in Kafka."""
        for hosted in self._partitions.values():  # bounded by the hosted partitions
            if hosted.topic == topic:
                hosted.update_config(partition_settings)
                hosted.log.update_config(log_settings)

    def _unhost(self, partition: Partition) -> None:
        del self._partitions[(partition.topic, partition.partition_id)]
        self._count_hosted(partition, -1)

    def _count_hosted(self, partition: Partition, change: int) -> None:
        topic_id = partition.topic_id
        if topic_id is None:
            return
        name, count = self._hosted_topic_ids.get(topic_id, (partition.topic, 0))
        if count + change:
            self._hosted_topic_ids[topic_id] = (name, count + change)
        else:
            del self._hosted_topic_ids[topic_id]

    def topic_of_id(self, topic_id: str) -> str | None:
        """The name of the topic with `topic_id`, if a partition of it is hosted here."""
        hosted = self._hosted_topic_ids.get(topic_id)
        return None if hosted is None else hosted[0]

    def of_another_topic(self, topic: str, partition: int, topic_id: str | None) -> bool:
        """Whether the replica's log, hosted or loaded for its start, is tagged with a topic id
        other than `topic_id`: it is a deleted topic's of the same name. False where either id
        is unknown."""
        hosted = self._partitions.get((topic, partition))
        log = hosted.log if hosted is not None else self._loaded.get((topic, partition))
        held = None if log is None else log.topic_id
        return held is not None and topic_id is not None and held != topic_id

    def log_directory(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def hosted(self, topic: str, partition: int) -> Partition | None:
        return self._partitions.get((topic, partition))

    def get_partition(self, topic: str, partition: int) -> Partition:
        found = self.hosted(topic, partition)
        if found is None:
            raise UnknownTopicOrPartitionError(f"broker {self.broker_id} hosts no replica of {topic}-{partition}")
        return found

    @property
    def partitions(self) -> tuple[Partition, ...]:
        return tuple(self._partitions.values())

    # -- periodic chores -------------------------------------------------------------------------

    async def _every(self, interval_ms: int, chore: Callable[[], object]) -> None:
        while True:  # ends when shutdown cancels the task
            await asyncio.sleep(interval_ms / 1000)
            try:
                outcome = chore()
                if inspect.isawaitable(outcome):
                    await outcome
            except OSError as error:
                report_write_failure(self.data_dir, chore.__name__, error, f"broker {self.broker_id}")
            except ReplicaError:
                logger.exception("periodic chore failed chore=%s broker=%d", chore.__name__, self.broker_id)

    def checkpoint_high_watermarks(self) -> None:
        """Write the HW of every hosted partition, and keep the entries of closed (not deleted)
        replicas so that they come back with their HW if started again."""
        self._high_watermark_snapshot()()

    async def _checkpoint_high_watermarks_in_background(self) -> None:
        """checkpoint_high_watermarks with the write and its fsyncs in a worker thread."""
        await asyncio.to_thread(self._high_watermark_snapshot())

    def _high_watermark_snapshot(self) -> Callable[[], None]:
        for partition in self._partitions.values():  # bounded by the hosted partitions
            self._checkpointed_high_watermarks[(partition.topic, partition.partition_id)] = partition.high_watermark
        return self._high_watermark_checkpoint.snapshot(self._checkpointed_high_watermarks)

    def delete_retained_segments(self) -> int:
        """Apply retention to every hosted partition; returns the segments deleted."""
        return sum(partition.delete_retained_segments() for partition in self._partitions.values())

    async def _clean_compacted_logs(self) -> None:
        """One cleaning pass over each compacted log that has enough to clean, one log at a time
        (Kafka's log.cleaner.threads=1): the pass's disk work and memory stay bounded."""
        for partition in list(self._partitions.values()):  # bounded by the hosted partitions
            started_s = time.perf_counter()
            try:
                cleaned = await partition.clean(self.config.cleaner_map_max_bytes)
            except (OSError, ReplicaError) as error:
                # One log the cleaner cannot read must not keep the others from being cleaned.
                logger.warning("cleaning log failed topic=%s partition=%d broker=%d error=%s",
                               partition.topic, partition.partition_id, self.broker_id, error)
                self._log_cleaned(time.perf_counter() - started_s, None)
                continue
            if cleaned is not None:
                self._log_cleaned(time.perf_counter() - started_s, cleaned)

    async def _flush_in_background(self) -> None:
        for partition in list(self._partitions.values()):  # bounded by the hosted partitions
            started_s = time.perf_counter()
            try:
                if await partition.flush_in_background():
                    self._log_flushed(time.perf_counter() - started_s)
            except OSError as error:
                # One failing log must not keep the others' recovery points from moving.
                report_write_failure(self.data_dir, "background flush", error, f"{partition.topic}-{partition.partition_id}")
            except ReplicaError:
                logger.exception("background flush failed topic=%s partition=%d broker=%d",
                                 partition.topic, partition.partition_id, self.broker_id)

    def _flush_due_logs(self) -> None:
        for partition in self._partitions.values():  # bounded by the hosted partitions
            partition.log.flush_if_due()

    def _remove_expired_producers(self) -> None:
        now_ms = self._clock()
        for partition in self._partitions.values():  # bounded by the hosted partitions
            partition.remove_expired_producers(now_ms)


@dataclasses.dataclass(frozen=True)
class _ReplicaStart:
    """What a startReplica asks for."""

    topic: str
    partition: int
    log_config: LogConfig
    assigned_replicas: tuple[int, ...]
    leader_epoch: int
    isr: Collection[int] | None
    partition_config: PartitionConfig
    leader_id: int | None

    def follows(self, broker_id: int) -> bool:
        return self.leader_id is not None and self.leader_id != broker_id

    @property
    def isr_or_all(self) -> Collection[int]:
        return self.assigned_replicas if self.isr is None else self.isr


def _close_unclaimed(opening: asyncio.Future) -> None:
    """The replica of an open whose caller was cancelled: closed, since nothing holds it."""
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()


def _close_unclaimed_logs(opening: asyncio.Future) -> None:
    """The logs of a load whose caller was cancelled (ReplicaManager._open_logs): closed."""
    if not opening.cancelled() and opening.exception() is None:
        opened, _ = opening.result()
        for log in opened.values():
            if isinstance(log, Log):
                log.close()


def _made(directory: Path) -> bool:
    """Make `directory`; False if it was there already."""
    try:
        directory.mkdir()
    except FileExistsError:
        return False
    return True


class DirectorySync:
    """fsyncs of one directory, shared: each caller returns once an fsync that began after it
    asked has completed, so every name it made before asking is durable, and the names of
    thousands of directories made at once cost a few fsyncs rather than one each. At most one
    fsync runs and one waits to run; a failure reaches the callers that waited for that one."""

    def __init__(self, directory: Path):
        self._directory = directory
        self._running: asyncio.Future | None = None
        self._next: asyncio.Future | None = None  # not begun yet: a caller may still join it

    async def sync(self) -> None:
        if self._next is None:
            self._next = asyncio.ensure_future(self._after(self._running))
            # Retrieved here too: its callers may all have been cancelled meanwhile.
            self._next.add_done_callback(lambda done: done.cancelled() or done.exception())
        await asyncio.shield(self._next)

    async def _after(self, running: asyncio.Future | None) -> None:
        if running is not None:
            await asyncio.gather(running, return_exceptions=True)  # its outcome is its own callers'
        self._running, self._next = self._next, None
        await asyncio.to_thread(fsync_directory, self._directory)
