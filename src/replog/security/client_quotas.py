"""The client quotas in force on this broker, answered from memory: which quota applies to a
request of a user from a client id, by Kafka's precedence.

An entity is what a quota is set on: a user, a client id, or both, each possibly the default
entity (`<default>`). Each quota type is resolved on its own, most specific entity first, as
Kafka's ClientQuotaManager (its DefaultQuotaCallback) does:

    /config/users/<user>/clients/<client-id>        tags (user, client-id)
    /config/users/<user>/clients/<default>          tags (user, client-id)
    /config/users/<user>                            tags (user, "")
    /config/users/<default>/clients/<client-id>     tags (user, client-id)
    /config/users/<default>/clients/<default>       tags (user, client-id)
    /config/users/<default>                         tags (user, "")
    /config/clients/<client-id>                     tags ("", client-id)
    /config/clients/<default>                       tags ("", client-id)

The tags name the quota's metrics and the rate measured against it: every client of a user
under a user quota shares one rate. `quota()` is on every request's path: it costs a few dict
lookups, and one when no quota of that type is set anywhere. The store feed keeps the entities
current (`set_entity`, `replace_all`); this class does no I/O and is used from one event loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from .quota_limits import DEFAULT_ENTITY, QUOTA_CONFIG_NAMES, QuotaEntity, QuotaType


class ClientQuotaEntity(NamedTuple):
    """What a quota is set on: `user` and `client_id` are a name, DEFAULT_ENTITY, or None where
    the entity has no such part (a user-only quota has client_id None)."""

    user: str | None
    client_id: str | None


def quotas_of(configs: Mapping[str, str]) -> dict[QuotaType, float]:
    """The quotas among an entity's configs as the store keeps them (strings; a user's node also
    holds SCRAM credentials, which are not quotas). Values were validated when written; one that
    is not a number is skipped rather than stopping every other entity's quotas."""
    quotas = {}
    for name in QUOTA_CONFIG_NAMES:
        if name in configs:
            try:
                quotas[QuotaType(name)] = float(configs[name])
            except ValueError:
                continue
    return quotas


class ClientQuotas:
    """Implements quota_limits.QuotaLimits."""

    def __init__(self) -> None:
        self._limits: dict[QuotaType, dict[ClientQuotaEntity, float]] = {quota_type: {} for quota_type in QuotaType}

    def set_entity(self, entity: ClientQuotaEntity, quotas: Mapping[QuotaType, float]) -> None:
        """`entity`'s quotas are now exactly `quotas` (empty: it has none)."""
        for quota_type, limits in self._limits.items():
            if quota_type in quotas:
                limits[entity] = quotas[quota_type]
            else:
                limits.pop(entity, None)

    def replace_all(self, entities: Iterable[tuple[ClientQuotaEntity, Mapping[QuotaType, float]]]) -> None:
        """The quotas are now exactly those of `entities` (a full load from the store)."""
        for limits in self._limits.values():
            limits.clear()
        for entity, quotas in entities:
            self.set_entity(entity, quotas)

    def entities(self) -> dict[ClientQuotaEntity, dict[QuotaType, float]]:
        """Every entity with a quota, and its quotas."""
        found: dict[ClientQuotaEntity, dict[QuotaType, float]] = {}
        for quota_type, limits in self._limits.items():
            for entity, limit in limits.items():
                found.setdefault(entity, {})[quota_type] = limit
        return found

    def quota(self, quota_type: QuotaType, user: str, client_id: str) -> tuple[QuotaEntity, float] | None:
        limits = self._limits[quota_type]
        if not limits:
            return None
        # Plain tuples: equal to the entities they stand for, and several times cheaper to make.
        for entity, tags in (
            ((user, client_id), (user, client_id)),
            ((user, DEFAULT_ENTITY), (user, client_id)),
            ((user, None), (user, "")),
            ((DEFAULT_ENTITY, client_id), (user, client_id)),
            ((DEFAULT_ENTITY, DEFAULT_ENTITY), (user, client_id)),
            ((DEFAULT_ENTITY, None), (user, "")),
            ((None, client_id), ("", client_id)),
            ((None, DEFAULT_ENTITY), ("", client_id)),
        ):
            limit = limits.get(entity)
            if limit is not None:
                return tags, limit
        return None
