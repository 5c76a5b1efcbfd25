"""One coordination node followed by a data watch for as long as its owner's task runs: each
event (the node's value, or its absence) goes to `on_event`; a store failure is logged and the
watch opened again after a pause, so a store that comes back is followed again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from replog.coord_backends import Store, StoreError

logger = logging.getLogger(__name__)

WATCH_RETRY_PAUSE_S = 1.0


async def follow_node(store: Store, path: str, on_event: Callable, what: str) -> None:
    """Until cancelled. `what` names the node in the log line of a failed watch."""
    while True:  # until cancelled; a failed watch is opened again after a pause
        try:
            async with await store.watch_data(path) as watch:
                async for event in watch:
                    on_event(event)
        except StoreError as error:
            logger.warning("%s watch failed, watching again path=%s error=%s", what, path, error)
        await asyncio.sleep(WATCH_RETRY_PAUSE_S)
