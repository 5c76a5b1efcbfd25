"""Change notifications, as Kafka's ZooKeeper brokers exchanged them: a writer changes a node,
then creates a sequential notification naming it (`notify`); every broker follows the
notifications (`follow_notifications`) and reads again what each names, so that a change reaches
every broker's memory without a watch per node.

A writer prunes the oldest notifications past NOTIFICATIONS_KEPT, so that they never pile up.
A follower that finds the last notification it applied pruned may have missed some: it reloads
everything instead (so it does at its start and after a store failure), which is why a follower
must be able to rebuild its state from the nodes alone. Applying a notification twice, or one
whose change a reload already saw, must be harmless: each re-reads the node it names.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from .base import NoNode, Store, StoreError

logger = logging.getLogger(__name__)

NOTIFICATIONS_KEPT = 1000
RETRY_PAUSE_S = 1.0


async def notify(store: Store, prefix: str, value: bytes) -> None:
    """Create a notification `prefix`NNNNNNNNNN holding `value`, then prune the oldest beyond
    NOTIFICATIONS_KEPT (a pruning that fails is left to the next writer)."""
    await store.create(prefix, value, sequential=True, make_parents=True)
    parent, _, name_prefix = prefix.rpartition("/")
    try:
        names = sorted(child for child in await store.children(parent) if child.startswith(name_prefix))
        for name in names[:-NOTIFICATIONS_KEPT]:  # bounded by the notifications
            await store.delete(f"{parent}/{name}")
    except NoNode:
        pass  # another writer pruned it meanwhile
    except StoreError as error:
        logger.warning("old change notifications not pruned path=%s error=%s", parent, error)


async def follow_notifications(store: Store, prefix: str, apply: Callable[[bytes], Awaitable[None]],
                               reload: Callable[[], Awaitable[None]], loaded: asyncio.Event | None = None) -> None:
    """Until cancelled: `reload()` everything, then `apply(value)` each notification created
    under `prefix` since, in order; `loaded` is set after the first reload. A store failure
    (raised by either too) is logged and the whole followed again from a reload after a pause."""
    parent, _, name_prefix = prefix.rpartition("/")
    while True:  # until cancelled; each turn starts from a reload
        try:
            async with await store.watch_children(parent) as watch:
                last = None  # the newest notification applied or covered by the reload; "": none was
                async for children in watch:
                    names = sorted(child for child in children if child.startswith(name_prefix))
                    if last is None or (last and last not in names and names and names[0] > last):
                        if last is not None:
                            logger.info("change notifications missed, loading everything again path=%s", parent)
                        await reload()  # at the start, or notifications were pruned unseen
                        last = names[-1] if names else ""
                        if loaded is not None:
                            loaded.set()
                        continue
                    for name in names:  # bounded by NOTIFICATIONS_KEPT, about
                        if name > last:
                            try:
                                value = (await store.get(f"{parent}/{name}"))[0]
                            except NoNode:
                                break  # pruned meanwhile: the next state of the watch reloads
                            await apply(value)
                            last = name
        except StoreError as error:
            logger.warning("change notifications not followed, following again path=%s error=%s", parent, error)
        await asyncio.sleep(RETRY_PAUSE_S)
