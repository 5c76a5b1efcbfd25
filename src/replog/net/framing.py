"""One client connection: size-prefixed frames in, responses out in request order.

Receiving, in memory bounded by what the client sent (request_memory.py keeps the accounts): a
connection with no partial frame reads into the server's shared buffer, and each complete frame
is decoded at once (decoding copies what it keeps). What is left, a partial frame or frames held
back (below), moves to a buffer of the connection's own, which grows as bytes arrive, doubling,
never past the frame at its head: a size prefix announcing 100 MB costs the 4 bytes sent, not
the 100 MB announced. Growth past BASELINE_BYTES is reserved first from the request memory
(queued.max.request.bytes), together with the frame's decoded size; refused, the connection
waits. A buffer grown for big frames is kept while they keep coming (fresh large allocations
page-fault, page by page, on every use), and `trim` gives it back once a sweep of the server's saw none. A
frame announcing more than `max_request_bytes`, or a negative size, closes the connection, as
Kafka does.

Backpressure, with bounds: a complete frame waits in the buffer, undecoded, while the
transport's write buffer is above its high-water mark, while `in_flight_max` requests are
pending, while the pending ones hold `queued_bytes_max` or the request memory is exhausted (a
connection with nothing pending may always have one request), or while memory for a big frame
is not granted; reading pauses meanwhile, and while the buffer is full and may not grow. Each
clears by itself (an answer is written, memory comes back), and reading resumes.

Idleness, for connections.max.idle.ms (enforced by the server): the time since the connection
last completed a request or was written an answer. Bytes of a request still arriving do not
count (Kafka's selector counts any bytes, so a sender of a byte a minute is never idle there);
a connection with a request being handled or a frame held back is not idle.

Ordering: Kafka clients rely on responses arriving in request order on a connection. Every
request gets a task; finished tasks are written strictly from the front of `_in_order`, so a
slow request holds back the responses behind it but not their processing; a long poll (Fetch)
is told when a later request arrives (codec.Overtaken) and answers at once, rather than
holding that later answer for its whole wait. A Produce gets the connection's
`appends_in_order` lock, which keeps its appends ahead of the next Produce's when it starts
them in slices (handlers/produce.py).

Sending: a response is written with one `writelines`, but for log bytes (a Fetch response's
HeldSlices), which go from the log file to the socket with os.sendfile while nothing is queued
before them in the transport (uvloop's transports have no sendfile), so that they are never
copied through Python; past a full socket, the rest goes through the transport, read then. On
a TLS connection everything goes through the transport, which encrypts it. Log bytes read for
the transport are read TRANSPORT_PIECE_BYTES at a time, each piece handed over (encrypted, or
queued) before the next is read, the kernel told first to read the whole range ahead
(segment.HeldSlice.pieces_from): one read of a fetch's megabytes would allocate them fresh,
and fresh memory page-faults (one 16 MiB read from the page cache ran at 2.4 GB/s here,
256 KiB pieces at 18 GB/s); and behind the page cache's tail, reads one piece at a time
waited on the disk for each (2.2-3.8 ms per MB; 0.9-1.3 read ahead). A
held range a truncation rewrote since it was read closes the connection rather than send other
bytes than were read (the client fetches again).

SASL, on a SASL listener: the session (sasl_session.py) says which requests a connection not yet
authenticated may send, one at a time, each of sasl.server.max.receive.size at most; any other
closes it. After a SaslHandshake v0, frames are the session's raw tokens until the exchange
ends. The session's principal is the one requests carry (on SASL_SSL too, whatever certificate
the client presented, as Kafka names it). A failed authentication's answer is written, then
reading stops and the connection closes after connection.failed.authentication.delay.ms.

A request the codec cannot answer (garbled frame, unknown API key) closes the connection with
one log line (at most CLOSES_LOGGED_MAX every 10 s: each names its peer, so no repeat filter
would hold a flood of them back); a known API at an unsupported version is answered by
`on_unsupported`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import collections
import logging
import mmap
import os
import struct
from typing import Awaitable, Callable, Protocol

from replog.obs.logs import LineBudget
from replog.storage.segment import HeldSlice

from . import codec
from .codec import ANONYMOUS
from .request_memory import BASELINE_BYTES, RequestMemory
from .sasl_session import SaslSession

logger = logging.getLogger(__name__)
# Each closed connection's line names its peer, so repeats are not held back as identical: a
# client opening connections only to have them closed would write a line each.
CLOSES_LOGGED_MAX = 100  # every 10 s
_CLOSES_LOGGED = LineBudget(logger, "closing connection", lines_max=CLOSES_LOGGED_MAX)

_SIZE = struct.Struct(">i")
OWN_BUFFER_MIN_BYTES = 4 * 1024  # the smallest buffer of a connection's own
WRITE_BUFFER_HIGH_BYTES = 8 * 1024 * 1024
TRANSPORT_PIECE_BYTES = 256 * 1024  # log bytes read for the transport at a time (see Sending)

# A handler's answer: the encoded frame as parts, or None when no response is sent (acks=0).
Dispatch = Callable[[codec.Request], Awaitable[list[bytes | HeldSlice] | None]]
# The answer to a known API at an unsupported version, or None to close the connection.
OnUnsupported = Callable[[codec.UnsupportedVersion], list[bytes] | None]


class Registry(Protocol):
    """Where connections are counted while open (connection_limits.py)."""

    def opened(self, connection: KafkaConnection) -> None: ...

    def closed(self, connection: KafkaConnection) -> None: ...


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatch: Dispatch,
        on_unsupported: OnUnsupported,
        *,
        max_request_bytes: int,
        in_flight_max: int,
        queued_bytes_max: int,
        memory: RequestMemory,
        registry: Registry,
        on_lost: Callable[[], None] | None = None,
        on_answered: Callable[[asyncio.Future], None] | None = None,
        listener: str = "",
        identify: Callable[[asyncio.BaseTransport], str | None] | None = None,
        sasl: SaslSession | None = None,
    ):
        """`on_answered` hears of each dispatched request once its response is written (or,
        when it has none, once its turn came): the future `dispatch` returned, for its timing.
        `identify` names the principal of a new connection, or None to refuse it (None:
        User:ANONYMOUS). `sasl`: the connection's SASL session, on a SASL listener (see SASL)."""
        self._dispatch = dispatch
        self._listener = listener  # the name each request carries
        self._identify = identify
        self.principal = ANONYMOUS
        self._sasl = sasl
        self._failure_close: asyncio.TimerHandle | None = None
        self._on_lost = on_lost
        self._on_answered = on_answered
        self._on_unsupported = on_unsupported
        self._max_request_bytes = max_request_bytes
        self._in_flight_max = in_flight_max
        self._queued_bytes_max = queued_bytes_max
        self._memory = memory
        self._registry = registry
        self._loop = asyncio.get_running_loop()
        # The connection's own receive buffer: None while it has no partial frame (reads go to
        # the shared one), else bytes from its start up to `_filled`, the frame at its head first.
        self._buffer: bytearray | mmap.mmap | None = None
        self._filled = 0
        self._into_scratch = False  # the last get_buffer gave the shared buffer
        # What the buffer may grow to; past BASELINE_BYTES, held from the request memory.
        self._buffer_allowance_bytes = BASELINE_BYTES
        # Request memory reserved for the decoded request of the big frame at the buffer's head.
        self._head_reserved_bytes = 0
        self._largest_frame_bytes = 0  # since the last trim
        self._held_back = False  # a complete frame waits, or the buffer is full and may not grow
        self._taking = False  # frames are being taken: a wake-up meanwhile leaves it to that loop
        self._transport: asyncio.Transport | None = None
        self._socket_fd = -1  # for sendfile; -1 where the transport has no socket
        self._peer = "?"
        self.peer_address = ""  # the peer's IP address, for per-address limits and the host ACLs name
        self._in_order: collections.deque[asyncio.Future] = collections.deque()
        # The request memory each of `_in_order` holds, in the same order, and their sum.
        self._in_order_bytes: collections.deque[int] = collections.deque()
        self._queued_bytes = 0
        self.last_active_s = self._loop.time()
        # The last request that may wait (a Fetch), which the next request overtakes.
        self._may_wait: codec.Overtaken | None = None
        self._appends_in_order = asyncio.Lock()
        self._writing_paused = False
        self._reading_paused = False
        self._draining = False
        self._closed = self._loop.create_future()

    # transport callbacks
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)
        sock = transport.get_extra_info("socket")
        # A TLS transport's socket would take the log's bytes unencrypted: those go through the transport.
        encrypted = transport.get_extra_info("sslcontext") is not None
        self._socket_fd = sock.fileno() if sock is not None and not encrypted else -1
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_address = peer[0] if peer else ""
        self._registry.opened(self)
        principal = self._identify(transport) if self._identify is not None else ANONYMOUS
        if principal is None:
            self._abort("no ssl.principal.mapping.rules rule applies to its certificate's subject")
        else:
            self.principal = principal

    def connection_lost(self, exc: Exception | None) -> None:
        self._registry.closed(self)
        if self._failure_close is not None:
            self._failure_close.cancel()
        self._memory.stop_waiting(self)
        for pending in self._in_order:
            if pending.done() and not pending.cancelled() and pending.exception() is None:
                _release(pending.result())
            pending.cancel()
        self._in_order.clear()
        self._in_order_bytes.clear()
        held = self._queued_bytes + self._head_reserved_bytes + self._buffer_allowance_bytes - BASELINE_BYTES
        self._queued_bytes = self._head_reserved_bytes = 0
        self._buffer, self._filled, self._buffer_allowance_bytes = None, 0, BASELINE_BYTES
        self._memory.give_back(held)
        if not self._closed.done():
            self._closed.set_result(None)
        if self._on_lost is not None:
            self._on_lost()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._buffer is None:
            self._into_scratch = True
            return memoryview(self._memory.scratch)
        self._into_scratch = False
        return memoryview(self._buffer)[self._filled:]  # never empty while reading: see _make_room

    def buffer_updated(self, nbytes: int) -> None:
        if self._into_scratch:
            self._into_scratch = False
            self._take_from_scratch(nbytes)
        else:
            self._filled += nbytes
            self._take_buffered()
        self._update_reading()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._resume()

    # frames
    def _take_from_scratch(self, nbytes: int) -> None:
        view = memoryview(self._memory.scratch)
        try:
            taken = self._take_frames(view, nbytes)
            if taken < nbytes and not self._closing:
                rest = view[taken:nbytes]
                head_bytes = self._head_bytes(rest, len(rest)) or 0
                # Room for a small frame whole; else as much again as arrived (growing as more does).
                wanted = head_bytes if head_bytes <= BASELINE_BYTES else min(2 * len(rest), BASELINE_BYTES)
                self._buffer = _new_buffer(max(OWN_BUFFER_MIN_BYTES, wanted, len(rest)))
                _copy(self._buffer, rest, len(rest))
                self._filled = len(rest)
                rest.release()
                self._make_room()
        finally:
            view.release()

    def _take_buffered(self) -> None:
        if self._buffer is None or self._taking:
            return  # nothing buffered; or frames are being taken already, and that loop goes on
        view = memoryview(self._buffer)
        try:
            taken = self._take_frames(view, self._filled)
            if taken:
                remaining = self._filled - taken
                view[:remaining] = view[taken:self._filled]
                self._filled = remaining
        finally:
            view.release()
        if self._closing:
            return
        if self._filled == 0 and len(self._buffer) <= BASELINE_BYTES:
            self._buffer = None  # reads go to the shared buffer again
            self._held_back = False
            self._set_allowance(BASELINE_BYTES)
        else:
            self._make_room()

    def _take_frames(self, view: memoryview, end: int) -> int:
        """Decode the complete frames of `view[:end]` that nothing holds back; the bytes taken."""
        start = 0
        self._taking = True
        try:
            while end - start >= _SIZE.size and not self._closing:  # bounded by the bytes
                (size,) = _SIZE.unpack_from(view, start)
                if size < 0 or size > self._max_request_bytes:
                    self._abort(f"frame of {size} bytes (socket.request.max.bytes is {self._max_request_bytes})")
                    return end
                if self._sasl is not None and self._sasl.serial and size > self._sasl.max_receive_bytes:
                    self._abort(f"frame of {size} bytes before authentication (sasl.server.max.receive.size is "
                                f"{self._sasl.max_receive_bytes})", logging.INFO)
                    return end
                frame_end = start + _SIZE.size + size
                if frame_end > end or not self._may_take(_SIZE.size + size):
                    break
                self._accept(view[start + _SIZE.size:frame_end])
                start = frame_end
            return start
        finally:
            self._taking = False

    def _may_take(self, frame_bytes: int) -> bool:
        """Whether the complete frame at the head may be decoded now (see Backpressure)."""
        if self._writing_paused or len(self._in_order) >= self._in_flight_max:
            return False
        if self._sasl is not None and (self._sasl.failed or (self._sasl.serial and self._in_order)):
            return False  # before authentication, one request at a time; after a failure, none
        if frame_bytes > BASELINE_BYTES:
            return self._reserve(frame_bytes)
        if not self._in_order:
            return True
        if self._queued_bytes >= self._queued_bytes_max:
            return False
        if self._memory.exhausted:
            self._memory.wait(self, self._resume)
            return False
        return True

    def _reserve(self, frame_bytes: int) -> bool:
        """Whether the frame at the head, of `frame_bytes`, has the memory it needs: room in the
        buffer and, for a big one, its decoded request's. Reserved at once if the request
        memory grants it; else the connection waits for its own answers, or for memory."""
        growth = max(0, frame_bytes - self._buffer_allowance_bytes)
        request = frame_bytes - _SIZE.size if frame_bytes > BASELINE_BYTES and not self._head_reserved_bytes else 0
        if not growth + request:
            return True
        if request and self._in_order and self._queued_bytes + request > self._queued_bytes_max:
            return False  # woken by its answers (_write_finished)
        if not self._memory.try_take(growth + request):
            logger.warning("request memory exhausted, connections wait for answers to free some "
                           "queued.max.request.bytes=%d", self._memory.limit_bytes)
            self._memory.wait(self, self._resume)
            return False
        self._buffer_allowance_bytes += growth
        self._head_reserved_bytes += request
        return True

    def _make_room(self) -> None:
        """After frames were taken from the buffer: grow it for the frame at its head if it is
        full, or hold reading back (`_held_back`) while that, or the head frame, must wait."""
        head_bytes = self._head_bytes(self._buffer, self._filled)
        if head_bytes is not None and head_bytes <= self._filled:
            self._held_back = True  # a complete frame that _may_take refused
            return
        capacity = len(self._buffer)
        if self._filled < capacity:
            self._held_back = False
            return
        # Full, and the partial frame at the head is bigger (the buffer holds its size prefix).
        if not self._reserve(head_bytes):
            self._held_back = True
            return
        self._held_back = False
        # A new buffer rather than resizing: the transport may still hold a view of the old one.
        grown = _new_buffer(min(head_bytes, max(2 * capacity, OWN_BUFFER_MIN_BYTES)))
        _copy(grown, self._buffer, self._filled)
        self._buffer = grown

    def _set_allowance(self, allowance_bytes: int) -> None:
        """What the buffer may grow to from now on; memory given back past it."""
        freed, self._buffer_allowance_bytes = self._buffer_allowance_bytes - allowance_bytes, allowance_bytes
        self._memory.give_back(freed)

    @staticmethod
    def _head_bytes(buffer, end: int) -> int | None:
        """The size of the frame at the head of `buffer[:end]`, prefix included; None while its
        prefix is incomplete."""
        if end < _SIZE.size:
            return None
        return _SIZE.size + max(0, _SIZE.unpack_from(buffer, 0)[0])

    def _accept(self, frame: memoryview) -> None:
        if self._sasl is not None and self._sasl.raw_tokens:
            self._enqueue_task(asyncio.ensure_future(self._sasl.raw_token(bytes(frame))), len(frame))
            return
        try:
            request = codec.decode_request(frame, self._listener,
                                           self.principal if self._sasl is None else self._sasl.principal, self.peer_address)
        except codec.UnsupportedVersion as unsupported:
            answer = self._on_unsupported(unsupported)
            if answer is None:
                self._abort(str(unsupported))
            else:
                logger.info("unsupported version answered peer=%s api_key=%d version=%d", self._peer, unsupported.api_key, unsupported.api_version)
                self._enqueue_ready(answer, len(frame))
            return
        except codec.FrameError as error:
            self._abort(str(error))
            return
        if self._sasl is not None:
            refusal = self._sasl.refusal(request.api_key)
            if refusal is not None:
                self._abort(refusal, logging.DEBUG)  # the session logged why
                return
            if request.api_key in (codec.ApiKey.SASL_HANDSHAKE, codec.ApiKey.SASL_AUTHENTICATE):
                request = dataclasses.replace(request, sasl=self._sasl)
        if self._may_wait is not None:
            self._may_wait.set()
            self._may_wait = None
        if request.api_key == codec.ApiKey.FETCH:
            self._may_wait = codec.Overtaken()
            request = dataclasses.replace(request, overtaken=self._may_wait)
        elif request.api_key == codec.ApiKey.PRODUCE:
            request = dataclasses.replace(request, appends_in_order=self._appends_in_order)
        self._enqueue_task(asyncio.ensure_future(self._dispatch(request)), len(frame))

    def _enqueue_task(self, task: asyncio.Future, frame_bytes: int) -> None:
        self._enqueue(task, frame_bytes)
        task.add_done_callback(self._write_finished)

    def _enqueue(self, pending: asyncio.Future, frame_bytes: int) -> None:
        """`pending` holds the memory of its frame (reserved, or taken now) until answered."""
        if self._head_reserved_bytes:
            self._head_reserved_bytes = 0  # the reservation passes to the request: same size
        else:
            self._memory.take(frame_bytes)
        self._in_order.append(pending)
        self._in_order_bytes.append(frame_bytes)
        self._queued_bytes += frame_bytes
        self._largest_frame_bytes = max(self._largest_frame_bytes, _SIZE.size + frame_bytes)
        self.last_active_s = self._loop.time()

    def _enqueue_ready(self, response: list[bytes] | None, frame_bytes: int) -> None:
        ready = self._loop.create_future()
        ready.set_result(response)
        self._enqueue(ready, frame_bytes)
        self._write_finished(ready)

    # responses, strictly in request order
    def _write_finished(self, _done: asyncio.Future) -> None:
        while self._in_order and self._in_order[0].done():
            finished = self._in_order.popleft()
            frame_bytes = self._in_order_bytes.popleft()
            self._queued_bytes -= frame_bytes
            try:
                if not self._write(finished):
                    return
            finally:
                # Once written: the memory coming back may have this connection take frames,
                # and answer one at once, which must not overtake this answer.
                self._memory.give_back(frame_bytes)
        if self._sasl is not None and self._sasl.failed and self._failure_close is None and not self._closing:
            # Answered; closed after the delay, as Kafka slows down a client guessing (KIP-306).
            self._failure_close = self._loop.call_later(self._sasl.failure_delay_s, self._abort,
                                                        "SASL authentication failed", logging.DEBUG)
        self._resume()

    def _write(self, finished: asyncio.Future) -> bool:
        """Write the answer of a request whose turn came; False if that closed the connection."""
        if finished.cancelled():
            return True
        error = finished.exception()
        if error is not None:
            logger.error("request failed peer=%s error=%r", self._peer, error, exc_info=error)
            self._abort("internal error while handling a request")
            return False
        response = finished.result()
        if response is not None and self._transport is not None and not self._transport.is_closing():
            try:
                self._send(response)
            except OSError as error:
                _release(response)
                self._abort(f"response not sent: {error}")
                return False
            self.last_active_s = self._loop.time()
        _release(response)
        if self._on_answered is not None:
            self._on_answered(finished)
        return True

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
                    for piece in part.pieces_from(sent, TRANSPORT_PIECE_BYTES):  # bounded by the slice
                        self._transport.write(piece)
            else:
                sent = _write_some(self._socket_fd, part) if direct else 0
                if sent < len(part):
                    direct = False
                    self._transport.write(memoryview(part)[sent:])

    # reading on, or not
    def _resume(self) -> None:
        """Something that held the connection back may have cleared (an answer was written, the
        client reads again, memory came back): take the frames waiting, and read on if nothing
        holds it back still."""
        if self._closing or self._taking:
            return  # closed; or frames are being taken, and that loop looks again at each frame
        if self._filled:
            self._take_buffered()
        self._update_reading()

    def _update_reading(self) -> None:
        if self._closing:
            return
        should_pause = (self._writing_paused or len(self._in_order) >= self._in_flight_max or self._held_back
                        or self._draining or (self._sasl is not None and self._sasl.failed))
        if should_pause and not self._reading_paused:
            self._transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            self._transport.resume_reading()
            self._reading_paused = False

    @property
    def _closing(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def _abort(self, reason: str, level: int = logging.WARNING) -> None:
        if _CLOSES_LOGGED.allows():
            logger.log(level, "closing connection peer=%s reason=%s", self._peer, reason)
        if self._transport is not None:
            self._transport.abort()

    # the server's sweep
    @property
    def receive_buffer_bytes(self) -> int:
        """The capacity of the connection's own receive buffer (0 without one)."""
        return 0 if self._buffer is None else len(self._buffer)

    def idle_s(self, now_s: float) -> float:
        """How long the connection has been idle at `now_s` (loop time); see Idleness."""
        if self._in_order or self._held_back:
            return 0.0
        return now_s - self.last_active_s

    def close_idle(self, reason: str) -> None:
        """Close an idle connection (the server logs one line for many)."""
        self._abort(reason, logging.DEBUG)

    def trim(self) -> None:
        """Give back the receive buffer, or the part of it that no frame since the last trim
        needed (nor the one at its head), if that is most of it."""
        largest, self._largest_frame_bytes = self._largest_frame_bytes, 0
        if self._buffer is None or len(self._buffer) <= BASELINE_BYTES or self._taking:
            return
        needed = max(largest, self._head_bytes(self._buffer, self._filled) or self._filled)
        if 2 * needed > len(self._buffer):
            return
        if self._filled:  # what is there moves; the frame at the head keeps what was reserved for it
            kept = _new_buffer(max(self._filled, OWN_BUFFER_MIN_BYTES))
            _copy(kept, self._buffer, self._filled)
            self._buffer = kept
            self._set_allowance(max(BASELINE_BYTES, needed))
            self._make_room()
            self._update_reading()
        else:
            self._buffer = None
            self._set_allowance(BASELINE_BYTES)

    # server shutdown
    async def drain_and_close(self, timeout_s: float) -> None:
        """Finish the requests already received, send their responses, then close."""
        if self._transport is None:
            return
        self._transport.pause_reading()
        self._reading_paused = True
        self._draining = True
        pending = list(self._in_order)
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        self._transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._closed), timeout_s)
        except TimeoutError:
            self._transport.abort()


def _new_buffer(capacity: int) -> bytearray | mmap.mmap:
    """Past BASELINE_BYTES, an anonymous mapping: its pages cost memory once written, not at
    once (a bytearray is zero-filled), and go back to the system when dropped (a big bytearray
    freed may stay in the allocator's heap)."""
    if capacity <= BASELINE_BYTES:
        return bytearray(capacity)
    return mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _copy(target: bytearray | mmap.mmap, source, size: int) -> None:
    with memoryview(target) as into, memoryview(source) as out_of:
        into[:size] = out_of[:size]


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
