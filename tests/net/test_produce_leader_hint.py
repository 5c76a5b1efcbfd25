"""A refused produce names the partition's leader (KIP-951 current_leader and node_endpoints),
waiting a bounded time for this broker's metadata to name another live one, so that a client
leaves a leader that stopped taking writes without waiting for its next metadata refresh."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from replog.coord_backends.paths import BrokerRegistration
from replog.replication.metadata_cache import MetadataCache, PartitionView
from replog.net.handlers import produce

THIS_BROKER, SUCCESSOR = 0, 2


def services_led_by(leader: int, epoch: int = 4) -> SimpleNamespace:
    metadata = MetadataCache(store=None)
    metadata.brokers = {broker: BrokerRegistration("127.0.0.1", 9090 + broker) for broker in (0, 1, 2)}
    metadata.topics = {"orders": {0: PartitionView(replicas=(0, 1, 2), leader=leader, leader_epoch=epoch, isr=(0, 1, 2))}}
    return SimpleNamespace(broker_id=THIS_BROKER, metadata=metadata)


async def test_the_hint_names_the_leader_the_metadata_knows():
    services = services_led_by(SUCCESSOR)
    hint = await produce._current_leader(services, "orders", 0)
    assert hint == {"current_leader": {"leader_id": SUCCESSOR, "leader_epoch": 4}}
    assert produce._endpoints(services, [hint], "PLAINTEXT") == [{"node_id": SUCCESSOR, "host": "127.0.0.1", "port": 9092, "rack": None}]


async def test_a_refusal_waits_for_the_metadata_to_name_a_successor():
    services = services_led_by(THIS_BROKER, epoch=3)

    async def elect_successor() -> None:
        await asyncio.sleep(0.05)
        services.metadata.topics["orders"][0] = PartitionView(replicas=(0, 1, 2), leader=SUCCESSOR, leader_epoch=4, isr=(1, 2))
        services.metadata.changed()

    election = asyncio.create_task(elect_successor())
    hint = await produce._current_leader(services, "orders", 0)
    await election
    assert hint == {"current_leader": {"leader_id": SUCCESSOR, "leader_epoch": 4}}


async def test_without_a_successor_the_refusal_comes_bare_after_the_bounded_wait(monkeypatch):
    monkeypatch.setattr(produce, "SUCCESSOR_WAIT_S", 0.05)
    services = services_led_by(THIS_BROKER)
    assert await produce._current_leader(services, "orders", 0) == {}
    assert await produce._current_leader(services, "no-such-topic", 0) == {}
    assert produce._endpoints(services, [{}], "PLAINTEXT") == []


async def test_a_leader_whose_broker_is_not_registered_is_not_named(monkeypatch):
    monkeypatch.setattr(produce, "SUCCESSOR_WAIT_S", 0.05)
    services = services_led_by(SUCCESSOR)
    del services.metadata.brokers[SUCCESSOR]
    assert await produce._current_leader(services, "orders", 0) == {}
