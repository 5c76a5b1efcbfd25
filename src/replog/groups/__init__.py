"""Consumer groups: the group coordinator and committed offsets, kept in __consumer_offsets."""

from .coordinator import CoordinatorConfig, GroupCoordinator, GroupListing, OffsetCommit
from .group import (NO_GENERATION, UNKNOWN_MEMBER_ID, Group, GroupLimits, GroupState, JoinRequest, JoinResult,
                    SyncResult)
from .placement import OFFSETS_TOPIC, java_string_hash_code, partition_for

__all__ = [
    "CoordinatorConfig", "GroupCoordinator", "GroupListing", "OffsetCommit", "NO_GENERATION", "UNKNOWN_MEMBER_ID",
    "Group", "GroupLimits", "GroupState", "JoinRequest", "JoinResult", "SyncResult", "OFFSETS_TOPIC",
    "java_string_hash_code", "partition_for",
]
