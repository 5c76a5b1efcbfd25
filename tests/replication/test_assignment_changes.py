"""The partitions a broker hosts follow the store's assignment even when the store fails just as
the metadata cache reports a change: the cache reports each change once, so a reconcile that
met a store error must be tried again (found by the simulator: a partition created while its
broker's store client failed was never hosted there, and one deleted then kept its leadership).
And a start-replica is acted on when the admin's create commits between its reads. One broker
in this process over the embedded store; the topic is written by a second client."""

from __future__ import annotations

import errno
from collections.abc import Callable

import pytest

from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import CoordinationUnavailable, NoNode, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import ReplicaAssignment, StateChangeRequest
from replog.replication.state_changes import FROM_ADMIN, START_REPLICA
from replog.replica import producer_state
from replog.replica.partition import ReplicaState
from tests.support.polling import eventually

TOPIC = "flaky"
BROKER = 1
WAIT_S = 20


@pytest.fixture
async def broker_and_tool(tmp_path):
    tool = MemoryStore(str(tmp_path / "store.db"))
    await tool.start()
    broker = Broker(load_broker_config(None, {
        "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}",
        "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0", "preferred.replica.election.wait.ms": "0",
    }))
    await broker.start()
    try:
        yield broker, tool
    finally:
        await broker.stop()
        await tool.close()


class FailingReads:
    """Reads of `path` by `store`, alone or joined with others, fail as a lost connection until
    `release()`."""

    def __init__(self, store, path: str):
        self.failed = 0
        self._released = False
        get, get_many = store.get, store.get_many

        def fail_if_held(read_paths: list[str]) -> None:
            if path in read_paths and not self._released:
                self.failed += 1
                raise CoordinationUnavailable("injected: connection lost")

        async def get_one(read_path, *args, **kwargs):
            fail_if_held([read_path])
            return await get(read_path, *args, **kwargs)

        async def get_joined(read_paths):
            fail_if_held(read_paths)
            return await get_many(read_paths)

        store.get, store.get_many = get_one, get_joined

    def release(self) -> None:
        self._released = True


async def test_a_partition_created_while_the_store_fails_is_hosted_once_it_answers(broker_and_tool):
    broker, tool = broker_and_tool
    reads = FailingReads(broker.store, paths.replicas(TOPIC, 0))

    await tool.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER,)).encode(), make_parents=True)

    async def reported() -> bool:
        view = broker.metadata.topics.get(TOPIC, {}).get(0)
        return view is not None and view.replicas == (BROKER,) and reads.failed > 0

    await eventually(reported, WAIT_S, "the cache to report the new partition, and the reconcile to fail")
    reads.release()

    async def leading() -> bool:
        hosted = broker.replicas.hosted(TOPIC, 0)
        return hosted is not None and hosted.state is ReplicaState.LEADER

    await eventually(leading, WAIT_S, "the new partition led by its only replica")


async def test_a_partition_deleted_while_the_store_fails_stops_being_hosted_once_it_answers(broker_and_tool):
    broker, tool = broker_and_tool
    await tool.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER,)).encode(), make_parents=True)

    async def hosted() -> bool:
        return broker.replicas.hosted(TOPIC, 0) is not None

    await eventually(hosted, WAIT_S, "the partition hosted")
    reads = FailingReads(broker.store, paths.replicas(TOPIC, 0))

    await tool.delete(paths.topic(TOPIC), recursive=True)

    async def reported() -> bool:
        return TOPIC not in broker.metadata.topics and reads.failed > 0

    await eventually(reported, WAIT_S, "the cache to report the topic gone, and the reconcile to fail")
    reads.release()

    async def gone() -> bool:
        return not broker.hosted.leaderships and broker.replicas.hosted(TOPIC, 0) is None

    await eventually(gone, WAIT_S, "the deleted partition's leadership stopped and its replica closed")


async def test_a_start_replica_whose_reads_straddle_the_creates_commit_is_acted_on(broker_and_tool):
    """The commit moves the partition's assignment from its staging node to its replicas node:
    read in the other order, both were missing, the request was refused as for a partition
    not assigned here, and a broker that had closed the partition's deleted namesake never
    hosted the new one (found by the simulator)."""
    broker, tool = broker_and_tool
    assignment = ReplicaAssignment((BROKER,)).encode()
    await tool.create(paths.reassigned_partition(TOPIC, 0), assignment, make_parents=True)
    get, get_many = broker.store.get, broker.store.get_many
    committed: list[bool] = []

    async def read_just_before_the_commit(path: str) -> bool:
        if path != paths.replicas(TOPIC, 0) or committed:
            return False
        committed.append(True)
        await tool.transaction().create(paths.topic(TOPIC)).create(paths.partition(TOPIC, 0)) \
            .create(paths.replicas(TOPIC, 0), assignment).delete(paths.reassigned_partition(TOPIC, 0)).commit()
        return True

    async def get_one(path, *args, **kwargs):
        if await read_just_before_the_commit(path):
            raise NoNode(path)
        return await get(path, *args, **kwargs)

    async def get_joined(read_paths):
        before = [await read_just_before_the_commit(path) for path in read_paths]
        return [None if absent else node for absent, node in zip(before, await get_many(read_paths))]

    broker.store.get, broker.store.get_many = get_one, get_joined
    await broker.hosted.start_replica_requested(StateChangeRequest(START_REPLICA, TOPIC, (0,), FROM_ADMIN, FROM_ADMIN))

    assert committed



class FailingDeletes:
    """Deletes of `path` by `store` fail as a lost connection until `release()`."""

    def __init__(self, store, path: str):
        self.failed = 0
        self._released = False
        delete = store.delete

        async def delete_unless_held(deleted_path, *args, **kwargs):
            if deleted_path == path and not self._released:
                self.failed += 1
                raise CoordinationUnavailable("injected: connection lost", deleted_path)
            return await delete(deleted_path, *args, **kwargs)

        store.delete = delete_unless_held

    def release(self) -> None:
        self._released = True


async def test_a_partition_assigned_here_again_after_a_failed_move_off_is_led_again(broker_and_tool):
    """A leader moved off deletes its leader node as it stops; a store error there leaves the
    stopped leadership for the reconcile's retry. Assigned here again before that retry, the
    partition was taken for one still running here, and stayed unled until a restart."""
    broker, tool = broker_and_tool
    await tool.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER,)).encode(), make_parents=True)

    async def leading() -> bool:
        hosted = broker.replicas.hosted(TOPIC, 0)
        return hosted is not None and hosted.state is ReplicaState.LEADER

    await eventually(leading, WAIT_S, "the partition led by its only replica")
    deletes = FailingDeletes(broker.store, paths.leader(TOPIC, 0))
    await tool.set(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER + 1,)).encode())

    async def deposition_failed() -> bool:
        return deletes.failed > 0

    await eventually(deposition_failed, WAIT_S, "the moved-off leader's deposition to fail")
    await tool.set(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER,)).encode())

    async def assigned_here_again() -> bool:
        return broker.metadata.topics[TOPIC][0].replicas == (BROKER,)

    await eventually(assigned_here_again, WAIT_S, "the cache to see the partition assigned here again")
    deletes.release()
    await eventually(leading, WAIT_S, "the partition led here again")


def out_of_descriptors(times: int, call: Callable, refused: list) -> Callable:
    """`call`, but its first `times` calls fail with EMFILE (their arguments kept in `refused`)."""
    def failing(*args):
        if len(refused) < times:
            refused.append(args)
            raise OSError(errno.EMFILE, "Too many open files")
        return call(*args)

    return failing


async def create_and_wait_until_led(broker, tool, what: str) -> None:
    await tool.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER,)).encode(), make_parents=True)

    async def leading() -> bool:
        hosted = broker.replicas.hosted(TOPIC, 0)
        return hosted is not None and hosted.state is ReplicaState.LEADER

    await eventually(leading, WAIT_S, what)


async def test_a_partition_whose_log_found_no_file_descriptor_is_led_once_one_is_free(broker_and_tool, monkeypatch):
    """A log open that fails with EMFILE (connections had taken every descriptor) was left for
    the partition's next assignment change, which a new partition never has: it stayed without
    a leader after the descriptors came back."""
    broker, tool = broker_and_tool
    refused: list = []
    monkeypatch.setattr(broker.replicas, "_new_log", out_of_descriptors(3, broker.replicas._new_log, refused))
    await create_and_wait_until_led(broker, tool, "the new partition led once its log could be opened")
    assert len(refused) == 3


async def test_a_partition_whose_replica_failed_to_open_as_its_leader_is_led_after_the_restart(broker_and_tool,
                                                                                               monkeypatch):
    """The driver restarts after a failure; under Python 3.11 its TaskGroup left the task marked
    cancelled by its own abort, and the first failure (here EMFILE as the elected replica opened)
    ended the driver for good: the partition stayed without a leader. The log loaded for it was
    left open too."""
    broker, tool = broker_and_tool
    refused: list = []
    manager = producer_state.ProducerStateManager
    monkeypatch.setattr(manager, "load", out_of_descriptors(1, manager.load, refused))
    await create_and_wait_until_led(broker, tool, "the partition led after its leadership's driver restarted")
    (_, log), = refused
    assert log._closed, "the log whose partition failed to open was closed, not left holding its files"
