"""Which partition of __transaction_state holds a transactional id, and so which broker is its
transaction coordinator: Kafka's function, the same one groups are placed by, so that an id
lands on the same partition number as in Kafka."""

from __future__ import annotations

from replog.groups.placement import partition_for

TRANSACTION_STATE_TOPIC = "__transaction_state"


def partition_for_transactional_id(transactional_id: str, partitions: int) -> int:
    return partition_for(transactional_id, partitions)
