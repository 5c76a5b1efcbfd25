"""Fetch: consumers read committed data, with long polling; followers (replica_id >= 0) read
up to the log end and report their position, which is how the leader learns their LEO.

Long poll (`max_wait_ms`, `min_bytes`): read every partition; if that gives fewer than
`min_bytes`, register one ReadWaiter with all of them and wait, up to the deadline, for the
first to have data, then read again. `max_bytes` bounds the records of the whole response and
each partition's `partition_max_bytes` its own, except that the first batch of the first
partition with data is sent whole whatever its size (KIP-74), so an oversized batch never
stalls a consumer. As from Kafka, a partition's last batch may be cut (its reader drops it),
but never its first: a partition whose next batch does not fit sends nothing. Partitions in
error carry empty, never null, records: some clients cannot parse null there.

A later request on the same connection cuts the wait short (codec.Overtaken): responses
leave in request order, and a follower sends its next fetch round, or a new partition's
OffsetForLeaderEpoch, while an idle round is parked (net/fetch_rounds.py).

Isolation (Fetch v4+): a read_committed consumer reads below the last stable offset (the first
offset of the oldest transaction still open, or the high watermark), and each partition's answer
lists the aborted transactions whose records it may carry (`aborted_transactions`: producer id
and first offset, from the partition's aborted-transaction index), so that the client drops
their records; read_uncommitted reads as before, with no list (docs/design.md §16.5). A
read_committed long poll whose fetch offset has reached the last stable offset waits for the
high watermark to move past where it is now, since the last stable offset moves only when it
does (a marker ends a transaction by being appended and committed): then it reads again, even
if the transaction is still open (an answer with nothing, as at the end of the wait).

Version 13 names topics by id (KIP-516), and a partition is read only if its log is tagged with
the id named: a follower whose log belongs to a deleted topic of the same name (a broker that
missed the deletion) is answered INCONSISTENT_TOPIC_ID or UNKNOWN_TOPIC_ID, so that it neither
counts toward the ISR nor copies this topic's records onto the other's (docs/design.md §9.3).
Only replog's followers are offered version 13 (handlers/api_versions.py).

Fetch sessions (KIP-227, net/fetch_sessions.py): a fetch that opens a session, or continues one,
reads the session's partitions, and an incremental one's answer carries only those with
something to say; a request the session refuses (unknown id, out-of-order epoch) is answered
with the error alone, and its fetcher starts a new session.

A consumer reads only the topics it may Read: the partitions of any other are answered
TOPIC_AUTHORIZATION_FAILED (net/authorization.py). A fetch naming a replica id is a follower's
only from a principal with ClusterAction on the cluster (without an authorizer: in super.users,
while that is set: inter_broker_settings.py), on a connection of that broker's registered life, or of an
earlier life (answered, never recorded: Partition.read_for_follower). One whose client id names a life of the broker not seen registered (a restarted broker fetches before it
registers) is read as a consumer's: up to the high watermark, nothing recorded, so that the
restarted follower catches up to it before its registration is seen, and a client posing as it
learns nothing a consumer does not. Any other is refused as Kafka refuses a follower's fetch
from a client without the CLUSTER_ACTION right: every partition it names
TOPIC_AUTHORIZATION_FAILED, nothing read, no session opened, continued or closed
(net/leader_connections.fetch_from). Else a client could pose as a follower: move the high
watermark past what the followers hold, rejoin a dead broker to the ISR, have its session hold
partitions quiet as the follower's, and read past the high watermark.

Encoding: the response body is written here rather than through kio, so that each partition's
log bytes are a part of their own: a HeldSlice of the log file (Log.hold), which the connection
sends with sendfile, never copying log bytes through Python (net/framing.py), rather than four
times through kio's buffers. tests/net/test_fetch_encoding.py checks the encoding against kio
for every version.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from typing import Callable, NamedTuple

from kio.schema.errors import ErrorCode

from replog.net.leader_connections import client_id_for_logs, fetch_from
from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.partition import FetchFrom, FetchResult, Partition, ReadWaiter
from replog.replica.results import READ_COMMITTED
from replog.security.acls import AclOperation, ResourceType
from replog.storage.segment import HeldSlice

from ..authorization import authorized, authorized_as_broker

from ..codec import ApiKey, EncodedBody, Request, wire_length, wire_string
from ..fetch_decoding import FIRST_FLEXIBLE_VERSION, FIRST_SESSION_VERSION, FIRST_TOPIC_ID_VERSION, PARTITION_HEAD
from ..loop_slices import LoopSlices
from ..fetch_sessions import FINAL_EPOCH, NO_SESSION_ID, SessionFetch, requested_topics
from . import count_error, handles, log_refusal

logger = logging.getLogger(__name__)

NO_EPOCH = -1
# A fetch of many partitions gives the loop back between slices of its reading and its encoding
# (loop_slices.py), looking at the clock once every this many partitions.
PARTITIONS_BETWEEN_PAUSES = 64
NO_REPLICA = -1
_OTHER_TOPIC = (ErrorCode.unknown_topic_id, ErrorCode.inconsistent_topic_id)
_ABORTED_TRANSACTION = struct.Struct(">qq")  # producer_id, first_offset
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


class _Read(NamedTuple):
    topic: str  # the name, or for an id no hosted topic has, the id
    wire_topic: str | uuid.UUID  # as the request named it: the answer names it so
    fetch: object  # the request's partition
    partition: Partition | None  # None: not hosted here, or not of the topic id named
    result: FetchResult | int  # an error code for a partition not read


def _read(services, topic: str, topic_id: str | None, fetch: object, replica_id: int, isolation_level: int,
          byte_budget: int, min_one_message: bool, now_ms: int, life: FetchFrom,
          record: bool) -> tuple[Partition | None, FetchResult | int]:
    try:
        partition = services.replicas.get_partition(topic, fetch.partition)
    except UnknownTopicOrPartitionError:
        return None, services.unknown_partition_error(topic, fetch.partition)
    if topic_id is not None and partition.topic_id != topic_id:
        # A replica of another topic of the name (KIP-516): a follower of a deleted topic of
        # the name must not count as this one's, nor this log be copied as that one's.
        return None, ErrorCode.inconsistent_topic_id
    epoch = getattr(fetch, "current_leader_epoch", NO_EPOCH)
    if replica_id >= 0 and life is not FetchFrom.UNSEEN:
        return partition, partition.read_for_follower(replica_id, fetch.fetch_offset, byte_budget, now_ms, epoch, life,
                                                          record=record, min_one_message=min_one_message)
    return partition, partition.read_for_consumer(fetch.fetch_offset, byte_budget, epoch, min_one_message=min_one_message,
                                                  isolation_level=isolation_level)


async def _read_all(services, body, topics: list[tuple[str | uuid.UUID, list]], now_ms: int, life: FetchFrom,
                    slices: LoopSlices, may_read: Callable[[str], bool] | None, *,
                    record: bool = True) -> tuple[list[_Read], int]:
    """(what was read of each partition of `topics`, total bytes read); `topics`: (topic as
    named: its name, or from version 13 on its id, [partition]); `life`: which life of a
    follower's broker the fetch comes from (leader_connections.fetch_from); `may_read`: whether
    the consumer may read a topic, None when nothing is checked per topic."""
    remaining_bytes = getattr(body, "max_bytes", 0x7FFFFFFF)
    results, total_bytes = [], 0
    for named, partitions in topics:
        await slices.pause()
        if isinstance(named, str):
            topic_id, name = None, named
        else:  # named by id, from version 13 on
            topic_id = named.hex
            name = services.replicas.topic_of_id(topic_id)
        if name is not None and may_read is not None and not may_read(name):
            results += [_Read(name, named, fetch, None, ErrorCode.topic_authorization_failed) for fetch in partitions]
            continue
        for index, fetch in enumerate(partitions):
            if not index % PARTITIONS_BETWEEN_PAUSES:
                await slices.pause()
            if name is None:
                results.append(_Read(topic_id, named, fetch, None, ErrorCode.unknown_topic_id))
                continue
            # KIP-74, as Kafka's ReplicaManager.readFromLog: each partition reads at most the
            # smaller of its own and the response's remaining bytes, except that the first batch
            # of the first partition with data is read whole, whatever its size.
            budget = max(min(fetch.partition_max_bytes, remaining_bytes), 0)
            partition, result = _read(services, name, topic_id, fetch, body.replica_id, body.isolation_level, budget,
                                      not total_bytes, now_ms, life, record)
            size = sum(piece.size_bytes for piece in result.slices) if isinstance(result, FetchResult) else 0
            total_bytes += size
            remaining_bytes -= size
            results.append(_Read(name, named, fetch, partition, result))
    return results, total_bytes


class FetchBodyEncoder:
    """Fetch response body, versions 4 to 13; log bytes are appended as parts of their own."""

    def __init__(self, api_version: int, session_id: int = NO_SESSION_ID, error: ErrorCode = ErrorCode.none):
        self.version = api_version
        self.session_id = session_id
        self.error = error  # the whole request's (version 7 on)
        self.flexible = api_version >= FIRST_FLEXIBLE_VERSION
        self.parts: list[bytes | HeldSlice] = []
        self._pending = bytearray()

    def _length(self, count: int, plain: struct.Struct) -> None:
        self._pending += wire_length(count, self.flexible, plain)

    def _tagged_fields(self) -> None:
        if self.flexible:
            self._pending += b"\0"

    def begin(self, topic_count: int) -> None:
        self._pending += _I32.pack(0)  # throttle_time_ms
        if self.version >= FIRST_SESSION_VERSION:
            self._pending += _I16.pack(self.error.value) + _I32.pack(self.session_id)  # error_code, session_id
        self._length(topic_count, _I32)

    def topic(self, name: str | uuid.UUID, partition_count: int) -> None:
        """`name`: from version 13 on, the topic's id."""
        if self.version >= FIRST_TOPIC_ID_VERSION:
            self._pending += name.bytes
        else:
            self._pending += wire_string(name, self.flexible)
        self._length(partition_count, _I32)

    def partition(self, index: int, error_code: int, high_watermark: int, last_stable_offset: int,
                  log_start_offset: int, records: list[bytes | HeldSlice],
                  aborted_transactions: tuple[tuple[int, int], ...] | None = None) -> None:
        """`aborted_transactions`: (producer id, first offset) of each, for read_committed."""
        self._pending += PARTITION_HEAD.pack(index, error_code, high_watermark, last_stable_offset)
        if self.version >= 5:
            self._pending += _I64.pack(log_start_offset)
        if aborted_transactions:
            self._length(len(aborted_transactions), _I32)
            for producer_id, first_offset in aborted_transactions:  # bounded by the segments read
                self._pending += _ABORTED_TRANSACTION.pack(producer_id, first_offset)
                self._tagged_fields()
        else:
            self._length(0, _I32)
        if self.version >= 11:
            self._pending += _I32.pack(NO_REPLICA)  # preferred_read_replica
        self._length(sum(len(piece) for piece in records), _I32)
        self.parts.append(bytes(self._pending))
        self._pending.clear()
        self.parts.extend(records)
        self._tagged_fields()

    def end_topic(self) -> None:
        self._tagged_fields()

    def finish(self) -> EncodedBody:
        self._tagged_fields()
        self.parts.append(bytes(self._pending))
        return EncodedBody(self.parts, throttle_at=0)  # every version replog offers begins with it


async def _encode(api_version: int, results: list[_Read], session: SessionFetch, by_follower: bool,
                  slices: LoopSlices) -> EncodedBody:
    """The answer to `results`; in a session, `session` picks the partitions it carries."""
    by_topic: dict[str | uuid.UUID, list] = {}
    for index, read in enumerate(results):
        if not index % PARTITIONS_BETWEEN_PAUSES:
            await slices.pause()
        if session.session is None or _carried(session, read, by_follower):
            by_topic.setdefault(read.wire_topic, []).append((read.fetch, read.partition, read.result))
    encoder = FetchBodyEncoder(api_version, session.session_id)
    encoder.begin(len(by_topic))
    for topic, partitions in by_topic.items():
        encoder.topic(topic, len(partitions))
        for index, (fetch, partition, result) in enumerate(partitions):
            if not index % PARTITIONS_BETWEEN_PAUSES:
                await slices.pause()
            if isinstance(result, FetchResult):
                encoder.partition(fetch.partition, result.error_code, result.high_watermark, result.last_stable_offset,
                                  result.log_start_offset, partition.log.hold(result.slices) if result.slices else [],
                                  result.aborted_transactions)
            else:
                # Empty, never null, records: some clients cannot parse null here.
                encoder.partition(fetch.partition, result, -1, -1, -1, [])
        encoder.end_topic()
    return encoder.finish()


def _carried(session: SessionFetch, read: _Read, by_follower: bool) -> bool:
    """Whether the session's answer carries `read`, which also tells the session what it told."""
    result = read.result
    if not isinstance(result, FetchResult) or result.error_code:
        return session.answered(read.wire_topic, read.fetch.partition, None, False, None)
    told = (result.high_watermark, result.last_stable_offset, result.log_start_offset)
    caught_up = by_follower and not result.slices and read.fetch.fetch_offset == read.partition.log_end_offset
    return session.answered(read.wire_topic, read.fetch.partition, told, bool(result.slices), read.partition if caught_up else None)


def _refused(api_version: int, error: ErrorCode) -> EncodedBody:
    """The answer refusing a whole request: a session error (KIP-227), no partitions."""
    encoder = FetchBodyEncoder(api_version, NO_SESSION_ID, error)
    encoder.begin(0)
    return encoder.finish()


async def _not_a_replica(services, request: Request, why: str) -> EncodedBody:
    """The answer to a fetch naming a replica id from a principal that may not act as a broker,
    or from a connection of no life of that broker: every partition it names refused (see the module
    docstring)."""
    error = ErrorCode.topic_authorization_failed
    log_refusal(request, f"fetch as a replica {why}", f"replica {request.body.replica_id} principal {request.principal}", error)
    results = []
    for named, partitions in requested_topics(request.body):
        for fetch in partitions:
            count_error(services.metrics, request, error)
            results.append(_Read(str(named), named, fetch, None, error))
    return await _encode(request.api_version, results, SessionFetch(None, True, []), False, LoopSlices())


@handles(ApiKey.FETCH)
async def fetch(services, request: Request):
    body = request.body
    life = FetchFrom.REGISTERED  # a consumer's: read as it is
    if body.replica_id >= 0:
        if not authorized_as_broker(services, request):
            return await _not_a_replica(services, request, "by a principal that may not act as a broker")
        life = fetch_from(services.metadata.brokers, services.metadata.lives, body.replica_id, request.client_id)
        if life is None:
            return await _not_a_replica(services, request, "from no known life of the broker")
    if getattr(body, "session_id", NO_SESSION_ID) == NO_SESSION_ID and getattr(body, "session_epoch", FINAL_EPOCH) == FINAL_EPOCH:
        return await _answer(services, request, SessionFetch(None, True, requested_topics(body)), life)
    by_id = request.api_version >= FIRST_TOPIC_ID_VERSION
    async with services.fetch_sessions.fetch(body, by_id) as context:
        if isinstance(context, SessionFetch):
            return await _answer(services, request, context, life)
        count_error(services.metrics, request, context)
        logger.info("fetch session refused peer_client=%s session_id=%d epoch=%d error=%s",
                    client_id_for_logs(request.client_id), body.session_id, body.session_epoch, context.name)
        return _refused(request.api_version, context)


async def _answer(services, request: Request, session: SessionFetch, life: FetchFrom) -> EncodedBody:
    body = request.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + body.max_wait.total_seconds()
    by_follower = body.replica_id >= 0 and life is not FetchFrom.UNSEEN
    # Only a registered life's fetches are recorded, so only theirs may be recorded without a read.
    quiet_from = body.replica_id if life is FetchFrom.REGISTERED else -1
    now_ms = services.now_ms()
    topics = session.to_read(quiet_from, now_ms, record=True)
    slices = LoopSlices()
    may_read = None
    if body.replica_id < 0 and services.authorizer is not None:
        may_read = lambda name: authorized(services, request, AclOperation.READ, ResourceType.TOPIC, name)  # noqa: E731
    results, total_bytes = await _read_all(services, body, topics, now_ms, life, slices, may_read)
    if total_bytes < body.min_bytes and loop.time() < deadline and not _any_error(results):
        with ReadWaiter() as waiter, session.parked(waiter):
            now_ms = services.now_ms()
            for partition, fetch_offset in _waits(results, body.isolation_level):
                # A partition whose data the reassignment throttle holds back would wake this
                # poll at once, again and again: it waits out the poll instead.
                if not (by_follower and partition.throttles(body.replica_id, now_ms)):
                    waiter.watch(partition, fetch_offset, for_follower=by_follower)
            if request.overtaken is not None:
                request.overtaken.listen(waiter.wake)
            await waiter.wait(max(0.0, deadline - loop.time()))
        now_ms = services.now_ms()
        topics = session.to_read(quiet_from, now_ms, record=False)  # recorded above
        results, _ = await _read_all(services, body, topics, now_ms, life, slices, may_read, record=False)
    for topic, _, fetch, partition, result in results:
        if partition is None and result != ErrorCode.topic_authorization_failed:  # audited
            what = "fetch naming another topic id" if result in _OTHER_TOPIC else "fetch from a partition not led here"
            log_refusal(request, what, f"{topic}-{fetch.partition}", result)
        if isinstance(result, FetchResult):
            count_error(services.metrics, request, result.error_code)
            if result.slices:
                services.metrics.fetched(topic, sum(piece.size_bytes for piece in result.slices), by_follower)
        else:
            count_error(services.metrics, request, result)
    return await _encode(request.api_version, results, session, by_follower, slices)


def _waits(results: list[_Read], isolation_level: int):
    """(partition, offset its high watermark must pass) of every partition a parked fetch waits
    on, besides those its session holds quiet (SessionFetch.parked). A read_committed fetch at
    the last stable offset waits for the next move of the high watermark (module docstring)."""
    committed = isolation_level == READ_COMMITTED
    for _, _, fetch, partition, result in results:
        if partition is not None:
            yield partition, max(fetch.fetch_offset, result.high_watermark) if committed else fetch.fetch_offset


def _any_error(results: list) -> bool:
    return any(not isinstance(result, FetchResult) or result.error_code for *_, result in results)
