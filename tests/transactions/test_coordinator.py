"""The transaction coordinator over a real __transaction_state partition on disk, with markers
written by a fake channel: Kafka's transitions and errors, the order decision -> answer ->
markers -> completion, fencing and timeouts, and a failover that finishes what was decided."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import pytest
from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC, partition_for
from replog.obs.metrics import BrokerMetrics
from replog.replica.partition import Partition, PartitionConfig
from replog.storage.control_batches import ControlType, Marker
from replog.storage.disk_space import NOT_WATCHED
from replog.storage.log import Log, LogConfig
from replog.transactions.coordinator import TransactionConfig, TransactionCoordinator
from replog.transactions.state import EPOCH_EXHAUSTED
from tests.support.log_fixtures import ManualClock
from tests.support.polling import eventually

HERE, OTHER = 1, 2
WAIT_S = 5
TIMEOUT_MS = 60_000
ID = "tx"


class FakeMarkers:
    """Records each marker and its partitions; holds them while `held` is set."""

    def __init__(self) -> None:
        self.written: list[tuple[Marker, list[tuple[str, int]]]] = []
        self.asked: list[Marker] = []
        self.held = False
        self._released = asyncio.Event()

    async def write_markers(self, marker, partitions) -> None:
        self.asked.append(marker)
        while self.held:
            self._released.clear()
            await self._released.wait()
        self.written.append((marker, list(partitions)))

    def release(self) -> None:
        self.held = False
        self._released.set()


class FakeProducerIds:
    def __init__(self) -> None:
        self._ids = itertools.count(1000)

    async def next_id(self) -> int:
        return next(self._ids)


@pytest.fixture
def metrics() -> BrokerMetrics:
    return BrokerMetrics()


@pytest.fixture
async def led(tmp_path, metrics):
    """Partition 0 of a one-partition __transaction_state led here, and a running coordinator."""
    wall = ManualClock(1_700_000_000_000)  # the log's too: it checks the batches' timestamps against it
    log = Log(tmp_path / "__transaction_state-0", LogConfig(), wall)
    partition = Partition(log, HERE, 0, (HERE, OTHER), (HERE,), 0, PartitionConfig(), now_ms=0, disk_space=NOT_WATCHED)
    markers = FakeMarkers()
    coordinator = TransactionCoordinator(HERE, TransactionConfig(offsets_topic_partitions=50), lambda topic, index: partition,
                                         lambda: 1, lambda: 0, wall, FakeProducerIds(), markers, metrics)
    running = asyncio.create_task(coordinator.run())
    coordinator.partition_changed(partition)
    await owned(coordinator)
    yield coordinator, partition, markers, wall
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    partition.close()


async def owned(coordinator: TransactionCoordinator) -> None:
    await eventually(lambda: coordinator.owns(ID) is None, WAIT_S, "the partition's transactions to load")


def state_of(coordinator: TransactionCoordinator) -> str:
    (described,) = coordinator.describe([ID])
    return described.state


async def completed(coordinator: TransactionCoordinator, state: str) -> None:
    await eventually(lambda: state_of(coordinator) == state, WAIT_S, f"the transaction to reach {state}")


async def test_a_commit_is_decided_in_the_log_then_marked_then_completed(led):
    coordinator, partition, markers, _ = led
    init = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    assert (init.error, init.producer_id, init.producer_epoch) == (ErrorCode.none, 1000, 0)
    pid = init.producer_id
    assert await coordinator.add_partitions(ID, pid, 0, [("out", 0), ("out", 1)]) == ErrorCode.none
    assert await coordinator.add_offsets(ID, pid, 0, "group") == ErrorCode.none
    assert state_of(coordinator) == "Ongoing"
    markers.held = True
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.none
    assert partition.high_watermark == partition.log_end_offset  # PrepareCommit written with acks=-1
    await eventually(lambda: markers.asked, WAIT_S, "the markers to be asked for")
    assert state_of(coordinator) == "PrepareCommit"
    # Until the markers are written: a retry of the end, and a new transaction, wait.
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.concurrent_transactions
    assert await coordinator.add_partitions(ID, pid, 0, [("out", 0)]) == ErrorCode.concurrent_transactions
    assert (await coordinator.init_producer_id(ID, TIMEOUT_MS)).error == ErrorCode.concurrent_transactions
    markers.release()
    await completed(coordinator, "CompleteCommit")
    ((marker, partitions),) = markers.written
    assert marker == Marker(pid, 0, ControlType.COMMIT, 0)
    assert partitions == sorted([("out", 0), ("out", 1), (OFFSETS_TOPIC, partition_for("group", 50))])
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.none  # a retry, answered as done
    assert await coordinator.end_txn(ID, pid, 0, committed=False) == ErrorCode.invalid_txn_state
    # The next transaction starts from CompleteCommit with only its own partitions.
    assert await coordinator.add_partitions(ID, pid, 0, [("other", 0)]) == ErrorCode.none
    assert coordinator.describe([ID])[0].partitions == (("other", 0),)


async def test_producers_are_checked_as_kafka_checks_them(led):
    coordinator, _, _, _ = led
    assert await coordinator.add_partitions(ID, 1, 0, [("out", 0)]) == ErrorCode.invalid_producer_id_mapping
    assert (await coordinator.init_producer_id(ID, 900_001)).error == ErrorCode.invalid_transaction_timeout
    assert (await coordinator.init_producer_id("", TIMEOUT_MS)).error == ErrorCode.invalid_request
    first = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    assert await coordinator.end_txn(ID, first.producer_id, 0, committed=True) == ErrorCode.invalid_txn_state  # Empty
    second = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    # The first producer is a zombie now.
    assert await coordinator.add_partitions(ID, first.producer_id, 0, [("out", 0)]) == ErrorCode.producer_fenced
    assert await coordinator.end_txn(ID, first.producer_id, 0, committed=True) == ErrorCode.producer_fenced
    assert await coordinator.add_partitions(ID, first.producer_id + 1, 1, [("out", 0)]) == \
        ErrorCode.invalid_producer_id_mapping
    # KIP-360: the current producer recovering keeps its id at the next epoch; a stale one is fenced.
    recovered = await coordinator.init_producer_id(ID, TIMEOUT_MS, first.producer_id, 1)
    assert (recovered.error, recovered.producer_id, recovered.producer_epoch) == (ErrorCode.none, first.producer_id, 2)
    retried = await coordinator.init_producer_id(ID, TIMEOUT_MS, first.producer_id, 1)  # its answer lost
    assert (retried.error, retried.producer_epoch) == (ErrorCode.none, 2)
    assert (await coordinator.init_producer_id(ID, TIMEOUT_MS, first.producer_id, 0)).error == ErrorCode.producer_fenced
    assert (await coordinator.init_producer_id(ID, TIMEOUT_MS, 1, 2)).error == ErrorCode.producer_fenced


async def test_verify_only_answers_from_memory(led):
    coordinator, partition, _, _ = led
    init = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    pid = init.producer_id
    await coordinator.add_partitions(ID, pid, 0, [("out", 0)])
    end = partition.log_end_offset
    assert coordinator.verify_partitions(ID, pid, 0, [("out", 0), ("out", 1)]) == {
        ("out", 0): ErrorCode.none, ("out", 1): ErrorCode.transaction_abortable}
    assert coordinator.verify_partitions(ID, pid, 5, [("out", 0)]) == {("out", 0): ErrorCode.producer_fenced}
    assert coordinator.verify_partitions("unknown", pid, 0, [("out", 0)]) == {
        ("out", 0): ErrorCode.invalid_producer_id_mapping}
    assert partition.log_end_offset == end


async def test_a_new_producer_aborts_the_open_transaction_at_an_epoch_it_never_gets(led):
    coordinator, _, markers, _ = led
    zombie = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    pid = zombie.producer_id
    await coordinator.add_partitions(ID, pid, 0, [("out", 0)])
    assert (await coordinator.init_producer_id(ID, TIMEOUT_MS)).error == ErrorCode.concurrent_transactions
    await completed(coordinator, "CompleteAbort")
    assert markers.written == [(Marker(pid, 1, ControlType.ABORT, 0), [("out", 0)])]
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.producer_fenced
    fresh = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    assert (fresh.error, fresh.producer_id, fresh.producer_epoch) == (ErrorCode.none, pid, 2)


async def test_a_transaction_open_past_its_timeout_is_aborted_and_its_producer_fenced(led):
    coordinator, _, markers, wall = led
    init = await coordinator.init_producer_id(ID, 1000)
    pid = init.producer_id
    await coordinator.add_partitions(ID, pid, 0, [("out", 0)])
    coordinator.abort_timed_out_transactions()
    assert state_of(coordinator) == "Ongoing"  # not yet past its timeout
    wall.advance(1001)
    coordinator.abort_timed_out_transactions()
    # Decided at once, though written in the background: the producer's commit comes too late.
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.producer_fenced
    await completed(coordinator, "CompleteAbort")
    assert markers.written == [(Marker(pid, 1, ControlType.ABORT, 0), [("out", 0)])]


async def test_each_outcome_is_counted_with_its_cause(led, metrics):
    coordinator, _, _, wall = led

    def ended() -> dict[str, float | None]:
        aborts = {cause: metrics.registry.get_sample_value("replog_transaction_aborts_total", {"cause": cause})
                  for cause in ("client", "timeout", "fenced")}
        return {"commit": metrics.registry.get_sample_value("replog_transaction_commits_total")} | aborts

    async def opened(transactional_id: str, timeout_ms: int = TIMEOUT_MS) -> int:
        init = await coordinator.init_producer_id(transactional_id, timeout_ms)
        assert await coordinator.add_partitions(transactional_id, init.producer_id, 0, [("out", 0)]) == ErrorCode.none
        return init.producer_id

    committer = await opened("commits")
    assert await coordinator.end_txn("commits", committer, 0, committed=True) == ErrorCode.none
    assert await coordinator.end_txn("aborts", await opened("aborts"), 0, committed=False) == ErrorCode.none
    await opened("replaced")
    assert (await coordinator.init_producer_id("replaced", TIMEOUT_MS)).error == ErrorCode.concurrent_transactions
    await opened("expires", timeout_ms=1000)
    wall.advance(1001)
    coordinator.abort_timed_out_transactions()
    once = {"commit": 1, "client": 1, "timeout": 1, "fenced": 1}
    await eventually(lambda: ended() == once, WAIT_S, "each outcome to be counted")
    # A retried end is answered, not counted again.
    await eventually(lambda: coordinator.describe(["commits"])[0].state == "CompleteCommit", WAIT_S,
                     "the commit to complete")
    assert await coordinator.end_txn("commits", committer, 0, committed=True) == ErrorCode.none
    assert ended() == once


async def test_spent_epochs_give_the_id_a_new_producer_id(led):
    coordinator, _, _, _ = led
    init = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    coordinator._transactions[ID].producer_epoch = EPOCH_EXHAUSTED
    rotated = await coordinator.init_producer_id(ID, TIMEOUT_MS, init.producer_id, EPOCH_EXHAUSTED)
    assert rotated.error == ErrorCode.none
    assert rotated.producer_id != init.producer_id and rotated.producer_epoch == 0
    # Its answer lost, the producer asks again with the old id: it is given the same answer.
    again = await coordinator.init_producer_id(ID, TIMEOUT_MS, init.producer_id, EPOCH_EXHAUSTED)
    assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.none, rotated.producer_id, 0)


async def test_ids_held_are_bounded_and_known_ones_still_served(led):
    coordinator, _, _, _ = led
    coordinator.config = dataclasses.replace(coordinator.config, ids_max=2)
    first = await coordinator.init_producer_id("first", TIMEOUT_MS)
    assert (await coordinator.init_producer_id("second", TIMEOUT_MS)).error == ErrorCode.none
    assert (await coordinator.init_producer_id("third", TIMEOUT_MS)).error == ErrorCode.coordinator_not_available
    assert coordinator.describe(["third"])[0].error == ErrorCode.transactional_id_not_found
    again = await coordinator.init_producer_id("first", TIMEOUT_MS)
    assert (again.error, again.producer_id, again.producer_epoch) == (ErrorCode.none, first.producer_id, 1)


async def test_a_new_leader_finishes_what_the_log_decided_and_requests_move_with_leadership(led):
    coordinator, partition, markers, _ = led
    init = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    pid = init.producer_id
    await coordinator.add_partitions(ID, pid, 0, [("out", 0)])
    markers.held = True
    assert await coordinator.end_txn(ID, pid, 0, committed=True) == ErrorCode.none
    await eventually(lambda: markers.asked, WAIT_S, "the markers to be asked for")

    partition.become_follower(OTHER, 1, now_ms=0)  # emigration: the marker write is cancelled
    coordinator.partition_changed(partition)
    assert coordinator.owns(ID) == ErrorCode.not_coordinator
    assert (await coordinator.init_producer_id(ID, TIMEOUT_MS)).error == ErrorCode.not_coordinator
    assert coordinator.describe([ID])[0].error == ErrorCode.not_coordinator

    markers.release()
    partition.become_leader(2, (HERE, OTHER), (HERE,), now_ms=0)  # immigration, from the log
    coordinator.partition_changed(partition)
    assert coordinator.owns(ID) == ErrorCode.coordinator_load_in_progress
    assert coordinator.list_transactions()[0] == ErrorCode.coordinator_load_in_progress
    await completed(coordinator, "CompleteCommit")
    assert markers.written == [(Marker(pid, 0, ControlType.COMMIT, 2), [("out", 0)])]  # the new coordinator epoch

    partition.become_follower(OTHER, 3, now_ms=0)
    coordinator.partition_changed(partition)
    partition.become_leader(4, (HERE, OTHER), (HERE,), now_ms=0)
    coordinator.partition_changed(partition)
    await owned(coordinator)
    described = coordinator.describe([ID])[0]
    assert (described.state, described.producer_id, described.producer_epoch) == ("CompleteCommit", pid, 0)
    assert len(markers.written) == 1  # a completed transaction sends nothing again


async def test_transactions_are_listed_and_described_as_kafka_names_them(led):
    coordinator, _, _, wall = led
    init = await coordinator.init_producer_id(ID, TIMEOUT_MS)
    await coordinator.init_producer_id("idle", TIMEOUT_MS)
    await coordinator.add_partitions(ID, init.producer_id, 0, [("out", 1), ("out", 0)])
    (described, unknown) = coordinator.describe([ID, "nope"])
    assert (described.error, described.state, described.timeout_ms, described.partitions) == (
        ErrorCode.none, "Ongoing", TIMEOUT_MS, (("out", 0), ("out", 1)))
    assert described.start_timestamp_ms == wall()
    assert unknown.error == ErrorCode.transactional_id_not_found
    error, unknown_states, listed = coordinator.list_transactions(["Ongoing", "Bogus"])
    assert (error, unknown_states, [listing.transactional_id for listing in listed]) == (ErrorCode.none, ["Bogus"], [ID])
    assert {listing.transactional_id for listing in coordinator.list_transactions()[2]} == {ID, "idle"}
    assert coordinator.list_transactions(producer_id_filters=[init.producer_id])[2][0].state == "Ongoing"
    assert coordinator.list_transactions(["Ongoing"], duration_filter_ms=10)[2] == []
    wall.advance(11)
    assert [listing.transactional_id for listing in coordinator.list_transactions(["Ongoing"], duration_filter_ms=10)[2]] == [ID]


async def test_an_idle_id_expires_and_stays_gone_after_a_reload(led):
    coordinator, partition, _, wall = led
    await coordinator.init_producer_id(ID, TIMEOUT_MS)
    wall.advance(coordinator.config.id_expiration_ms)
    coordinator.remove_expired_transactional_ids()
    await eventually(lambda: coordinator.describe([ID])[0].error == ErrorCode.transactional_id_not_found, WAIT_S,
                     "the id to expire")
    partition.become_follower(OTHER, 1, now_ms=0)
    coordinator.partition_changed(partition)
    partition.become_leader(2, (HERE, OTHER), (HERE,), now_ms=0)
    coordinator.partition_changed(partition)
    await owned(coordinator)
    assert coordinator.describe([ID])[0].error == ErrorCode.transactional_id_not_found
    assert coordinator._transactions == {}
