"""The settings one partition's log enforces (LogConfig): Kafka's topic configs, in python
spelling, with their defaults (config.py's, the only ones) and their bounds."""

from __future__ import annotations

import dataclasses

from replog.config import LONG_MAX, SEGMENT_BYTES_RUNNABLE_MIN, TopicSettings, topic_default
from replog.storage.batch_format import TOPIC_CODECS

NEVER = LONG_MAX  # "no limit" for the flush settings


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

    segment_bytes: int = topic_default("segment.bytes")
    segment_ms: int = topic_default("segment.ms")
    index_interval_bytes: int = topic_default("index.interval.bytes")
    flush_messages: int = topic_default("flush.messages")
    flush_ms: int = topic_default("flush.ms")
    retention_ms: int = topic_default("retention.ms")
    retention_bytes: int = topic_default("retention.bytes")
    max_message_bytes: int = topic_default("max.message.bytes")
    message_timestamp_before_max_ms: int = topic_default("message.timestamp.before.max.ms")
    message_timestamp_after_max_ms: int = topic_default("message.timestamp.after.max.ms")
    message_timestamp_type: str = topic_default("message.timestamp.type")
    compression_type: str = topic_default("compression.type")
    compression_gzip_level: int = topic_default("compression.gzip.level")
    compression_lz4_level: int = topic_default("compression.lz4.level")
    compression_zstd_level: int = topic_default("compression.zstd.level")
    compact: bool = "compact" in topic_default("cleanup.policy")
    delete_retention_ms: int = topic_default("delete.retention.ms")
    min_cleanable_dirty_ratio: float = topic_default("min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = topic_default("min.compaction.lag.ms")
    max_compaction_lag_ms: int = topic_default("max.compaction.lag.ms")

    def __post_init__(self) -> None:
        minimums = {"segment_bytes": SEGMENT_BYTES_RUNNABLE_MIN, "segment_ms": 1, "index_interval_bytes": 0, "flush_messages": 1,
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

    @classmethod
    def from_topic_settings(cls, settings: TopicSettings) -> LogConfig:
        """A topic's log settings; each field is the topic setting of its name in python spelling.

        A topic that is compact but not also delete keeps its segments: the cleaner, not
        retention, bounds it."""
        values = {field.name: settings[field.name.replace("_", ".")] for field in dataclasses.fields(cls)
                  if field.name != "compact"}
        policy = settings["cleanup.policy"]
        values["compact"] = "compact" in policy
        if "delete" not in policy:
            values |= {"retention_ms": -1, "retention_bytes": -1}
        return cls(**values)
