"""Followers as a leader's Fetch handler knows them, for tests that drive the handler directly:
each registered with a life id, which its connections' client id names
(net/leader_connections.py)."""

from __future__ import annotations

import collections
from types import SimpleNamespace

from replog.coord_backends.paths import BrokerRegistration
from replog.net.leader_connections import follower_client_id


def life_of(broker_id: int) -> str:
    return f"{broker_id:016x}"


def registered(*broker_ids: int) -> SimpleNamespace:
    """The metadata cache's brokers and lives (MetadataCache) with `broker_ids` registered."""
    return SimpleNamespace(brokers={broker_id: BrokerRegistration("127.0.0.1", 9092, None, life_of(broker_id))
                                    for broker_id in broker_ids},
                           lives={broker_id: collections.deque([life_of(broker_id)]) for broker_id in broker_ids})


def client_id_of(broker_id: int) -> str:
    """The client id of a connection of `broker_id`'s registered life."""
    return follower_client_id(broker_id, life_of(broker_id))
