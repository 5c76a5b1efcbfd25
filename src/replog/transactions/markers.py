"""What the transaction coordinator needs to end a transaction in the partitions it wrote: a way
to write one marker into each of them. The coordinator never finds leaders itself; the broker
hands it a channel (net/txn_markers.py) that does (docs/design.md §16.2)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from replog.storage.control_batches import Marker


class WritesMarkers(Protocol):
    async def write_markers(self, marker: Marker, partitions: Collection[tuple[str, int]]) -> None:
        """Return once every partition (topic, partition index) holds `marker` at its high
        watermark, or no longer exists; retry anything else (no leader, a leader that moved, a
        timeout) until cancelled. Fencing errors (INVALID_PRODUCER_EPOCH,
        TRANSACTION_COORDINATOR_FENCED) end a partition's retries too: a newer producer or
        coordinator owns the outcome there."""
        ...
