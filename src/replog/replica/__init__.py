"""Everything about one partition's data and its replication."""

from replog.replica.checkpoint import LeaderEpochCache, OffsetCheckpoint
from replog.replica.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    ReplicaError,
)
from replog.replica.log import Log, LogConfig
from replog.replica.segment import FileSlice

__all__ = [
    "CorruptRecordError",
    "FileSlice",
    "InvalidRecordError",
    "LeaderEpochCache",
    "Log",
    "LogConfig",
    "OffsetCheckpoint",
    "OffsetOutOfRangeError",
    "RecordListTooLargeError",
    "RecordTooLargeError",
    "ReplicaError",
]
