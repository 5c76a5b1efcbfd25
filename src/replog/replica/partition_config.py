"""The topic settings a partition enforces (PartitionConfig); the log's own are
storage/log_config.py's LogConfig."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """Topic settings the partition enforces (the log's are LogConfig), Kafka's names and defaults.

    min.insync.replicas; producer.id.expiration.ms.
    """

    min_insync_replicas: int = 1
    producer_id_expiration_ms: int = 24 * 3600 * 1000

    def __post_init__(self) -> None:
        if self.min_insync_replicas < 1:
            raise ValueError(f"min.insync.replicas must be >= 1, got {self.min_insync_replicas}")
        if self.producer_id_expiration_ms < 1:
            raise ValueError(f"producer.id.expiration.ms must be >= 1, got {self.producer_id_expiration_ms}")
