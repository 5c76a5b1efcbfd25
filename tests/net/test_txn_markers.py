"""Transaction markers from a coordinator to partition leaders: the WriteTxnMarkers handler over
the wire, and the channel (net/txn_markers.py) that writes a partition led here directly, sends
the others to their leaders' brokers in batched requests, follows a leader change, retries what
failed, stops for a partition that no longer exists or a fence, and lets its writer cancel."""

from __future__ import annotations

import asyncio
import contextlib
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration
from replog.groups.placement import OFFSETS_TOPIC
from replog.net.client import BrokerConnection, MarkerWrite, NoCommonVersion
from replog.net.leader_connections import LeaderConnections
from replog.net.server import KafkaServer
from replog.net import txn_markers
from replog.net.txn_markers import TxnMarkerChannel
from replog.obs import BrokerMetrics
from replog.replication.metadata_cache import NO_LEADER, MetadataCache, PartitionView
from replog.storage.control_batches import ControlType, Marker
from tests.support.polling import eventually

HERE, THERE = 1, 2
TIMEOUT_MS = 5_000
WAIT_S = 10
COMMIT = Marker(producer_id=7, producer_epoch=3, control_type=ControlType.COMMIT, coordinator_epoch=11)
ABORT = Marker(producer_id=8, producer_epoch=0, control_type=ControlType.ABORT, coordinator_epoch=11)


class FakePartition:
    """A partition led here: the markers written to it, and what it answers (success unless
    `answers` says otherwise, one answer per write)."""

    def __init__(self, topic: str, partition_id: int, *answers: ErrorCode):
        self.topic, self.partition_id = topic, partition_id
        self.answers = list(answers)
        self.written: list[Marker] = []
        self.on_write = None  # called before answering, as a leader change would happen meanwhile

    async def write_txn_marker(self, marker: Marker, timeout_ms: int) -> ErrorCode:
        assert timeout_ms == TIMEOUT_MS
        if self.on_write is not None:
            await self.on_write()
        answer = self.answers.pop(0) if self.answers else ErrorCode.none
        if answer == ErrorCode.none:
            self.written.append(marker)
        return answer


class FakeGroups:
    def __init__(self):
        self.completed: list[tuple[int, int, bool]] = []

    def complete_transaction(self, producer_id: int, partition_index: int, committed: bool) -> None:
        self.completed.append((producer_id, partition_index, committed))


def hosting(*partitions: FakePartition) -> dict[tuple[str, int], FakePartition]:
    return {(partition.topic, partition.partition_id): partition for partition in partitions}


def broker_services(hosted: dict[tuple[str, int], FakePartition], groups: FakeGroups, authorizer=None) -> SimpleNamespace:
    return SimpleNamespace(authorizer=authorizer, config={"request.timeout.ms": TIMEOUT_MS, "super.users": ()},
                           replicas=SimpleNamespace(hosted=lambda topic, index: hosted.get((topic, index))),
                           groups=groups, metrics=BrokerMetrics(), metadata=SimpleNamespace(brokers={}))


@contextlib.asynccontextmanager
async def serving(services):
    server = KafkaServer(services, "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=BrokerMetrics())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def test_write_txn_markers_writes_each_partition_and_completes_offsets_in_a_transactions_group_partition():
    remote = hosting(FakePartition("t", 0), FakePartition("t", 1), FakePartition(OFFSETS_TOPIC, 3),
                     FakePartition("led-elsewhere", 0, ErrorCode.not_leader_or_follower),
                     FakePartition(OFFSETS_TOPIC, 4, ErrorCode.not_leader_or_follower))
    groups = FakeGroups()
    async with serving(broker_services(remote, groups)) as server:
        async with await BrokerConnection.open("127.0.0.1", server.port) as connection:
            errors = await connection.write_txn_markers([
                MarkerWrite(COMMIT, [("t", 0), ("t", 1), (OFFSETS_TOPIC, 3), (OFFSETS_TOPIC, 4)]),
                MarkerWrite(ABORT, [("t", 0), ("absent", 0), ("led-elsewhere", 0)]),
            ])
    assert errors == {
        (7, "t", 0): ErrorCode.none, (7, "t", 1): ErrorCode.none, (7, OFFSETS_TOPIC, 3): ErrorCode.none,
        (7, OFFSETS_TOPIC, 4): ErrorCode.not_leader_or_follower,
        (8, "t", 0): ErrorCode.none, (8, "absent", 0): ErrorCode.unknown_topic_or_partition,
        (8, "led-elsewhere", 0): ErrorCode.not_leader_or_follower,
    }
    assert remote["t", 0].written == [COMMIT, ABORT]
    assert remote["t", 1].written == [COMMIT]
    # Only where the marker was written: the offsets of a marker not written stay pending.
    assert groups.completed == [(7, 3, True)]


async def test_write_txn_markers_without_alter_or_cluster_action_writes_nothing():
    class Denying:
        def authorize(self, *_) -> bool:
            return False

    remote = hosting(FakePartition("t", 0))
    async with serving(broker_services(remote, FakeGroups(), Denying())) as server:
        async with await BrokerConnection.open("127.0.0.1", server.port) as connection:
            errors = await connection.write_txn_markers([MarkerWrite(COMMIT, [("t", 0), ("t", 1)])])
    assert errors == {(7, "t", 0): ErrorCode.cluster_authorization_failed, (7, "t", 1): ErrorCode.cluster_authorization_failed}
    assert remote["t", 0].written == []


class Metadata(MetadataCache):
    """A metadata cache told its partitions' leaders by the test rather than by a store."""

    def __init__(self, leaders: dict[tuple[str, int], int]):
        super().__init__(store=None)
        for (topic, index), leader in leaders.items():
            self.lead(topic, index, leader)

    def lead(self, topic: str, index: int, leader: int) -> None:
        self.topics.setdefault(topic, {})[index] = PartitionView(replicas=(HERE, THERE), leader=leader)
        self.changed()


class Store:
    """The store's side of whether a partition exists."""

    def __init__(self, *partitions: tuple[str, int]):
        self.nodes = {paths.replicas(topic, index) for topic, index in partitions}

    async def exists(self, path: str) -> int | None:
        return 0 if path in self.nodes else None


class CountedConnections:
    """LeaderConnections, counting the requests sent through it; the first `failures` fail with
    `failure` (as a broken connection does, by default)."""

    def __init__(self, connections: LeaderConnections, failures: int = 0, failure: Exception = ConnectionError("reset")):
        self.connections, self.failures, self.failure, self.requests = connections, failures, failure, 0

    async def call(self, broker_id: int, request):
        self.requests += 1
        if self.failures:
            self.failures -= 1
            raise self.failure
        return await self.connections.call(broker_id, request)


@contextlib.asynccontextmanager
async def channel_to(remote: dict[tuple[str, int], FakePartition], metadata: Metadata, local=(), store: Store = Store(),
                     failures: int = 0, failure: Exception = ConnectionError("reset")):
    """A channel on broker HERE (hosting `local`), whose other broker THERE hosts `remote`."""
    groups = FakeGroups()
    async with serving(broker_services(remote, FakeGroups())) as server:
        connections = LeaderConnections(HERE, lambda: {THERE: BrokerRegistration("127.0.0.1", server.port)}, 60_000)
        counted = CountedConnections(connections, failures, failure)
        here = hosting(*local)
        channel = TxnMarkerChannel(HERE, metadata, store, counted, lambda topic, index: here.get((topic, index)), groups,
                                   TIMEOUT_MS)
        try:
            yield channel, counted
        finally:
            await channel.close()
            connections.close()


async def test_a_partition_led_here_is_written_directly_and_one_led_elsewhere_through_its_leader():
    local, remote = FakePartition("t", 0), FakePartition("t", 1)
    metadata = Metadata({("t", 0): HERE, ("t", 1): THERE})
    async with channel_to(hosting(remote), metadata, [local]) as (channel, connections):
        await channel.write_markers(COMMIT, [("t", 0), ("t", 1)])
        assert channel.pending_markers == 0
    assert local.written == [COMMIT] and remote.written == [COMMIT]
    assert connections.requests == 1


async def test_markers_of_many_transactions_to_one_broker_share_requests():
    remote = FakePartition("t", 0)
    markers = [Marker(producer_id, 0, ControlType.COMMIT, 1) for producer_id in range(50)]
    async with channel_to(hosting(remote), Metadata({("t", 0): THERE})) as (channel, connections):
        await asyncio.gather(*(channel.write_markers(marker, [("t", 0)]) for marker in markers))
    assert sorted(remote.written) == sorted(markers)
    assert connections.requests < len(markers)


async def test_two_markers_of_one_producer_go_in_separate_requests_in_their_order():
    remote = FakePartition("t", 0)
    first, then = Marker(5, 0, ControlType.ABORT, 1), Marker(5, 1, ControlType.COMMIT, 1)
    async with channel_to(hosting(remote), Metadata({("t", 0): THERE})) as (channel, connections):
        await asyncio.gather(channel.write_markers(first, [("t", 0)]), channel.write_markers(then, [("t", 0)]))
    assert remote.written == [first, then]
    assert connections.requests == 2


async def test_a_leader_change_is_followed_to_the_new_leader_without_waiting_out_the_backoff(monkeypatch):
    monkeypatch.setattr(txn_markers, "RETRY_BACKOFF_MS", 3_600_000)
    metadata = Metadata({("t", 0): THERE})
    local = FakePartition("t", 0)
    remote = FakePartition("t", 0, ErrorCode.not_leader_or_follower)

    async def moved() -> None:
        metadata.lead("t", 0, HERE)

    remote.on_write = moved
    async with channel_to(hosting(remote), metadata, [local]) as (channel, _):
        await asyncio.wait_for(channel.write_markers(COMMIT, [("t", 0)]), WAIT_S)
    assert remote.written == [] and local.written == [COMMIT]


async def test_a_failed_connection_a_timeout_and_no_leader_are_retried_until_written():
    metadata = Metadata({("t", 0): NO_LEADER})
    remote = FakePartition("t", 0, ErrorCode.request_timed_out, ErrorCode.not_enough_replicas)
    async with channel_to(hosting(remote), metadata, failures=1) as (channel, connections):
        writing = asyncio.create_task(channel.write_markers(COMMIT, [("t", 0)]))
        await eventually(lambda: channel.pending_markers == 1, WAIT_S, "the marker to wait for a leader")
        assert not writing.done()
        metadata.lead("t", 0, THERE)
        await asyncio.wait_for(writing, WAIT_S)
    assert remote.written == [COMMIT]
    assert connections.requests == 4  # the failed connection, the two refusals, the write


async def test_a_broker_that_speaks_no_write_txn_markers_is_asked_again_and_its_queue_goes_on():
    remote = FakePartition("t", 0)
    async with channel_to(hosting(remote), Metadata({("t", 0): THERE}), failures=1,
                          failure=NoCommonVersion("WriteTxnMarkers: none in common")) as (channel, connections):
        await asyncio.wait_for(channel.write_markers(COMMIT, [("t", 0)]), WAIT_S)
        await asyncio.wait_for(channel.write_markers(ABORT, [("t", 0)]), WAIT_S)
    assert remote.written == [COMMIT, ABORT] and connections.requests == 3


async def test_a_fenced_marker_is_not_retried():
    remote = FakePartition("t", 0, ErrorCode.transaction_coordinator_fenced)
    async with channel_to(hosting(remote), Metadata({("t", 0): THERE})) as (channel, connections):
        await channel.write_markers(COMMIT, [("t", 0)])
    assert remote.written == [] and connections.requests == 1


async def test_a_partition_gone_from_the_store_needs_no_marker_and_one_the_metadata_lags_waits_for_it():
    metadata = Metadata({})
    remote = FakePartition("new", 0)
    async with channel_to(hosting(remote), metadata, store=Store(("new", 0))) as (channel, _):
        await asyncio.wait_for(channel.write_markers(COMMIT, [("deleted", 0)]), WAIT_S)
        writing = asyncio.create_task(channel.write_markers(COMMIT, [("new", 0)]))
        await eventually(lambda: channel.pending_markers == 1, WAIT_S, "the marker to wait for the metadata")
        metadata.lead("new", 0, THERE)
        await asyncio.wait_for(writing, WAIT_S)
    assert remote.written == [COMMIT]


async def test_a_cancelled_write_is_dropped_and_the_channel_goes_on():
    entered, release = asyncio.Event(), asyncio.Event()
    remote = FakePartition("t", 0)

    async def held() -> None:
        entered.set()
        await release.wait()

    remote.on_write = held
    async with channel_to(hosting(remote), Metadata({("t", 0): THERE, ("t", 1): NO_LEADER})) as (channel, _):
        writing = asyncio.create_task(channel.write_markers(COMMIT, [("t", 0), ("t", 1)]))
        await asyncio.wait_for(entered.wait(), WAIT_S)
        assert channel.pending_markers == 2
        writing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await writing
        assert channel.pending_markers == 0
        release.set()
        remote.on_write = None
        await asyncio.wait_for(channel.write_markers(ABORT, [("t", 0)]), WAIT_S)
    assert ABORT in remote.written
