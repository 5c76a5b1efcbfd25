"""Keeps a broker's AclAuthorizer equal to the ACLs in the store, as Kafka's ZooKeeper-era
authorizer kept its cache: from the change notifications writers leave under
/kafka-acl-extended-changes (acl_records.change_notice), one sequential node per changed
resource pattern.

The children watch is opened first and every pattern loaded next, so that a change made during
the load is both in the load and notified after it. Each later notification (a sequence above
the last one applied) has its pattern's node read again. When notifications may have been
missed (the last one applied is gone and the next is not its successor: pruned while this
broker lagged or was away), or one cannot be read, everything is loaded again rather than
guessed. A failed watch or read is retried after a pause, with a full load, as the store comes
back.
"""

from __future__ import annotations

import asyncio
import logging

from replog.coord_backends import Store, StoreError
from replog.coord_backends.base import TRANSACTION_OPS_MAX, Watch, sequential_path
from replog.coord_backends.paths import ACL_CHANGE_PREFIX, ACL_CHANGES, InvalidNodeValue
from replog.security import acl_records
from replog.security.acls import ResourcePattern
from replog.security.authorizer import AclAuthorizer

logger = logging.getLogger(__name__)

RETRY_PAUSE_S = 1.0
_NOTICE_NAME_PREFIX = ACL_CHANGE_PREFIX.removeprefix(ACL_CHANGES + "/")


class _MissedChanges(Exception):
    """Some notification cannot tell which pattern changed: everything is read again."""


class AclFeed:
    def __init__(self, store: Store, authorizer: AclAuthorizer):
        self._store = store
        self._authorizer = authorizer
        self._watch: Watch[tuple[str, ...]] | None = None
        self._last_applied: int | None = None  # the highest notification sequence reflected

    async def load(self) -> None:
        """Open the watch and load every ACL; the authorizer answers from the store's ACLs once
        this returns. StoreError when the store fails meanwhile."""
        watch = await self._store.watch_children(ACL_CHANGES)
        try:
            sequences = _sequences(await anext(watch))
            await self._load_all()
        except BaseException:
            await watch.close()
            raise
        self._last_applied = sequences[-1] if sequences else None
        self._watch = watch

    async def run(self) -> None:
        """Until cancelled: apply each notification as it comes (load() first)."""
        try:
            while True:  # until cancelled; a failed watch or read is retried after a pause
                try:
                    if self._watch is None:
                        await self.load()
                    async for names in self._watch:
                        await self._apply(_sequences(names))
                except StoreError as error:
                    logger.warning("ACL feed failed, loading every ACL again error=%s", error)
                await self._close_watch()
                await asyncio.sleep(RETRY_PAUSE_S)
        finally:
            await self._close_watch()

    async def _close_watch(self) -> None:
        if self._watch is not None:
            await self._watch.close()
            self._watch = None

    async def _load_all(self) -> None:
        patterns = await acl_records.stored_patterns(self._store)
        acls = await acl_records.read_many(self._store, patterns)
        self._authorizer.replace_all({pattern: entries for pattern, entries in acls.items() if entries})

    async def _apply(self, sequences: list[int]) -> None:
        last = self._last_applied
        new = [sequence for sequence in sequences if last is None or sequence > last]
        if not new:
            return
        try:
            if last is not None and last not in sequences and new[0] != last + 1:
                raise _MissedChanges(f"notifications after {last} up to {new[0]} are gone")
            changed = await self._changed_patterns(new)
        except _MissedChanges as why:
            logger.info("ACL change notifications missed, loading every ACL again reason=%s", why)
            await self._load_all()
        else:
            for pattern, entries in (await acl_records.read_many(self._store, changed)).items():
                self._authorizer.replace(pattern, entries)
                logger.debug("ACLs changed pattern=%s entries=%d", pattern, len(entries))
        self._last_applied = new[-1]

    async def _changed_patterns(self, sequences: list[int]) -> list[ResourcePattern]:
        changed: dict[ResourcePattern, None] = {}  # a dict keeps the first-notified order and each pattern once
        for start in range(0, len(sequences), TRANSACTION_OPS_MAX):  # bounded by the new notifications
            paths = [sequential_path(ACL_CHANGE_PREFIX, sequence) for sequence in sequences[start:start + TRANSACTION_OPS_MAX]]
            for path, answer in zip(paths, await self._store.get_many(paths)):
                if answer is None:
                    raise _MissedChanges(f"{path} was pruned before it was read")
                try:
                    changed[acl_records.changed_pattern(answer[0])] = None
                except InvalidNodeValue as error:
                    raise _MissedChanges(f"{path} is unreadable: {error}") from None
        return list(changed)


def _sequences(names: tuple[str, ...]) -> list[int]:
    """The sequences of the notifications among `names`, in order."""
    return sorted(int(suffix) for name in names
                  if name.startswith(_NOTICE_NAME_PREFIX) and (suffix := name[len(_NOTICE_NAME_PREFIX):]).isdigit())
