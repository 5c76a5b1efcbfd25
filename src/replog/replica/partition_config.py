"""The topic settings a partition enforces (PartitionConfig); the log's own are
storage/log_config.py's LogConfig."""

from __future__ import annotations

import dataclasses

from replog.config import TopicSettings, topic_default


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """Topic settings the partition enforces (the log's are LogConfig), Kafka's names and defaults.

    min.insync.replicas; producer.id.expiration.ms (not a setting in replog: Kafka's default).
    """

    min_insync_replicas: int = topic_default("min.insync.replicas")
    producer_id_expiration_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}")
        if self.producer_id_expiration_ms < 1:
            raise ValueError(f"producer.id.expiration.ms must be >= 1, got {self.producer_id_expiration_ms}")

    @classmethod
    def from_topic_settings(cls, settings: TopicSettings) -> PartitionConfig:
        """The settings a topic's partitions enforce beyond their logs'."""
        return cls(min_insync_replicas=settings["min.insync.replicas"])
