"""Issue 11, bug 4: a topic deleted and created again while one of its replica brokers was
down is hosted by that broker when it comes back, not left closed by the old topic's
close-replica. One broker in this process over the embedded store; admin commands through a
second client of the same store, as `--coord` admin tools would."""

from __future__ import annotations

from replog import admin
from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.replica.partition import ReplicaState
from tests.polling import eventually

TOPIC = "reborn"
BROKER, OTHER = 1, 2
WAIT_S = 20


async def test_a_topic_recreated_while_a_replica_broker_was_down_is_hosted_when_it_is_back(tmp_path):
    store_file = tmp_path / "store.db"
    tool = MemoryStore(str(store_file))
    await tool.start()
    # Neither broker runs while the admin works: BROKER is down, OTHER stands for a leader.
    limits = admin.StateChangeLimits(timeout_s=1)
    try:
        await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [OTHER, BROKER]}, limits=limits)
        await admin.delete_topic(tool, TOPIC, limits=limits)
        await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [OTHER, BROKER]}, limits=limits)
        # OTHER leads the new topic already, as it would have by the time BROKER is back.
        await tool.transaction().create(paths.leader(TOPIC, 0), LeaderRecord(OTHER, 0).encode(), ephemeral=True) \
            .create(paths.isr(TOPIC, 0), IsrRecord((OTHER,), 0).encode()).commit()
        broker = Broker(load_broker_config(None, {
            "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{store_file}",
            "listeners": "127.0.0.1:0",
        }))
        await broker.start()
        try:
            async def following() -> bool:
                hosted = broker.replicas.hosted(TOPIC, 0)
                return hosted is not None and hosted.state is ReplicaState.FOLLOWER and hosted.leader_id == OTHER

            await eventually(following, WAIT_S, "the recreated topic's replica hosted by the broker that was down")
        finally:
            await broker.stop()
    finally:
        await tool.close()
