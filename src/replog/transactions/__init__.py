"""The transaction coordinator: transactional ids' state in __transaction_state, and the markers
that end their transactions in the partitions they wrote."""

from .coordinator import (InitResult, TransactionConfig, TransactionCoordinator, TransactionDescription,
                          TransactionListing)
from .markers import WritesMarkers
from .placement import TRANSACTION_STATE_TOPIC, partition_for_transactional_id
from .state import TxnState

__all__ = [
    "InitResult", "TransactionConfig", "TransactionCoordinator", "TransactionDescription", "TransactionListing",
    "WritesMarkers", "TRANSACTION_STATE_TOPIC", "partition_for_transactional_id", "TxnState",
]
