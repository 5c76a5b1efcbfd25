"""The one-broker fixture the replication tests share (one_broker.py)."""

from __future__ import annotations

import pytest

from tests.replication.one_broker import one_broker


@pytest.fixture
async def cluster(tmp_path):
    """Its ISR upkeep soon shrinks the other replica, which never fetches."""
    async with one_broker(tmp_path, replica_lag_time_max_ms=200) as running:
        yield running
