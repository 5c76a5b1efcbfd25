"""Admin tests run over every coordination backend, with the backends suite's fixtures."""

from __future__ import annotations

import pytest

from replog.coord_backends import Store
from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration, StateChangeRequest
from replog.replication.state_changes import StateChangeListener
from tests.backends.conftest import backend, connect, security, store, url  # noqa: F401  (fixtures)
from tests.support.recording_listener import recording_listener


@pytest.fixture
async def register_brokers(store):
    """Register brokers as a starting broker would: ephemeral /brokers/ids/[id] nodes, each with
    a real state-change listener on its queue that records what it consumes
    (`register.consumed[broker_id]`) instead of opening or deleting logs."""
    listeners: list[StateChangeListener] = []
    consumed: dict[int, list[StateChangeRequest]] = {}

    async def register(racks: dict[int, str | None], on: Store | None = None) -> None:
        client = on or store
        for broker_id, rack in racks.items():
            listener, consumed[broker_id] = await recording_listener(client, broker_id)
            listeners.append(listener)
            registration = BrokerRegistration("127.0.0.1", 9092 + broker_id, rack).encode()
            await client.create(paths.broker(broker_id), registration, ephemeral=True, make_parents=True)

    register.consumed = consumed
    yield register
    for listener in listeners:
        await listener.close()
