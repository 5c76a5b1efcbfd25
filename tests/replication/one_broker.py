"""One broker in this process over the embedded store, leading partition 0 of TOPIC with
OTHER as its other replica; a second client of the same store (`peer`) plays OTHER's
registration and reads what the broker wrote. OTHER never fetches, so whether it stays in the
ISR is up to `replica.lag.time.max.ms`."""

from __future__ import annotations

import contextlib

from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import StoreError, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replica.partition import ReplicaState
from tests.support.polling import eventually

TOPIC = "wedge"
LEADER, OTHER = 1, 2
WAIT_S = 20


class OneBroker:
    def __init__(self, broker: Broker, peer: MemoryStore):
        self.broker, self.peer = broker, peer

    async def create_partition(self) -> None:
        await self.peer.create(paths.replicas(TOPIC, 0), ReplicaAssignment((LEADER, OTHER)).encode(), make_parents=True)

    async def leader_record(self) -> tuple[LeaderRecord, int] | None:
        try:
            data, version = await self.peer.get(paths.leader(TOPIC, 0))
        except StoreError:
            return None
        return LeaderRecord.decode(data), version

    async def isr(self) -> tuple[int, ...]:
        data, _ = await self.peer.get(paths.isr(TOPIC, 0))
        return IsrRecord.decode(data).isr

    async def working_leader(self) -> bool:
        """The node names this broker and its replica leads, unfenced, at the node's epoch."""
        found = await self.leader_record()
        hosted = self.broker.replicas.hosted(TOPIC, 0)
        return (
            found is not None and found[0].leader == LEADER and hosted is not None
            and hosted.state is ReplicaState.LEADER and not hosted.fenced
            and hosted.leader_epoch == found[0].leader_epoch
        )

    async def wait_for_working_leader(self, what: str) -> LeaderRecord:
        await eventually(self.working_leader, WAIT_S, what)
        return (await self.leader_record())[0]


@contextlib.asynccontextmanager
async def one_broker(tmp_path, replica_lag_time_max_ms: int):
    store_url = f"memory://{tmp_path / 'store.db'}"
    peer = MemoryStore(str(tmp_path / "store.db"))
    await peer.start()
    await peer.create(paths.broker(OTHER), b'{"host": "127.0.0.1", "port": 1, "rack": null}', ephemeral=True, make_parents=True)
    config = load_broker_config(None, {
        "broker.id": str(LEADER), "log.dirs": str(tmp_path / "data"), "coord.url": store_url,
        "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
        "replica.lag.time.max.ms": str(replica_lag_time_max_ms),
        "preferred.replica.election.wait.ms": "0", "auto.leader.rebalance.enable": "false",
    })
    broker = Broker(config)
    await broker.start()
    try:
        yield OneBroker(broker, peer)
    finally:
        await broker.stop()
        await peer.close()
