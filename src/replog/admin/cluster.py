"""The cluster as a whole, on the coordination store: `replog cluster` and the ElectLeaders and
DescribeCluster requests.

    cluster_status          brokers (registered or only known by their state-change queue),
                            replicas and leaders per broker, queue depths, moves in flight,
                            under-replicated and offline partitions
    elect_leaders           preferred: leadership back to the first assigned replica;
                            unclean: a live replica outside the ISR leads a partition whose
                            in-sync replicas are all down, once, when asked
    plan_membership         the planner's moves (planner.py) that spread replicas onto added
                            brokers or off removed ones (decide_membership, from what either
                            Admin reads); the CLI executes them as reassignments, waits for
                            them and elects the preferred leaders the plan balanced
                            (replog.cli.membership)
    finish_removal          the end of a broker's removal (docs/design.md §12): the removed brokers'
                            state-change paths go, and with them any topic deletion that was
                            waiting for their close-replicas (Kafka's UnregisterBroker)

A broker of the cluster is one registered under /brokers/ids or one with a state-change queue
(made at its first start; reassignment.cluster_brokers): one with a
queue and no registration is down.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import logging
import time
from collections.abc import Collection, Iterable, Mapping, Sequence

from replog import listener_settings
from replog.coord_backends import BadVersion, NodeExists, NoNode, Store, children_or_empty
from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration, ClusterId, IsrRecord, LeaderRecord
from replog.replication.election import next_leader_epoch
from replog.replication.state_changes import wait_till_state_change_requests_consumed
from replog.replication.topic_deletion import finish_topic_deletion

from .errors import (
    AdminError,
    BrokerNotAvailable,
    ElectionNotNeeded,
    EligibleLeadersNotAvailable,
    InvalidReplicaAssignment,
    PreferredLeaderNotAvailable,
    ReassignmentInProgress,
    RequestTimedOut,
    UnknownTopicOrPartition,
    error_for_code,
)
from .planner import Plan, plan_balance
from .reassignment import cluster_brokers, list_partition_reassignments
from .topics import (
    PartitionDescription,
    StateChangeLimits,
    _get_or_none,
    _partition_ids,
    describe_topic,
    list_topics,
    read_replicas,
    registered_brokers,
)

logger = logging.getLogger(__name__)

PartitionKey = tuple[str, int]
POLL_S = 0.1  # how often a wait for leaders looks at the store again


# -- status ----------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BrokerStatus:
    broker: int
    host: str | None  # None: not registered
    port: int | None
    rack: str | None
    alive: bool
    replicas: int
    leaders: int
    queue_depth: int | None  # None: the door cannot tell (a broker does not serve the queues)
    # Its PLAINTEXT listeners bound beyond loopback, NAME://address:port (listener_settings.py);
    # None: the door cannot tell (a broker tells no other's bound addresses), or it is down.
    plaintext_beyond_loopback: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class ClusterStatus:
    """JSON (`--output json`), keys in this order:

        {"cluster_id": str | null, "brokers": [{"broker", "host", "port", "rack", "alive",
         "replicas", "leaders", "queue_depth", "plaintext_beyond_loopback"}], "partitions": int, "under_replicated": int,
         "offline": int, "reassignments": int | null}

    null where there is no value (a broker down has no address) or the door cannot tell.
    """

    cluster_id: str | None
    brokers: tuple[BrokerStatus, ...]
    partitions: int
    under_replicated: int
    offline: int
    reassignments: int | None

    def as_json(self) -> dict:
        return {"cluster_id": self.cluster_id, "brokers": [dataclasses.asdict(broker) for broker in self.brokers],
                "partitions": self.partitions, "under_replicated": self.under_replicated, "offline": self.offline,
                "reassignments": self.reassignments}


def summarize(cluster_id: str | None, registered: Mapping[int, BrokerRegistration], known: Collection[int],
              partitions: Sequence[PartitionDescription], queue_depths: Mapping[int, int] | None,
              reassignments: int | None) -> ClusterStatus:
    """The status from what either door reads: the registered brokers, the others known to the
    cluster, and every partition."""
    everyone = sorted(set(known) | set(registered) | {broker for part in partitions for broker in part.replicas})
    brokers = []
    for broker in everyone:
        registration = registered.get(broker)
        brokers.append(BrokerStatus(
            broker=broker,
            host=registration.host if registration else None,
            port=registration.port if registration else None,
            rack=registration.rack if registration else None,
            alive=registration is not None,
            replicas=sum(broker in part.replicas for part in partitions),
            leaders=sum(part.leader == broker for part in partitions),
            queue_depth=None if queue_depths is None else queue_depths.get(broker, 0),
            plaintext_beyond_loopback=_plaintext_beyond_loopback(registration),
        ))
    return ClusterStatus(
        cluster_id=cluster_id,
        brokers=tuple(brokers),
        partitions=len(partitions),
        under_replicated=sum(len(part.isr) < len(part.replicas) for part in partitions),
        offline=sum(part.leader is None or part.leader not in registered for part in partitions),
        reassignments=reassignments,
    )


def _plaintext_beyond_loopback(registration: BrokerRegistration | None) -> tuple[str, ...] | None:
    if registration is None or not registration.listeners:
        return None
    bound = [listener_settings.bound_listener(listener) for listener in registration.listeners]
    exposed = listener_settings.plaintext_beyond_loopback(bound, registration.listener_security_protocol_map or {})
    return tuple(str(endpoint) for endpoint in exposed)


async def cluster_status(store: Store) -> ClusterStatus:
    registered = await registered_brokers(store)
    known = await cluster_brokers(store)
    partitions = []
    for topic in await list_topics(store):
        try:
            partitions += (await describe_topic(store, topic)).partitions
        except UnknownTopicOrPartition:
            continue  # deleted since the listing
    depths = {broker: len(await children_or_empty(store, paths.state_queue(broker))) for broker in sorted(known)}
    cluster_id = await _get_or_none(store, paths.CLUSTER_ID)
    return summarize(ClusterId.decode(cluster_id[0]).cluster_id if cluster_id else None, registered, known,
                     partitions, depths, len(await list_partition_reassignments(store)))


# -- elections -------------------------------------------------------------------------------------

class ElectionType(enum.IntEnum):
    """Kafka's ElectLeaders election_type values."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclasses.dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    error: AdminError | None  # None: elected
    leader: int | None = None
    # An unclean election: the in-sync replicas the new leader was not among. Records they
    # acknowledged after it fell behind are not on it.
    unclean_after_isr: tuple[int, ...] | None = None

    @property
    def outcome(self) -> str:
        if self.error is None:
            return "elected"
        return {ElectionNotNeeded.code: "not needed", UnknownTopicOrPartition.code: "unknown"}.get(
            self.error.code, "not available")

    @property
    def detail(self) -> str:
        if self.error is not None:
            return self.error.message
        if self.unclean_after_isr is not None:
            return unclean_warning(self.topic, self.partition, self.leader, self.unclean_after_isr)
        return f"broker {self.leader} leads"

    def as_json(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "outcome": self.outcome, "leader": self.leader,
                "error_code": None if self.error is None else self.error.code, "detail": self.detail}


def unclean_warning(topic: str, partition: int, leader: int | None, isr: Sequence[int]) -> str:
    since = f"it fell out of the ISR {list(isr)}" if isr else "it fell out of the ISR"
    return (f"unclean election: broker {leader} leads {topic}-{partition}; records acknowledged since {since} "
            f"may be lost")


@dataclasses.dataclass(frozen=True)
class _Pending:
    expected: int
    unclean_after_isr: tuple[int, ...] | None = None
    nudge: tuple[int, int] | None = None  # (epoch, version) of the leader node written for an unclean election


async def elect_leaders(store: Store, election_type: ElectionType, partitions: Iterable[PartitionKey] | None,
                        timeout_s: float) -> list[ElectionResult]:
    """Elect the leaders of `partitions` (None: every partition), and wait up to `timeout_s` for
    the outcome; a result per partition, by topic and partition.

    Preferred: where the first assigned replica is registered and in the ISR but does not lead,
    the leader node is deleted at the version read. That is how a follower deposes a leader it
    presumes gone (leadership.py, BrokerPresumedGone), argued safe there: the old leader's ISR
    writes are compare-and-set on the node, so they fail from then on; the next leader comes
    from the ISR, which holds everything the old leader acknowledged; and every replica but the
    preferred one waits PreferredReplicaTime before it races (election.py), so the preferred one
    wins unless it takes longer than that to notice.
    """
    started = time.monotonic()
    keys = await _partitions(store, partitions)
    results: dict[PartitionKey, ElectionResult] = {}
    pending: dict[PartitionKey, _Pending] = {}
    start = _start_preferred if election_type is ElectionType.PREFERRED else _start_unclean
    for key in keys:  # bounded by the request, or by the partitions
        outcome = await start(store, *key)
        if isinstance(outcome, _Pending):
            pending[key] = outcome
        else:
            results[key] = outcome
    results |= await _wait_for_leaders(store, pending, started + timeout_s)
    return [results[key] for key in sorted(results)]


async def election_partitions(store: Store, topic: str | None, partition: int | None) -> list[PartitionKey] | None:
    """The partitions an election names: one, a topic's, or every one (None)."""
    if topic is None:
        return None
    if partition is not None:
        return [(topic, partition)]
    return [(topic, index) for index in await _partition_ids(store, topic)]


async def _partitions(store: Store, asked: Iterable[PartitionKey] | None) -> list[PartitionKey]:
    if asked is None:
        return [(topic, partition) for topic in sorted(await list_topics(store))
                for partition in await _partition_ids_or_none(store, topic)]
    return sorted(set(asked))


async def _partition_ids_or_none(store: Store, topic: str) -> list[int]:
    try:
        return await _partition_ids(store, topic)
    except UnknownTopicOrPartition:
        return []  # deleted since the listing


async def _partition_state(store: Store, topic: str, partition: int):
    """(replicas, leader record and version or None, ISR record and version or None); raises
    UnknownTopicOrPartition."""
    if partition not in await _partition_ids(store, topic):
        raise UnknownTopicOrPartition(f"partition {topic}-{partition} does not exist")
    replicas = await read_replicas(store, paths.replicas(topic, partition))
    if replicas is None:
        raise UnknownTopicOrPartition(f"partition {topic}-{partition} does not exist")
    leader = await _get_or_none(store, paths.leader(topic, partition))
    isr = await _get_or_none(store, paths.isr(topic, partition))
    return (tuple(replicas), None if leader is None else (LeaderRecord.decode(leader[0]), leader[1]),
            None if isr is None else (IsrRecord.decode(isr[0]), isr[1]))


async def _start_preferred(store: Store, topic: str, partition: int) -> ElectionResult | _Pending:
    subject = f"{topic}-{partition}"
    try:
        replicas, leader, isr = await _partition_state(store, topic, partition)
    except UnknownTopicOrPartition as error:
        return ElectionResult(topic, partition, error)
    preferred = replicas[0]
    if leader is not None and leader[0].leader == preferred:
        return ElectionResult(topic, partition, ElectionNotNeeded(
            f"{subject}: already led by its preferred replica {preferred}"), preferred)
    if await store.exists(paths.broker(preferred)) is None:
        return ElectionResult(topic, partition, PreferredLeaderNotAvailable(
            f"{subject}: its preferred replica {preferred} is not registered (down)"), _leader_of(leader))
    if isr is not None and preferred not in isr[0].isr:
        return ElectionResult(topic, partition, PreferredLeaderNotAvailable(
            f"{subject}: its preferred replica {preferred} is not in sync (ISR {list(isr[0].isr)})"), _leader_of(leader))
    if leader is not None:
        try:
            await store.delete(paths.leader(topic, partition), leader[1])
        except (NoNode, BadVersion):
            pass  # an election is under way already: the wait sees who won it
        else:
            logger.info("preferred election: deposed topic=%s partition=%d leader=%d epoch=%d preferred=%d",
                        topic, partition, leader[0].leader, leader[0].leader_epoch, preferred)
    return _Pending(preferred)


async def _start_unclean(store: Store, topic: str, partition: int) -> ElectionResult | _Pending:
    """A live replica outside the ISR leads, once: the ISR becomes that replica alone, written
    in one transaction with a leader node naming it at a new epoch.

    The ISR write is what makes it eligible (election.py lets only ISR members race while the ISR
    names anyone), and its compare-and-set on the ISR's version fences it against any election
    racing it, since every election rewrites the ISR in the transaction that creates its node.
    The leader node is what wakes the replica: having lost its last election, it waits for the
    node's next value. Naming it at an epoch it does not hold, the node is released by the
    replica itself (leadership.py: a node naming this broker at a leadership it does not hold is
    deleted), and its own election follows at once, as the only ISR member; the other replicas
    follow the node's name, then that election. The node is ephemeral to this admin's session:
    were the replica not to release it, it goes with the session, or when the wait gives up.
    """
    subject = f"{topic}-{partition}"
    try:
        replicas, leader, isr = await _partition_state(store, topic, partition)
    except UnknownTopicOrPartition as error:
        return ElectionResult(topic, partition, error)
    if leader is not None:
        return ElectionResult(topic, partition, ElectionNotNeeded(f"{subject}: led by broker {leader[0].leader}"),
                              leader[0].leader)
    if isr is None or not isr[0].isr:
        return ElectionResult(topic, partition, ElectionNotNeeded(
            f"{subject}: it has not led yet, so any live replica may lead it"))
    alive = [broker for broker in replicas if await store.exists(paths.broker(broker)) is not None]
    in_sync = [broker for broker in alive if broker in isr[0].isr]
    if in_sync:
        return ElectionResult(topic, partition, ElectionNotNeeded(
            f"{subject}: in-sync replica {in_sync[0]} is alive and elects itself"))
    if not alive:
        return ElectionResult(topic, partition, EligibleLeadersNotAvailable(
            f"{subject}: none of its replicas {list(replicas)} is registered"))
    chosen, lost_isr = alive[0], tuple(isr[0].isr)
    epoch, epoch_taken = await next_leader_epoch(store, topic, partition)
    txn = store.transaction()
    txn.set(paths.isr(topic, partition), IsrRecord((chosen,), epoch).encode(), isr[1])
    txn.create(paths.leader(topic, partition), LeaderRecord(chosen, epoch).encode(), ephemeral=True)
    txn.ops.append(epoch_taken)
    try:
        _, created, _ = await txn.commit()
    except (BadVersion, NoNode, NodeExists):
        return ElectionResult(topic, partition, EligibleLeadersNotAvailable(
            f"{subject}: its leader or ISR changed meanwhile; describe it and try again"))
    logger.warning("%s", unclean_warning(topic, partition, chosen, lost_isr))
    return _Pending(chosen, lost_isr, (epoch, created.version))


def _leader_of(leader: tuple[LeaderRecord, int] | None) -> int | None:
    return None if leader is None else leader[0].leader


async def _wait_for_leaders(store: Store, pending: dict[PartitionKey, _Pending], deadline: float) -> dict[PartitionKey, ElectionResult]:
    results = {}
    while pending:  # each round settles some or waits; the deadline ends it
        for (topic, partition), wanted in list(pending.items()):
            node = await _get_or_none(store, paths.leader(topic, partition))
            if node is None:
                continue
            record = LeaderRecord.decode(node[0])
            if wanted.nudge is not None and record.leader_epoch == wanted.nudge[0]:
                continue  # the node this election wrote, not yet released by its replica
            del pending[topic, partition]
            if record.leader == wanted.expected:
                results[topic, partition] = ElectionResult(topic, partition, None, record.leader, wanted.unclean_after_isr)
            else:
                results[topic, partition] = ElectionResult(topic, partition, PreferredLeaderNotAvailable(
                    f"{topic}-{partition}: broker {record.leader} won the election, not broker {wanted.expected}"),
                    record.leader)
        if not pending or time.monotonic() >= deadline:
            break
        await asyncio.sleep(POLL_S)
    for (topic, partition), wanted in pending.items():
        if wanted.nudge is not None:
            try:
                await store.delete(paths.leader(topic, partition), wanted.nudge[1])
            except (NoNode, BadVersion):
                pass
        results[topic, partition] = ElectionResult(topic, partition, RequestTimedOut(
            f"{topic}-{partition}: broker {wanted.expected} did not take the leadership in time"))
    return results


# -- adding and removing brokers -------------------------------------------------------------------

async def current_assignment(store: Store) -> dict[PartitionKey, tuple[int, ...]]:
    assignment = {}
    for topic in await list_topics(store):
        for partition in await _partition_ids_or_none(store, topic):
            replicas = await read_replicas(store, paths.replicas(topic, partition))
            if replicas is not None:
                assignment[topic, partition] = tuple(replicas)
    return assignment


async def plan_membership(store: Store, *, add: Collection[int] = (), remove: Collection[int] = (),
                          size_bytes: Mapping[PartitionKey, int] | None = None) -> Plan:
    """decide_membership over what the store says."""
    registered = await registered_brokers(store)
    return decide_membership({broker: registration.rack for broker, registration in registered.items()},
                             await cluster_brokers(store), await current_assignment(store),
                             len(await list_partition_reassignments(store)), add=add, remove=remove, size_bytes=size_bytes)


def decide_membership(racks: Mapping[int, str | None], known: Collection[int],
                      current: Mapping[PartitionKey, Sequence[int]], moving: int, *, add: Collection[int] = (),
                      remove: Collection[int] = (), size_bytes: Mapping[PartitionKey, int] | None = None) -> Plan:
    """The planner's moves over the cluster's brokers, the added ones included (they must be
    running, for their racks) and the removed ones excluded; refused while moves are in flight
    (`moving` of them), since their partitions' replicas are changing.

    From the facts either door reads: the registered brokers' racks, every broker the cluster
    knows (registered or down), each partition's replicas, and its size, which the plan reports
    and, between plans moving as many replicas, keeps small."""
    known = set(known) | set(racks)
    for broker in sorted(add):
        if broker not in racks:
            raise BrokerNotAvailable(f"broker {broker} is not registered: start it (replog broker start --broker-id "
                                     f"{broker} --coord ...), then add it")
    unknown = sorted(set(remove) - known)
    if unknown:
        raise InvalidReplicaAssignment(f"brokers {unknown} are not in the cluster (`replog cluster status` lists them)")
    if moving:
        raise ReassignmentInProgress(f"{moving} partitions are being reassigned; wait for them (replog reassign "
                                     "verify) or cancel them, then plan again")
    down = sorted(known - set(racks) - set(remove))
    if down and any(rack is not None for rack in racks.values()):
        raise BrokerNotAvailable(f"brokers {down} are down, and their racks are needed to plan: start them, or "
                                 "remove them too")
    brokers = sorted(racks.items()) + [(broker, None) for broker in down]
    holding = {broker for replicas in current.values() for broker in replicas}
    # A removed broker that is down and holds nothing needs no move, only its paths deleted,
    # which the planner would take for a typo.
    planned_removal = {broker for broker in remove if broker in racks or broker in holding}
    return plan_balance({key: tuple(replicas) for key, replicas in current.items()}, brokers, remove=planned_removal,
                        size_bytes=size_bytes)


def plan_targets(plan: Plan) -> dict[PartitionKey, tuple[int, ...]]:
    """The plan's moves as reassignment targets."""
    return {(move.topic, move.partition): move.new_replicas for move in plan.moves}


def raise_refusals(refused: Mapping[PartitionKey, AdminError | None]) -> None:
    """The first refusal of a plan's moves, if any, as an error naming how many more there were
    (the others went on)."""
    errors = [error for _, error in sorted(refused.items()) if error is not None]
    if len(errors) == 1:
        raise errors[0]
    if errors:
        raise error_for_code(errors[0].code, f"{errors[0].message} (and {len(errors) - 1} more moves refused)")


@dataclasses.dataclass(frozen=True)
class Removal:
    brokers: tuple[int, ...]
    queues_deleted: tuple[int, ...]
    # Topics whose deletion waited for a removed broker; None where the door cannot tell (Kafka's
    # UnregisterBroker answers an error code only).
    deletions_finished: tuple[str, ...] | None


async def finish_removal(store: Store, brokers: Collection[int], limits: StateChangeLimits = StateChangeLimits()) -> Removal:
    """Delete the removed brokers' state-change paths, once nothing is assigned to them; topic
    deletions that waited for their close-replicas then complete.

    A removed broker still running first gets up to the limits' timeout to consume what is
    queued for it (the close-replicas of the moves delete its logs); one that is down never
    will, and a decommissioned broker's leftover logs are its disk's business."""
    assigned = await current_assignment(store)
    for key, replicas in sorted(assigned.items()):
        left = sorted(set(replicas) & set(brokers))
        if left:
            raise ReassignmentInProgress(f"brokers {left} still hold a replica of {key[0]}-{key[1]} (a topic created "
                                         "meanwhile?): remove them again")
    running = [broker for broker in sorted(brokers) if await store.exists(paths.broker(broker)) is not None]
    queued = {broker: await children_or_empty(store, paths.state_queue(broker)) for broker in running}
    await wait_till_state_change_requests_consumed(store, queued, limits.timeout_s)
    deleted = []
    for broker in sorted(brokers):
        try:
            await store.delete(paths.state_queue(broker), recursive=True)
        except NoNode:
            continue
        deleted.append(broker)
    finished = [topic for topic in sorted(await children_or_empty(store, paths.TOPIC_DELETIONS))
                if await finish_topic_deletion(store, topic)]
    logger.info("brokers removed brokers=%s queues_deleted=%s deletions_finished=%s", sorted(brokers), deleted, finished)
    return Removal(tuple(sorted(brokers)), tuple(deleted), tuple(finished))


def plan_as_json(plan: Plan) -> dict:
    """JSON of a plan: {"moves": [{"topic", "partition", "from", "to", "added", "removed",
    "size_bytes"}], "replicas_moved": int, "bytes_moved": int, "lower_bound": int}."""
    return {
        "moves": [{"topic": move.topic, "partition": move.partition, "from": list(move.old_replicas),
                   "to": list(move.new_replicas), "added": list(move.added), "removed": list(move.removed),
                   "size_bytes": move.size_bytes}
                  for move in plan.moves],
        "replicas_moved": plan.replicas_moved, "bytes_moved": plan.bytes_moved, "lower_bound": plan.lower_bound,
    }
