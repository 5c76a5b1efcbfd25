"""The per-broker state-change queues (docs/design.md §7): sendStateChange, the state-change listener and
waitTillStateChangeRequestConsumed.

    /brokers/state/[broker_id]/[seq]  ->  StateChangeRequest (persistent, sequential)

A leader, or an admin command, asks a broker to start or close one of its replicas by
appending a request to that broker's queue (an admin's names every partition of the topic it
creates or deletes there in one request, as Kafka's LeaderAndIsr request does). The queue is persistent so that a request reaches
a broker that is down when it is sent (a deleted topic's close-replica, above all): the broker
drains its queue at start-up, before it computes the replicas assigned to it.

The listener on the broker processes requests strictly in sequence order, one at a time (the
partitions of one request side by side, at most PARTITIONS_IN_FLIGHT_MAX at once), and
deletes each once it is done; a sender learns that a request was consumed when its node is
gone. After an admin's close-replica, the listener removes the topic if that was the last
replica of a topic being deleted (topic_deletion.py). close-replica is acted on whatever its epoch (a broker that was down must still delete
what was deleted meanwhile), but for an admin's that a later create of the partition overtook; start-replica is acted on only when the partition has no leader
yet (a new topic or partition) or when its epoch is the partition's latest (the ISR's), so that
a slow broker ignores a request queued by an earlier leader.

Each step of a request's lifecycle, requested (sender side), received and completed, ignored
or failed (receiver side), is logged on the `replog.state_change` logger and recorded in the
broker's ring of events (obs/state_change_events.py, which `replog cluster state-changes`
reads), with topic, partition, from, to, epoch and queue sequence, so that a state change's whole
lifecycle can be followed (§7.4). `from=admin` and `epoch=-1` mark an
admin command's request; an admin command runs outside any broker and has no ring.

Bound: a queue holds at most `state.change.queue.max.requests` requests. A sender that finds it
full shrinks it (§7.3: only the latest-epoch close-replica of each partition stays;
start-replicas go, a broker that comes back computes its replicas from the store anyway) and
raises FollowerStateChangeQueueFull if that did not make room. Concurrent senders may overshoot
the bound by their number: the check and the append are two store operations.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence

from replog.coord_backends import CoordinationUnavailable, NoNode, SessionLost, Store, StoreError
from replog.coord_backends import paths
from replog.coord_backends.paths import InvalidNodeValue, IsrRecord, ReplicaAssignment, StateChangeRequest
from replog.obs.state_change_events import EventKind, StateChangeEvents
from replog.replication.topic_deletion import finish_topic_deletion
from replog.tasks import cancel_and_wait

logger = logging.getLogger("replog.state_change")

START_REPLICA = "start-replica"
CLOSE_REPLICA = "close-replica"
FROM_ADMIN = -1  # the sender, and the epoch, of an admin command's request
STORE_RETRY_PAUSE_S = 1.0  # a listener that met a store error looks at its queue again after this
# A request's partitions acted on at once: each is a few store reads, and thousands of them in
# series made a big topic's creation wait on round trips.
PARTITIONS_IN_FLIGHT_MAX = 64

Handler = Callable[[StateChangeRequest], Awaitable[None]]


class FollowerStateChangeQueueFull(Exception):
    def __init__(self, broker_id: int, queued: int, queue_max_requests: int):
        super().__init__(
            f"the state-change queue of broker {broker_id} holds {queued} requests even after shrinking"
            f" (state.change.queue.max.requests={queue_max_requests})"
        )
        self.broker_id = broker_id


# Requested and received are per-replica chatter; what came of a request is what an operator reads.
LOG_LEVELS = {EventKind.REQUESTED: logging.DEBUG, EventKind.RECEIVED: logging.DEBUG, EventKind.COMPLETED: logging.INFO,
              EventKind.IGNORED: logging.INFO, EventKind.FAILED: logging.ERROR}


def describe(request: StateChangeRequest, partition: int, to_broker: int) -> str:
    sender = "admin" if request.from_broker == FROM_ADMIN else str(request.from_broker)
    return (f"{request.kind} topic={request.topic} partition={partition} from={sender} to={to_broker}"
            f" epoch={request.leader_epoch}")


def note(events: StateChangeEvents | None, kind: EventKind, request: StateChangeRequest, to_broker: int, sequence: str,
         reason: str | None = None) -> None:
    """One step of a request's lifecycle, for each of its partitions: logged, and recorded in
    the broker's ring (None: an admin command's step, outside any broker). `sequence` is "" for
    a request never queued."""
    for partition in request.partitions:  # bounded by the topic's partitions
        logger.log(LOG_LEVELS[kind], "%s %s seq=%s%s", kind, describe(request, partition, to_broker), sequence or "-",
                   "" if reason is None else f" reason={reason}")
        if events is not None:
            events.record(kind, request.kind, request.topic, partition, request.from_broker, to_broker,
                          request.leader_epoch, sequence, reason)


async def send_state_change(
    store: Store, kind: str, follower_broker_id: int, topic: str, partitions: Sequence[int], epoch: int, sender: int,
    *, queue_max_requests: int, events: StateChangeEvents | None = None,
) -> str:
    """sendStateChange: append a request for these partitions of the topic to the follower's
    queue; returns the request's node name (its sequence number), which the consumer deletes
    once done. `events`: the sending broker's ring."""
    request = StateChangeRequest(kind, topic, tuple(partitions), from_broker=sender, leader_epoch=epoch)
    queue = paths.state_queue(follower_broker_id)
    try:
        queued = await store.children(queue)
    except NoNode:
        queued = []  # a broker that never started: the queue is made with its first request
    if len(queued) >= queue_max_requests:
        remaining = await shrink(store, follower_broker_id, queued)
        if remaining >= queue_max_requests:
            full = FollowerStateChangeQueueFull(follower_broker_id, remaining, queue_max_requests)
            note(events, EventKind.FAILED, request, follower_broker_id, "", f"not queued: {full}")
            raise full
    created = await store.create(paths.state_change_prefix(follower_broker_id), request.encode(),
                                 sequential=True, make_parents=True)
    name = created.rsplit("/", 1)[1]
    note(events, EventKind.REQUESTED, request, follower_broker_id, name)
    return name


async def queued_requests(store: Store, brokers: Collection[int]) -> list[tuple[int, str, StateChangeRequest]]:
    """(target broker, node name, request for one partition) of every request waiting in the
    brokers' queues, in queue order: requested, not yet received. Unreadable ones are left out (their consumer drops
    them), as are those consumed while they are read."""
    found = []
    for broker in sorted(brokers):
        try:
            names = await store.children(paths.state_queue(broker))
        except NoNode:
            continue
        for name in sorted(names):  # bounded by the queue
            path = f"{paths.state_queue(broker)}/{name}"
            try:
                request = StateChangeRequest.decode((await store.get(path))[0])
            except (NoNode, InvalidNodeValue):
                continue
            found += [(broker, name, request.of(partition)) for partition in request.partitions]
    return found


async def shrink(store: Store, broker_id: int, names: Collection[str]) -> int:
    """Keep only the latest-epoch close-replica of each partition (the latest sent, among equal
    epochs); returns how many requests are left."""
    kept: dict[tuple[str, int], tuple[int, str]] = {}
    doomed: list[str] = []
    for name in sorted(names):  # bounded by the queue
        try:
            request = StateChangeRequest.decode((await store.get(f"{paths.state_queue(broker_id)}/{name}"))[0])
        except NoNode:
            continue  # consumed meanwhile
        except InvalidNodeValue:
            doomed.append(name)  # the consumer would drop it too
            continue
        if request.kind != CLOSE_REPLICA:
            doomed.append(name)
            continue
        key = (request.topic, request.partitions)
        if key in kept and kept[key][0] > request.leader_epoch:
            doomed.append(name)
            continue
        if key in kept:
            doomed.append(kept[key][1])
        kept[key] = (request.leader_epoch, name)
    for name in doomed:
        try:
            await store.delete(f"{paths.state_queue(broker_id)}/{name}")
        except NoNode:
            pass
    logger.warning("shrank state-change queue broker=%d dropped=%d kept=%d", broker_id, len(doomed), len(kept))
    return len(await store.children(paths.state_queue(broker_id)))


async def start_replica_is_current(store: Store, request: StateChangeRequest) -> tuple[bool, int | None]:
    """The check on a start-replica (docs/design.md §7.2): act when the partition has no leader (a new topic or
    partition) or when the request carries the partition's latest epoch, read from its ISR.
    Returns (act, latest epoch or None when there is no leader).

    An admin's request (a topic or partitions being created) carries no epoch to compare and is
    always acted on; the broker checks that the store assigns it the partition. A broker that
    was down while a topic was deleted and created again finds the new topic led already when
    it gets to the request, and ignoring it left the new partition unhosted there, closed by
    the old topic's close-replica."""
    if request.from_broker == FROM_ADMIN:
        return True, None
    if await store.exists(paths.leader(request.topic, request.partition)) is None:
        return True, None
    try:
        latest = IsrRecord.decode((await store.get(paths.isr(request.topic, request.partition)))[0]).leader_epoch
    except NoNode:
        return True, None  # the leader went between the two reads
    return request.leader_epoch == latest, latest


async def close_replica_is_overtaken(store: Store, request: StateChangeRequest, broker_id: int) -> bool:
    """A close-replica for a partition that exists, is assigned to this broker and whose topic is
    not being deleted was overtaken, and a broker that is behind in its queue would otherwise
    delete a replica of the live partition, perhaps one in its ISR:
    - an admin's comes from a failed attempt to create the partition (cleanFailedTopicCreation-
      Attempt closing what the attempt staged), overtaken by the attempt that created it;
    - a leader's comes from a reassignment that moved the partition off this broker
      (reassignment.py sends it once the assignment excludes the broker), overtaken by a later
      one that moved it back (the simulator found it: the replica stayed closed for good, and the
      move back waited for it forever).
    A deletion's close-replicas always find their topic marked: the mark goes only once all are
    consumed (topic_deletion.py)."""
    try:
        assigned = ReplicaAssignment.decode((await store.get(paths.replicas(request.topic, request.partition)))[0])
    except NoNode:
        return False
    return broker_id in assigned.replicas and await store.exists(paths.topic_deletion(request.topic)) is None


async def wait_till_state_change_requests_consumed(
    store: Store, sent: Mapping[int, Collection[str]], timeout_s: float
) -> list[int]:
    """waitTillStateChangeRequestConsumed: watch each broker's queue until none of the requests
    sent to it is left, for at most `timeout_s`. Returns the brokers that did not consume theirs."""
    pending = {broker: set(names) for broker, names in sent.items() if names}

    async def consumed(broker: int) -> None:
        async with await store.watch_children(paths.state_queue(broker)) as watch:
            async for queued in watch:
                if pending[broker].isdisjoint(queued):
                    del pending[broker]
                    return

    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(consumed(broker) for broker in list(pending)))
    except TimeoutError:
        pass
    return sorted(pending)


class StateChangeListener:
    """The state-change listener of one broker: `listen()` arms the watch on its queue,
    `drain()` processes what is queued and then follows the queue in a task. Each request's
    steps are recorded in `events`, the broker's ring (a ring of its own if none is given)."""

    def __init__(self, store: Store, broker_id: int, start_replica: Handler, close_replica: Handler,
                 events: StateChangeEvents | None = None):
        self._store = store
        self._broker_id = broker_id
        self._events = StateChangeEvents(broker_id) if events is None else events
        self._queue = paths.state_queue(broker_id)
        self._start_replica = start_replica
        self._close_replica = close_replica
        self._watch = None
        self._task: asyncio.Task | None = None
        # Requests queued here, by name, and when `backlog` first saw each (a request names no
        # time of its own).
        self._first_seen_ms: dict[str, int] = {}

    async def backlog(self, now_ms: int) -> tuple[int, int]:
        """(requests queued here now, ms since the oldest of them was first seen queued by a
        call of this), read from the store: for the metrics, whose scrapes call it."""
        names = await self._queued()
        self._first_seen_ms = {name: self._first_seen_ms.get(name, now_ms) for name in names}  # bounded by the queue
        return len(names), now_ms - min(self._first_seen_ms.values(), default=now_ms)

    async def listen(self) -> None:
        self._watch = await self._store.watch_children(self._queue)

    async def drain(self) -> None:
        drained = await self._consume_queue()
        self._task = asyncio.create_task(self._follow(None if drained else STORE_RETRY_PAUSE_S))

    async def close(self) -> None:
        if self._task is not None:
            await cancel_and_wait(self._task)
        if self._watch is not None:
            await self._watch.close()

    async def _follow(self, retry_pause_s: float | None) -> None:
        while True:  # ends when close() cancels it or closes the watch
            try:
                await asyncio.wait_for(anext(self._watch), retry_pause_s)
            except TimeoutError:
                pass
            except StopAsyncIteration:
                return
            retry_pause_s = None if await self._consume_queue() else STORE_RETRY_PAUSE_S

    async def _consume_queue(self) -> bool:
        """Process every request queued now, in sequence order. False after a store error: the
        rest waits for the next change of the queue or the retry pause, whichever comes first."""
        try:
            for name in await self._queued():  # bounded by the queue
                await self._consume(name)
        except StoreError as error:
            logger.warning("state-change queue unreadable broker=%d error=%s", self._broker_id, error)
            return False
        return True

    async def _queued(self) -> list[str]:
        try:
            return await self._store.children(self._queue)
        except NoNode:
            return []  # no queue yet: nothing was ever sent here

    async def _consume(self, name: str) -> None:
        path = f"{self._queue}/{name}"
        try:
            raw, _ = await self._store.get(path)
        except NoNode:
            return  # already consumed (the watch lags our own deletes), or shrunk away
        try:
            request = StateChangeRequest.decode(raw)
        except InvalidNodeValue as error:
            logger.error("dropped unreadable state change broker=%d seq=%s error=%s", self._broker_id, name, error)
            await self._store.delete(path)
            return
        note(self._events, EventKind.RECEIVED, request, self._broker_id, name)
        partitions = request.partitions
        for start in range(0, len(partitions), PARTITIONS_IN_FLIGHT_MAX):
            # Every partition's act ends before the store's error goes up: none runs on unowned
            # while the request, still queued, is tried again.
            outcomes = await asyncio.gather(*(self._consume_one(request.of(partition), name)
                                              for partition in partitions[start:start + PARTITIONS_IN_FLIGHT_MAX]),
                                            return_exceptions=True)
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome
        try:
            await self._store.delete(path)
        except NoNode:
            pass
        if request.kind == CLOSE_REPLICA and request.from_broker == FROM_ADMIN:
            # Perhaps the last replica of a topic being deleted: its nodes can go now.
            await finish_topic_deletion(self._store, request.topic)

    async def _consume_one(self, request: StateChangeRequest, name: str) -> None:
        """Act on the request for its one partition, and record what came of it."""
        try:
            ignored_because = await self._act(request)
        except (CoordinationUnavailable, SessionLost):
            raise  # the store is away: the request stays queued and is tried again
        except Exception as error:
            # Consumed all the same: one replica the broker cannot open or delete must not hold
            # back every later request; the sender sees the request gone, the log says why.
            note(self._events, EventKind.FAILED, request, self._broker_id, name, repr(error))
        else:
            if ignored_because is None:
                note(self._events, EventKind.COMPLETED, request, self._broker_id, name)
            else:
                note(self._events, EventKind.IGNORED, request, self._broker_id, name, ignored_because)

    async def _act(self, request: StateChangeRequest) -> str | None:
        """Act on the request; why it was ignored instead, or None."""
        if request.kind == CLOSE_REPLICA:
            if await close_replica_is_overtaken(self._store, request, self._broker_id):
                return "overtaken: the partition is assigned here again"
            await self._close_replica(request)  # whatever the epoch: deletes reach a broker that was down
            return None
        current, latest = await start_replica_is_current(self._store, request)
        if not current:
            return f"stale: the partition's latest epoch is {latest}"
        await self._start_replica(request)
        return None
