"""A follower whose registration goes leaves the ISRs it is in at once (docs/design.md §5.3), not after
replica.lag.time.max.ms of held acks=all: when its session ends (the broker died: the store
deletes its registration), and when it stops cleanly (a controlled shutdown deregisters first
and waits to be out).

Two brokers run in this process over the embedded store, LEADER (the preferred replica) and
FOLLOWER (which waits two seconds before it runs for leader against a live LEADER), with a lag
time of ten minutes, so that any shrink seen here is the departure's.
"""

from __future__ import annotations

import pytest

from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import NoNode, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, ReplicaAssignment
from replog.replica.partition import ReplicaState
from tests.support.polling import eventually

TOPIC = "departures"
LEADER, FOLLOWER = 0, 1
WAIT_S = 20


def config(tmp_path, broker_id: int):
    return load_broker_config(None, {
        "broker.id": str(broker_id), "log.dirs": str(tmp_path / f"data-{broker_id}"),
        "coord.url": f"memory://{tmp_path / 'store.db'}", "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
        "replica.lag.time.max.ms": "600000", "preferred.replica.election.wait.ms": "2000",
        "auto.leader.rebalance.enable": "false",
    })


class Pair:
    def __init__(self, peer: MemoryStore, brokers: dict[int, Broker]):
        self.peer, self.brokers = peer, brokers

    async def isr(self) -> tuple[int, ...]:
        try:
            return IsrRecord.decode((await self.peer.get(paths.isr(TOPIC, 0)))[0]).isr
        except NoNode:
            return ()  # no election yet

    async def wait_for_isr(self, expected: tuple[int, ...], what: str) -> None:
        async def reached() -> bool:
            return await self.isr() == expected

        await eventually(reached, WAIT_S, what)


@pytest.fixture
async def pair(tmp_path):
    peer = MemoryStore(str(tmp_path / "store.db"))
    await peer.start()
    brokers: dict[int, Broker] = {}
    try:
        for broker_id in (LEADER, FOLLOWER):
            brokers[broker_id] = Broker(config(tmp_path, broker_id))
            await brokers[broker_id].start()
        await peer.create(paths.replicas(TOPIC, 0), ReplicaAssignment((LEADER, FOLLOWER)).encode(), make_parents=True)
        started = Pair(peer, brokers)
        await started.wait_for_isr((LEADER, FOLLOWER), "both replicas in sync")

        async def replicas_started() -> bool:
            led, followed = (brokers[broker_id].replicas.hosted(TOPIC, 0) for broker_id in (LEADER, FOLLOWER))
            return led is not None and led.state is ReplicaState.LEADER and followed is not None \
                and followed.state is ReplicaState.FOLLOWER

        await eventually(replicas_started, WAIT_S, "LEADER leading and FOLLOWER following")
        yield started
    finally:
        for broker in brokers.values():
            await broker.stop()
        await peer.close()


async def test_a_follower_stopped_cleanly_is_out_of_the_isr_before_it_stops(pair):
    await pair.brokers.pop(FOLLOWER).stop()
    assert await pair.isr() == (LEADER,)


async def test_a_follower_whose_registration_went_leaves_the_isr_and_rejoins_once_registered(pair):
    """The store deletes a dead broker's registration when its session ends; done here by hand,
    so that the follower, alive in fact, cannot register again before the leader has looked."""
    registration, _ = await pair.peer.get(paths.broker(FOLLOWER))
    await pair.peer.delete(paths.broker(FOLLOWER))
    await pair.wait_for_isr((LEADER,), "the follower whose registration went shrunk out")
    await pair.peer.create(paths.broker(FOLLOWER), registration, ephemeral=True)
    await pair.wait_for_isr((LEADER, FOLLOWER), "the follower back in the ISR, by fetching, once registered")
