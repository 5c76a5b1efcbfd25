"""Partition reassignment, carried out by the partition's leader (docs/design.md §10):
onPartitionsReassigned, checkReassignedReplicas and completePartitionReassignment.

The admin writes the target replicas (RAR) to /brokers/partitions_reassigned/[topic]/[partition]
with the partition's original replicas (admin/reassignment.py); a cancellation writes the
original back as the target. The leader watches that node while it leads and moves the
partition in three steps, each one store transaction fenced on its leader node, so a leader
that lost its leadership without noticing can take none of them:

    add       replicas := RAR + (AR - RAR), and a start-replica to each replica added. The
              added replicas follow the leader like any other and join the ISR once caught up
              (commit.py). Kafka's KIP-455 extends AR the same way, rather than running
              separate RAR fetchers, so that an added replica is an ordinary follower.
    switch    once every replica of RAR is in the ISR: ISR := RAR, replicas := RAR, and the
              node records the replicas it is `closing` (AR - RAR). The ISR write is what makes
              the removed replicas unelectable; it can only drop replicas, and what the HW
              acknowledged is on every member of RAR, so nothing acknowledged is lost. A leader
              outside RAR keeps its in-memory ISR, a superset of RAR, until it resigns a moment
              later, so what it acknowledges meanwhile is on every member of RAR too.
    finish    a close-replica to each replica closing (it deletes its log), then the node goes.
              A leader that was moved off then resigns: it releases its leader node and RAR
              elects.

A leader that dies between steps leaves the node as it was; the next leader reads it and
carries on from where the store says the move is, which is why the switch records `closing`
rather than sending the close-replicas first: a leader that crashed between sending them and
switching would take with it which replicas were to be closed.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable

from replog.coord_backends import BadVersion, NoNode, Store
from replog.coord_backends import paths
from replog.coord_backends.paths import IsrRecord, PartitionReassignment, ReplicaAssignment
from replog.replica.partition import Partition
from replog.replica.throttle import ReplicationThrottle
from replog.replication.node_watch import follow_node
from replog.obs import StateChangeEvents
from replog.replication.state_changes import CLOSE_REPLICA, START_REPLICA, FollowerStateChangeQueueFull, send_state_change

logger = logging.getLogger(__name__)


class Step(enum.Enum):
    NONE = "none"  # nothing to do, or waiting for the added replicas to catch up
    FENCED = "fenced"  # the store moved on behind this leader
    MOVED_OFF = "moved off"  # this leader is no longer a replica: resign


class ReassignmentWatch:
    """The partition's reassignment node as last seen, kept current by a watch while this
    broker leads the partition; `on_change` hears of each change."""

    def __init__(self, store: Store, topic: str, partition: int):
        self._store, self._path = store, paths.reassigned_partition(topic, partition)
        self.current: tuple[PartitionReassignment, int] | None = None

    async def run(self, on_change: Callable[[], None]) -> None:
        """Until cancelled with the leadership."""
        def changed(event) -> None:
            self.current = (PartitionReassignment.decode(event.data), event.version) if event.exists else None
            on_change()

        await follow_node(self._store, self._path, changed, "reassignment")


class Reassigner:
    """checkReassignedReplicas for one leader partition, called by its ISR upkeep (commit.py)
    after each check, with the versions that fence this leader's writes. `watch()` runs while
    the upkeep does and calls `on_change` when the reassignment node changes."""

    def __init__(self, store: Store, partition: Partition, throttle: ReplicationThrottle, *, clock_ms: Callable[[], int],
                 queue_max_requests: int, events: StateChangeEvents | None):
        self._store = store
        self._partition = partition
        self._throttle = throttle
        self._watch = ReassignmentWatch(store, partition.topic, partition.partition_id)
        self._clock_ms = clock_ms
        self._queue_max_requests = queue_max_requests
        self._events = events  # the broker's ring, where the requests it sends are recorded

    async def watch(self, on_change: Callable[[], None]) -> None:
        await self._watch.run(on_change)

    async def step(self, leader_version: int, isr_version: int) -> tuple[Step, int]:
        """Take the next step of the reassignment in progress, if any; with the ISR node's
        version after it."""
        seen = self._watch.current
        partition = self._partition
        if seen is None or seen[0].original is None:
            partition.throttle((), self._throttle, None)
            return Step.NONE, isr_version  # none, or a new partition being staged: not a move
        reassignment, version = seen
        added = [broker for broker in reassignment.replicas if broker not in reassignment.original]
        partition.throttle(added, self._throttle, reassignment.throttle_bytes_per_s)
        if reassignment.closing is not None:
            await self._finish(reassignment, version)
            return (Step.MOVED_OFF if partition.local_broker_id in reassignment.closing else Step.NONE), isr_version
        target = reassignment.replicas
        adding = [broker for broker in target if broker not in partition.assigned_replicas]
        if adding:
            return await self._add(target, adding, leader_version), isr_version
        if not set(target) <= partition.isr:
            return Step.NONE, isr_version  # the added replicas catch up; each join wakes the upkeep
        return await self._switch(reassignment, version, leader_version, isr_version)

    async def _add(self, target: tuple[int, ...], adding: list[int], leader_version: int) -> Step:
        partition = self._partition
        extended = (*target, *(broker for broker in partition.assigned_replicas if broker not in target))
        txn = self._store.transaction()
        txn.check(paths.leader(partition.topic, partition.partition_id), leader_version)
        txn.set(paths.replicas(partition.topic, partition.partition_id), ReplicaAssignment(extended).encode())
        try:
            await txn.commit()
        except (BadVersion, NoNode):
            return Step.FENCED
        partition.reassign(extended, self._clock_ms())
        logger.info("reassignment adding replicas topic=%s partition=%d broker=%d epoch=%d replicas=%s adding=%s",
                    partition.topic, partition.partition_id, partition.local_broker_id, partition.leader_epoch,
                    list(extended), adding)
        for broker in adding:
            await self._send(START_REPLICA, broker)
        return Step.NONE

    async def _switch(self, reassignment: PartitionReassignment, version: int, leader_version: int,
                      isr_version: int) -> tuple[Step, int]:
        partition = self._partition
        topic, partition_id, me = partition.topic, partition.partition_id, partition.local_broker_id
        target = reassignment.replicas
        closing = tuple(broker for broker in partition.assigned_replicas if broker not in target)
        switched = dataclasses.replace(reassignment, closing=closing)
        txn = self._store.transaction()
        txn.check(paths.leader(topic, partition_id), leader_version)
        txn.set(paths.isr(topic, partition_id), IsrRecord(tuple(sorted(target)), partition.leader_epoch).encode(), isr_version)
        txn.set(paths.replicas(topic, partition_id), ReplicaAssignment(target).encode())
        txn.set(paths.reassigned_partition(topic, partition_id), switched.encode(), version)
        try:
            _, new_isr_version, _, new_version = await txn.commit()
        except (BadVersion, NoNode):
            return await self._refused_switch(leader_version, isr_version), isr_version
        logger.info("reassignment switched replicas topic=%s partition=%d broker=%d epoch=%d replicas=%s closing=%s",
                    topic, partition_id, me, partition.leader_epoch, list(target), list(closing))
        if me in target:
            partition.update_isr(target)
            partition.reassign(target, self._clock_ms())
        await self._finish(switched, new_version)
        return (Step.MOVED_OFF if me in closing else Step.NONE), new_isr_version

    async def _refused_switch(self, leader_version: int, isr_version: int) -> Step:
        """A refused switch is either this leader fenced or the node rewritten by the admin (a
        new target or a cancellation), which the watch brings next."""
        partition = self._partition
        topic, partition_id = partition.topic, partition.partition_id
        try:
            leader_now = (await self._store.get(paths.leader(topic, partition_id)))[1]
            isr_now = (await self._store.get(paths.isr(topic, partition_id)))[1]
        except NoNode:
            return Step.FENCED
        return Step.NONE if (leader_now, isr_now) == (leader_version, isr_version) else Step.FENCED

    async def _finish(self, reassignment: PartitionReassignment, version: int) -> None:
        """completePartitionReassignment's last part: close the replicas moved off, then the
        node goes. Sent again by a leader that finds the node still there after a crash; a
        close-replica for a replica already closed closes nothing."""
        partition = self._partition
        for broker in reassignment.closing or ():
            await self._send(CLOSE_REPLICA, broker)
        try:
            await self._store.delete(paths.reassigned_partition(partition.topic, partition.partition_id), version)
        except (NoNode, BadVersion):
            return  # gone, or a new reassignment replaced it: that one is the next step's
        logger.info("reassignment completed topic=%s partition=%d broker=%d epoch=%d replicas=%s",
                    partition.topic, partition.partition_id, partition.local_broker_id, partition.leader_epoch,
                    list(reassignment.replicas))

    async def _send(self, kind: str, broker: int) -> None:
        partition = self._partition
        try:
            await send_state_change(self._store, kind, broker, partition.topic, [partition.partition_id],
                                    partition.leader_epoch, partition.local_broker_id,
                                    queue_max_requests=self._queue_max_requests, events=self._events)
        except FollowerStateChangeQueueFull:
            # Logged by the sender. A replica added starts from its assignment anyway; one
            # closing stops there, and only its log stays behind (reported at its next start).
            pass
