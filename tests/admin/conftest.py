"""Admin tests run over every coordination backend, with the backends suite's fixtures."""

from __future__ import annotations

import pytest

from replog.coord_backends import Store
from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration
from tests.backends.conftest import backend, connect, store, url  # noqa: F401  (fixtures)


@pytest.fixture
def register_brokers(store):
    """Register brokers as a starting broker would: ephemeral /brokers/ids/[id] nodes."""

    async def register(racks: dict[int, str | None], on: Store | None = None) -> None:
        for broker_id, rack in racks.items():
            registration = BrokerRegistration("127.0.0.1", 9092 + broker_id, rack).encode()
            await (on or store).create(paths.broker(broker_id), registration, ephemeral=True, make_parents=True)

    return register
