"""The partitions this broker hosts, converged to what the store assigns it.

Hosted leaderships converge to the store: whenever the metadata cache sees a partition's
assignment change (it appeared, vanished, or its replicas changed: `assignment_changed`) and on
every start-replica, `reconcile` reads the partition's replicas from the store and starts a
leadership where this broker is assigned and none runs (startReplica, docs/design.md §13: the log is
loaded first, then the leadership elects, leads or follows as the leader node says), or stops
one where it is not (the log stays; close-replica deletes it). The cache's view may lag: a
partition it reports after this broker consumed the partition's close-replica is the deleted
one, still in the store for a moment, so a closed partition starts again only after a
start-replica for it (a new topic of the same name). The cache reports a change once:
partitions whose reconcile met a store error, or a log open that ran out of file descriptors,
are reconciled again every RECONCILE_RETRY_PAUSE_S until one succeeds. Partitions of a topic marked for deletion are
stopped and never started (topic_deletion.py). A replica whose log may have lost unflushed writes in
a machine restart leaves the ISR before its leadership starts (unclean_reboot.py).

Each hosted topic's settings are followed here (topic_configs.py) and applied to its running
partitions. One start or stop of a partition's replica runs at a time.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import pathlib

import anyio

from replog.config import BrokerConfig, TopicSettings
from replog.coord_backends import BadVersion, NoNode, SessionState, Store, StoreError
from replog.coord_backends import paths
from replog.coord_backends.base import TRANSACTION_OPS_MAX, TxnOp
from replog.coord_backends.joined import JoinedStore, commit_together
from replog.coord_backends.paths import IsrRecord, ReplicaAssignment, StateChangeRequest, TopicId
from replog.replica.manager import ReplicaManager
from replog.replica.partition_config import PartitionConfig
from replog.storage.log_config import LogConfig
from replog.replication.driver import LeadershipContext, PartitionLeadership
from replog.replication.topic_configs import TopicConfigs
from replog.tasks import cancel_and_wait, first_failure

logger = logging.getLogger(__name__)

RECONCILE_RETRY_PAUSE_S = 1.0
ISR_EXIT_ATTEMPTS_MAX = 64  # ISR writes by the leader that may race one exit
# Logs loaded by one worker-thread job (ReplicaManager.load_logs): a job each, a restarted
# broker's 10,000 loads waited in the executor's queue behind each other's hand-offs. And such
# jobs at once: in one job after another, a new topic's logs waited on each other's fsyncs, which
# concurrent jobs share (the file system commits its journal for many at once); 8 jobs of 16 at
# once slowed a restart of 10,000 clean logs, whose opens are CPU, by their contention for the GIL.
LOGS_PER_LOAD = 64
LOADS_AT_ONCE = 2
HAND_OVERS_PER_TRANSACTION = TRANSACTION_OPS_MAX // 2  # an ISR write and a leader node's deletion each


def _passing(error: StoreError | OSError) -> bool:
    """Whether a reconcile that failed with `error` may succeed if tried again as it is."""
    return isinstance(error, StoreError) or error.errno in (errno.EMFILE, errno.ENFILE)


class NotReplicaForPartition(Exception):
    """A start-replica for a partition whose replicas do not include this broker."""


async def read_replicas(store: Store | JoinedStore, path: str) -> tuple[int, ...] | None:
    """The ReplicaAssignment at `path` (a partition's replicas, or its staged ones), None if absent."""
    try:
        return ReplicaAssignment.decode((await store.get(path))[0]).replicas
    except NoNode:
        return None


async def read_topic_record(store: Store, topic: str) -> tuple[TopicId, int] | None:
    """The topic's node (its id, "" if made before topics had ids, an empty node; its partition
    count) and version; None for a topic gone."""
    try:
        data, version = await store.get(paths.topic(topic))
    except NoNode:
        return None
    return (TopicId.decode(data) if data else TopicId("")), version


class HostedPartitions:
    def __init__(self, context: LeadershipContext, config: BrokerConfig):
        self._context = context
        self.broker_id = context.broker_id
        self._store: Store = context.store
        # Thousands of assignments are read at once when a topic is created (its start-replicas,
        # then its leaderships): joined with each other (joined.py).
        self._joined_reads: Store | JoinedStore = context.joined_or_store
        self._replicas: ReplicaManager = context.replicas
        self.topic_configs = TopicConfigs(context.store, config, self._topic_config_changed)
        self.leaderships: dict[tuple[str, int], PartitionLeadership] = {}
        # Closed by close-replica while the store still assigned them here: not started again
        # until a start-replica for them, or the store stops assigning them (see reconcile).
        self._closed: set[tuple[str, int]] = set()
        self._reconciling = asyncio.Lock()
        # Partitions to reconcile again, in the order they failed; bounded by the partitions the
        # cache reports. One task retries them while any are left.
        self._to_retry: dict[tuple[str, int], None] = {}
        self._retrying: asyncio.Task | None = None

    async def reconcile(self, topic: str, partition_ids: list[int]) -> None:
        """Make this broker's leaderships of these partitions what the store assigns. Idempotent."""
        async with self._reconciling:
            being_deleted = await self._store.exists(paths.topic_deletion(topic)) is not None
            record = await read_topic_record(self._store, topic)
            topic_id = None if record is None else record[0].topic_id or None
            # Read at once: a new topic's partitions come to a broker together.
            assignments = await asyncio.gather(*(read_replicas(self._joined_reads, paths.replicas(topic, partition))
                                                 for partition in partition_ids))
            starting: list[int] = []
            for partition, assigned in zip(partition_ids, assignments):  # bounded by the topic's partitions
                key = (topic, partition)
                if record is None or not record[0].counts(partition):
                    assigned = None  # not part of the topic (yet): an addPartition's, before its commit point
                if assigned is None or self.broker_id not in assigned:
                    # Gone, or assigned elsewhere now: a leadership must not outlive its
                    # partition, nor an open replica lend its epoch and HW to a recreated one.
                    self._closed.discard(key)
                    await self._stop_replica(key, moved_off=assigned is not None)
                    continue
                if being_deleted:
                    # Not started again once closed (a broker restarted after its close-replica),
                    # nor left running when the mark is seen before the close-replica, which
                    # deletes the log.
                    await self._stop_replica(key)
                    continue
                if key in self._closed:
                    continue
                leadership = self.leaderships.get(key)
                if leadership is not None and not leadership.running:
                    # Stopped, but its stop failed (a moved-off leader's deposition met a store
                    # error) and waits for a retry; assigned here again meanwhile: the stop is
                    # finished here, and a new leadership starts.
                    await self._stop_replica(key)
                elif leadership is not None:
                    if not self._replicas.of_another_topic(topic, partition, topic_id):
                        continue
                    # Its topic was deleted and created again while this broker was cut off from
                    # the store: the leadership and the replica are the deleted topic's. The log
                    # goes as the new replica loads (ReplicaManager.load_logs).
                    logger.warning("replacing a replica of a deleted topic of the name topic=%s partition=%d broker=%d "
                                   "topic_id=%s", topic, partition, self.broker_id, topic_id)
                    await self._stop_replica(key)
                starting.append(partition)
            if starting:
                await self._start_leaderships(topic, starting, topic_id)

    async def _start_leaderships(self, topic: str, partitions: list[int], topic_id: str | None) -> None:
        """Load the partitions' logs, LOGS_PER_LOAD at a time in each of LOADS_AT_ONCE worker
        threads, and start a leadership for each log as its load ends. A log that failed to load
        is left for the next reconcile: the first such error is raised."""
        await self.topic_configs.follow(topic)
        config = LogConfig.from_topic_settings(self.topic_configs.settings(topic))
        failures: list[BaseException] = []
        batches = iter(range(0, len(partitions), LOGS_PER_LOAD))

        async def load_and_start() -> None:
            for start in batches:  # shared by the loaders: each batch is taken once
                batch = partitions[start:start + LOGS_PER_LOAD]
                loaded = await self._replicas.load_logs(topic, batch, config, topic_id)
                for partition, outcome in zip(batch, loaded):
                    if outcome is not None:
                        failures.append(outcome)
                        continue
                    if self._replicas.lost_unflushed_writes(topic, partition):
                        await self._leave_isr_after_reboot(topic, partition)
                        await self._replicas.forget_lost_writes(topic, partition)
                    leadership = PartitionLeadership(self._context, topic, partition, lambda: self.topic_configs.settings(topic))
                    self.leaderships[(topic, partition)] = leadership
                    leadership.start()

        # A loader's store error ends the others too: the reconcile that comes after it must
        # not find them still starting leaderships.
        with first_failure():
            async with anyio.create_task_group() as loaders:
                for _ in range(LOADS_AT_ONCE):
                    loaders.start_soon(load_and_start)
        if failures:
            raise failures[0]

    async def assignment_changed(self, topic: str, partition_ids: list[int]) -> None:
        """What the metadata cache calls: reconcile now, or after a pause if the store fails or
        a log cannot be opened for want of file descriptors (they come back as files and
        connections close; the cache would not report the partition again)."""
        try:
            await self.reconcile(topic, partition_ids)
        except (StoreError, OSError) as error:
            if not _passing(error):
                raise
            logger.warning("reconcile failed, retrying in %.1f s topic=%s partitions=%s broker=%d error=%s",
                           RECONCILE_RETRY_PAUSE_S, topic, partition_ids, self.broker_id, error)
            self._to_retry.update(dict.fromkeys((topic, partition) for partition in partition_ids))
            if self._retrying is None or self._retrying.done():
                self._retrying = asyncio.create_task(self._retry_reconciles(), name="reconcile-retry")
                self._retrying.add_done_callback(self._retries_ended)

    def _retries_ended(self, task: asyncio.Task) -> None:
        """Retries end when every partition was reconciled, or with the broker (cancelled);
        anything else is a bug that leaves partitions unreconciled until their next change."""
        if not task.cancelled() and task.exception() is not None:
            logger.error("reconcile retries stopped broker=%d partitions=%s", self.broker_id, sorted(self._to_retry),
                         exc_info=task.exception())

    async def _retry_reconciles(self) -> None:
        while self._to_retry:  # a partition leaves once reconciled; a failure waits the pause again
            await asyncio.sleep(RECONCILE_RETRY_PAUSE_S)
            for key in list(self._to_retry):
                try:
                    await self.reconcile(key[0], [key[1]])
                except (StoreError, OSError) as error:
                    if not _passing(error):
                        raise
                    logger.warning("reconcile failed again topic=%s partition=%d broker=%d error=%s",
                                   key[0], key[1], self.broker_id, error)
                    break
                self._to_retry.pop(key, None)

    def session_changed(self, state: SessionState) -> None:
        leading = sum(leadership.leading for leadership in self.leaderships.values())
        if state is not SessionState.CONNECTED and leading:
            # One line for all of them: each partition's own is below the default level.
            logger.warning("store session %s: leaders fenced until it is back broker=%d leaders=%d",
                           state.value, self.broker_id, leading)
        for leadership in self.leaderships.values():  # bounded by the hosted partitions
            leadership.session_changed(state)

    def brokers_changed(self) -> None:
        """The registered brokers changed: leaders check whether a follower of theirs went."""
        for leadership in self.leaderships.values():  # bounded by the hosted partitions
            leadership.brokers_changed()

    def broker_presumed_gone(self, broker_id: int) -> None:
        """`broker_id`'s process is gone (its address refused a connection): its followers
        depose it where it leads, and leaders shrink it out where it follows."""
        for leadership in self.leaderships.values():  # bounded by the hosted partitions
            leadership.broker_presumed_gone(broker_id)

    async def wait_until_settled(self, timeout_s: float) -> int:
        """Wait until every hosted partition has led, followed or lost its election, at most
        `timeout_s`; how many had not."""
        leaderships = list(self.leaderships.values())
        with anyio.move_on_after(timeout_s):
            for leadership in leaderships:  # bounded by the hosted partitions; settled stays set
                await leadership.settled.wait()
        return sum(not leadership.settled.is_set() for leadership in leaderships)

    async def hand_over(self, timeout_s: float) -> None:
        """Controlled shutdown: hand leadership to other in-sync replicas while still serving,
        so producers see one NOT_LEADER_OR_FOLLOWER and move on.

        Every leader's driver and ISR upkeep stop first. The broker has deregistered, so its
        followers no longer know where to fetch from it: an upkeep still running would shrink
        each ISR to this broker alone, and once it went no replica would be left that may lead.

        A session in doubt (the store restarting) is waited for, since no store write can
        succeed meanwhile. Best effort, within `timeout_s`: a store that stays away or does not
        answer costs the hand-over only, never the clean local shutdown that follows. A
        partition not handed over goes to another replica when this session ends, as after a
        crash, but its log here is still closed cleanly."""
        leaderships = list(self.leaderships.values())
        if not leaderships:
            return  # nothing hosted, so nothing to skip: no warning (a start that failed early)
        waiting_for = "the store's answer"
        try:
            async with asyncio.timeout(timeout_s):
                prepared = await asyncio.gather(*(leadership.begin_hand_over() for leadership in leaderships),
                                                return_exceptions=True)
                ready = []
                for leadership, outcome in zip(leaderships, prepared):
                    if isinstance(outcome, BaseException):
                        self._hand_over_skipped(leadership, outcome)
                    elif outcome is not None:
                        ready.append((leadership, outcome))
                if not ready:
                    return
                waiting_for = "the coordination session"
                await self._session_connected()
                waiting_for = "the store's answer"
                await asyncio.gather(*(self._hand_over_batch(ready[start:start + HAND_OVERS_PER_TRANSACTION])
                                       for start in range(0, len(ready), HAND_OVERS_PER_TRANSACTION)))
        except TimeoutError:
            logger.warning("controlled shutdown: hand-over abandoned after %d ms waiting for %s (session %s) broker=%d led=%s",
                           timeout_s * 1000, waiting_for, self._store.session_state.value, self.broker_id, self._led())

    async def _session_connected(self) -> None:
        async with self._store.session_events() as states:
            async for state in states:  # until connected; the caller bounds the wait
                if state is SessionState.CONNECTED:
                    return

    async def _hand_over_batch(self, batch: list[tuple[PartitionLeadership, list[TxnOp]]]) -> None:
        for leadership, _ in batch:
            leadership.stop_taking_writes()
        for leadership, outcome in await commit_together(self._store, batch):
            if not isinstance(outcome, BaseException):
                leadership.handed_over()
            elif not isinstance(outcome, (BadVersion, NoNode)):  # fenced: another leadership already
                self._hand_over_skipped(leadership, outcome)

    def _hand_over_skipped(self, leadership: PartitionLeadership, error: BaseException) -> None:
        # Anything but a store error is a bug: logged in full, yet it must not cost the clean
        # local shutdown either.
        logger.warning("controlled shutdown: hand-over skipped topic=%s partition=%d broker=%d error=%s",
                       leadership.topic, leadership.partition, self.broker_id, error,
                       exc_info=None if isinstance(error, StoreError) else error)

    def _led(self) -> list[str]:
        """The partitions this broker still leads: those a hand-over did not reach."""
        return sorted(f"{leadership.topic}-{leadership.partition}" for leadership in self.leaderships.values() if leadership.leading)

    async def stop(self) -> None:
        if self._retrying is not None:
            await cancel_and_wait(self._retrying)
        async with self._reconciling:  # after any start in flight
            # All at once: each stop waits for its tasks to end, and 10,000 in turn held a broker's
            # exit for minutes. A failed one is raised once all have stopped.
            outcomes = await asyncio.gather(*(leadership.stop() for leadership in self.leaderships.values()),
                                            return_exceptions=True)
            self.leaderships.clear()
        await self.topic_configs.close()
        failed = next((outcome for outcome in outcomes if isinstance(outcome, BaseException)), None)
        if failed is not None:
            raise failed

    def report_stray_logs(self, data_dir: pathlib.Path) -> None:
        """Logs of topics the store does not know: kept (the store may be the wrong one), reported."""
        hosted = {(partition.topic, partition.partition_id) for partition in self._replicas.partitions}
        for entry in sorted(data_dir.iterdir()):
            topic, dash, partition = entry.name.rpartition("-")
            if entry.is_dir() and dash and partition.isdigit() and (topic, int(partition)) not in hosted:
                logger.warning("stray partition log kept broker=%d dir=%s (its topic or assignment is not in the store)", self.broker_id, entry)

    # -- the state-change listener's actions -------------------------------------------------------

    async def start_replica_requested(self, request: StateChangeRequest) -> None:
        """startReplica on request. startReplica refuses a broker missing from the
        partition's replicas path, yet addPartition writes that path only after every
        start-replica was consumed (and onPartitionsReassigned sends start-replica to replicas
        not yet in it): the staged assignment under /brokers/partitions_reassigned counts too.
        The log is prepared at once; leadership starts once the partition's replicas include
        this broker (for a new partition, when the metadata cache sees it appear)."""
        topic, partition = request.topic, request.partition
        # Staged first: the admin's commit moves the assignment from there to the replicas
        # node, so in this order one of the reads finds it, whenever the commit comes.
        staged = await read_replicas(self._joined_reads, paths.reassigned_partition(topic, partition)) or ()
        assigned = await read_replicas(self._joined_reads, paths.replicas(topic, partition)) or ()
        if self.broker_id not in (*assigned, *staged):
            raise NotReplicaForPartition(f"broker {self.broker_id} is not a replica of {topic}-{partition}"
                                         f" (replicas {list(assigned)}, staged {list(staged)})")
        await self._replicas.prepare_replica(topic, partition)
        self._closed.discard((topic, partition))
        if assigned:
            await self.reconcile(topic, [partition])  # starts it if the topic counts it already

    async def close_replica_requested(self, request: StateChangeRequest) -> None:
        """closeReplica: stop leading or following, close the log and delete it."""
        key = (request.topic, request.partition)
        async with self._reconciling:
            assigned = await read_replicas(self._store, paths.replicas(*key))
            await self._stop_replica(key, moved_off=assigned is not None and self.broker_id not in assigned)
            await self._replicas.delete_replica(*key)
            if assigned is not None and self.broker_id in assigned:
                self._closed.add(key)  # the admin removes it next; until then it stays closed

    # -- helpers ---------------------------------------------------------------------------------

    async def _leave_isr_after_reboot(self, topic: str, partition: int) -> None:
        """The log may lack acknowledged records (unclean_reboot.py): take this replica out of
        the ISR before its leadership starts, so that it is never elected without them (as
        KIP-966 does for a broker back from an unclean shutdown). A leader that writes the ISR
        next finds it changed and is fenced; the partition elects again among the others.

        Not if it is the only member: an empty ISR would let any replica lead. There the
        records acknowledged since its last flush are lost if the machine lost them, as in
        Kafka; topics that must survive every replica's power loss set flush.messages=1."""
        path = paths.isr(topic, partition)
        for _ in range(ISR_EXIT_ATTEMPTS_MAX):  # each retry follows a leader's ISR write
            try:
                data, version = await self._store.get(path)
            except NoNode:
                return  # never led: nothing acknowledged
            record = IsrRecord.decode(data)
            others = tuple(member for member in record.isr if member != self.broker_id)
            if len(others) == len(record.isr):
                return
            if not others:
                logger.warning("only in-sync replica after an unclean reboot: records acknowledged since the log's last "
                               "flush may be lost topic=%s partition=%d broker=%d", topic, partition, self.broker_id)
                return
            try:
                await self._store.set(path, IsrRecord(others, record.leader_epoch).encode(), version)
            except BadVersion:
                continue
            logger.warning("left the ISR after an unclean reboot, rejoining by fetching topic=%s partition=%d broker=%d isr=%s",
                           topic, partition, self.broker_id, list(others))
            return
        raise RuntimeError(f"ISR of {topic}-{partition} changed {ISR_EXIT_ATTEMPTS_MAX} times while broker "
                         f"{self.broker_id} left it")

    def _topic_config_changed(self, topic: str, settings: TopicSettings) -> None:
        self._replicas.update_topic_config(topic, PartitionConfig.from_topic_settings(settings),
                                           LogConfig.from_topic_settings(settings))

    async def _stop_replica(self, key: tuple[str, int], *, moved_off: bool = False) -> None:
        """Stop leading or following the partition and close its replica, keeping the log.
        `moved_off`: it is assigned elsewhere now (PartitionLeadership.stop); a store error
        leaves the leadership here for the reconcile's retry."""
        leadership = self.leaderships.get(key)
        if leadership is not None:
            await leadership.stop(moved_off=moved_off)
            self.leaderships.pop(key, None)
        if self._replicas.hosted(*key) is not None:
            self._replicas.close_replica(*key)
        self._replicas.close_loaded(*key)
        if not any(topic == key[0] for topic, _ in self.leaderships):
            await self.topic_configs.forget(key[0])
