"""The Kafka protocol server: accepts connections and routes each request to its handler.

Handlers live in `handlers/`, one module per API family; each is a plain coroutine
`handler(services, request) -> response body | None` that can be tested without sockets. The
server owns only the sockets: `start`, then `stop` (stop accepting, let each connection finish
the requests it already sent, close). It counts and times every request, and counts the error
code a request answers with as a whole (obs/metrics.py); Produce and Fetch count their
partitions' errors themselves, where the codes are at hand.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable

from kio.schema.errors import ErrorCode

from replog.obs import BrokerMetrics

from . import codec
from .framing import KafkaConnection
from .handlers import API_NAMES, HANDLERS, count_error
from .handlers.api_versions import unsupported_version_answer
from .leader_connections import registered_follower
from .services import Services

logger = logging.getLogger(__name__)

IN_FLIGHT_PER_CONNECTION_MAX = 64


class CannotListen(Exception):
    """The listener's address cannot be bound (in use, not local, not resolvable)."""


class KafkaServer:
    def __init__(self, services: Services, host: str, port: int, *, max_request_bytes: int, metrics: BrokerMetrics):
        self._services = services
        self._metrics = metrics
        self.host, self.port = host, port
        self._max_request_bytes = max_request_bytes
        self._server: asyncio.base_events.Server | None = None
        self._connections: set[KafkaConnection] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(self._connection, self.host, self.port, reuse_address=True)
        except OSError as error:
            raise CannotListen(f"cannot listen on {self.host}:{self.port}: {error.strerror or error}") from None
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def connection_count(self) -> int:
        return len(self._connections)

    def _connection(self) -> KafkaConnection:
        # The broker whose follower connection this is, once it named that broker's registered
        # life: no other client can have a live broker presumed gone by closing a connection.
        follower: list[int] = []
        # Requests handled and not yet answered, by their task: (api, received, handled) for
        # the sending and total times. At most the connection's requests in flight.
        handled: dict[asyncio.Future, tuple[str, float, float]] = {}

        def dispatch(request: codec.Request) -> Awaitable[list[bytes] | None]:
            # Called as the frame is decoded; the coroutine runs when the loop gets to it (queued).
            if not follower and (broker_id := registered_follower(request.client_id, lambda: self._services.metadata.brokers)) is not None:
                follower.append(broker_id)
            return self._dispatch(request, time.perf_counter(), handled)

        def answered(task: asyncio.Future) -> None:
            timing = handled.pop(task, None)  # None for an answer the connection made itself
            if timing is not None:
                self._metrics.request_sent(*timing, time.perf_counter())

        def lost() -> None:
            if follower:
                # Perhaps its process died: the broker finds out at once (LeaderConnections).
                self._services.follower_connection_lost(follower[0])

        return KafkaConnection(
            dispatch,
            unsupported_version_answer,
            max_request_bytes=self._max_request_bytes,
            in_flight_max=IN_FLIGHT_PER_CONNECTION_MAX,
            connections=self._connections,
            on_lost=lost,
            on_answered=answered,
        )

    async def _dispatch(self, request: codec.Request, received_s: float,
                        handled: dict[asyncio.Future, tuple[str, float, float]]) -> list[bytes] | None:
        started_s = time.perf_counter()
        body = await HANDLERS[request.api_key](self._services, request)
        api, handled_s = API_NAMES[request.api_key], time.perf_counter()
        self._metrics.request_handled(api, request.api_version, received_s, started_s, handled_s)
        handled[asyncio.current_task()] = (api, received_s, handled_s)
        if body is None:
            return None
        count_error(self._metrics, request, getattr(body, "error_code", ErrorCode.none))  # not every response has one
        return codec.encode_response(request.api_key, request.api_version, request.correlation_id, body)

    async def stop(self, drain_timeout_s: float = 10.0) -> None:
        if self._server is None:
            return
        self._server.close()
        await asyncio.gather(*(connection.drain_and_close(drain_timeout_s) for connection in list(self._connections)))
        await self._server.wait_closed()
        self._server = None
