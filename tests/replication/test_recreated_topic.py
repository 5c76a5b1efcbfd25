"""A topic deleted while one of its replica brokers was down: the broker deletes its replica
when it comes back, and the deletion completes then, not before; the name is refused to a
create until it does. A namesake created afterwards is hosted by that broker (the old
topic's close-replica must not leave it closed). One broker in this process over the
embedded store; admin commands through a second client of the same store, as `--coord` admin
tools would, and the other replica's queue consumed by a recording listener."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from replog import admin
from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import SessionState, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord, TopicId
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.storage.log import LogConfig
from replog.replica.partition import ReplicaState
from replog.replication import leadership as machine
from replog.replication.driver import LeadershipContext, PartitionLeadership
from replog.replication.topic_deletion import pending_close_replicas, read_deletion
from tests.support.polling import eventually
from tests.support.recording_listener import recording_listener
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock

TOPIC = "reborn"
BROKER, OTHER = 1, 2
WAIT_S = 20


async def test_a_topic_deleted_while_a_replica_broker_was_down_goes_when_it_is_back_and_its_namesake_is_hosted(tmp_path):
    store_file = tmp_path / "store.db"
    tool = MemoryStore(str(store_file))
    await tool.start()
    other_listener, _ = await recording_listener(tool, OTHER)
    limits = admin.StateChangeLimits(timeout_s=1)
    broker = Broker(load_broker_config(None, {
        "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{store_file}",
        "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
    }))
    try:
        # BROKER is down while the admin works.
        await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [OTHER, BROKER]}, limits=limits)
        await admin.delete_topic(tool, TOPIC, limits=limits)
        assert await admin.list_topics(tool) == []

        async def only_broker_pending() -> bool:
            return list(await pending_close_replicas(tool, (await read_deletion(tool, TOPIC))[0])) == [BROKER]

        await eventually(only_broker_pending, WAIT_S, "the other replica's close-replica consumed")
        with pytest.raises(admin.TopicAlreadyExists, match=rf"marked for deletion.* brokers \[{BROKER}\] consume"):
            await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [OTHER, BROKER]}, limits=limits)
        assert await tool.exists(paths.replicas(TOPIC, 0)) is not None

        await broker.start()
        try:
            async def deleted() -> bool:
                return await tool.exists(paths.topic(TOPIC)) is None and await tool.exists(paths.topic_deletion(TOPIC)) is None

            await eventually(deleted, WAIT_S, "the deletion completed by the broker that was down")
            await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [OTHER, BROKER]}, limits=limits)
            # OTHER leads the new topic, as it would.
            await tool.transaction().create(paths.leader(TOPIC, 0), LeaderRecord(OTHER, 0).encode(), ephemeral=True) \
                .create(paths.isr(TOPIC, 0), IsrRecord((OTHER,), 0).encode()).commit()

            async def following() -> bool:
                hosted = broker.replicas.hosted(TOPIC, 0)
                return hosted is not None and hosted.state is ReplicaState.FOLLOWER and hosted.leader_id == OTHER

            await eventually(following, WAIT_S, "the new topic's replica hosted by the broker that was down")
        finally:
            await broker.stop()
    finally:
        await other_listener.close()
        await tool.close()


async def test_a_replica_of_a_topic_recreated_behind_the_brokers_back_is_replaced_not_served(tmp_path):
    """The broker's watches saw only the net change of a delete and create of the topic (it was
    cut off from the store meanwhile, and no longer assigned when the delete was sent): the
    same assignment, a new topic id. Its running replica is the deleted topic's, whose records
    must not be served or elected as the new topic's (simulator seed 1592); it is replaced by
    an empty one."""
    store_file = tmp_path / "store.db"
    tool = MemoryStore(str(store_file))
    await tool.start()
    limits = admin.StateChangeLimits(timeout_s=WAIT_S)
    broker = Broker(load_broker_config(None, {
        "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{store_file}",
        "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
    }))
    await broker.start()
    try:
        await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [BROKER]}, limits=limits)

        async def leading() -> bool:
            hosted = broker.replicas.hosted(TOPIC, 0)
            return hosted is not None and hosted.state is ReplicaState.LEADER

        await eventually(leading, WAIT_S, "the topic led")
        deleted_topic = broker.replicas.hosted(TOPIC, 0)
        await deleted_topic.append_as_leader(producer_batch(3), acks=1, timeout_ms=1000)

        data, _ = await tool.get(paths.topic(TOPIC))
        new_id = TopicId.new().topic_id
        await tool.set(paths.topic(TOPIC), dataclasses.replace(TopicId.decode(data), topic_id=new_id).encode())

        async def id_seen() -> bool:
            return broker.metadata.topic_id(TOPIC) == new_id

        await eventually(id_seen, WAIT_S, "the new topic id seen")
        # The new topic's partition has no leader, ISR or epochs yet.
        await tool.transaction().delete(paths.leader(TOPIC, 0)).delete(paths.isr(TOPIC, 0)) \
            .delete(paths.leader_epoch(TOPIC, 0)).commit()

        async def new_replica_leads() -> bool:
            hosted = broker.replicas.hosted(TOPIC, 0)
            return await leading() and hosted.topic_id == new_id and await tool.exists(paths.leader(TOPIC, 0)) is not None

        await eventually(new_replica_leads, WAIT_S, "an empty replica of the new topic leading")
        assert broker.replicas.hosted(TOPIC, 0).log_end_offset == 0, "the deleted topic's records served as the new one's"
    finally:
        await broker.stop()
        await tool.close()


async def test_a_replica_of_another_topic_id_than_seen_does_not_run_for_leader(tmp_path):
    """Before its reconcile replaces it, a leadership of the deleted topic's replica sees its
    leader node go (the new topic has none yet): it must not elect itself with the deleted
    topic's records. No store access is made (the store here has none to give)."""
    replicas = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=BROKER), ManualClock())
    assert await replicas.load_logs(TOPIC, [0], LogConfig(), topic_id="deleted") == [None]
    context = LeadershipContext(BROKER, SimpleNamespace(session_state=SessionState.CONNECTED), replicas=replicas,
                                connections=None, config={}, now_ms=lambda: 0, leadership_changed=lambda: None,
                                seen_topic_id=lambda topic: "created since")
    try:
        assert isinstance(await PartitionLeadership(context, TOPIC, 0, lambda: {})._elect(), machine.ElectionDeferred)
    finally:
        await replicas.shutdown()
