"""The settings one partition's log enforces (LogConfig): Kafka's topic configs, in python
spelling, with Kafka's defaults and their bounds."""

import dataclasses

from replog.storage.batch_format import TOPIC_CODECS

NEVER = 2**63 - 1  # Kafka's Long.MAX_VALUE: "no limit" for the flush settings


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """Per-log settings; Kafka's topic config names in python spelling, Kafka's defaults.

    segment.bytes, segment.ms, index.interval.bytes, flush.messages, flush.ms, retention.ms
    (-1: keep forever), retention.bytes (-1: no size limit), max.message.bytes,
    message.timestamp.before.max.ms and message.timestamp.after.max.ms (Kafka 4's defaults: any
    time before now, at most an hour after), message.timestamp.type (CreateTime: the producer's;
    LogAppendTime: the leader's clock when it appends), compression.type (the codec batches are
    stored in, batch_format.TOPIC_CODECS; producer: each batch's own) and compression.gzip.level,
    compression.lz4.level and compression.zstd.level (what it is stored at), and for a compacted log
    (`compact`) delete.retention.ms, min.cleanable.dirty.ratio, min.compaction.lag.ms (records
    younger stay uncleaned) and max.compaction.lag.ms (records older are cleaned, however little
    is dirty).
    """

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    flush_messages: int = NEVER
    flush_ms: int = NEVER
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_before_max_ms: int = NEVER
    message_timestamp_after_max_ms: int = 3600 * 1000
    message_timestamp_type: str = "CreateTime"
    compression_type: str = "producer"
    compression_gzip_level: int = -1  # zlib's default
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    compact: bool = False
    delete_retention_ms: int = 24 * 3600 * 1000
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = NEVER

    def __post_init__(self) -> None:
        minimums = {"segment_bytes": 14, "segment_ms": 1, "index_interval_bytes": 0, "flush_messages": 1,
                    "flush_ms": 0, "retention_ms": -1, "retention_bytes": -1, "max_message_bytes": 0,
                    "message_timestamp_before_max_ms": 0, "message_timestamp_after_max_ms": 0,
                    "delete_retention_ms": 0, "min_cleanable_dirty_ratio": 0, "min_compaction_lag_ms": 0,
                    "max_compaction_lag_ms": 1}
        for name, minimum in minimums.items():
            if getattr(self, name) < minimum:
                raise ValueError(f"{name} must be >= {minimum}, got {getattr(self, name)}")
        if self.message_timestamp_type not in ("CreateTime", "LogAppendTime"):
            raise ValueError("message_timestamp_type must be CreateTime or LogAppendTime, "
                             f"got {self.message_timestamp_type}")
        if self.compression_type not in TOPIC_CODECS:
            raise ValueError(f"compression_type must be one of {', '.join(TOPIC_CODECS)}, got {self.compression_type}")
