"""One partition's bytes on disk: record batches, segments, indexes, the log, checkpoints."""

from replog.storage.checkpoint import LeaderEpochCache, OffsetCheckpoint
from replog.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    ReplicaError,
)
from replog.storage.log import Log
from replog.storage.log_config import LogConfig
from replog.storage.segment import FileSlice

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
