"""What client quotas are, in Kafka's names: the four quota types, the entities a quota is set on,
and the question the broker asks of the quotas in force.

A quota is set on a user, a client id, or a user and client id together, each possibly the
default (`<default>`, Kafka's name of the default entity's node); which one applies to a
request is Kafka's precedence, most specific first (client_quotas.py answers it from the
store). The entity that applies names the quota's metrics and the rate it is measured over:
Kafka's metric tags, ("alice", "") for a quota on user alice, ("", "app") for one on client id
app, ("alice", "app") for the pair.
"""

from __future__ import annotations

import enum
from typing import Protocol

DEFAULT_ENTITY = "<default>"


class QuotaType(enum.Enum):
    PRODUCE = "producer_byte_rate"  # bytes/s a client's Produce requests may bring
    FETCH = "consumer_byte_rate"  # bytes/s a client's Fetch responses may carry
    REQUEST = "request_percentage"  # % of one request handler thread's time (KIP-124)
    CONTROLLER_MUTATION = "controller_mutation_rate"  # partitions created or deleted per s (KIP-599)


QUOTA_CONFIG_NAMES = tuple(quota_type.value for quota_type in QuotaType)

QuotaEntity = tuple[str, str]  # (user, client id) tags of the quota that applies; "" where unset


def user_of_principal(principal: str) -> str:
    """The user a quota on users names for `principal`: User:alice -> alice (ANONYMOUS for
    User:ANONYMOUS, as Kafka)."""
    return principal.partition(":")[2]


class QuotaLimits(Protocol):
    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> tuple[QuotaEntity, float] | None:
        """The quota of `quota_type` that applies to requests of `user` from `client_id`, and the
        entity it is set on; None when none does."""
        ...
