"""Keeps a broker's client quotas (client_quotas.py) current from the store: everything at the
start and whenever notifications may have been missed, then the entity each config change
notification names, read again (client_quota_records.py). A change reaches every broker as
soon as its watch fires, without a store round trip on any request's path."""

from __future__ import annotations

import asyncio
import logging

from replog.coord_backends import Store
from replog.coord_backends import paths
from replog.coord_backends.change_notifications import follow_notifications
from replog.coord_backends.paths import InvalidNodeValue

from . import client_quota_records as records
from .client_quotas import ClientQuotas, quotas_of

logger = logging.getLogger(__name__)


class ClientQuotaFeed:
    def __init__(self, store: Store, quotas: ClientQuotas):
        self._store = store
        self._quotas = quotas
        self.loaded = asyncio.Event()  # set once everything stored was loaded

    async def run(self) -> None:
        """Until cancelled; store failures are retried (change_notifications.py)."""
        await follow_notifications(self._store, paths.CONFIG_CHANGE_PREFIX, self._apply, self._reload, self.loaded)

    async def _reload(self) -> None:
        stored = await records.stored_quotas(self._store)
        self._quotas.replace_all((entity, quotas_of(configs)) for entity, configs in stored.items())
        # A broker without quotas, the common case, says nothing of them when it starts.
        logger.log(logging.INFO if stored else logging.DEBUG, "client quotas loaded entities=%d", len(stored))

    async def _apply(self, notification: bytes) -> None:
        try:
            entity = records.changed_entity(notification)
        except InvalidNodeValue as error:
            logger.warning("unreadable config change notification skipped error=%s", error)
            return
        if entity is None:
            return
        quotas = quotas_of(await records.read_quotas(self._store, entity))
        self._quotas.set_entity(entity, quotas)
        logger.info("client quotas changed user=%r client_id=%r quotas=%s", entity.user, entity.client_id,
                    ",".join(f"{quota_type.value}={limit}" for quota_type, limit in quotas.items()) or "-")
