"""leaderElection (docs/design.md §4): who leads a partition, at which epoch.

A replica in the assigned set (AR) and in the ISR, or any assigned replica while the ISR is
empty, races to create the ephemeral leader node carrying its broker id and a new epoch; the
store lets exactly one create succeed. A replica outside a non-empty ISR never races (unclean
election is off by default), so an acknowledged write cannot be lost to a stale replica.

Epochs come from a per-partition counter node, incremented in the election's own transaction by
compare-and-set (or created there, at 0): they only grow, even across store sessions, and an
epoch is taken only by the election that wins with it. (An increment of its own cost every
election a store round trip.)

A replica that is not the partition's preferred one (the first assigned) waits
PreferredReplicaTime before racing, while the preferred replica is alive and eligible, so that
leadership lands where the assignment balanced it. When the preferred replica is dead or out
of the ISR, the head start goes to the first replica in assignment order that is alive and
eligible, as Kafka's controller picks the first live ISR member: one replica races, not all of
them, when a broker that led thousands of partitions dies or shuts down.

An election starts from what the broker's watches last saw of the partition (`seen`):
thousands elect at once when a topic is created or a broker leaves, and reading the replicas and
ISR nodes again cost each two store round trips. It takes the assignment as seen, and the ISR as
seen only while it was seen absent (a partition never led): an ISR that exists is read, since a
controlled shutdown writes it without its leader and deletes the leader node in one transaction,
and the deletion reaches the broker before the new ISR does (an election on the old one gave the
head start to the leader that left, or failed its commit). The transaction checks the
assignment's version, and creates the ISR seen absent, so a stale view fails the commit
(BadVersion, or NodeExists on the ISR) and the election reads both nodes. A view never decides
alone that this broker may not lead, which leaves the partition to the others: that answer is
read from the store.

Unclean election (`unclean.leader.election.enable`, off by default) lets a replica outside the
ISR race, and only when no ISR member is alive: it trades the committed data the ISR holds for
availability.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import NamedTuple

from replog.coord_backends import BadVersion, Created, NodeExists, NoNode, Store
from replog.coord_backends.base import CreateOp, SetOp, TxnOp
from replog.coord_backends.joined import JoinedStore
from replog.coord_backends import paths
from replog.coord_backends.paths import EpochCounter, IsrRecord, LeaderRecord, ReplicaAssignment

logger = logging.getLogger(__name__)

ISR_CHANGES_MAX = 64

# An election's reads and its transaction may be joined with other partitions' (joined.py).
ElectionStore = Store | JoinedStore


async def next_leader_epoch(store: ElectionStore, topic: str, partition: int) -> tuple[int, TxnOp]:
    """The next leader epoch, and the write that takes it, for the transaction that writes the
    leader node with it: that transaction commits only if no other took the epoch since this
    read (BadVersion, or NodeExists for a partition's first epoch)."""
    path = paths.leader_epoch(topic, partition)
    try:
        data, version = await store.get(path)
    except NoNode:
        return 0, CreateOp(path, EpochCounter(0).encode())
    epoch = EpochCounter.decode(data).epoch + 1
    return epoch, SetOp(path, EpochCounter(epoch).encode(), version)


async def broker_alive(store: ElectionStore, broker_id: int) -> bool:
    """Registered under /brokers/ids: its session is live."""
    return await store.exists(paths.broker(broker_id)) is not None


RegisteredBrokers = Callable[[], Collection[int] | None]  # the broker's view of /brokers/ids; None: not read yet


async def seen_alive(store: ElectionStore, registered: RegisteredBrokers, broker_id: int) -> bool:
    """Registered, as far as the broker's watched view of the registrations knows (the store
    itself while the view is not read yet). For what only balances or trims: a stale answer
    costs a head start waited in vain, or an ISR member trimmed that joins again by fetching."""
    view = registered()
    return broker_id in view if view is not None else await broker_alive(store, broker_id)


class SeenPartition(NamedTuple):
    """A partition's assignment and ISR as the broker's watches last saw them, with the versions
    the election's transaction checks them at."""

    assigned: tuple[int, ...]
    assigned_version: int
    isr: tuple[int, ...]
    isr_version: int | None  # None: the ISR node was seen absent


PartitionSeen = Callable[[], SeenPartition | None]  # None: not seen (yet)


class _AskTheStore(Exception):
    """The view an election started from cannot decide what comes next, or was stale: read the store."""


class Election(NamedTuple):
    """A won election: the ISR record written, the assignment it was decided on, and the
    versions its own transaction gave the leader node and the ISR node, on which the new
    leader fences every later ISR write (commit.py)."""

    isr: IsrRecord
    assigned: tuple[int, ...]
    leader_version: int
    isr_version: int


async def _leader_named_within(store: ElectionStore, topic: str, partition: int, timeout_s: float) -> bool:
    try:
        async with asyncio.timeout(timeout_s):
            async with await store.watch_data(paths.leader(topic, partition)) as watch:
                async for event in watch:  # until a leader is named or the time is up
                    if event.exists:
                        return True
    except TimeoutError:
        pass
    return False


async def leader_election(
    store: ElectionStore,
    topic: str,
    partition: int,
    broker_id: int,
    *,
    preferred_wait_s: float = 0.0,
    new_partition_wait_s: float = 0.0,
    unclean_allowed: bool = False,
    registered: RegisteredBrokers = lambda: None,
    seen: PartitionSeen = lambda: None,
) -> Election | None:
    """Try to become leader; None if this broker may not lead or lost the race.

    The preferred replica (or the first live in-sync one) gets a head start of
    `preferred_wait_s`, and of `new_partition_wait_s` if longer in a partition never led (no
    ISR yet): a new partition is led by its preferred replica while that is alive, as Kafka's
    controller elects it, although the brokers start a new topic's partitions each at its own
    pace. With only the usual head start, the brokers that reached a large topic's partitions
    first won most of the others' too, and the broker left with most of the leaderships held the
    whole cluster back (bench/scale.py times a large topic's creation).

    `registered` answers whether the preferred replica and the ISR's members are alive, without
    a store read each (thousands of partitions elect at once when a topic is created). Whether
    an unclean election may go ahead is read from the store: it gives up acknowledged records.

    An ISR that changed between its read and the race is read again: not every ISR write comes
    from a leader (a replica back from an unclean reboot takes itself out, hosted.py), so a
    changed ISR does not mean that someone else won.

    `seen`: the partition as the broker's watches saw it, to start from (module docstring)."""
    view = seen()
    for _ in range(ISR_CHANGES_MAX):  # each retry follows an ISR or epoch write that raced this one
        try:
            return await _run_for_leader(store, topic, partition, broker_id, preferred_wait_s, new_partition_wait_s,
                                         unclean_allowed, registered, view)
        except BadVersion:
            logger.debug("ISR or epoch changed during leader election, reading them again topic=%s partition=%d broker=%d",
                        topic, partition, broker_id)
        except _AskTheStore:
            logger.debug("the partition seen did not decide the election, reading it topic=%s partition=%d broker=%d",
                         topic, partition, broker_id)
        view = None
    raise RuntimeError(f"leader election of {topic}-{partition}: the ISR or epoch changed {ISR_CHANGES_MAX} times in a row")


async def _first_electable(store: ElectionStore, registered: RegisteredBrokers, assigned: tuple[int, ...], isr: tuple[int, ...],
                           broker_id: int) -> int | None:
    """The first replica in assignment order that may lead (in the ISR, or any while it is
    empty) and is alive; None if there is none (this broker is eligible only uncleanly)."""
    for replica in assigned:  # bounded by the replication factor
        if (not isr or replica in isr) and (replica == broker_id or await seen_alive(store, registered, replica)):
            return replica
    return None


async def _read_isr(store: ElectionStore, topic: str, partition: int) -> tuple[tuple[int, ...], int | None]:
    """The ISR and its node's version; (), None while absent."""
    try:
        isr_data, isr_version = await store.get(paths.isr(topic, partition))
    except NoNode:
        return (), None
    return IsrRecord.decode(isr_data).isr, isr_version


async def _partition_to_decide_on(store: ElectionStore, topic: str, partition: int, view: SeenPartition | None) -> SeenPartition:
    """The view, with its ISR read unless it was seen absent; read whole without a view."""
    if view is not None and view.isr_version is None:
        return view
    if view is None:
        assigned_data, assigned_version = await store.get(paths.replicas(topic, partition))
        view = SeenPartition(ReplicaAssignment.decode(assigned_data).replicas, assigned_version, (), None)
    isr, isr_version = await _read_isr(store, topic, partition)
    return view._replace(isr=isr, isr_version=isr_version)


async def _run_for_leader(store: ElectionStore, topic: str, partition: int, broker_id: int, preferred_wait_s: float,
                          new_partition_wait_s: float, unclean_allowed: bool, registered: RegisteredBrokers,
                          view: SeenPartition | None) -> Election | None:
    """One try, from `view` if given (its staleness raises _AskTheStore or BadVersion), else from reads."""
    assigned, assigned_version, isr, isr_version = await _partition_to_decide_on(store, topic, partition, view)
    eligible = broker_id in assigned and (not isr or broker_id in isr)
    if not eligible and view is not None:
        raise _AskTheStore
    if broker_id in assigned and not eligible and unclean_allowed:
        eligible = not any([await broker_alive(store, member) for member in isr])
        if eligible:
            logger.warning("unclean leader election topic=%s partition=%d broker=%d isr=%s", topic, partition, broker_id, isr)
    if not eligible:
        logger.debug("not eligible to lead topic=%s partition=%d broker=%d assigned=%s isr=%s", topic, partition, broker_id, assigned, isr)
        return None
    first = await _first_electable(store, registered, assigned, isr, broker_id)
    if first is not None and first != broker_id:
        # The preferred replica's head start (docs/design.md §4.3): the preferred replica (or the first electable one)
        # races first. Once it has won there is nothing left to race for, and the new leader's
        # acks=all waits for this replica to follow it: stop waiting at once.
        head_start_s = preferred_wait_s if isr_version is not None else max(preferred_wait_s, new_partition_wait_s)
        if await _leader_named_within(store, topic, partition, head_start_s):
            logger.debug("lost leader election topic=%s partition=%d broker=%d (elected during the head start of replica %d)",
                        topic, partition, broker_id, first)
            return None
    epoch, epoch_taken = await next_leader_epoch(store, topic, partition)
    # A new partition starts with every assigned replica in sync (all are empty); after an
    # unclean election only the new leader is. Either way only live replicas stay (becomeLeader
    # takes the replicas in sync now): a dead broker left in the ISR
    # would hold acks=all back until replica.lag.time.max.ms shrank it out.
    candidates = (broker_id,) if isr and broker_id not in isr else (isr or assigned)
    new_isr = IsrRecord(tuple([member for member in candidates
                               if member == broker_id or await seen_alive(store, registered, member)]), epoch)
    leader_path = paths.leader(topic, partition)
    txn = store.transaction().create(leader_path, LeaderRecord(broker_id, epoch).encode(), ephemeral=True)
    if view is not None:
        txn.check(paths.replicas(topic, partition), assigned_version)
    if isr_version is None:
        txn.create(paths.isr(topic, partition), new_isr.encode())
    else:
        txn.set(paths.isr(topic, partition), new_isr.encode(), isr_version)
    # Last: a race lost to a winner whose node is still there fails on the node, as lost.
    txn.ops.append(epoch_taken)
    try:
        created, *written = await txn.commit()
    except NodeExists as exists:
        if exists.path != leader_path:
            raise _AskTheStore from exists  # an ISR node or epoch counter created since it was seen absent
        logger.debug("lost leader election topic=%s partition=%d broker=%d epoch=%d", topic, partition, broker_id, epoch)
        return None
    # The partition logs it at INFO once it leads, whichever way it came to (replica/partition.py).
    logger.debug("won leader election topic=%s partition=%d broker=%d epoch=%d isr=%s", topic, partition, broker_id, epoch,
                 new_isr.isr)
    isr_written = written[-2]  # after the assignment's check, if any; before the epoch's write
    written_isr_version = isr_written.version if isinstance(isr_written, Created) else isr_written
    return Election(new_isr, assigned, created.version, written_isr_version)
