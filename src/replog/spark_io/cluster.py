"""Blocking access to a replog cluster for Spark's synchronous callbacks, over replog's own
async client (net/client.py): a private event loop, one connection per broker, requests routed
to each partition's leader from metadata.

Leader changes are followed: a retriable answer (NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
FENCED_LEADER_EPOCH, a timeout...) or a lost connection refreshes the metadata and retries,
with a growing pause, until the caller's deadline; past it the last error is raised naming the
partition and the broker's error. A topic missing from fresh metadata is not retried: it raises
TopicGone at once, for the caller to treat as data loss.

Not thread-safe: one Cluster per Spark callback or task, closed when it ends. Instances are
never pickled (Spark pickles readers and writers, which open a Cluster when they run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from kio.schema.errors import ErrorCode

from replog.net.client import (
    BrokerConnection,
    BrokerUnavailable,
    ClusterMetadata,
    ListedOffset,
    ProduceResult,
    ReplicaFetchResult,
)

from .offsets import TopicPartition
from .options import ClientSettings

logger = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_PAUSE_FIRST_S = 0.05
RETRY_PAUSE_MAX_S = 1.0
ACKS_ALL = -1


class ClusterError(Exception):
    """The cluster did not serve a request within its deadline; the message names the
    partition and the broker's last error."""


class TopicGone(ClusterError):
    """A topic (or a partition of it) is not in the cluster's metadata any more."""


class Cluster:
    def __init__(self, settings: ClientSettings):
        self.settings = settings
        # Built here, where the query runs: an SSL context cannot be pickled with the settings.
        self._security = settings.security.client_security()
        self._loop = asyncio.new_event_loop()
        self._connections: dict[tuple[str, int], BrokerConnection] = {}
        self._metadata: ClusterMetadata | None = None

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()
        self._loop.run_until_complete(asyncio.sleep(0))  # let the transports finish closing
        self._loop.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- metadata -----------------------------------------------------------------------------

    def partition_counts(self, topics: list[str] | None) -> dict[str, int]:
        """Fresh metadata: partition count per existing topic among `topics` (None: every topic)."""
        metadata = self._run(lambda: self._refresh(topics), self._deadline(self.settings.request_timeout_ms), "metadata")
        return {name: len(topic.partitions) for name, topic in metadata.topics.items()
                if topic.error_code == ErrorCode.none and topic.partitions}

    async def _refresh(self, topics: list[str] | None) -> ClusterMetadata:
        """Metadata from the first bootstrap or known broker that answers."""
        known = [(address.host, address.port) for address in self._metadata.brokers.values()] if self._metadata else []
        last_error: Exception | None = None
        for address in [*self._connections, *known, *self.settings.bootstrap]:
            try:
                connection = await self._connection(address)
                self._metadata = await connection.metadata(topics)
                return self._metadata
            except BrokerUnavailable as error:
                self._drop(address)
                last_error = error
        raise BrokerUnavailable(f"no broker answered metadata: {last_error}")

    async def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            timeout_s = self.settings.request_timeout_ms / 1000
            connection = await BrokerConnection.open(*address, client_id=self.settings.client_id,
                                                     connect_timeout_s=timeout_s, request_timeout_s=timeout_s,
                                                     security=self._security)
            self._connections[address] = connection
        return connection

    def _drop(self, address: tuple[str, int]) -> None:
        connection = self._connections.pop(address, None)
        if connection is not None:
            connection.close()

    async def _leader(self, tp: TopicPartition) -> tuple[tuple[str, int], int]:
        """(address, leader epoch) of the partition's leader: from cached metadata, else from
        fresh metadata; TopicGone if fresh metadata lacks the topic or the partition."""
        cached = _leader_in(self._metadata, tp) if self._metadata is not None else None
        if cached is not None:
            return cached
        metadata = await self._refresh([tp.topic])
        topic = metadata.topics.get(tp.topic)
        if topic is None or topic.error_code == ErrorCode.unknown_topic_or_partition:
            raise TopicGone(f"topic '{tp.topic}' does not exist (any more)")
        if topic.error_code == ErrorCode.none and tp.partition not in topic.partitions:
            raise TopicGone(f"partition {tp} does not exist (any more)")
        found = _leader_in(metadata, tp)
        if found is None:
            raise _Retriable(f"{tp} has no leader", ErrorCode.leader_not_available)
        return found

    # -- requests to leaders ------------------------------------------------------------------

    def list_offsets(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, ListedOffset]:
        """ListOffsets for each partition (-2 earliest, -1 latest = high watermark, else a
        timestamp in ms), each asked of its leader, concurrently; UNKNOWN_TOPIC_OR_PARTITION
        for a partition that no longer exists."""
        async def one(tp: TopicPartition, timestamp: int) -> ListedOffset:
            try:
                return await self._at_leader(tp, lambda connection, epoch: connection.list_offsets(tp.topic, tp.partition, timestamp))
            except TopicGone:  # one vanished partition must not hide the others' answers
                return ListedOffset(ErrorCode.unknown_topic_or_partition, -1, -1)

        async def every() -> list[ListedOffset]:
            return await asyncio.gather(*(one(tp, timestamp) for tp, timestamp in timestamps.items()))

        answers = self._run(every, self._deadline(self.settings.request_timeout_ms), "list offsets")
        return dict(zip(timestamps, answers))

    def fetch(self, tp: TopicPartition, offset: int, deadline: float, max_wait_ms: int = 500) -> ReplicaFetchResult:
        """Committed records of `tp` from `offset` (at most the configured fetch bytes, at least
        one whole batch). OFFSET_OUT_OF_RANGE is returned for the caller to judge."""
        max_bytes = self.settings.fetch_bytes
        return self._run(lambda: self._at_leader(tp, lambda connection, epoch: connection.fetch(
            tp.topic, tp.partition, offset, current_leader_epoch=epoch, max_bytes=max_bytes, max_wait_ms=max_wait_ms)),
            deadline, f"fetch {tp} at offset {offset}")

    def produce(self, tp: TopicPartition, batch: bytes, deadline: float) -> ProduceResult:
        """Append one record batch with acks=all. Retried on retriable errors, so a batch may be
        written twice (at-least-once, as Spark's Kafka sink)."""
        timeout_ms = self.settings.request_timeout_ms
        return self._run(lambda: self._at_leader(tp, lambda connection, epoch: connection.produce(
            tp.topic, tp.partition, batch, ACKS_ALL, timeout_ms)), deadline, f"produce to {tp}")

    async def _at_leader(self, tp: TopicPartition, call: Callable[[BrokerConnection, int], Awaitable[T]]) -> T:
        """One attempt at the leader; a retriable partition error becomes _Retriable."""
        address, epoch = await self._leader(tp)
        try:
            answer = await call(await self._connection(address), epoch)
        except BrokerUnavailable:
            self._drop(address)
            self._metadata = None
            raise
        error = answer.error_code
        if error != ErrorCode.none and error.retriable:
            self._metadata = None
            raise _Retriable(f"{tp}: broker {address[0]}:{address[1]} answered {error.name}", error)
        return answer

    def _run(self, attempt: Callable[[], Awaitable[T]], deadline: float, what: str) -> T:
        """Run `attempt()` until it succeeds or `deadline` (time.monotonic()) passes."""
        return self._loop.run_until_complete(self._retrying(attempt, deadline, what))

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], deadline: float, what: str) -> T:
        pause_s = RETRY_PAUSE_FIRST_S
        while True:  # bounded by the deadline
            try:
                return await attempt()
            except (_Retriable, BrokerUnavailable) as error:
                if time.monotonic() + pause_s > deadline:
                    raise ClusterError(f"{what}: {error}") from None
                logger.info("retrying after a retriable error", extra={"what": what, "error": str(error)})
            await asyncio.sleep(pause_s)
            pause_s = min(2 * pause_s, RETRY_PAUSE_MAX_S)

    @staticmethod
    def _deadline(timeout_ms: int) -> float:
        return time.monotonic() + timeout_ms / 1000


def _leader_in(metadata: ClusterMetadata, tp: TopicPartition) -> tuple[tuple[str, int], int] | None:
    topic = metadata.topics.get(tp.topic)
    partition = topic.partitions.get(tp.partition) if topic is not None else None
    if partition is None or partition.leader_id not in metadata.brokers:
        return None
    address = metadata.brokers[partition.leader_id]
    return (address.host, address.port), partition.leader_epoch


class _Retriable(Exception):
    def __init__(self, message: str, error_code: ErrorCode):
        super().__init__(message)
        self.error_code = error_code
