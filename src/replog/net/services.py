"""What the request handlers may use of their broker: the narrow context `KafkaServer` hands
every handler as `services`. The broker provides it; tests may provide any object that does."""

from __future__ import annotations

from typing import Any, Mapping, Protocol

from replog.admin import StateChangeLimits
from replog.coord_backends import Store
from replog.groups import GroupCoordinator
from replog.transactions import TransactionCoordinator
from replog.replication.metadata_cache import MetadataCache
from replog.net.fetch_sessions import FetchSessions
from replog.net.transaction_verification import TransactionVerifier
from replog.obs import BrokerMetrics, StateChangeEvents
from replog.replica.producer_ids import ProducerIdAllocator
from replog.replica.manager import ReplicaManager
from replog.security.acls import AclOperation, ResourceType
from replog.security.quota_limits import QuotaLimits
from replog.security.quota_manager import ClientQuotaManagers


class PresumedGone(Protocol):
    def presumed_gone(self, broker_id: int) -> bool: ...


class Authorizes(Protocol):
    """The authorizer (security/authorizer.py): whether a principal, from a host, may perform an
    operation on the resource named (`authorize`), or on some resource of a type
    (`authorize_any`, Kafka's authorizeByResourceType). Answers from memory."""

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool: ...

    def authorize_any(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType) -> bool: ...


class Services(Protocol):
    broker_id: int
    cluster_id: str | None
    config: Mapping[str, Any]
    store: Store
    metadata: MetadataCache
    replicas: ReplicaManager
    producer_ids: ProducerIdAllocator
    leader_connections: PresumedGone
    groups: GroupCoordinator
    transactions: TransactionCoordinator
    # Asks coordinators whether transactional batches' partitions are in their transactions
    # (KIP-890); None with transaction.partition.verification.enable=false.
    transaction_verifier: TransactionVerifier | None
    fetch_sessions: FetchSessions
    metrics: BrokerMetrics
    state_change_events: StateChangeEvents
    authorizer: Authorizes | None  # None: no authorizer.class.name, every request allowed
    client_quotas: QuotaLimits  # the client quotas in force, from the store
    quotas: ClientQuotaManagers  # the client quotas enforced (the controller mutation quota, for admin handlers)

    def now_ms(self) -> int: ...

    def serving(self, topic: str, partition: int) -> bool: ...

    def unknown_partition_error(self, topic: str, partition: int) -> int: ...

    def state_change_limits(self, timeout_s: float) -> StateChangeLimits: ...

    async def topic_missing(self, name: str, allow_auto_create: bool) -> int: ...

    def follower_connection_lost(self, broker_id: int) -> None: ...

    def create_offsets_topic(self) -> None: ...

    def create_transaction_state_topic(self) -> None: ...
