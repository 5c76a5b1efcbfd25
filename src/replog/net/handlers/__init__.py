"""Request handlers, one module per API family, registered by API key.

Each module declares the versions it implements with `codec.supports`, which is what
ApiVersions advertises, and adds its handlers to HANDLERS.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from ..codec import Request

Handler = Callable[[Any, Request], Awaitable[Any]]
HANDLERS: dict[int, Handler] = {}


def handles(api_key: int, versions: tuple[int, int]) -> Callable[[Handler], Handler]:
    from ..codec import supports

    def register(handler: Handler) -> Handler:
        supports(api_key, versions)
        HANDLERS[int(api_key)] = handler
        return handler

    return register


# Importing the modules registers their handlers.
from . import admin, api_versions, fetch, metadata, offsets, produce, producer_ids  # noqa: E402,F401
