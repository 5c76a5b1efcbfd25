"""A real state-change listener that records the requests it acts on instead of opening or
deleting logs: what a broker's queue consumer does, without the broker."""

from __future__ import annotations

from replog.coord_backends import Store
from replog.coord_backends.paths import StateChangeRequest
from replog.replication.state_changes import Handler, StateChangeListener


async def recording_listener(
    store: Store, broker_id: int, on_start: Handler | None = None
) -> tuple[StateChangeListener, list[StateChangeRequest]]:
    """Listen on `broker_id`'s queue and drain it (as brokerStartup does); the caller closes it.
    `on_start` replaces recording for start-replica requests."""
    acted: list[StateChangeRequest] = []

    async def record(request: StateChangeRequest) -> None:
        acted.append(request)

    listener = StateChangeListener(store, broker_id, on_start or record, record)
    await listener.listen()
    await listener.drain()
    return listener, acted
