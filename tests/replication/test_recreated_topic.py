"""A topic deleted while one of its replica brokers was down: the broker deletes its replica
when it comes back, and the deletion completes then, not before; the name is refused to a
create until it does. A namesake created afterwards is hosted by that broker (issue 11, bug 4:
it was left closed by the old topic's close-replica). One broker in this process over the
embedded store; admin commands through a second client of the same store, as `--coord` admin
tools would, and the other replica's queue consumed by a recording listener."""

from __future__ import annotations

import pytest

from replog import admin
from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.replica.partition import ReplicaState
from replog.replication.topic_deletion import pending_close_replicas, read_deletion
from tests.polling import eventually
from tests.recording_listener import recording_listener

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
