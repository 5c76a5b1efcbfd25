"""One seeded schedule of the deterministic simulation (after Kafka's RaftEventSimulationTest,
FoundationDB's simulator and TigerBeetle's VOPR).

Three brokers (node.py: replog's real replication code on real logs) share one in-process store
and a simulated network, in one event loop with virtual time (loop.py). Everything that varies
comes from one `random.Random(seed)`: the delays of store operations and messages, which writes
fail or lose their replies, which messages drop, and the nemesis's faults: topic settings
altered (min.insync.replicas, segment.bytes, through the brokers' own config watches), the
topic deleted and created again (recreate.py, through the brokers' state-change queues and
metadata caches; at most RECREATES_MAX times a schedule, so that most of it replicates), flaky
store clients, cut links, ports that refuse connections of a running broker (which its peers then
presume gone), isolated brokers, suspended and expired sessions, pauses (SIGSTOP, past the session
timeout or not), crashes (SIGKILL) and restarts, and power losses: a crash of the broker's machine,
whose files lose what was not flushed (disk.py) and which restarts with a new boot id. A producer appends numbered records with
acks=all to the partition's leader meanwhile and remembers what was acknowledged: one record a
batch, keyed from a few KEYS, its number the batch's timestamp.

One schedule in COMPACTED_EVERY has a compacted topic (cleanup.policy=compact, 512-byte segments,
a low min.cleanable.dirty.ratio) and brokers whose cleaners run every second, so that every
replica cleans its log below its HW and recovery point while the faults go on; alter_config may
turn compaction off and on again there. Every cleaning pass that changed a log is traced and
counted (`Outcome.cleanings`, `records_removed`): test_simulation.py requires that most compacted
schedules remove records, so that their invariants are tested on cleaned logs.

The brokers run with Kafka's authorizer and authenticate to one another as BROKER_PRINCIPAL,
which BROKER_ACLS (written to the store as CreateAcls writes them) allows ClusterAction on the
cluster: an ACL, not super.users, so that every follower request goes through the ACL checks.
A follower request refused (network.py) fails the schedule at once: a broker's own traffic
refused is a broken check, not a fault to survive. The nemesis's alter_acls adds and removes an
operator's ACL beside the brokers', so that the node holding theirs is rewritten and read again
by every broker's ACL feed while the faults go on.

One schedule in TRANSACTIONAL_EVERY (by seed, compacted in one of TRANSACTIONAL_COMPACTED_EVERY) also runs transactions
(transactions.py): transactional producers writing to both partitions beside the plain producer,
a modelled transaction coordinator writing the markers with replog's partitions' own
write_txn_marker, and the faults of transactions: coordinator failovers, lost marker replies,
zombie producers and producers stalled past their transaction timeout. The topic is never
deleted there (a transaction across a topic's recreation is not what is tested). After every
step the invariants of transaction_invariants.py are checked as well, and after the liveness of
the partitions every transaction must end within LIVENESS_S: nothing unstable left, and each
committed transaction visible to read_committed on all its partitions.

After every step the invariants of invariants.py are checked. Then everything heals (faults
off, links mended, sessions reconnected, paused brokers resumed, crashed ones restarted from
their directories, recovery running as after a real crash) and liveness is required: within
LIVENESS_S of virtual time the topic exists (a create in flight has completed) and every
partition has a working leader (the store's leader node names a broker whose replica leads it,
unfenced, at the node's epoch) that acknowledges an acks=all produce.

The same seed gives the same schedule: `Outcome.trace` (what the harness saw, with virtual
times) is identical from run to run.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import pathlib
import random
import shutil
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from replog import admin
from replog.admin.acls import create_acls, delete_acls
from replog.config import load_broker_config
from replog.coord_backends import NoNode, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment, TopicConfig
from replog.replica.partition import Partition, ReplicaState
from replog.replica.results import AppendResult
from replog.security.acls import CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, AclOperation, AclPermissionType
from replog.security.acls import PatternType, ResourcePattern, ResourceType
from replog.spark_io.records import OutgoingRecord, encode_batch
from replog.storage.log import Log
from tests.sim.disk import PageCache
from tests.sim.invariants import Ack, Checker, Violation
from tests.sim.loop import START_S, Deadlock, VirtualTimeLoop
from tests.sim.network import SimNetwork
from tests.sim.node import SimBroker
from tests.sim.recreate import recreate_topic
from tests.sim.store import SimStore, make_watch_order_deterministic
from tests.sim.transaction_invariants import TransactionChecker
from tests.sim.transactions import ModelCoordinator, TransactionalProducers

TOPIC = "sim"
PARTITIONS = 2
BROKER_IDS = (0, 1, 2)
SESSION_TIMEOUT_MS = 6_000
TOPIC_OVERRIDES = {"min.insync.replicas": "2"}
# What the alter_config fault draws from, as IncrementalAlterConfigs would set it: any
# min.insync.replicas the replication factor allows, and segments small enough to roll often.
ALTERED_SETTINGS = {"min.insync.replicas": ("1", "2", "3"), "segment.bytes": ("512", "4096", "1073741824")}
# One schedule in COMPACTED_EVERY (by seed) has a compacted topic: segments small and a dirty
# ratio low enough that whole segments fall below the HW and get cleaned within seconds, and an
# alter_config that may also switch compaction off (delete) and on again. compact,delete cleans
# as compact does here: retention is checked every 5 minutes, after a schedule has ended.
COMPACTED_EVERY = 3
COMPACTED_OVERRIDES = {"cleanup.policy": "compact", "segment.bytes": "512", "min.cleanable.dirty.ratio": "0.1"}
ALTERED_COMPACTED_SETTINGS = {**ALTERED_SETTINGS, "cleanup.policy": ("compact", "compact,delete", "delete")}
# Few keys, so that most records are superseded by a later one of their key within a schedule.
KEYS = tuple(f"key-{index}".encode() for index in range(8))
VALUE = b"v" * 16
BROKER_SETTINGS = {
    "internal.segment.bytes.min": "512",  # ALTERED_SETTINGS' and COMPACTED_OVERRIDES' small segments
    "replica.lag.time.max.ms": "2000",
    "preferred.replica.election.wait.ms": "50",
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "5",
    "coord.session.timeout.ms": str(SESSION_TIMEOUT_MS),
    "log.flush.offset.checkpoint.interval.ms": "2000",
    "log.cleaner.backoff.ms": "1000",
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
}
BROKER_PRINCIPAL = "User:broker"
BROKER_ACLS = (AclBinding(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL),
                          AccessControlEntry(BROKER_PRINCIPAL, "*", AclOperation.CLUSTER_ACTION, AclPermissionType.ALLOW)),)
OPERATOR_PRINCIPAL = "User:admin"
OPERATOR_ACL = AclBinding(BROKER_ACLS[0].pattern,
                          AccessControlEntry(OPERATOR_PRINCIPAL, "*", AclOperation.ALTER, AclPermissionType.ALLOW))
FAULT_PHASE_S = 20.0
LIVENESS_S = 60.0
PRODUCE_TIMEOUT_MS = 3_000
POLL_S = 0.1
FAULT_GAP_S = (0.1, 1.5)
LIVELOCK_STEPS = 50_000  # a healthy schedule never spins this long at one instant
FAULTS = ("alter_config", "flaky_store", "cut_link", "isolate", "suspend", "expire", "pause", "crash", "power_loss",
          "recreate_topic", "refuse_connections", "reassign", "alter_acls")
# Transactional schedules: the seeds equal to TRANSACTIONAL_SEED modulo TRANSACTIONAL_EVERY, none of
# them a multiple of COMPACTED_EVERY; one in TRANSACTIONAL_COMPACTED_EVERY of them has a compacted
# topic too, whose cleaners apply their transactional rules (aborted records and markers removed).
TRANSACTIONAL_EVERY = 12
TRANSACTIONAL_SEED = 1
TRANSACTIONAL_COMPACTED_EVERY = 2
TRANSACTIONAL_FAULTS = tuple(fault for fault in FAULTS if fault != "recreate_topic") + (
    "coordinator_failover", "fence_producer", "stall_producer")
REASSIGNMENT_CANCEL_CHANCE = 0.3
RECREATES_MAX = 2


@dataclasses.dataclass
class Outcome:
    seed: int
    trace: list[str]
    violation: str | None
    virtual_s: float
    steps: int
    acknowledged: int
    compacted: bool  # the topic was created compacted
    cleanings: int  # cleaning passes that changed a log
    records_removed: int  # by those passes
    transactional: bool  # transactions ran
    committed: int  # transactions committed
    aborted: int  # and aborted


class Simulation:
    def __init__(self, seed: int, root: pathlib.Path, acls: tuple[AclBinding, ...] = BROKER_ACLS):
        self.seed = seed
        self._acls = acls
        self.rng = random.Random(seed)
        self.transactional = seed % TRANSACTIONAL_EVERY == TRANSACTIONAL_SEED
        self.compacted = seed % COMPACTED_EVERY == 0 or (
            self.transactional and seed // TRANSACTIONAL_EVERY % TRANSACTIONAL_COMPACTED_EVERY == 1)
        self._overrides = {**TOPIC_OVERRIDES, **COMPACTED_OVERRIDES} if self.compacted else TOPIC_OVERRIDES
        self._altered_settings = ALTERED_COMPACTED_SETTINGS if self.compacted else ALTERED_SETTINGS
        self.root = root / f"seed-{seed}"
        self.trace: list[str] = []
        self.loop = VirtualTimeLoop(after_step=self._after_step)
        self.loop.set_exception_handler(self._loop_exception)
        self._partitions = [(TOPIC, partition) for partition in range(PARTITIONS)]
        self.transaction_checker = TransactionChecker()
        self.checker = Checker(self.note, self._store_isr, self._store_leader, self.compacted,
                               self.transaction_checker.aborted)
        self._faults = TRANSACTIONAL_FAULTS if self.transactional else FAULTS
        self._coordinator = ModelCoordinator(self.rng, self.note, self.loop.time, self._named_leader, self.transaction_checker)
        self._transactional_producers = TransactionalProducers(self.rng, self.note, self._coordinator,
                                                               self.transaction_checker, self.produce, PARTITIONS,
                                                               PRODUCE_TIMEOUT_MS)
        self.network = SimNetwork(self.rng)
        self.brokers: dict[int, SimBroker] = {}
        self.page_cache = PageCache(self.root, self.rng)
        self._boots = {broker_id: 0 for broker_id in BROKER_IDS}  # machine restarts so far
        self._lives = {broker_id: 0 for broker_id in BROKER_IDS}  # process starts so far
        # (topic, partition) -> brokers that lost power while in its ISR and have not left it since
        self._lost_in_isr: dict[tuple[str, int], set[int]] = {key: set() for key in self._partitions}
        self._stores: list[MemoryStore] = []  # every client opened, closed at the end
        self._fault_ends: list[asyncio.TimerHandle] = []
        self._fault_tasks: dict[asyncio.Task, None] = {}  # ordered: cancelled in the order started
        self._config = None
        self._observer: MemoryStore | None = None
        self._recreates: list[asyncio.Task] = []  # not cancelled by the heal: a topic must come of it
        self._next_record = 0
        self._cleanings = 0
        self._records_removed = 0
        self._steps = 0
        self._steps_at_this_time = 0
        self._last_step_time = 0.0
        self._unhandled: list[str] = []  # what the loop's exception handler got
        self._healed = False

    # -- running ----------------------------------------------------------------------------------

    def run(self) -> Outcome:
        shutil.rmtree(self.root, ignore_errors=True)  # left by a run that was killed
        self.root.mkdir(parents=True)
        violation = None
        replog_logger = logging.getLogger("replog")
        level, propagate = replog_logger.level, replog_logger.propagate
        # Errors go to the trace; formatting thousands of info lines would cost more than the simulation.
        replog_logger.setLevel(logging.ERROR)
        replog_logger.propagate = False
        to_trace = _TraceHandler(self.note)
        replog_logger.addHandler(to_trace)
        try:
            with self.page_cache.installed(), self._cleanings_counted():
                self.loop.run_until_complete(self._main())
        except (Violation, Deadlock) as error:
            violation = f"{type(error).__name__}: {error}"
            self.note(f"VIOLATION {violation}")
        finally:
            replog_logger.removeHandler(to_trace)
            replog_logger.setLevel(level)
            replog_logger.propagate = propagate
            self._tear_down()
        transactions = self._coordinator.transactions
        return Outcome(self.seed, self.trace, violation, self.loop.time() - START_S, self._steps, len(self.checker.acks),
                       self.compacted, self._cleanings, self._records_removed, self.transactional,
                       sum(1 for transaction in transactions if transaction.committed),
                       sum(1 for transaction in transactions if transaction.committed is False))

    @contextlib.contextmanager
    def _cleanings_counted(self):
        """Every cleaning pass that changed a log, counted and traced (Log.complete_clean wrapped
        for the schedule): what shows that compacted schedules did compact."""
        complete_clean = Log.complete_clean

        def counted(log: Log, job, result):
            changed = complete_clean(log, job, result)
            if changed:
                self._cleanings += 1
                self._records_removed += result.records_removed
                self.note(f"cleaned {log.directory.parent.name}/{log.directory.name} below {result.first_dirty}: "
                          f"{result.records_removed} records removed")
            return changed

        Log.complete_clean = counted
        try:
            yield
        finally:
            Log.complete_clean = complete_clean

    def _store_isr(self, topic: str, partition: int) -> tuple[int, ...]:
        """Read from the tree itself: the check runs between steps, where nothing may await."""
        node = None if self._observer is None else self._observer._tree.nodes.get(paths.isr(topic, partition))
        return () if node is None else _decoded_isr(node.data)

    def _store_leader(self, topic: str, partition: int) -> LeaderRecord | None:
        node = None if self._observer is None else self._observer._tree.nodes.get(paths.leader(topic, partition))
        return None if node is None else _decoded_leader(node.data)

    def _now_ms(self) -> int:
        return int(self.loop.time() * 1000)

    def note(self, text: str) -> None:
        self.trace.append(f"{(self.loop.time() - START_S) * 1000:9.1f}ms {text}")

    def _after_step(self) -> None:
        self._steps += 1
        now = self.loop.time()
        self._steps_at_this_time = self._steps_at_this_time + 1 if now == self._last_step_time else 0
        self._last_step_time = now
        if self._steps_at_this_time > LIVELOCK_STEPS:
            raise Violation(f"livelock: {LIVELOCK_STEPS} steps without virtual time passing")
        if self._unhandled:
            raise Violation(f"unhandled in the event loop: {self._unhandled[0]}")
        if self.network.refusals:
            raise Violation(f"follower traffic refused by the authorizer: {self.network.refusals[0]}")
        self.checker.check_step(self.brokers, self._partitions, now - START_S)
        if self.transactional:
            self.transaction_checker.check_step(self.brokers)

    def _loop_exception(self, loop, context) -> None:
        """A callback that raised or a task whose failure nobody awaited: a component without
        an owner that notices its end (no task may die unnoticed, docs/design.md §4.5), or a bug
        of the simulator."""
        message = context.get("message", "")
        if message.startswith("Task was destroyed but it is pending"):
            return  # the tasks of crashed brokers, abandoned on purpose
        self._unhandled.append(f"{message} {context.get('exception')!r}")
        self.note(f"loop: {self._unhandled[-1]}")

    async def _main(self) -> None:
        store_path = str(self.root / "store.db")
        self._config = load_broker_config(None, {"log.dirs": str(self.root), **BROKER_SETTINGS})
        self._observer = MemoryStore(store_path, SESSION_TIMEOUT_MS)
        self._stores.append(self._observer)
        await self._observer.start()
        make_watch_order_deterministic(self._observer._tree)
        await self._observer.create(paths.BROKER_IDS, b"", make_parents=True)
        refusals = await create_acls(self._observer, self._acls)
        assert not any(refusals), refusals
        # No broker runs yet: each finds its start-replicas in its queue when it starts.
        assignment = {partition: [BROKER_IDS[(partition + index) % len(BROKER_IDS)] for index in range(len(BROKER_IDS))]
                      for partition in range(PARTITIONS)}
        await admin.create_topic(self._observer, TOPIC, None, None, self._overrides, replica_assignment=assignment,
                                 broker_config=self._config)
        for broker_id in BROKER_IDS:
            self._start_broker(broker_id)
        producers = [asyncio.create_task(self._keep_producing(partition)) for partition in range(PARTITIONS)]
        if self.transactional:
            self._coordinator.start()
            self._transactional_producers.start()
        try:
            await self._nemesis()
        finally:
            for producer in producers:
                producer.cancel()
            await asyncio.gather(*producers, return_exceptions=True)
            await self._transactional_producers.stop()
        await self._heal()
        await self._require_liveness()
        if self.transactional:
            await self._require_transactions_ended()
        self.checker.check_convergence(self.brokers.values())
        self.note(f"done acknowledged={len(self.checker.acks)}")

    def _tear_down(self) -> None:
        self.loop.after_step = None
        self.loop.run_until_complete(self._coordinator.close())
        for broker in self.brokers.values():
            broker.owner.crash()  # nothing of theirs may run while the store clients close
        for broker in self.brokers.values():
            for replica in broker.replicas.partitions:
                replica.log.close()
        for store in self._stores:
            self.loop.run_until_complete(MemoryStore.close(store))
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)

    # -- brokers ----------------------------------------------------------------------------------

    def _start_broker(self, broker_id: int) -> None:
        store = SimStore(str(self.root / "store.db"), SESSION_TIMEOUT_MS, self.rng, f"broker {broker_id}")
        store.faults_on = not self._healed  # a broker restarted by the heal runs fault-free too
        self._stores.append(store)
        self._lives[broker_id] += 1
        broker = SimBroker(broker_id, self.root / f"broker-{broker_id}", self._config, store, self.network, self._now_ms,
                           f"boot-{broker_id}-{self._boots[broker_id]}", f"life{self._lives[broker_id]}", BROKER_PRINCIPAL)
        self.brokers[broker_id] = broker
        self.network.brokers[broker_id] = broker
        broker.start()

    # -- the workload -----------------------------------------------------------------------------

    async def _keep_producing(self, partition: int) -> None:
        while True:  # until cancelled at the end of the fault phase
            if not await self._produce(partition):
                await asyncio.sleep(POLL_S)
            await asyncio.sleep(self.rng.uniform(0, 0.05))

    async def _leader_record(self, partition: int) -> LeaderRecord | None:
        try:
            return LeaderRecord.decode((await self._observer.get(paths.leader(TOPIC, partition)))[0])
        except NoNode:
            return None

    async def _named_leader(self, partition: int) -> tuple[LeaderRecord | None, SimBroker | None, Partition | None]:
        """The leader node, the broker it names if running, and that broker's replica (None where absent)."""
        record = await self._leader_record(partition)
        broker = None if record is None else self.brokers.get(record.leader)
        replica = None if broker is None or broker.owner.crashed else broker.replicas.hosted(TOPIC, partition)
        return record, broker, replica

    async def _produce(self, partition: int) -> bool:
        """One record with acks=all to the leader the store names; True if acknowledged."""
        return await self.produce(partition, _plain_batch, _append_plain) is not None

    async def produce(self, partition: int, encode: Callable[[int, bytes], bytearray],
                      serve: Callable[[Partition, bytearray], Awaitable[AppendResult]], key: bytes | None = None) -> Ack | None:
        """One record to the leader the store names: `encode(number, key)` makes its batch, whose
        timestamp is the record's number (what the checker reads of every batch), and
        `serve(replica, batch)` appends it there with acks=all, as the leader broker's task. Its
        key is `key`, or one of KEYS."""
        _, broker, replica = await self._named_leader(partition)
        if replica is None:
            return None
        self._next_record += 1
        number, epoch, incarnation = self._next_record, replica.leader_epoch, self.checker.incarnations.current
        key = key or self.rng.choice(KEYS)
        self.checker.produced(number, key)
        appending = broker.spawn(serve(replica, encode(number, key)))
        done, _ = await asyncio.wait({appending}, timeout=PRODUCE_TIMEOUT_MS / 1000 + 1)
        if not done or appending.result().error_code != ErrorCode.none:
            return None
        ack = Ack(number, TOPIC, partition, appending.result().base_offset, epoch, incarnation)
        self.checker.acknowledged(ack, replica)
        self.note(f"acked record={number} {TOPIC}-{partition} offset={ack.offset} epoch={epoch} broker={broker.broker_id}")
        return ack

    # -- the nemesis ------------------------------------------------------------------------------

    async def _nemesis(self) -> None:
        end = self.loop.time() + FAULT_PHASE_S
        while self.loop.time() < end:
            await asyncio.sleep(self.rng.uniform(*FAULT_GAP_S))
            fault = self.rng.choice(self._faults)
            broker = self.brokers[self.rng.choice(BROKER_IDS)]
            if broker.owner.crashed or broker.owner.paused:
                continue
            getattr(self, f"_{fault}")(broker)

    def _later(self, delay_s: float, action) -> None:
        self._fault_ends.append(self.loop.call_later(delay_s, action))

    def _in_background(self, coroutine) -> None:
        task = asyncio.create_task(coroutine)
        self._fault_tasks[task] = None
        task.add_done_callback(lambda done: self._fault_tasks.pop(done, None))

    def _alter_config(self, broker: SimBroker) -> None:
        """The topic's settings change (not `broker`'s alone: topic settings are cluster-wide)."""
        settings = {**self._overrides, **{name: self.rng.choice(values) for name, values in self._altered_settings.items()}}
        self.note(f"fault: topic settings altered to {settings}")
        self._in_background(self._set_topic_config(settings))

    async def _set_topic_config(self, settings: dict[str, str]) -> None:
        try:
            await self._observer.set(paths.topic_config(TOPIC), TopicConfig(settings).encode())
        except NoNode:
            self.note("topic settings not altered: the topic is being created again")

    def _recreate_topic(self, broker: SimBroker) -> None:
        """The topic is deleted and created again (not `broker`'s alone), one at a time."""
        if len(self._recreates) >= RECREATES_MAX or (self._recreates and not self._recreates[-1].done()):
            return
        assignment = {partition: self.rng.sample(BROKER_IDS, len(BROKER_IDS)) for partition in range(PARTITIONS)}
        self.note(f"fault: topic deleted, to be created again with replicas {assignment}")
        self._recreates.append(asyncio.create_task(self._recreate(assignment)))

    async def _recreate(self, assignment: dict[int, list[int]]) -> None:
        await recreate_topic(self._observer, TOPIC, assignment, self._overrides, self.note, self._config)
        # In the step of the create's commit: no replica of the new topic can be open yet.
        self.checker.incarnations.begin_next(
            [replica for broker in self.brokers.values() for replica in broker.replicas.partitions], self._next_record + 1)
        self.note(f"topic created again: incarnation {self.checker.incarnations.current}")

    def _reassign(self, broker: SimBroker) -> None:
        """A partition is moved (not `broker`'s alone) to two or three brokers in any order, as
        AlterPartitionReassignments asks: its leader adds replicas, switches, closes the ones
        moved off, and may move itself off (replication/reassignment.py). Sometimes cancelled
        a moment later, which moves it back to where it was."""
        partition = self.rng.randrange(PARTITIONS)
        target = self.rng.sample(BROKER_IDS, self.rng.choice((2, 3)))
        self.note(f"fault: {TOPIC}-{partition} reassigned to {target}")
        self._in_background(self._alter_reassignment(partition, target))
        if self.rng.random() < REASSIGNMENT_CANCEL_CHANCE:
            self._later(self.rng.uniform(0.1, 3), lambda: self._in_background(self._alter_reassignment(partition, None)))

    async def _alter_reassignment(self, partition: int, target: list[int] | None) -> None:
        outcome = (await admin.alter_partition_reassignments(
            self._observer, {(TOPIC, partition): target}, limits=admin.StateChangeLimits(timeout_s=3.0)))[TOPIC, partition]
        what = "cancel" if target is None else f"reassignment to {target}"
        self.note(f"{what} of {TOPIC}-{partition}: {'accepted' if outcome is None else outcome.message}")

    def _alter_acls(self, broker: SimBroker) -> None:
        """An operator's ACL on the cluster added or removed (not `broker`'s alone: ACLs are
        cluster-wide), in the node that holds the brokers' ACL."""
        adding = self.rng.random() < 0.5
        self.note(f"fault: ACL {OPERATOR_ACL} {'to be added' if adding else 'to be removed'}")
        self._in_background(self._change_operator_acl(adding))

    async def _change_operator_acl(self, adding: bool) -> None:
        """Through the harness's fault-free store client: a failure is a bug, and fails the schedule."""
        if adding:
            failures = await create_acls(self._observer, [OPERATOR_ACL])
            assert failures == [None], failures
        else:
            pattern = OPERATOR_ACL.pattern
            (removed,) = await delete_acls(self._observer, [AclBindingFilter(pattern.resource_type, pattern.name,
                                                                             pattern.pattern_type, OPERATOR_PRINCIPAL)])
            assert all(failure is None for _, failure in removed), removed
        self.note(f"operator's ACL {'added' if adding else 'removed'}")

    def _coordinator_failover(self, broker: SimBroker) -> None:
        """The transaction coordinator moves (not `broker`'s alone: it is modelled, not placed)."""
        self._coordinator.fail_over()

    def _fence_producer(self, broker: SimBroker) -> None:
        self._transactional_producers.fence()

    def _stall_producer(self, broker: SimBroker) -> None:
        self._transactional_producers.stall()

    def _flaky_store(self, broker: SimBroker) -> None:
        duration = self.rng.uniform(0.5, 4)
        self.note(f"fault: broker {broker.broker_id}'s store client flaky for {duration:.2f}s")
        broker.store.flaky = True
        self._later(duration, lambda: setattr(broker.store, "flaky", False))

    def _cut_link(self, broker: SimBroker) -> None:
        other = self.rng.choice([peer for peer in BROKER_IDS if peer != broker.broker_id])
        self._cut({frozenset((broker.broker_id, other))}, self.rng.uniform(0.5, 8))

    def _isolate(self, broker: SimBroker) -> None:
        self._cut({frozenset((broker.broker_id, peer)) for peer in BROKER_IDS if peer != broker.broker_id}, self.rng.uniform(1, 10))

    def _cut(self, links: set[frozenset[int]], duration: float) -> None:
        self.note(f"fault: links {sorted(sorted(link) for link in links)} cut for {duration:.2f}s")
        self.network.cut |= links
        self._later(duration, lambda: self.network.cut.difference_update(links))

    def _refuse_connections(self, broker: SimBroker) -> None:
        """The broker's port refuses and resets connections while its process runs (a firewall's
        REJECT rule): its peers presume it gone although it is not, and depose it where it
        leads. What the presumption's design claims is that this costs elections, never an
        acknowledged record."""
        duration = self.rng.uniform(0.2, 4)
        self.note(f"fault: broker {broker.broker_id}'s port refuses connections for {duration:.2f}s")
        self.network.refusing.add(broker.broker_id)
        self._later(duration, lambda: self.network.refusing.discard(broker.broker_id))

    def _suspend(self, broker: SimBroker) -> None:
        duration = self.rng.uniform(0.2, 9)
        expires = duration * 1000 >= SESSION_TIMEOUT_MS
        self.note(f"fault: broker {broker.broker_id}'s session suspended for {duration:.2f}s{', then expired' if expires else ''}")
        broker.store.suspend()
        if expires:
            self._later(SESSION_TIMEOUT_MS / 1000, lambda: self._in_background(broker.store.expire_session()))
        else:
            self._later(duration, broker.store.reconnect)

    def _expire(self, broker: SimBroker) -> None:
        self.note(f"fault: broker {broker.broker_id}'s session expired")
        self._in_background(broker.store.expire_session())

    def _pause(self, broker: SimBroker) -> None:
        duration = self.rng.uniform(0.2, 10)
        self.note(f"fault: broker {broker.broker_id} paused for {duration:.2f}s")
        broker.owner.pause()
        if duration * 1000 >= SESSION_TIMEOUT_MS:  # the store gives up on its session meanwhile
            self._later(SESSION_TIMEOUT_MS / 1000, lambda: self._in_background(broker.store.expire_session()))
        self._later(duration, lambda: self._resume(broker))

    def _resume(self, broker: SimBroker) -> None:
        if broker.owner.paused:
            self.note(f"broker {broker.broker_id} resumed")
            broker.owner.resume()

    def _crash(self, broker: SimBroker) -> None:
        down_s = self.rng.uniform(0.5, 8)
        self.note(f"fault: broker {broker.broker_id} crashed, restarting {down_s:.2f}s after its session expired")
        broker.crash()
        self._in_background(self._restart_later(broker, down_s))

    def _power_loss(self, broker: SimBroker) -> None:
        """As `_crash`, but the machine goes down: unflushed writes are lost and the broker comes
        back under a new boot id. Only where every partition keeps an ISR member other than this
        broker that never lost power since it joined: an acknowledged record is on every ISR
        member, and the design promises it survives as long as one of them keeps its disk."""
        isrs = {key: set(self._store_isr(*key)) for key in self._partitions}
        for key, lost in self._lost_in_isr.items():
            lost &= isrs[key]  # out of the ISR since: it rejoins only with every acknowledged record
        if any(not isr - {broker.broker_id} - self._lost_in_isr[key] for key, isr in isrs.items()):
            return self._crash(broker)
        for key, isr in isrs.items():
            if broker.broker_id in isr:
                self._lost_in_isr[key].add(broker.broker_id)
        down_s = self.rng.uniform(0.5, 8)
        broker.crash()
        broker.lost_power = True
        lost = self.page_cache.lose_unflushed(self.root / f"broker-{broker.broker_id}")
        self._boots[broker.broker_id] += 1
        self.note(f"fault: broker {broker.broker_id} lost power, restarting {down_s:.2f}s after its session expired; "
                  f"lost {', '.join(lost) or 'nothing'}")
        self._in_background(self._restart_later(broker, down_s))

    async def _restart_later(self, crashed: SimBroker, down_s: float) -> None:
        await asyncio.sleep(SESSION_TIMEOUT_MS / 1000)
        await self._end_session(crashed)
        await asyncio.sleep(down_s)
        self._restart(crashed)

    async def _end_session(self, crashed: SimBroker) -> None:
        """The store times the dead broker's session out: its ephemeral nodes go."""
        self.note(f"broker {crashed.broker_id}'s session timed out")
        await MemoryStore.close(crashed.store)

    def _restart(self, crashed: SimBroker) -> None:
        self.note(f"broker {crashed.broker_id} restarted")
        self._start_broker(crashed.broker_id)

    # -- healing and liveness ---------------------------------------------------------------------

    async def _heal(self) -> None:
        self.note("heal: faults stop")
        self._healed = True
        for handle in self._fault_ends:
            handle.cancel()
        for task in list(self._fault_tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.network.cut.clear()
        self.network.refusing.clear()
        self.network.faults_on = False
        for broker_id, broker in list(self.brokers.items()):
            broker.store.faults_on = False
            broker.store.flaky = False
            broker.store.reconnect()
            self._resume(broker)
            if broker.owner.crashed:
                if broker.store._tree is not None:
                    await self._end_session(broker)
                self._restart(broker)

    async def _require_liveness(self) -> None:
        deadline = self.loop.time() + LIVENESS_S
        if self._recreates:
            try:
                async with asyncio.timeout_at(deadline):
                    await self._recreates[-1]
            except TimeoutError:
                raise Violation(f"liveness: {TOPIC} not created again {LIVENESS_S:.0f}s after the faults stopped") from None
        for partition in range(PARTITIONS):
            while not (await self._working_leader(partition)
                       and (not await self._writable(partition) or await self._produce(partition))):
                if self.loop.time() > deadline:
                    raise Violation(f"liveness: {TOPIC}-{partition} has no working leader {LIVENESS_S:.0f}s after the faults "
                                    f"stopped; {await self._describe(partition)}")
                await asyncio.sleep(POLL_S)
            self.note(f"live {TOPIC}-{partition}")

    async def _require_transactions_ended(self) -> None:
        """Every transaction ended (the producers' last ones by their timeout) and nothing left
        unstable on the working leaders: then what read_committed shows must be whole. Not where
        a partition refuses acks=all writes for good (`_writable`): its markers cannot be written,
        in Kafka neither."""
        if not all([await self._writable(partition) for partition in range(PARTITIONS)]):
            self.note("transactions not required to end: a partition has fewer replicas than min.insync.replicas")
            return
        deadline = self.loop.time() + LIVENESS_S
        while True:
            leaders = {partition: (await self._named_leader(partition))[2] for partition in range(PARTITIONS)}
            if self._coordinator.settled() and all([await self._working_leader(partition) for partition in leaders]) and all(
                    replica.last_stable_offset == replica.high_watermark for replica in leaders.values()):
                break
            if self.loop.time() > deadline:
                raise Violation(f"liveness: transactions not ended {LIVENESS_S:.0f}s after the faults stopped: coordinator "
                                f"{'settled' if self._coordinator.settled() else 'busy'}; "
                                + "; ".join(f"{TOPIC}-{partition} LSO={replica.last_stable_offset if replica else None} "
                                            f"hw={replica.high_watermark if replica else None}"
                                            for partition, replica in leaders.items()))
            await asyncio.sleep(POLL_S)
        offsets = await self.transaction_checker.finish(leaders, self._coordinator.transactions)
        self.note(f"transactions ended: {len(self._coordinator.transactions)}; groups' offsets {offsets}")

    async def _working_leader(self, partition: int) -> bool:
        record, _, replica = await self._named_leader(partition)
        return (replica is not None and replica.state is ReplicaState.LEADER and not replica.fenced
                and replica.leader_epoch == record.leader_epoch)

    async def _writable(self, partition: int) -> bool:
        """Whether an acks=all write can succeed at all: a partition moved to fewer replicas than
        min.insync.replicas refuses every one (NOT_ENOUGH_REPLICAS), rightly, as Kafka's does."""
        settings = TopicConfig.decode((await self._observer.get(paths.topic_config(TOPIC)))[0]).configs
        replicas = ReplicaAssignment.decode((await self._observer.get(paths.replicas(TOPIC, partition)))[0]).replicas
        return len(replicas) >= int(settings.get("min.insync.replicas", "1"))

    async def _describe(self, partition: int) -> str:
        record = await self._leader_record(partition)
        parts = [f"leader node={record}"]
        for broker_id, broker in self.brokers.items():
            parts.append(f"broker {broker_id}: {broker.describe(TOPIC, partition)}")
        return "; ".join(parts)


def _plain_batch(number: int, key: bytes) -> bytearray:
    return bytearray(encode_batch([OutgoingRecord(key, VALUE, None)], "none", timestamp_ms=number))


def _append_plain(replica: Partition, batch: bytearray) -> Awaitable[AppendResult]:
    return replica.append_as_leader(batch, -1, PRODUCE_TIMEOUT_MS)


@functools.lru_cache(maxsize=64)
def _decoded_isr(data: bytes) -> tuple[int, ...]:
    """Read after every step, and the node changes seldom: decode each value once."""
    return IsrRecord.decode(data).isr


@functools.lru_cache(maxsize=64)
def _decoded_leader(data: bytes) -> LeaderRecord:
    return LeaderRecord.decode(data)


class _TraceHandler(logging.Handler):
    def __init__(self, note):
        super().__init__()
        self._note = note

    def emit(self, record: logging.LogRecord) -> None:
        failure = f" {record.exc_info[1]!r}" if record.exc_info else ""
        self._note(f"log {record.levelname} {record.name}: {record.getMessage()}{failure}")
