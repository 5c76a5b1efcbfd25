"""Markers from the transaction coordinator to the leaders of the partitions a transaction wrote
(docs/design.md §16.2): the channel the coordinator ends its transactions through
(transactions/markers.py's WritesMarkers), and the one step both it and the WriteTxnMarkers
handler take on a partition led here (write_marker).

Each marker of each partition finds its leader in the metadata cache. A partition led here is
written directly. Every other one joins the queue of its leader's broker, whose one sender task
takes what is queued, markers of many transactions, and sends it as one WriteTxnMarkers over a
connection of its own (not the fetchers': a marker must not wait behind a follower's parked
fetch), authenticated as the broker's fetches are. An answer other than success or a fence, or a
failed connection, sends the marker round again after a backoff, or as soon as the metadata
names another leader, to wherever it then says the leader is: a leader change is followed,
never waited out. A partition the metadata no longer shows, and the store no longer holds (or
holds marked for deletion), needs no marker: the cache may lag the store, and a topic only just
made is not one deleted.

Writes wait in bounded queues: a coordinator ending transactions faster than a broker takes
their markers waits for room. The coordinator cancels its write_markers when it loses its
partition of __transaction_state; what was queued for it is then dropped unsent.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Protocol, TypeVar

from kio.schema.errors import ErrorCode

from replog.coord_backends import Store, StoreError
from replog.coord_backends import paths
from replog.groups.placement import OFFSETS_TOPIC
from replog.replication.metadata_cache import NO_LEADER, PartitionView
from replog.storage.control_batches import Marker
from replog.tasks import TaskOwner, first_failure

from .client import BrokerConnection, MarkerWrite, NoCommonVersion

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Markers (one marker, one partition) a destination broker's queue holds; more wait for room.
QUEUED_PER_BROKER_MAX = 10_000
# Markers one WriteTxnMarkers carries.
MARKERS_PER_REQUEST_MAX = 1_000
ANSWER_WAIT_FACTOR = 2
RETRY_BACKOFF_MS = 20
RETRY_BACKOFF_MAX_MS = 1_000
# The leader's partition no longer takes this marker: a newer producer epoch or coordinator
# decides there (Kafka's TransactionMarkerRequestCompletionHandler stops sending).
FENCED = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
# Retried without a word: the leader moved or is busy.
EXPECTED_RETRIES = frozenset({ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition,
                              ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
                              ErrorCode.request_timed_out, ErrorCode.network_exception,
                              ErrorCode.coordinator_load_in_progress})

PartitionKey = tuple[str, int]


class WritesTxnMarkers(Protocol):
    """A partition's side (replica/partition.py)."""

    topic: str
    partition_id: int

    async def write_txn_marker(self, marker: Marker, timeout_ms: int) -> ErrorCode: ...


class CompletesTransactions(Protocol):
    """The group coordinator's side (groups/coordinator.py)."""

    def complete_transaction(self, producer_id: int, partition_index: int, committed: bool) -> None: ...


class CallsBrokers(Protocol):
    """Connections to other brokers (net/leader_connections.py): `request` on the one to
    `broker_id`; ConnectionError when there is none."""

    async def call(self, broker_id: int, request: Callable[[BrokerConnection], Awaitable[T]]) -> T: ...


class SeesPartitions(Protocol):
    """The metadata cache (replication/metadata_cache.py)."""

    topics: Mapping[str, Mapping[int, PartitionView]]

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float) -> bool: ...


async def write_marker(partition: WritesTxnMarkers, groups: CompletesTransactions, marker: Marker,
                       timeout_ms: int) -> ErrorCode:
    """`marker` written to `partition`, led here, and once it is, the offsets a transaction
    committed in a partition of __consumer_offsets applied or dropped: what Kafka's
    WriteTxnMarkers handler does for each partition."""
    error = await partition.write_txn_marker(marker, timeout_ms)
    if error == ErrorCode.none and partition.topic == OFFSETS_TOPIC:
        try:
            groups.complete_transaction(marker.producer_id, partition.partition_id, marker.committed)
        except Exception:
            # The marker stands; the coordinator, told this, sends it again, and the group
            # coordinator is asked again.
            logger.exception("offsets of a transaction not completed producer_id=%d partition=%d committed=%s",
                             marker.producer_id, partition.partition_id, marker.committed)
            return ErrorCode.unknown_server_error
    return error


class _Queued:
    """One marker for one partition, in a destination broker's queue until answered."""

    __slots__ = ("marker", "partition", "answer")

    def __init__(self, marker: Marker, partition: PartitionKey, answer: asyncio.Future):
        self.marker, self.partition, self.answer = marker, partition, answer


class TxnMarkerChannel:
    """transactions/markers.py's WritesMarkers for a broker. See the module docstring."""

    def __init__(self, broker_id: int, metadata: SeesPartitions, store: Store, connections: CallsBrokers,
                 hosted: Callable[[str, int], WritesTxnMarkers | None], groups: CompletesTransactions,
                 request_timeout_ms: int):
        self._broker_id = broker_id
        self._metadata = metadata
        self._store = store
        self._connections = connections
        self._hosted = hosted
        self._groups = groups
        self._timeout_ms = request_timeout_ms
        self._queues: dict[int, asyncio.Queue[_Queued]] = {}  # bounded by the brokers in the cluster
        self._senders = TaskOwner("transaction marker sender")
        self.pending_markers = 0  # markers (one marker, one partition) asked for and not yet written

    async def write_markers(self, marker: Marker, partitions: Collection[PartitionKey]) -> None:
        remaining = list(dict.fromkeys(partitions))
        self.pending_markers += len(remaining)
        backoff_ms = RETRY_BACKOFF_MS
        try:
            while True:
                leaders = {partition: self._leader(partition) for partition in remaining}
                with first_failure():
                    async with asyncio.TaskGroup() as attempts:
                        done = [attempts.create_task(self._write_once(marker, partition)) for partition in remaining]
                remaining = [partition for partition, written in zip(remaining, done) if not written.result()]
                self.pending_markers -= len(done) - len(remaining)
                if not remaining:
                    return
                # Sent again after the backoff, or as soon as the metadata names another leader
                # for one of them: a leader change needs no wait.
                await self._metadata.wait_for(
                    lambda: any(self._leader(partition) != leaders[partition] for partition in remaining),
                    backoff_ms / 1000)
                backoff_ms = min(2 * backoff_ms, RETRY_BACKOFF_MAX_MS)
        finally:
            self.pending_markers -= len(remaining)

    async def close(self) -> None:
        await self._senders.close()
        self._queues.clear()

    def _leader(self, partition: PartitionKey) -> int | None:
        """The partition's leader as the metadata names it; None if it shows no such partition."""
        view = self._metadata.topics.get(partition[0], {}).get(partition[1])
        return None if view is None else view.leader

    async def _write_once(self, marker: Marker, partition: PartitionKey) -> bool:
        """Whether `partition` needs `marker` no more after one attempt."""
        leader = self._leader(partition)
        if leader is None:
            return await self._gone(partition)
        if leader == NO_LEADER:
            return False
        if leader == self._broker_id:
            hosted = self._hosted(*partition)
            error = (ErrorCode.not_leader_or_follower if hosted is None
                     else await write_marker(hosted, self._groups, marker, self._timeout_ms))
        else:
            error = await self._sent(leader, marker, partition)
        return self._settled(leader, marker, partition, error)

    async def _gone(self, partition: PartitionKey) -> bool:
        topic, index = partition
        try:
            gone = (await self._store.exists(paths.replicas(topic, index)) is None
                    or await self._store.exists(paths.topic_deletion(topic)) is not None)
        except StoreError as error:
            logger.warning("cannot tell whether a partition awaiting a marker exists topic=%s partition=%d error=%s",
                           topic, index, error)
            return False
        if gone:
            logger.info("transaction marker not written: the partition no longer exists topic=%s partition=%d broker=%d",
                        topic, index, self._broker_id)
        return gone

    def _settled(self, leader: int, marker: Marker, partition: PartitionKey, error: ErrorCode) -> bool:
        if error == ErrorCode.none:
            return True
        if error in FENCED:
            logger.warning("transaction marker fenced, not written topic=%s partition=%d leader=%d producer_id=%d "
                           "producer_epoch=%d coordinator_epoch=%d error=%s", *partition, leader, marker.producer_id,
                           marker.producer_epoch, marker.coordinator_epoch, error.name)
            return True
        if error not in EXPECTED_RETRIES:
            logger.warning("transaction marker refused, retrying topic=%s partition=%d leader=%d producer_id=%d error=%s",
                           *partition, leader, marker.producer_id, error.name)
        return False

    async def _sent(self, broker_id: int, marker: Marker, partition: PartitionKey) -> ErrorCode:
        queue = self._queues.get(broker_id)
        if queue is None:
            queue = self._queues[broker_id] = asyncio.Queue(QUEUED_PER_BROKER_MAX)
            self._senders.start(self._send_queued(broker_id, queue), name=f"txn-markers-{self._broker_id}-to-{broker_id}")
        answer = asyncio.get_running_loop().create_future()
        await queue.put(_Queued(marker, partition, answer))
        return await answer

    async def _send_queued(self, broker_id: int, queue: asyncio.Queue[_Queued]) -> None:
        """What is queued for `broker_id`, a request at a time, until closed."""
        held: collections.deque[_Queued] = collections.deque()  # taken from the queue, for a later request
        while True:
            if not held:
                held.append(await queue.get())
            while len(held) < MARKERS_PER_REQUEST_MAX and not queue.empty():
                held.append(queue.get_nowait())
            writes, sent, held = _one_request(held)
            if writes:
                await self._request(broker_id, writes, sent)

    async def _request(self, broker_id: int, writes: list[MarkerWrite], sent: list[_Queued]) -> None:
        # The leader answers a write it could not finish in request.timeout.ms with
        # REQUEST_TIMED_OUT: that answer, not the connection's end, is what to wait for.
        timeout_s = ANSWER_WAIT_FACTOR * self._timeout_ms / 1000
        try:
            errors: Mapping[tuple[int, str, int], ErrorCode] = await self._connections.call(
                broker_id, lambda connection: connection.write_txn_markers(writes, timeout_s))
        except ConnectionError as error:
            logger.info("transaction markers not sent broker=%d destination=%d markers=%d error=%s", self._broker_id,
                        broker_id, len(sent), error)
            errors = {}
        except NoCommonVersion as error:
            # A broker of a version without WriteTxnMarkers, in a rolling upgrade: it may be
            # upgraded yet, and this sender must go on for the markers queued behind.
            logger.warning("transaction markers not sent broker=%d destination=%d error=%s", self._broker_id, broker_id,
                           error)
            errors = {}
        for queued in sent:
            if not queued.answer.done():  # else its writer was cancelled
                queued.answer.set_result(errors.get((queued.marker.producer_id, *queued.partition),
                                                    ErrorCode.network_exception))


def _one_request(held: collections.deque[_Queued]) -> tuple[list[MarkerWrite], list[_Queued], collections.deque[_Queued]]:
    """The markers of `held` that one request can carry, the queued writes they answer, and the
    rest, in their order: a request names each producer once (its answer is keyed by producer
    id), so a second marker of one producer waits for the next. Writes whose writer was
    cancelled are dropped."""
    partitions: dict[Marker, list[PartitionKey]] = {}
    producers: set[int] = set()
    sent: list[_Queued] = []
    rest: collections.deque[_Queued] = collections.deque()
    for queued in held:
        if queued.answer.done():
            continue
        marker = queued.marker
        if marker not in partitions and marker.producer_id in producers:
            rest.append(queued)
            continue
        producers.add(marker.producer_id)
        partitions.setdefault(marker, []).append(queued.partition)
        sent.append(queued)
    return [MarkerWrite(marker, listed) for marker, listed in partitions.items()], sent, rest
