"""One client connection: size-prefixed frames in, responses out in request order.

Receiving: an `asyncio.BufferedProtocol` reading into one preallocated buffer that is reused
for the life of the connection (fresh large allocations page-fault; see DESIGN.md). The buffer
grows to hold the largest frame seen, never past `max_request_bytes`; a frame announcing more
than that, or a negative size, closes the connection, as Kafka does. Each complete frame is
decoded at once (decoding copies what it keeps), so the buffer can be compacted and reused.

Ordering: Kafka clients rely on responses arriving in request order on a connection. Every
request gets a task; finished tasks are written strictly from the front of `_in_order`, so a
slow request holds back the responses behind it but not their processing; a long poll (Fetch)
is told when a later request arrives (codec.Overtaken) and answers at once, rather than
holding that later answer for its whole wait.

Sending: a response is written with one `writelines`, but for log bytes (a Fetch response's
HeldSlices), which go from the log file to the socket with os.sendfile while nothing is queued
before them in the transport (uvloop's transports have no sendfile), so that they are never
copied through Python; past a full socket, the rest goes through the transport, read then. A
held range a truncation rewrote since it was read closes the connection rather than send other
bytes than were read (the client fetches again).

Backpressure, with bounds: reading pauses while `in_flight_max` requests are pending or while
the transport's write buffer is above its high-water mark, and resumes when both clear.

A request the codec cannot answer (garbled frame, unknown API key) closes the connection with
one log line; a known API at an unsupported version is answered by `on_unsupported`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import collections
import logging
import os
import struct
from typing import Awaitable, Callable

from replog.storage.segment import HeldSlice

from . import codec

logger = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
INITIAL_BUFFER_BYTES = 64 * 1024
WRITE_BUFFER_HIGH_BYTES = 8 * 1024 * 1024

# A handler's answer: the encoded frame as parts, or None when no response is sent (acks=0).
Dispatch = Callable[[codec.Request], Awaitable[list[bytes | HeldSlice] | None]]
# The answer to a known API at an unsupported version, or None to close the connection.
OnUnsupported = Callable[[codec.UnsupportedVersion], list[bytes] | None]


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatch: Dispatch,
        on_unsupported: OnUnsupported,
        *,
        max_request_bytes: int,
        in_flight_max: int,
        connections: set[KafkaConnection],
        on_lost: Callable[[], None] | None = None,
        on_answered: Callable[[asyncio.Future], None] | None = None,
    ):
        """`on_answered` hears of each dispatched request once its response is written (or,
        when it has none, once its turn came): the future `dispatch` returned, for its timing."""
        self._dispatch = dispatch
        self._on_lost = on_lost
        self._on_answered = on_answered
        self._on_unsupported = on_unsupported
        self._max_request_bytes = max_request_bytes
        self._in_flight_max = in_flight_max
        self._connections = connections
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)
        self._filled = 0
        self._transport: asyncio.Transport | None = None
        self._socket_fd = -1  # for sendfile; -1 where the transport has no socket
        self._peer = "?"
        self._peer_host = ""  # as Kafka names a group member's host: "/127.0.0.1"
        self._in_order: collections.deque[asyncio.Future] = collections.deque()
        # The last request that may wait (a Fetch), which the next request overtakes.
        self._may_wait: codec.Overtaken | None = None
        self._writing_paused = False
        self._reading_paused = False
        self._closed = asyncio.get_running_loop().create_future()

    # transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        sock = transport.get_extra_info("socket")
        self._socket_fd = sock.fileno() if sock is not None else -1
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._peer_host = f"/{peer[0]}" if peer else ""
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        for pending in self._in_order:
            if pending.done() and not pending.cancelled() and pending.exception() is None:
                _release(pending.result())
            pending.cancel()
        self._in_order.clear()
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_lost is not None:
            self._on_lost()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._filled == len(self._buffer):
            self._grow(len(self._buffer) * 2)
        return memoryview(self._buffer)[self._filled:]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        self._take_frames()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    # frames
    def _grow(self, capacity: int) -> None:
        # A new buffer rather than resizing: the transport may still hold a view of the old one.
        grown = bytearray(min(max(capacity, INITIAL_BUFFER_BYTES), self._max_request_bytes + _SIZE.size))
        grown[: self._filled] = self._buffer[: self._filled]
        self._buffer = grown

    def _take_frames(self) -> None:
        view = memoryview(self._buffer)
        start = 0
        try:
            while self._filled - start >= _SIZE.size and self._transport is not None:
                (size,) = _SIZE.unpack_from(view, start)
                if size < 0 or size > self._max_request_bytes:
                    self._abort(f"frame of {size} bytes (socket.request.max.bytes is {self._max_request_bytes})")
                    return
                end = start + _SIZE.size + size
                if end > self._filled:
                    if end - start > len(self._buffer):
                        self._compact(view, start)
                        view.release()
                        self._grow(end - start)
                        return
                    break
                self._accept(view[start + _SIZE.size:end])
                start = end
            self._compact(view, start)
        finally:
            view.release()

    def _compact(self, view: memoryview, start: int) -> None:
        if start:
            remaining = self._filled - start
            view[:remaining] = view[start:self._filled]
            self._filled = remaining

    def _accept(self, frame: memoryview) -> None:
        try:
            request = codec.decode_request(frame)
        except codec.UnsupportedVersion as unsupported:
            answer = self._on_unsupported(unsupported)
            if answer is None:
                self._abort(str(unsupported))
            else:
                logger.info("unsupported version answered peer=%s api_key=%d version=%d", self._peer, unsupported.api_key, unsupported.api_version)
                self._enqueue_ready(answer)
            return
        except codec.FrameError as error:
            self._abort(str(error))
            return
        if self._may_wait is not None:
            self._may_wait.set()
            self._may_wait = None
        if request.api_key == codec.ApiKey.FETCH:
            self._may_wait = codec.Overtaken()
            request = dataclasses.replace(request, overtaken=self._may_wait)
        elif request.api_key == codec.ApiKey.JOIN_GROUP:
            request = dataclasses.replace(request, client_host=self._peer_host)
        task = asyncio.ensure_future(self._dispatch(request))
        self._in_order.append(task)
        task.add_done_callback(self._write_finished)
        self._update_reading()

    def _enqueue_ready(self, response: list[bytes] | None) -> None:
        ready = asyncio.get_running_loop().create_future()
        ready.set_result(response)
        self._in_order.append(ready)
        self._write_finished(ready)

    # responses, strictly in request order
    def _write_finished(self, _done: asyncio.Future) -> None:
        while self._in_order and self._in_order[0].done():
            finished = self._in_order.popleft()
            if finished.cancelled():
                continue
            error = finished.exception()
            if error is not None:
                logger.error("request failed peer=%s error=%r", self._peer, error, exc_info=error)
                self._abort("internal error while handling a request")
                return
            response = finished.result()
            if response is not None and self._transport is not None and not self._transport.is_closing():
                try:
                    self._send(response)
                except OSError as error:
                    _release(response)
                    self._abort(f"response not sent: {error}")
                    return
            _release(response)
            if self._on_answered is not None:
                self._on_answered(finished)
        self._update_reading()

    def _send(self, response: list[bytes | HeldSlice]) -> None:
        """Write `response` in order; see "Sending" in the module docstring."""
        held = [part for part in response if isinstance(part, HeldSlice)]
        if not held:
            self._transport.writelines(response)
            return
        if not all(part.current() for part in held):  # checked before any byte of the frame goes
            raise OSError("the log was truncated under a fetch response")
        direct = self._socket_fd >= 0 and self._transport.get_write_buffer_size() == 0
        for part in response:
            if isinstance(part, HeldSlice):
                sent = _sendfile(self._socket_fd, part) if direct else 0
                if sent < part.size_bytes:
                    direct = False
                    self._transport.write(part.read_from(sent))
            else:
                sent = _write_some(self._socket_fd, part) if direct else 0
                if sent < len(part):
                    direct = False
                    self._transport.write(memoryview(part)[sent:])

    def _update_reading(self) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        should_pause = self._writing_paused or len(self._in_order) >= self._in_flight_max
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    def _abort(self, reason: str) -> None:
        logger.warning("closing connection peer=%s reason=%s", self._peer, reason)
        if self._transport is not None:
            self._transport.abort()

    # server shutdown
    async def drain_and_close(self, timeout_s: float) -> None:
        """Finish the requests already received, send their responses, then close."""
        if self._transport is None:
            return
        self._transport.pause_reading()
        self._reading_paused = True
        pending = list(self._in_order)
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        self._transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), timeout_s)
        except TimeoutError:
            self._transport.abort()


def _sendfile(socket_fd: int, part: HeldSlice) -> int:
    """Send as much of `part` as the socket takes now; how much that was."""
    sent = 0
    while sent < part.size_bytes:  # bounded: each turn sends bytes, or stops
        try:
            count = os.sendfile(socket_fd, part.fd, part.position + sent, part.size_bytes - sent)
        except BlockingIOError:
            break
        if count == 0:
            raise OSError("log file shrank under a held slice")
        sent += count
    return sent


def _write_some(socket_fd: int, data: bytes) -> int:
    try:
        return os.write(socket_fd, data)
    except BlockingIOError:
        return 0


def _release(response: list[bytes | HeldSlice] | None) -> None:
    """Close the held slices of a response, sent or not."""
    for part in response or ():
        if isinstance(part, HeldSlice):
            part.close()
