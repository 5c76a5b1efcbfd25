"""This broker's view of the cluster, kept current by coordination-store watches.

Metadata requests are frequent (every client, on every error), so they are answered from
memory: live brokers from `/brokers/ids`, and per partition its replicas, leader, leader epoch
and ISR from `/brokers/topics/...`. One task per watched node applies each change it sees;
the view may lag the store by one notification, exactly as Kafka's metadata cache lags its
controller, and clients recover the same way (they retry on NOT_LEADER_OR_FOLLOWER).

Watches: /brokers/ids (children) and each registration in it (data), /brokers/topics (children),
/admin/delete_topics (children), per topic its node (data: its partition count) and its
partitions (children), per partition its replicas, leader and ISR (data). A topic marked for
deletion is out of the view, as in Kafka's metadata cache: its partitions count as gone
(replication/topic_deletion.py). So are a topic's partitions numbered at or above the count in
its node, and a topic whose count is 0: an addPartition before its commit point
(admin/topics.py).

The broker hears of every change of assignment the cache sees (`on_assignment_changed`): a
partition's replicas node changed (appeared with it included), or the partition vanished with
its topic or alone. It is told which partitions, not what changed: watches coalesce (a topic
deleted and recreated under the same name may look like no change at all, or like a change
of replicas), so the broker reads the store and converges to it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
from typing import Awaitable, Callable, Iterable, TypeVar

from replog.coord_backends import DataEvent, Store, StoreError, Watch
from replog.coord_backends import paths
from replog.coord_backends.paths import (
    BrokerRegistration,
    InvalidNodeValue,
    IsrRecord,
    LeaderRecord,
    ReplicaAssignment,
    TopicId,
)
from replog.replication.election import SeenPartition
from replog.tasks import TaskOwner

logger = logging.getLogger(__name__)
T = TypeVar("T")

NO_LEADER = -1
UNSEEN = -1  # a node's version before its watch first reported it: no store version is negative
REGISTRATION_RETRY_PAUSE_S = 0.5
# New partitions whose watches are armed at once: a topic of thousands arrives in one change.
# Each reads its three nodes in turn, so this many reads wait at once: what ZooKeeper's watched
# node reads send together (zookeeper.py: 4 requests of 64 nodes).
PARTITION_WATCHES_IN_FLIGHT_MAX = 256
# Lives of a broker remembered (BrokerRegistration.life_id): a fetch one of them sent may reach
# its leader after the broker restarted, a few times over at most.
LIVES_KEPT_PER_BROKER = 4


def each_seen(items: Iterable[T], done: Callable[[T], bool]) -> Callable[[], bool]:
    """A condition for MetadataCache.wait_for that holds once each of `items` was seen `done`.

    Such a wait is checked at every change of the view, tens of thousands while 10,000
    partitions are created or their ISRs shrink: a check goes through the items in order and
    stops at the first not done yet, and one seen done is not checked again (a check of every
    item each time cost an eighth of a broker's event loop)."""
    waiting = collections.deque(items)

    def all_seen() -> bool:
        while waiting and done(waiting[0]):
            waiting.popleft()
        return not waiting

    return all_seen


@dataclasses.dataclass(frozen=True)
class PartitionView:
    replicas: tuple[int, ...] = ()
    leader: int = NO_LEADER
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    # The nodes' versions, for an election that starts from this view (seen_partition); None:
    # absent. Not part of what the view says: two views of the same metadata are equal.
    replicas_version: int | None = dataclasses.field(default=UNSEEN, compare=False)
    isr_version: int | None = dataclasses.field(default=UNSEEN, compare=False)


class MetadataCache:
    def __init__(self, store: Store):
        self._store = store
        self.brokers: dict[int, BrokerRegistration] = {}
        # Each broker's lives seen registered, the latest last: which tell a follower's fetch
        # from an earlier life from a client's posing as it (net/leader_connections.fetch_from).
        self.lives: dict[int, collections.deque[str]] = {}
        self.topics: dict[str, dict[int, PartitionView]] = {}
        self._followers = TaskOwner("metadata follower")  # by key: "brokers" | "broker:<id>" | "brokers-retry" | "topics" | "deletions" | "topic:<t>" | "topic:<t>:<p>"
        self._changed = asyncio.Event()
        # The broker's hook: the partitions of a topic whose assignment may have changed.
        self.on_assignment_changed: Callable[[str, list[int]], Awaitable[None]] | None = None
        # And the brokers registered, once first read (None before): a leader shrinks out a
        # follower whose registration went, on_brokers_changed.
        self.registered: frozenset[int] | None = None
        self.on_brokers_changed: Callable[[], None] | None = None
        self._registrations_followed: set[int] = set()
        self._following_registrations = asyncio.Lock()
        self._topic_names: frozenset[str] = frozenset()
        self._being_deleted: frozenset[str] = frozenset()
        self._applying_topics = asyncio.Lock()  # two watches feed it; one topic, one follower
        # Per followed topic: its partition nodes' names, and the count in its node (None:
        # every partition counts; 0: being created). Which partitions are visible follows.
        self._partition_names: dict[str, tuple[str, ...]] = {}
        self._partition_counts: dict[str, int | None] = {}
        # The followed topics whose partition nodes' names are followed too: from the first
        # count other than 0. A creation writes its partitions' nodes under a count of 0, a
        # transaction at a time, and each would have the names read again, all of them: for
        # 10,000 partitions, a few hundred reads of up to 10,000 names on every broker, which
        # nothing looks at until the count says which of them count.
        self._names_followed: set[str] = set()
        self._topic_ids: dict[str, str] = {}  # per followed topic with an id in its node
        self._topics_by_id: dict[str, str] = {}  # the other way round
        self._applying_partitions = asyncio.Lock()  # a topic's two watches feed it

    async def start(self) -> None:
        await self._follow("brokers", await self._store.watch_children(paths.BROKER_IDS), self._apply_broker_ids)
        await self._follow("deletions", await self._store.watch_children(paths.TOPIC_DELETIONS), self._apply_deletions)
        await self._follow("topics", await self._store.watch_children(paths.TOPICS), self._apply_topic_names)

    async def close(self) -> None:
        await self._followers.close()

    def changed(self) -> None:
        """Wake `wait_for` callers: something their conditions read (besides the view) changed."""
        self._changed.set()

    def topic_id(self, topic: str) -> str | None:
        """The topic's id as last seen; None while unseen, or for a topic without one."""
        return self._topic_ids.get(topic)

    def topic_of_id(self, topic_id: str) -> str | None:
        """The name of the topic whose id is `topic_id`, as last seen; None for an id unseen."""
        return self._topics_by_id.get(topic_id)

    def seen_partition(self, topic: str, partition: int) -> SeenPartition | None:
        """The partition's assignment and ISR as last seen, for an election to start from (it
        checks their versions); None while either is unseen, or the assignment absent."""
        view = self.topics.get(topic, {}).get(partition)
        if view is None or view.replicas_version in (UNSEEN, None) or view.isr_version == UNSEEN:
            return None
        return SeenPartition(view.replicas, view.replicas_version, view.isr, view.isr_version)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool:
        """Wait until `condition()` holds after some change to the view, or time runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while not condition():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return condition()
        return True

    # following watches
    async def _follow(self, key: str, watch: Watch, apply: Callable[[object], Awaitable[None]]) -> None:
        """Apply the watch's current state now, then every later state in a task."""
        await apply(await anext(watch))
        self._changed.set()

        async def run() -> None:
            async with watch:
                async for state in watch:
                    try:
                        await apply(state)
                    except Exception:
                        logger.exception("metadata update failed key=%s", key)
                    self._changed.set()

        self._followers.start(run(), name=f"metadata-{key}", key=key)

    async def _forget(self, key_prefix: str) -> None:
        await self._followers.stop(*(key for key in self._followers.keys() if key == key_prefix or key.startswith(key_prefix + ":")))

    async def _apply_broker_ids(self, names: tuple[str, ...]) -> None:
        # Who is registered is the children's names: a registration not read yet is there all
        # the same, and a leader must not shrink out a live follower for a failed read.
        registered = frozenset(int(name) for name in names if name.isdigit())
        if not await self._follow_registrations(registered):
            self._follow_registrations_later()
        if registered != self.registered:
            self.registered = registered
            if self.on_brokers_changed is not None:
                self.on_brokers_changed()

    async def _follow_registrations(self, registered: frozenset[int]) -> bool:
        """Watch each registration in `registered` and no other; False if some watch could not
        be opened.

        Each registration has its own watch, not only the names: a broker restarted deletes its
        registration and creates its next one, and a read of the names after both finds no
        change, while the new one may hold a new address."""
        opened = True
        async with self._following_registrations:  # both the names' watch and a retry call this
            for gone in self._registrations_followed - registered:
                await self._forget(f"broker:{gone}")
                self._registrations_followed.discard(gone)
                self.brokers.pop(gone, None)
            for broker_id in sorted(registered - self._registrations_followed):
                try:
                    watch = await self._store.watch_data(paths.broker(broker_id))
                except StoreError as error:
                    logger.warning("broker registration unreadable, watching it later broker=%d error=%s", broker_id, error)
                    opened = False
                    continue
                self._registrations_followed.add(broker_id)
                await self._follow(f"broker:{broker_id}", watch, self._registration_applier(broker_id))
        return opened

    def _registration_applier(self, broker_id: int) -> Callable[[DataEvent], Awaitable[None]]:
        async def apply(event: DataEvent) -> None:
            if not event.exists:  # gone, or going: the names' watch forgets this one
                self.brokers.pop(broker_id, None)
                return
            try:
                registration = BrokerRegistration.decode(event.data)
            except InvalidNodeValue as error:
                logger.warning("unreadable broker registration broker=%d error=%s", broker_id, error)
                return
            self.brokers[broker_id] = registration
            if registration.life_id:
                lives = self.lives.setdefault(broker_id, collections.deque(maxlen=LIVES_KEPT_PER_BROKER))
                if registration.life_id not in lives:
                    lives.append(registration.life_id)

        return apply

    def _follow_registrations_later(self) -> None:
        """Try again after a pause, until every registration is watched: the names' watch
        reports only their next change, and a broker registered while the store failed would
        stay unknown (no address for its followers, nor for clients) until then."""
        if self._followers.running("brokers-retry"):
            return

        async def retry() -> None:
            while True:  # until every registration is watched, or close() cancels it
                await asyncio.sleep(REGISTRATION_RETRY_PAUSE_S)
                if await self._follow_registrations(self.registered or frozenset()):
                    self._changed.set()
                    return

        self._followers.start(retry(), name="metadata-brokers-retry", key="brokers-retry")

    async def _apply_topic_names(self, names: tuple[str, ...]) -> None:
        self._topic_names = frozenset(names)
        await self._apply_visible_topics()

    async def _apply_deletions(self, names: tuple[str, ...]) -> None:
        self._being_deleted = frozenset(names)
        await self._apply_visible_topics()

    async def _apply_visible_topics(self) -> None:
        async with self._applying_topics:
            visible = self._topic_names - self._being_deleted
            followed = self._partition_names.keys()
            for topic in followed - visible:
                await self._forget(f"topic:{topic}")
                del self._partition_names[topic], self._partition_counts[topic]
                self._names_followed.discard(topic)
                self._topics_by_id.pop(self._topic_ids.pop(topic, None), None)
                await self._assignment_changed(topic, sorted(self.topics.pop(topic, {})))
            for topic in visible - followed:
                self._partition_names[topic], self._partition_counts[topic] = (), 0
                await self._follow(f"topic:{topic}", await self._store.watch_data(paths.topic(topic)),
                                   self._count_applier(topic))

    def _count_applier(self, topic: str) -> Callable[[DataEvent], Awaitable[None]]:
        async def apply(event: DataEvent) -> None:
            if topic not in self._partition_counts:
                return
            try:
                record = TopicId.decode(event.data) if event.data else TopicId("")
            except InvalidNodeValue as error:
                logger.warning("unreadable topic node topic=%s error=%s", topic, error)
                return
            self._partition_counts[topic] = record.partitions
            earlier_id = self._topic_ids.get(topic)
            if record.topic_id:
                self._topics_by_id.pop(earlier_id, None)
                self._topic_ids[topic] = record.topic_id
                self._topics_by_id[record.topic_id] = topic
            if record.partitions != 0 and topic not in self._names_followed:
                await self._follow(f"topic:{topic}", await self._store.watch_children(paths.topic(topic)),
                                   self._partitions_applier(topic))
                self._names_followed.add(topic)
            await self._apply_partitions(topic)
            if earlier_id not in (None, record.topic_id):
                # Deleted and created again while the watch was away (the store was out of
                # reach): every replica hosted of the topic belongs to the deleted one, even
                # where the assignment is the same (hosted.py).
                await self._assignment_changed(topic, sorted(self.topics.get(topic, {})))

        return apply

    def _partitions_applier(self, topic: str) -> Callable[[tuple[str, ...]], Awaitable[None]]:
        async def apply(names: tuple[str, ...]) -> None:
            if topic not in self._partition_names:
                return
            self._partition_names[topic] = names
            await self._apply_partitions(topic)

        return apply

    async def _apply_partitions(self, topic: str) -> None:
        """Bring the topic's view to its partition nodes numbered below its count."""
        async with self._applying_partitions:
            if topic in self._partition_names:  # else it went while this waited
                await self._apply_partitions_of(topic)

    async def _apply_partitions_of(self, topic: str) -> None:
        count = self._partition_counts[topic]
        visible = {partition for partition in map(int, self._partition_names[topic]) if count is None or partition < count}
        partitions = self.topics.setdefault(topic, {}) if visible else self.topics.pop(topic, {})
        # Gone with a delete of the topic that its name's watch did not see, or alone. Told
        # before their watches go: the topic's own watch may be forgotten (cancelled) meanwhile.
        removed = sorted(set(partitions) - visible)
        for partition in removed:
            del partitions[partition]
        await self._assignment_changed(topic, removed)
        for partition in removed:
            await self._forget(f"topic:{topic}:{partition}")
        added = sorted(visible - set(partitions))
        for partition in added:
            partitions[partition] = PartitionView()
        for start in range(0, len(added), PARTITION_WATCHES_IN_FLIGHT_MAX):
            await asyncio.gather(*(self._follow_partition(topic, partition)
                                   for partition in added[start:start + PARTITION_WATCHES_IN_FLIGHT_MAX]))
        # Told once for all: the broker reads their assignments together.
        await self._assignment_changed(topic, [partition for partition in added if partitions[partition].replicas])

    async def _follow_partition(self, topic: str, partition: int) -> None:
        key = f"topic:{topic}:{partition}"
        for path, field, decode in (
            (paths.replicas(topic, partition), "replicas", lambda raw: {"replicas": ReplicaAssignment.decode(raw).replicas}),
            (paths.leader(topic, partition), "leader", _leader_fields),
            (paths.isr(topic, partition), "isr", lambda raw: {"isr": IsrRecord.decode(raw).isr}),
        ):
            await self._follow(key, await self._store.watch_data(path),
                               self._partition_field_applier(topic, partition, field, decode, announce=False))

    async def _assignment_changed(self, topic: str, partitions: list[int]) -> None:
        if partitions and self.on_assignment_changed is not None:
            # Shielded: forgetting the watch that saw the change (its topic went) must not
            # stop the broker half-way through starting or stopping a replica.
            await asyncio.shield(self.on_assignment_changed(topic, partitions))

    def _partition_field_applier(self, topic: str, partition: int, field: str, decode: Callable[[bytes], dict],
                                 *, announce: bool):
        """`announce`: tell the broker of a change of replicas from the first state on; else
        from the second (the first is told with the partition's arrival)."""

        async def apply(event: DataEvent) -> None:
            nonlocal announce
            partitions = self.topics.get(topic)
            if partitions is None or partition not in partitions:
                return
            try:
                values = decode(event.data) if event.exists else _ABSENT[field]
            except InvalidNodeValue as error:
                logger.warning("unreadable partition metadata topic=%s partition=%d field=%s error=%s", topic, partition, field, error)
                return
            if field in _VERSION_FIELDS:
                values = {**values, _VERSION_FIELDS[field]: event.version}
            previous = partitions[partition]
            partitions[partition] = dataclasses.replace(previous, **values)
            if field == "replicas" and values["replicas"] != previous.replicas and announce:
                await self._assignment_changed(topic, [partition])
            announce = True

        return apply


def _leader_fields(raw: bytes) -> dict:
    record = LeaderRecord.decode(raw)
    return {"leader": record.leader, "leader_epoch": record.leader_epoch}


_VERSION_FIELDS = {"replicas": "replicas_version", "isr": "isr_version"}

_ABSENT = {
    "replicas": {"replicas": ()},
    "leader": {"leader": NO_LEADER},
    "isr": {"isr": ()},
}
