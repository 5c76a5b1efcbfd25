"""The Prometheus endpoint: GET /metrics over HTTP/1.x, served on the broker's event loop.

prometheus_client's own server (start_http_server) runs in a thread of its own, from which the
scrape-time collector would read the replicas and the metadata cache while the loop changes
them; here a scrape runs on the loop, between two of its callbacks, and sees a consistent state.

One request per connection (the answer says `Connection: close`; Prometheus reconnects each
scrape). Bounded: the request head may be at most REQUEST_HEAD_BYTES_MAX and must arrive within
REQUEST_TIMEOUT_S; anything else (another path, another method, garbage) gets its HTTP error
or a closed connection, and a failure is logged, never raised into the broker.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from replog.tasks import cancel_and_wait

logger = logging.getLogger(__name__)

REQUEST_HEAD_BYTES_MAX = 8 * 1024
REQUEST_TIMEOUT_S = 10.0
METRICS_PATH = "/metrics"


class CannotServeMetrics(Exception):
    """The metrics listener's address cannot be bound; the message names the setting."""


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 before_scrape: Callable[[], Awaitable[None]] | None = None):
        """`before_scrape`: brings up to date what only a store read can tell (bounded by its caller)."""
        self._registry = registry
        self._before_scrape = before_scrape
        self.host, self.port = host, port
        self._server: asyncio.base_events.Server | None = None
        self._exchanges: set[asyncio.Task] = set()  # one per connection, until answered

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(self._connected, self.host, self.port, reuse_address=True,
                                                      limit=REQUEST_HEAD_BYTES_MAX)
        except OSError as error:
            raise CannotServeMetrics(f"cannot serve metrics on {self.host}:{self.port} (metrics.listeners, "
                                     f"--metrics-listen): {error.strerror or error}") from None
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        await cancel_and_wait(*self._exchanges)
        await self._server.wait_closed()
        self._server = None

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        exchange = asyncio.current_task()
        self._exchanges.add(exchange)
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                status, body, content_type = await self._answer(await reader.readuntil(b"\r\n\r\n"))
                writer.write(_response(status, body, content_type))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, TimeoutError):
            pass  # a client that went, sent too much or too little: nothing to answer
        except Exception:
            logger.exception("metrics request failed")
        finally:
            self._exchanges.discard(exchange)
            writer.close()

    async def _answer(self, head: bytes) -> tuple[str, bytes, str]:
        request_line = head.split(b"\r\n", 1)[0].split()
        if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/1."):
            return "400 Bad Request", b"bad request\n", "text/plain"
        method, target = request_line[0], request_line[1].split(b"?", 1)[0]
        if target != METRICS_PATH.encode():
            return "404 Not Found", b"only /metrics is served here\n", "text/plain"
        if method != b"GET":
            return "405 Method Not Allowed", b"only GET\n", "text/plain"
        if self._before_scrape is not None:
            await self._before_scrape()
        return "200 OK", generate_latest(self._registry), CONTENT_TYPE_LATEST


def _response(status: str, body: bytes, content_type: str) -> bytes:
    head = (f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n")
    return head.encode() + body
