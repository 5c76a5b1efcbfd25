"""The transaction coordinator: transactional ids' state in __transaction_state, and the markers
that end their transactions in the partitions they wrote."""

from .placement import TRANSACTION_STATE_TOPIC, partition_for_transactional_id

__all__ = ["TRANSACTION_STATE_TOPIC", "partition_for_transactional_id"]
