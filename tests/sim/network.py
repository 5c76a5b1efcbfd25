"""Broker-to-broker messages of the simulation: the follower's Fetch and OffsetForLeaderEpoch.

A request travels for a drawn delay, is served by the leader broker as its handlers serve it
(net/handlers/fetch.py, net/handlers/offsets.py: the authorizer's ClusterAction check, the
Partition methods, the long poll of a fetch that found nothing, the file slices' bytes), and the
answer travels back for another drawn delay. A request the check refuses is answered as the
handlers answer it, every partition TOPIC_AUTHORIZATION_FAILED, and noted in `refusals`: the
simulation fails the schedule on it, for a broker's own traffic refused means a broken check or
a cluster without the ACLs brokers need.

The serving runs as the leader broker's own task, so a paused leader answers late and a
crashed one never: its callers' requests fail with a connection error, as the kernel's reset of
a killed process's sockets does, and a new connection to it is refused. A message crossing a cut link, or dropped, fails the call with
ConnectionError (the fetcher backs off and retries); an answer not back within
REQUEST_TIMEOUT_S fails it too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from replog.replication.fetcher import EpochAsk, FetchReply, FetchSpec
from replog.replica.partition import EpochEndOffset, FetchFrom, FetchResult, ReadWaiter

DELAY_MAX_S = 0.01
DROP_P = 0.02
REQUEST_TIMEOUT_S = 5.0
TOPIC_AUTHORIZATION_FAILED = 29


class SimNetwork:
    def __init__(self, rng: random.Random):
        self._rng = rng
        self.brokers: dict[int, Any] = {}  # broker id -> the running SimBroker
        self.cut: set[frozenset[int]] = set()  # links that carry nothing
        self.refusing: set[int] = set()  # brokers whose port refuses and resets connections, running or not
        self.faults_on = True
        self.refusals: list[str] = []  # follower requests the leader's authorizer refused

    async def connect(self, source: int, target: int) -> Any:
        """A connection from `source` to the process running as `target` now: refused when none
        runs, or it does not listen yet; a paused one accepts, as its kernel does."""
        await self._travel(source, target, "connect")
        broker = self.brokers.get(target)
        if broker is None or broker.owner.crashed or not broker.listening or target in self.refusing:
            raise ConnectionRefusedError(f"broker {target} is not running, or its port refuses")
        return broker

    async def call(self, source: int, target: int, serve: Callable[[Any], Awaitable[Any]], process: Any) -> Any:
        """`serve(target broker)` as a request from `source` on a connection to `process`,
        through the network's faults."""
        await self._travel(source, target, "request")
        broker = self.brokers.get(target)
        if broker is not process or broker.owner.crashed or target in self.refusing:
            raise ConnectionResetError(f"broker {target}'s process is gone, or its port resets")
        answer = asyncio.get_running_loop().create_future()
        broker.answer_later(serve, answer)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                result = await answer
        except TimeoutError:
            raise ConnectionError(f"broker {target} did not answer within {REQUEST_TIMEOUT_S}s") from None
        await self._travel(target, source, "answer")
        return result

    async def _travel(self, source: int, target: int, what: str) -> None:
        if not self.faults_on:
            return
        await asyncio.sleep(self._rng.uniform(0, DELAY_MAX_S))
        if frozenset((source, target)) in self.cut:
            raise ConnectionError(f"injected: link {source}-{target} cut, {what} lost")
        if self._rng.random() < DROP_P:
            raise ConnectionError(f"injected: {what} {source}->{target} dropped")


# -- the leader's side, as its request handlers do it ---------------------------------------------

async def serve_replica_fetch(replicas, replica_id: int, specs: list[FetchSpec], max_wait_ms: int,
                              now_ms: Callable[[], int], life: FetchFrom | None,
                              as_broker: bool) -> dict[tuple[str, int], FetchReply]:
    """The leader's side of a follower's fetch of several partitions: answered at once if any
    has data or an error, else once the first gets data or after `max_wait_ms` (the broker's
    Fetch handler). A replica of another topic id than the spec names is not read: Fetch v13
    refuses it (handlers/fetch.py), a leader problem to the follower as NOT_LEADER_OR_FOLLOWER is.
    A fetch from a life of its broker the leader has not seen registered (a restarted broker's,
    before the leader sees its registration: FetchFrom.UNSEEN) is read as a consumer's, and one
    naming no life (`life` None), or from a principal that may not act as a broker (`as_broker`
    False), is refused whole, as the handler does.
    """
    if not as_broker or life is None:
        return {(spec.topic, spec.partition): FetchReply(TOPIC_AUTHORIZATION_FAILED, -1, -1, b"") for spec in specs}
    as_follower = life is not FetchFrom.UNSEEN

    def read(hosted, spec: FetchSpec, record: bool) -> FetchResult:
        if not as_follower:
            return hosted.read_for_consumer(spec.fetch_offset, spec.max_bytes, spec.current_leader_epoch)
        return hosted.read_for_follower(replica_id, spec.fetch_offset, spec.max_bytes, now_ms(), spec.current_leader_epoch,
                                        life, record=record)

    def read_all(record: bool) -> list:
        return [(spec, hosted, None if hosted is None else read(hosted, spec, record))
                for spec in specs for hosted in [_named(replicas, spec)]]

    results = read_all(record=True)
    if max_wait_ms > 0 and all(result is not None and not result.error_code and not result.slices for _, _, result in results):
        with ReadWaiter() as waiter:
            for spec, hosted, _ in results:
                waiter.watch(hosted, spec.fetch_offset, for_follower=as_follower)
            await waiter.wait(max_wait_ms / 1000)
        results = read_all(record=False)
    return {(spec.topic, spec.partition): FetchReply(ErrorCode.not_leader_or_follower, -1, -1, b"") if result is None
            else _reply(result) for spec, _, result in results}


def _named(replicas, spec: FetchSpec):
    hosted = replicas.hosted(spec.topic, spec.partition)
    return None if hosted is None or spec.topic_id not in (None, hosted.topic_id) else hosted


def _reply(result: FetchResult) -> FetchReply:
    return FetchReply(result.error_code, result.high_watermark, result.log_start_offset,
                      b"".join(piece.read() for piece in result.slices))


async def serve_epoch_ends(replicas, asks: list[EpochAsk], as_broker: bool) -> dict[tuple[str, int], EpochEndOffset]:
    """The leader's side of a follower's OffsetForLeaderEpoch: every partition refused when the
    principal may not act as a broker, as the handler refuses it."""
    if not as_broker:
        return {(ask.topic, ask.partition): EpochEndOffset(TOPIC_AUTHORIZATION_FAILED, -1, -1) for ask in asks}
    return {(ask.topic, ask.partition): _epoch_end(replicas, *ask) for ask in asks}


def _epoch_end(replicas, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int) -> EpochEndOffset:
    hosted = replicas.hosted(topic, partition)
    if hosted is None:
        return EpochEndOffset(ErrorCode.not_leader_or_follower, -1, -1)
    return hosted.end_offset_for_epoch(leader_epoch, current_leader_epoch)
