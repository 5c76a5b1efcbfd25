"""Topic lifecycle on the coordination store: create, delete, add partitions, describe (the
topic's configuration overrides are topic_configs.py's).

These act on the store directly (docs/design.md §8, §9), so they work while every
broker is down; brokers act on the start-replica and close-replica requests these commands put
in their state-change queues (replication/state_changes.py). Nodes written (paths.py):

    /brokers/topics/[topic]                            TopicId: its id, and its partition count
    /brokers/topics/[topic]/[partition]/replicas       ReplicaAssignment, preferred leader first
    /brokers/partitions_reassigned/[topic]/[partition] ReplicaAssignment of a partition being added
    /config/topics/[topic]                             TopicConfig: the topic's overrides, as text
    /admin/topic_changes/[topic]                       held (ephemeral) while partitions are added
    /admin/delete_topics/[topic]                       TopicDeletion: the topic is being deleted

Adding partitions (create, grow) is addPartition (docs/design.md §8), for all new partitions at once so
that a reader never sees half a topic: take the topic's change marker, clean a failed earlier
attempt (cleanFailedTopicCreationAttempt), stage the new partitions under
/brokers/partitions_reassigned, send start-replica (epoch -1) to every replica, one request per
broker naming all its partitions, wait until every registered replica broker consumed its
requests (waitTillStateChangeRequestConsumed; a broker that is not registered drains its queue
when it starts), then create the partitions and remove the staging. A wait that runs out fails
with REQUEST_TIMED_OUT naming the brokers, and leaves the staging for the next create to clean.

A topic of many partitions takes more writes than one transaction may hold (TRANSACTION_OPS_MAX,
a stock etcd's limit), so the writes have a commit point of their own: the partition count in
the topic's node. A new topic's node is written first with count 0, the partitions' nodes in
transactions of their own, and the count last; every reader (the brokers' metadata caches and
reconcile, these commands) counts only the partitions numbered below it, and hides a topic
whose count is 0. An attempt cut short leaves partitions above the count, or a topic of count
0, that the next create or growth of the topic removes (cleanFailedTopicCreationAttempt).

Deleting a topic marks it for deletion, sends close-replica to every assigned broker, down or
not, and removes the topic's nodes once every one of them consumed its request
(replication/topic_deletion.py says why not sooner, and who finishes it). A marked topic is
hidden from listings and metadata, unknown to every command but delete, and its name refused to
create until the deletion completes, as Kafka's "marked for deletion".

A transaction that conflicts with a concurrent writer (NodeExists, NoNode, BadVersion,
NotEmpty) is re-planned from a fresh read, at most CONFLICT_ATTEMPTS_MAX times; the fresh read
usually turns the conflict into the right Kafka error (TOPIC_ALREADY_EXISTS, ...).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TypeVar

from replog.config import SEGMENT_BYTES_MIN, SETTINGS, BrokerConfig, ConfigError, validate_topic_configs
from replog.coord_backends import (BadVersion, NodeExists, NoNode, NotEmpty, Store, Transaction, children_or_empty,
                                  commit_groups, commit_in_batches, commit_ops)
from replog.coord_backends import paths
from replog.coord_backends.base import CreateOp, DeleteOp, TxnOp
from replog.coord_backends.paths import (
    BrokerRegistration,
    IsrRecord,
    LeaderRecord,
    PartitionReassignment,
    ReplicaAssignment,
    TopicChangeInProgress,
    TopicConfig,
    TopicId,
    TopicDeletion,
)
from replog.replication.hosted import read_replicas, read_topic_record
from replog.replication.state_changes import (
    CLOSE_REPLICA,
    FROM_ADMIN,
    START_REPLICA,
    FollowerStateChangeQueueFull,
    send_state_change,
    wait_till_state_change_requests_consumed,
)
from replog.replication.topic_deletion import finish_topic_deletion, pending_close_replicas, read_deletion, subtree

from .assignment import BrokerRack, assign_replicas, check_assignment
from .errors import (
    AdminError,
    BrokerNotAvailable,
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidTopic,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)

logger = logging.getLogger(__name__)

TOPIC_NAME_LENGTH_MAX = 249  # Kafka's: a partition directory "<topic>-<partition>" must fit in 255 bytes
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
CONFLICT_ATTEMPTS_MAX = 5
STATE_CHANGE_TIMEOUT_S_DEFAULT = 30.0  # Kafka's request.timeout.ms default
# Partitions per state-change request: its node stays far below ZooKeeper's 1 MB and etcd's
# 1.5 MiB request limits.
STATE_CHANGE_PARTITIONS_MAX = 10_000
QUEUE_MAX_REQUESTS_DEFAULT: int = SETTINGS["state.change.queue.max.requests"].default
_CONFLICTS = (NodeExists, NoNode, BadVersion, NotEmpty)

T = TypeVar("T")


def validate_topic_name(name: str) -> None:
    """Kafka's rules (Topic.validate); InvalidTopic (17) says which one is broken."""
    if not name:
        raise InvalidTopic("topic name is illegal: it can't be empty")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is illegal: it can't be '.' or '..'")
    if len(name) > TOPIC_NAME_LENGTH_MAX:
        raise InvalidTopic(f"topic name {name!r} is illegal: it can't be longer than {TOPIC_NAME_LENGTH_MAX} characters")
    if not _TOPIC_NAME.fullmatch(name):
        raise InvalidTopic(
            f"topic name {name!r} is illegal: it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
        )


def mixed_separators_warning(name: str) -> str | None:
    """Kafka's warning for a name with both '.' and '_': metric names turn '.' into '_', so such
    a topic's metrics collide with a namesake's that differs only there."""
    if "." in name and "_" in name:
        return (
            f"topic {name!r} mixes '.' and '_': metric names collide for topics that differ only there;"
            " it is best to use one or the other"
        )
    return None


def _collision_key(name: str) -> str:
    # Kafka refuses topics differing only in '.' versus '_': their metric names collide.
    return name.replace(".", "_")


async def _retrying(attempt: Callable[[], Awaitable[T]]) -> T:
    for _ in range(CONFLICT_ATTEMPTS_MAX - 1):
        try:
            return await attempt()
        except _CONFLICTS:
            continue
    return await attempt()


async def _get_or_none(store: Store, path: str) -> tuple[bytes, int] | None:
    try:
        return await store.get(path)
    except NoNode:
        return None


async def _ensure_exists(store: Store, path: str) -> None:
    if await store.exists(path) is None:
        try:
            await store.create(path, make_parents=True)
        except NodeExists:
            pass  # another admin or broker made it first


async def registered_brokers(store: Store) -> dict[int, BrokerRegistration]:
    """Every registered broker's registration, by id."""
    registered = {}
    for child in await children_or_empty(store, paths.BROKER_IDS):
        node = await _get_or_none(store, paths.broker(int(child)))
        if node is not None:  # None: the broker's session ended since the listing
            registered[int(child)] = BrokerRegistration.decode(node[0])
    return registered


async def live_brokers(store: Store) -> list[BrokerRack]:
    """(broker id, rack) of every registered broker, by id."""
    return [(broker, registration.rack) for broker, registration in sorted((await registered_brokers(store)).items())]


async def list_topics(store: Store) -> list[str]:
    """The topics, but those marked for deletion and those being created (count 0)."""
    marked = set(await children_or_empty(store, paths.TOPIC_DELETIONS))
    names = [topic for topic in await children_or_empty(store, paths.TOPICS) if topic not in marked]
    records = await asyncio.gather(*(read_topic_record(store, topic) for topic in names))
    return [topic for topic, record in zip(names, records) if record is not None and record[0].partitions != 0]


async def _partition_ids(store: Store, name: str) -> list[int]:
    validate_topic_name(name)
    record = await read_topic_record(store, name)
    try:
        children = await store.children(paths.topic(name))
    except NoNode:
        children = None
    if record is None or children is None or record[0].partitions == 0:
        raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
    if await store.exists(paths.topic_deletion(name)) is not None:
        raise UnknownTopicOrPartition(f"topic {name!r} is marked for deletion")
    return sorted(partition for partition in map(int, children) if record[0].counts(partition))


def _topic_config_errors(name: str, configs: Mapping[str, str], broker_config: BrokerConfig | None) -> None:
    """Without `broker_config` (an admin command run away from any broker), Kafka's floor for
    segment.bytes holds; a broker holds its clients to its own."""
    segment_bytes_min = SEGMENT_BYTES_MIN if broker_config is None else broker_config["internal.segment.bytes.min"]
    try:
        validate_topic_configs(configs, segment_bytes_min)
    except ConfigError as error:
        raise InvalidConfig(f"topic {name!r}: {error}") from None


def _naming_topic(name: str, error: AdminError) -> AdminError:
    return type(error)(f"topic {name!r}: {error.message}")


async def _plan_assignment(
    store: Store,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    replica_assignment: Mapping[int, Sequence[int]] | None,
) -> dict[int, list[int]]:
    if replica_assignment is not None:
        return check_given_assignment(name, replica_assignment, partitions, replication_factor)
    if partitions is None or replication_factor is None:
        raise InvalidReplicaAssignment(f"topic {name!r}: give a partition count and a replication factor, or a replica assignment")
    try:
        return assign_replicas(await live_brokers(store), partitions, replication_factor)
    except AdminError as error:
        raise _naming_topic(name, error) from None


def check_given_assignment(
    name: str, replica_assignment: Mapping[int, Sequence[int]], partitions: int | None, replication_factor: int | None
) -> dict[int, list[int]]:
    """An explicit assignment for a new topic, validated (check_assignment), and agreeing with the
    partition count and replication factor where those are given too."""
    try:
        assignment = check_assignment(replica_assignment)
    except AdminError as error:
        raise _naming_topic(name, error) from None
    given_factor = len(assignment[0])
    disagreements = []
    if partitions is not None and partitions != len(assignment):
        disagreements.append(f"{partitions} partitions")
    if replication_factor is not None and replication_factor != given_factor:
        disagreements.append(f"replication factor {replication_factor}")
    if disagreements:
        raise InvalidReplicaAssignment(
            f"topic {name!r}: the replica assignment has {len(assignment)} partitions of {given_factor} replicas,"
            f" not {' and '.join(disagreements)}"
        )
    return assignment


@dataclasses.dataclass(frozen=True)
class StateChangeLimits:
    """How long an admin command waits for brokers to consume its requests, and the bound of
    their queues (`state.change.queue.max.requests`)."""

    timeout_s: float = STATE_CHANGE_TIMEOUT_S_DEFAULT
    queue_max_requests: int = QUEUE_MAX_REQUESTS_DEFAULT


async def _send_to_replicas(
    store: Store, kind: str, name: str, assignment: Mapping[int, Sequence[int]], limits: StateChangeLimits
) -> dict[int, list[str]]:
    """sendStateChange(kind, epoch -1) to every replica of every partition, one request per
    broker (per STATE_CHANGE_PARTITIONS_MAX of its partitions), to all brokers at once; the
    request names sent, by broker."""
    by_broker: dict[int, list[int]] = {}
    for partition_id, replicas in sorted(assignment.items()):
        for broker in replicas:
            by_broker.setdefault(broker, []).append(partition_id)

    async def send(broker: int, partition_ids: list[int]) -> list[str]:
        names = []
        for start in range(0, len(partition_ids), STATE_CHANGE_PARTITIONS_MAX):
            try:
                names.append(await send_state_change(
                    store, kind, broker, name, partition_ids[start:start + STATE_CHANGE_PARTITIONS_MAX], FROM_ADMIN,
                    FROM_ADMIN, queue_max_requests=limits.queue_max_requests))
            except FollowerStateChangeQueueFull as full:
                raise BrokerNotAvailable(f"topic {name!r}: {full}") from None
        return names

    sent = await asyncio.gather(*(send(broker, partition_ids) for broker, partition_ids in by_broker.items()))
    return dict(zip(by_broker, sent))


async def _wait_for_registered(store: Store, name: str, sent: Mapping[int, list[str]], limits: StateChangeLimits,
                               consequence: str) -> None:
    """waitTillStateChangeRequestConsumed, for the brokers that are registered: the others drain
    their queues before they start any replica."""
    registered = {broker for broker, _ in await live_brokers(store)}
    late = await wait_till_state_change_requests_consumed(
        store, {broker: names for broker, names in sent.items() if broker in registered}, limits.timeout_s
    )
    if late:
        raise RequestTimedOut(
            f"topic {name!r}: brokers {late} did not consume their state-change requests within"
            f" {limits.timeout_s:g} s; {consequence}"
        )


async def _staged(store: Store, name: str) -> dict[int, list[int]]:
    staged = {}
    for child in await children_or_empty(store, paths.reassigned_topic(name)):
        replicas = await read_replicas(store, paths.reassigned_partition(name, int(child)))
        if replicas is not None:
            staged[int(child)] = list(replicas)
    return staged


async def clean_failed_topic_creation_attempt(store: Store, name: str, limits: StateChangeLimits) -> None:
    """cleanFailedTopicCreationAttempt: what an addPartition that never finished (it timed out,
    or its admin died) left is closed on its brokers and removed: partitions staged but not
    created, partitions created above the topic's count, and a new topic's node and config
    while its count is 0. A staged partition of the topic (below its count) is a reassignment,
    not a failed attempt: left alone. Runs under the topic's change marker, so no addPartition
    of another admin is in flight."""
    record = await read_topic_record(store, name)
    uncounted = {} if record is None else {
        partition_id: list(await read_replicas(store, paths.replicas(name, partition_id)) or ())
        for partition_id in map(int, await children_or_empty(store, paths.topic(name)))
        if not record[0].counts(partition_id)
    }
    staged = await _staged(store, name)
    unstaged = [partition_id for partition_id in staged if record is None or not record[0].counts(partition_id)]
    leftovers = {partition_id: sorted({*uncounted.get(partition_id, ()), *staged.get(partition_id, ())})
                 for partition_id in {*uncounted, *unstaged}}
    abandoned_topic = record is not None and record[0].partitions == 0
    if not leftovers and not abandoned_topic:
        return
    doomed: list[TxnOp] = [DeleteOp(paths.reassigned_partition(name, partition_id)) for partition_id in unstaged]
    if len(unstaged) == len(staged) and staged:
        doomed.append(DeleteOp(paths.reassigned_topic(name)))
    for partition_id in uncounted:
        doomed += [DeleteOp(path) for path in await subtree(store, paths.partition(name, partition_id))]
    if abandoned_topic:
        doomed += [DeleteOp(paths.topic(name), record[1]), DeleteOp(paths.topic_config(name))]
    await commit_in_batches(store, doomed)
    # Sent once the nodes are gone: a broker finding a partition's replicas node that names it
    # takes the close-replica for one overtaken by a later creation, and ignores it.
    await _send_to_replicas(store, CLOSE_REPLICA, name, leftovers, limits)
    logger.info("cleaned a failed attempt to add partitions topic=%s partitions=%s", name, sorted(leftovers))


async def _wait_for_topic_change(store: Store, name: str, timeout_s: float) -> None:
    """Wait while another admin holds the topic's change marker (it ends with its command, or
    with its session)."""
    try:
        async with asyncio.timeout(timeout_s):
            async with await store.watch_data(paths.topic_change(name)) as watch:
                async for event in watch:
                    if not event.exists:
                        return
    except TimeoutError:
        raise RequestTimedOut(f"topic {name!r}: another admin command is still changing it after {timeout_s:g} s") from None


async def _changing_topic(
    store: Store, name: str, operation: str, limits: StateChangeLimits, change: Callable[[], Awaitable[T]]
) -> T:
    """Run `change` holding the topic's change marker. Taking it is the command's first
    transaction: the point where racing admins meet, one wins, and the others wait for it."""
    await _wait_for_topic_change(store, name, limits.timeout_s)
    await _ensure_exists(store, paths.TOPIC_CHANGES)
    marker = TopicChangeInProgress(operation).encode()
    await store.transaction().create(paths.topic_change(name), marker, ephemeral=True).commit()
    try:
        return await change()
    finally:
        try:
            await store.delete(paths.topic_change(name))
        except NoNode:
            pass  # it went with a lost session


async def add_partitions(
    store: Store, name: str, assignment: Mapping[int, Sequence[int]], limits: StateChangeLimits,
    new_topic: Callable[[Transaction], Awaitable[None]] | None = None,
) -> None:
    """addPartition for every partition in `assignment` (numbered on from the topic's count),
    with one commit point for all of them: stage, start-replica each replica, wait, then
    `new_topic` adds a new topic's node (count 0) and config to a transaction of their own, the
    partitions are created and unstaged, and the topic's count is raised to take them in.
    Call under the topic's change marker, after clean_failed_topic_creation_attempt."""
    await _ensure_exists(store, paths.PARTITIONS_REASSIGNED)
    staging_topic_existed = await store.exists(paths.reassigned_topic(name)) is not None
    if not staging_topic_existed:
        await commit_ops(store, [CreateOp(paths.reassigned_topic(name))])
    await commit_groups(store, [[CreateOp(paths.reassigned_partition(name, partition_id), ReplicaAssignment(tuple(replicas)).encode())]
                                for partition_id, replicas in assignment.items()])
    sent = await _send_to_replicas(store, START_REPLICA, name, assignment, limits)
    await _wait_for_registered(store, name, sent, limits,
                               "the partitions stay staged until the next create of the topic cleans them up")
    if new_topic is not None:
        transaction = store.transaction()
        await new_topic(transaction)
        await transaction.commit()
    record, version = await _counted_topic_record(store, name)
    await commit_groups(store, [[CreateOp(paths.partition(name, partition_id)),
                                 CreateOp(paths.replicas(name, partition_id), ReplicaAssignment(tuple(replicas)).encode()),
                                 DeleteOp(paths.reassigned_partition(name, partition_id))]
                                for partition_id, replicas in assignment.items()])
    commit = store.transaction().set(paths.topic(name), dataclasses.replace(record, partitions=max(assignment) + 1).encode(),
                                     version)
    if not staging_topic_existed:
        commit.delete(paths.reassigned_topic(name))
    await commit.commit()


async def _counted_topic_record(store: Store, name: str) -> tuple[TopicId, int]:
    """The topic's node and its version, with a partition count: a topic written before counts
    existed gets the count of its partitions now, so that partitions added above it stay out of
    sight until the commit point."""
    found = await read_topic_record(store, name)
    if found is None:
        raise NoNode(paths.topic(name))
    record, version = found
    if record.partitions is None:
        record = dataclasses.replace(record, partitions=len(await store.children(paths.topic(name))))
        version = await store.set(paths.topic(name), record.encode(), version)
    return record, version


async def create_topic(
    store: Store,
    name: str,
    partitions: int | None,
    replication_factor: int | None,
    configs: Mapping[str, str] | None = None,
    *,
    replica_assignment: Mapping[int, Sequence[int]] | None = None,
    validate_only: bool = False,
    limits: StateChangeLimits = StateChangeLimits(),
    broker_config: BrokerConfig | None = None,
) -> dict[int, list[int]]:
    """Create a topic and return its replica assignment; with `validate_only`, only check and plan.

    `partitions` and `replication_factor` may be None when `replica_assignment` gives them
    (CreateTopics resolves Kafka's -1 to the broker's num.partitions/default.replication.factor
    before calling). Without an assignment, replicas go to the registered brokers by
    `assign_replicas`.
    """
    validate_topic_name(name)
    overrides = dict(configs or {})
    _topic_config_errors(name, overrides, broker_config)
    assignment = await _plan_assignment(store, name, partitions, replication_factor, replica_assignment)

    async def refuse_existing() -> None:
        if not await finish_topic_deletion(store, name):
            raise TopicAlreadyExists(f"topic {name!r} is marked for deletion; {await _deletion_waits_for(store, name)}")
        existing = await list_topics(store)
        if name in existing:
            raise TopicAlreadyExists(f"topic {name!r} already exists")
        colliding = [topic for topic in existing if _collision_key(topic) == _collision_key(name)]
        if colliding:
            raise InvalidTopic(f"topic {name!r} collides with existing topic {colliding[0]!r} ('.' and '_' collide)")

    async def new_topic(transaction: Transaction) -> None:
        transaction.create(paths.topic(name), TopicId.new().encode())
        config_bytes = TopicConfig(overrides).encode()
        # A config left behind without its topic (written by an older tool) is overwritten,
        # as Kafka's createTopic does; the version check keeps a racing creator out.
        stale_version = await store.exists(paths.topic_config(name))
        if stale_version is None:
            transaction.create(paths.topic_config(name), config_bytes)
        else:
            transaction.set(paths.topic_config(name), config_bytes, stale_version)

    async def create() -> dict[int, list[int]]:
        await refuse_existing()  # not a topic of count 0: that one is a failed attempt, cleaned next
        await _ensure_exists(store, paths.TOPICS)
        await _ensure_exists(store, paths.TOPIC_CONFIGS)
        await clean_failed_topic_creation_attempt(store, name, limits)
        await add_partitions(store, name, assignment, limits, new_topic)
        return assignment

    if validate_only:
        await refuse_existing()
        return assignment
    return await _retrying(lambda: _changing_topic(store, name, "create", limits, create))


async def delete_topic(store: Store, name: str, *, limits: StateChangeLimits = StateChangeLimits()) -> None:
    """deleteTopic: mark the topic for deletion and send close-replica to every broker holding a
    replica (of its partitions and of any staged for it), down or not, then wait for the
    registered ones and remove the topic once all consumed theirs (topic_deletion.py).

    In the classic design each partition's leader sends the close-replicas, prompted by an
    empty reassignment; the admin sends them itself here (docs/design.md §9.1), which also reaches partitions that
    have no leader. A delete of a topic already marked sends nothing again: it waits, and
    finishes the deletion if it can.

    Returns once the topic is gone, or is marked and only brokers that are not registered still
    have to consume their requests (they do when they start, before opening any replica, and
    the last of them removes the topic), as Kafka's DeleteTopics returns while a replica's
    broker is offline. Fails with REQUEST_TIMED_OUT naming the registered brokers that did not
    consume theirs within the timeout; the topic stays marked, and goes when they do.
    """
    validate_topic_name(name)
    if await store.exists(paths.topic(name)) is None:
        raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
    sent = await _retrying(lambda: _changing_topic(store, name, "delete", limits, lambda: _mark_for_deletion(store, name, limits)))
    if sent:
        await _wait_for_registered(store, name, sent, limits, "the topic is marked for deletion, which completes when they do")
    if not await finish_topic_deletion(store, name):
        logger.info("topic marked for deletion topic=%s %s", name, await _deletion_waits_for(store, name))


async def _mark_for_deletion(store: Store, name: str, limits: StateChangeLimits) -> dict[int, list[str]]:
    """Mark the topic, send the close-replicas, and name them in the mark, in that order: a
    broker consuming its request finds the topic marked (else it takes the request for a failed
    creation's, state_changes.close_replica_is_overtaken), and the deletion completes only once
    the mark names every request to wait for. Returns the requests not consumed yet, by broker
    (of an earlier delete that named them, if there was one)."""
    if await store.exists(paths.topic(name)) is None:
        raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
    marked = await read_deletion(store, name)
    if marked is not None and marked[0].close_replicas is not None:
        return await pending_close_replicas(store, marked[0])
    if marked is None:
        await _ensure_exists(store, paths.TOPIC_DELETIONS)
        await store.create(paths.topic_deletion(name), TopicDeletion().encode())
        marked = await read_deletion(store, name)
    assignment = await _staged(store, name)
    for partition_id in await children_or_empty(store, paths.topic(name)):
        replicas = await read_replicas(store, paths.replicas(name, int(partition_id)))
        if replicas is not None:
            assignment[int(partition_id)] = sorted({*assignment.get(int(partition_id), ()), *replicas})
    sent = await _send_to_replicas(store, CLOSE_REPLICA, name, assignment, limits)
    named = TopicDeletion({str(broker): names for broker, names in sent.items()})
    await store.set(paths.topic_deletion(name), named.encode(), marked[1])
    return sent


async def _deletion_waits_for(store: Store, name: str) -> str:
    marked = await read_deletion(store, name)
    if marked is None or marked[0].close_replicas is None:
        return "its close-replica requests are being sent"
    pending = await pending_close_replicas(store, marked[0])
    return f"the deletion completes when brokers {sorted(pending)} consume their close-replica requests"


async def create_partitions(
    store: Store, name: str, new_total: int, assignment: Mapping[int, Sequence[int]] | None = None,
    *, limits: StateChangeLimits = StateChangeLimits(),
) -> dict[int, list[int]]:
    """Grow the topic to `new_total` partitions; returns the new partitions' replicas.

    `assignment`, when given, names the new partitions only (ids existing count .. new_total-1),
    each with as many replicas as partition 0 has. Without it, Kafka's rule: continue the
    round-robin from partition 0's leader over the registered brokers.
    """

    async def grow() -> dict[int, list[int]]:
        existing = await _partition_ids(store, name)
        check_partition_increase(name, len(existing), new_total)
        first_replicas = await _stored_replicas(store, name, 0)
        added = await _plan_new_partitions(store, name, len(existing), new_total, first_replicas, assignment)
        await clean_failed_topic_creation_attempt(store, name, limits)
        # Were the topic deleted meanwhile, creating a partition under it fails with NoNode,
        # and the re-read reports the topic unknown.
        await add_partitions(store, name, added, limits)
        return added

    await _partition_ids(store, name)  # an unknown topic is refused before anything is taken
    return await _retrying(lambda: _changing_topic(store, name, "add-partitions", limits, grow))


def check_partition_increase(name: str, current: int, new_total: int) -> None:
    """A partition count only grows. Kafka refuses to shrink one too: a keyed record's partition
    is hash(key) mod the count, so fewer partitions would send keys to other partitions than
    their earlier records, and the removed partitions' records would have nowhere to go."""
    if new_total < current:
        raise InvalidPartitions(
            f"topic {name!r} has {current} partitions and cannot shrink to {new_total}: keyed records would"
            " move to other partitions (Kafka refuses too); create a new topic with fewer partitions instead"
        )
    if new_total == current:
        raise InvalidPartitions(f"topic {name!r} already has {current} partitions; give a larger count to add some")


async def _plan_new_partitions(
    store: Store,
    name: str,
    existing_count: int,
    new_total: int,
    first_replicas: list[int],
    assignment: Mapping[int, Sequence[int]] | None,
) -> dict[int, list[int]]:
    try:
        if assignment is None:
            brokers = await live_brokers(store)
            start_index = next((index for index, (broker, _) in enumerate(brokers) if broker >= first_replicas[0]), 0)
            return assign_replicas(
                brokers, new_total - existing_count, len(first_replicas), start_index=start_index,
                first_partition_id=existing_count,
            )
        added = check_assignment(assignment, first_partition_id=existing_count)
    except AdminError as error:
        raise _naming_topic(name, error) from None
    if max(added) != new_total - 1 or len(added[existing_count]) != len(first_replicas):
        raise InvalidReplicaAssignment(
            f"topic {name!r}: the assignment must give partitions {existing_count}..{new_total - 1}"
            f" {len(first_replicas)} replicas each, as partition 0 has"
        )
    return added


async def _stored_replicas(store: Store, name: str, partition_id: int) -> list[int]:
    data, _ = await store.get(paths.replicas(name, partition_id))
    return list(ReplicaAssignment.decode(data).replicas)


@dataclasses.dataclass(frozen=True)
class PartitionDescription:
    partition: int
    replicas: tuple[int, ...]
    leader: int | None  # None: no leader right now (election pending, or every replica down)
    leader_epoch: int | None  # the current leader's, else the last one the ISR record names
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]  # assigned to brokers that are not registered
    # Of a reassignment in flight (/brokers/partitions_reassigned): target replicas not yet in
    # the assignment, and replicas that leave it. None: the door asked cannot tell.
    adding_replicas: tuple[int, ...] | None = ()
    removing_replicas: tuple[int, ...] | None = ()


@dataclasses.dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]


async def describe_topic(store: Store, name: str) -> TopicDescription:
    live = {broker for broker, _ in await live_brokers(store)}
    described = []
    for partition_id in await _partition_ids(store, name):
        replicas = tuple(await _stored_replicas(store, name, partition_id))
        leader_node = await _get_or_none(store, paths.leader(name, partition_id))
        isr_node = await _get_or_none(store, paths.isr(name, partition_id))
        leader = LeaderRecord.decode(leader_node[0]) if leader_node else None
        isr = IsrRecord.decode(isr_node[0]) if isr_node else None
        moving = await _get_or_none(store, paths.reassigned_partition(name, partition_id))
        reassignment = PartitionReassignment.decode(moving[0]) if moving else PartitionReassignment(replicas)
        # A move's leader first adds the target's replicas to the assignment (reassignment.py):
        # what it adds is counted from the replicas the move began with.
        target, original = reassignment.replicas, reassignment.original or replicas
        described.append(
            PartitionDescription(
                partition=partition_id,
                replicas=replicas,
                leader=leader.leader if leader else None,
                leader_epoch=leader.leader_epoch if leader else (isr.leader_epoch if isr else None),
                isr=isr.isr if isr else (),
                offline_replicas=tuple(replica for replica in replicas if replica not in live),
                adding_replicas=tuple(replica for replica in target if replica not in original),
                removing_replicas=tuple(replica for replica in replicas if replica not in target),
            )
        )
    return TopicDescription(name, tuple(described))
