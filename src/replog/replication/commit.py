"""The leader's ISR duties (docs/design.md §5.3): followers that have not caught up
within `replica.lag.time.max.ms` move from ISR to CUR, and back once a fetch
of theirs at this leader's epoch reaches the high watermark and this epoch's start offset
(Partition.followers_ready_to_join; the fetch wakes the upkeep, which writes at once). A member
that fetches from below the HW came back without records, and one whose registration went, or
whose process is known gone (net/leader_connections.py), is dead or stopping: all move out at
once. The commit queue itself, which answers acks=all as the
HW passes, lives in Partition; a shrink is what lets it advance past a dead follower.

Fencing: every ISR change is written to the store in one transaction that checks the version
of the leader node this leader created when it was elected and compare-and-sets the ISR node
on the version this leader last saw; it is taken locally only after the write succeeded. A
leader that lost its leadership without noticing (paused past its session: a zombie) finds
either moved on, so it can neither shrink the ISR to itself nor advance its HW on that basis;
it is told through `on_fenced` and must stop leading. This is the fix later Kafka made to the
classic design's unconditional ISR write (there the controller epoch plays the leader node's
part).

The ISR version alone is not enough: between a zombie's session expiring (its leader node
gone) and another replica's election (which rewrites the ISR), the ISR version is still the
zombie's, and it could shrink the ISR to itself, leaving a partition nobody else may lead.
The leader-node check closes that window. On etcd versions are global revisions, so a leader
node recreated by someone else fails the check too; on ZooKeeper and the embedded store a
recreated node starts again at version 0, and there it is the election's own ISR write,
made in the same transaction as the create, that moves the ISR version on.

The write may go out joined with other partitions' (`commit`, coord_backends/joined.py): a
broker's death or return changes thousands of ISRs at once. A joined transaction that one
fenced leader's write refuses is retried part by part, so each leader still learns only of its
own fencing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable, Collection

from replog.coord_backends import BadVersion, NoNode, Store, StoreError
from replog.coord_backends.base import CheckOp, DeleteOp, SetOp, TxnOp, commit_ops
from replog.coord_backends import paths
from replog.coord_backends.paths import IsrRecord
from replog.obs import BrokerMetrics
from replog.replication.election import broker_alive
from replog.replication.reassignment import Reassigner, Step
from replog.replica.partition import Partition
from replog.tasks import cancel_and_wait

logger = logging.getLogger(__name__)


class IsrMaintainer:
    """One leader partition's ISR upkeep: a task checking every half lag time."""

    def __init__(
        self,
        store: Store,
        partition: Partition,
        leader_version: int,
        isr_version: int,
        *,
        replica_lag_time_max_ms: int,
        clock_ms: Callable[[], int],
        on_fenced: Callable[[], Awaitable[None]],
        on_preferred_ready: Callable[[], Awaitable[None]] | None = None,
        balance_check_interval_ms: int = 300_000,
        registered_brokers: Callable[[], Collection[int] | None] = lambda: None,
        presumed_gone: Callable[[int], bool] = lambda broker_id: False,
        reassigner: Reassigner | None = None,
        on_moved_off: Callable[[], Awaitable[None]] | None = None,
        metrics: BrokerMetrics | None = None,
        commit: Callable[[list[TxnOp]], Awaitable[list[object]]] | None = None,
    ):
        """`registered_brokers`: the brokers registered now (their sessions live), None while
        not known; `presumed_gone`: whether a broker's process is known gone (its address
        refused a connection); a follower not registered or presumed gone is shrunk out at
        once (see check). `reassigner` carries out a reassignment of the partition after each
        check (reassignment.py); `on_moved_off` hears that it moved this leader off."""
        self._store = store
        self._partition = partition
        self._leader_version = leader_version
        self._isr_version = isr_version
        self._lag_ms = replica_lag_time_max_ms
        self._clock_ms = clock_ms
        self._on_fenced = on_fenced
        self._on_preferred_ready = on_preferred_ready
        self._balance_interval_ms = balance_check_interval_ms
        self._next_balance_check_ms = clock_ms() + balance_check_interval_ms
        self._registered_brokers = registered_brokers
        self._presumed_gone = presumed_gone
        self._reassigner = reassigner
        self._on_moved_off = on_moved_off
        self._metrics = metrics or BrokerMetrics()
        self._commit = commit or (lambda ops: commit_ops(store, ops))  # all-or-nothing, perhaps joined with others'
        self._task: asyncio.Task | None = None
        self._change_due = asyncio.Event()

    def brokers_changed(self) -> None:
        """A broker registered or its registration went: check the ISR now."""
        self._change_due.set()

    def start(self) -> asyncio.Task:
        """Run the upkeep as a task; returns it (done once stopped, fenced or resigned)."""
        self._partition.on_isr_change_due = self._change_due.set  # from now: no fetch goes unseen
        # A broker that went between the election's look at who is alive and now was told to
        # nobody: the first check runs at once.
        self._change_due.set()
        self._task = asyncio.create_task(self._run())
        return self._task

    async def _run(self) -> None:
        if self._reassigner is None:
            await self._checks()
            return
        async with asyncio.TaskGroup() as group:  # the reassignment watch lives as long as the checks
            watching = group.create_task(self._reassigner.watch(self._change_due.set))
            try:
                await self._checks()
            finally:
                watching.cancel()

    def hand_over_ops(self) -> list[TxnOp] | None:
        """Controlled shutdown: the writes that hand this leadership over, for the caller to
        commit in one transaction, alone or with other partitions': the ISR without this
        leader, so that it cannot be elected again and the others can, and the leader node's
        deletion, so that they elect at once. Each is fenced on the version this leader last
        saw (a recreated leader node may start at the same version again, but an election
        writes the ISR in the same transaction). None if no other member is in sync."""
        partition = self._partition
        others = partition.isr - {partition.local_broker_id}
        if not others:
            return None
        topic, partition_id = partition.topic, partition.partition_id
        return [SetOp(paths.isr(topic, partition_id), IsrRecord(tuple(sorted(others)), partition.leader_epoch).encode(),
                      self._isr_version),
                DeleteOp(paths.leader(topic, partition_id), self._leader_version)]

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
            self._task = None

    async def _checks(self) -> None:
        try:
            while True:  # until stopped: a check per half lag time, or at once when a fetch makes a change due
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._lag_ms / 2000):
                        await self._change_due.wait()
                self._change_due.clear()
                try:
                    if not await self.check():
                        await self._on_fenced()
                        return
                    if await self.preferred_replica_ready():
                        await self._on_preferred_ready()
                        return
                    if self._reassigner is not None and not await self._reassignment_step():
                        return
                except StoreError as error:  # store unreachable: keep the ISR as it is and retry
                    logger.warning("ISR check failed topic=%s partition=%d error=%s",
                                   self._partition.topic, self._partition.partition_id, error)
        except Exception:
            # A leader without ISR upkeep would hold acks=all forever: say so loudly; the
            # leadership driver sees the task end and starts the leadership afresh.
            logger.exception("ISR maintenance stopped topic=%s partition=%d", self._partition.topic, self._partition.partition_id)
            raise
        finally:
            self._partition.on_isr_change_due = None

    async def check(self) -> bool:
        """Shrink or expand the ISR if due; False if this leader has been fenced.

        Followers that may join are counted by the HW while the write adding them is in flight
        (KIP-497): once it lands in the store they are electable, so the HW must not have
        acknowledged anything they lack in the meantime."""
        partition = self._partition
        now_ms = self._clock_ms()
        # A follower whose registration went is dead (its session ended) or stopping (a
        # controlled shutdown deregisters first), and one whose process is known gone before
        # its session ends is dead: out now, as Kafka's controller takes a failed broker out of
        # every ISR, not after replica.lag.time.max.ms of held acks=all. Shrinking is always
        # safe for what was acknowledged; it joins again by a fetch of its next life.
        registered = self._registered_brokers()
        departed = frozenset(
            broker for broker in partition.isr.union(partition.assigned_replicas)
            if broker != partition.local_broker_id
            and ((registered is not None and broker not in registered) or self._presumed_gone(broker)))
        partition.forget_fetches(departed)
        lagging = partition.out_of_sync_replicas(now_ms, self._lag_ms) | (partition.isr & departed)
        joining = partition.followers_ready_to_join(now_ms, self._lag_ms) - departed
        new_isr = (partition.isr - lagging) | joining
        if new_isr == partition.isr and not partition.joining_isr:
            return True
        record = IsrRecord(tuple(sorted(new_isr)), partition.leader_epoch)
        partition.isr_joining(joining)
        try:
            self._isr_version = await self._write_isr(record)
        except (BadVersion, NoNode):
            # The store changed behind this leader (another leader, or a write of ours whose
            # reply was lost): it no longer knows who is electable, so it stops acknowledging
            # now, before its leadership hears of it.
            partition.fence()
            logger.warning("ISR write fenced topic=%s partition=%d broker=%d epoch=%d",
                           partition.topic, partition.partition_id, partition.local_broker_id, partition.leader_epoch)
            return False
        # Any other failure leaves the outcome unknown (a lost reply may hide an applied write):
        # the HW goes on counting the followers it added until a later write at this leader's
        # ISR version settles it, by succeeding (this one never applied) or by BadVersion (it did).
        logger.info("ISR %s topic=%s partition=%d broker=%d epoch=%d isr=%s out=%s in=%s",
                    "shrunk" if lagging else "expanded" if joining else "rewritten", partition.topic, partition.partition_id,
                    partition.local_broker_id, partition.leader_epoch, record.isr, sorted(lagging), sorted(joining))
        partition.update_isr(new_isr)
        if lagging:
            self._metrics.isr_shrinks.inc()
        if joining:
            self._metrics.isr_expands.inc()
        return True

    async def _reassignment_step(self) -> bool:
        """The next step of a reassignment in progress; False once this leader is done."""
        step, self._isr_version = await self._reassigner.step(self._leader_version, self._isr_version)
        if step is Step.FENCED:
            self._partition.fence()
            await self._on_fenced()
            return False
        if step is Step.MOVED_OFF:
            await self._on_moved_off()
            return False
        return True

    async def _write_isr(self, record: IsrRecord) -> int:
        """Write the ISR only while this leader's leader node and the ISR node are as it last saw
        them; the ISR node's new version. BadVersion or NoNode: this leader is fenced."""
        topic, partition_id = self._partition.topic, self._partition.partition_id
        _, isr_version = await self._commit([CheckOp(paths.leader(topic, partition_id), self._leader_version),
                                             SetOp(paths.isr(topic, partition_id), record.encode(), self._isr_version)])
        return isr_version

    async def preferred_replica_ready(self) -> bool:
        """checkLoadBalancing (docs/design.md §4.3), at most once per leader.imbalance.check.interval: the
        preferred replica (the first assigned) is alive and in sync, and this leader is not it,
        so leadership should go back to where the assignment balanced it.

        In sync means following this leadership too, not only being in the ISR: an election
        keeps a broker in the ISR while its registration stands, and a killed broker's stands
        until its session times out. A leader that resigned to one that was only registered
        was elected again, and resigned again a check later, for as long as that session
        lasted: clients that looked the partition up meanwhile found a leader that had resigned."""
        now_ms = self._clock_ms()
        if self._on_preferred_ready is None or now_ms < self._next_balance_check_ms:
            return False
        self._next_balance_check_ms = now_ms + self._balance_interval_ms
        partition = self._partition
        preferred = partition.assigned_replicas[0]
        return (
            preferred != partition.local_broker_id
            and preferred in partition.isr
            and partition.follows_this_leadership(preferred, now_ms, self._lag_ms)
            and await broker_alive(self._store, preferred)
        )
