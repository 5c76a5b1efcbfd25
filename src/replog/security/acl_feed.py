"""Keeps a broker's AclAuthorizer equal to the ACLs in the store, as Kafka's ZooKeeper-era
authorizer kept its cache: every pattern loaded at the start, then each pattern a change
notification under /kafka-acl-extended-changes names (acl_records.change_notice) read again
(coord_backends/change_notifications.py follows them, and loads everything again when some may
have been missed or the store failed). A notification that names no pattern this broker can
read cannot say what changed: everything is loaded again rather than guessed.
"""

from __future__ import annotations

import asyncio
import logging

from replog.coord_backends import Store
from replog.coord_backends.change_notifications import follow_notifications
from replog.coord_backends.paths import ACL_CHANGE_PREFIX, InvalidNodeValue
from replog.security import acl_records
from replog.security.authorizer import AclAuthorizer

logger = logging.getLogger(__name__)


class AclFeed:
    def __init__(self, store: Store, authorizer: AclAuthorizer):
        self._store = store
        self._authorizer = authorizer
        self.loaded = asyncio.Event()  # set once every stored ACL was loaded

    async def run(self) -> None:
        """Until cancelled; store failures are retried (change_notifications.py)."""
        await follow_notifications(self._store, ACL_CHANGE_PREFIX, self._apply, self._load_all, self.loaded)

    async def _load_all(self) -> None:
        patterns = await acl_records.stored_patterns(self._store)
        acls = await acl_records.read_many(self._store, patterns)
        self._authorizer.replace_all({pattern: entries for pattern, entries in acls.items() if entries})

    async def _apply(self, notification: bytes) -> None:
        try:
            pattern = acl_records.changed_pattern(notification)
        except InvalidNodeValue as error:
            logger.warning("unreadable ACL change notification, loading every ACL again error=%s", error)
            await self._load_all()
            return
        entries = (await acl_records.read_many(self._store, [pattern]))[pattern]
        self._authorizer.replace(pattern, entries)
        logger.debug("ACLs changed pattern=%s entries=%d", pattern, len(entries))
