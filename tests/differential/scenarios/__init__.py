"""Every scenario, by name (importing a family's module registers its scenarios)."""

from . import configs, groups, producers, records, requests, topics, transactions, txn_offsets  # noqa: F401  (registration)
from .registry import SCENARIOS

__all__ = ["SCENARIOS"]
