"""KafkaConnection without sockets: ordering and bounds, observed through a recording transport."""

from __future__ import annotations

import asyncio
import struct

from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.framing import OWN_BUFFER_MIN_BYTES, KafkaConnection
from replog.net.request_memory import BASELINE_BYTES, RequestMemory
from tests.support.frames import api_versions_frame


class RecordingTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.reading = True
        self.closed = False

    def set_write_buffer_limits(self, high: int) -> None:
        pass

    def get_extra_info(self, name: str):
        return ("127.0.0.1", 1) if name == "peername" else None

    def writelines(self, parts: list[bytes]) -> None:
        self.written.append(b"".join(parts))

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def abort(self) -> None:
        self.closed = True

    close = abort


def correlation_ids(transport: RecordingTransport) -> list[int]:
    return [struct.unpack_from(">i", frame, 4)[0] for frame in transport.written]


def feed(connection: KafkaConnection, data: bytes, transport: RecordingTransport | None = None) -> bytes:
    """Deliver `data` as a transport would, in reads as big as the buffers offered, while reading
    is not paused (`transport`); what was left unread."""
    while data and (transport is None or transport.reading):
        buffer = connection.get_buffer(-1)
        taken = min(len(buffer), len(data))
        buffer[:taken] = data[:taken]
        connection.buffer_updated(taken)
        data = data[taken:]
    return data


class Registry:
    def __init__(self) -> None:
        self.connections: set[KafkaConnection] = set()

    def opened(self, connection: KafkaConnection) -> None:
        self.connections.add(connection)

    def closed(self, connection: KafkaConnection) -> None:
        self.connections.discard(connection)


def open_connection(dispatch, in_flight_max: int = 64, *, memory: RequestMemory | None = None,
                    max_request_bytes: int = 1 << 20, on_unsupported=lambda unsupported: None,
                    ) -> tuple[KafkaConnection, RecordingTransport]:
    connection = KafkaConnection(dispatch, on_unsupported, max_request_bytes=max_request_bytes,
                                 in_flight_max=in_flight_max, queued_bytes_max=max_request_bytes,
                                 memory=memory or RequestMemory(1 << 30), registry=Registry())
    transport = RecordingTransport()
    connection.connection_made(transport)
    return connection, transport


def echo(request: codec.Request) -> list[bytes]:
    return [struct.pack(">ii", 4, request.correlation_id)]


async def test_a_slow_request_holds_back_later_responses_but_not_their_processing():
    release_first = asyncio.Event()
    handled: list[int] = []

    async def dispatch(request):
        if request.correlation_id == 1:
            await release_first.wait()
        handled.append(request.correlation_id)
        return echo(request)

    connection, transport = open_connection(dispatch)
    feed(connection, api_versions_frame(1) + api_versions_frame(2) + api_versions_frame(3))
    later = list(connection._in_order)[1:]
    await asyncio.wait(later)  # their done-callbacks (which write) have run when this returns
    assert handled == [2, 3]
    assert transport.written == []
    release_first.set()
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1, 2, 3]


async def test_no_response_is_sent_for_a_request_answered_with_none():
    async def dispatch(request):
        return None if request.correlation_id == 2 else echo(request)

    connection, transport = open_connection(dispatch)
    feed(connection, b"".join(api_versions_frame(i) for i in (1, 2, 3)))
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1, 3]


async def test_reading_pauses_at_the_in_flight_bound_and_resumes_below_it():
    release = asyncio.Event()

    async def dispatch(request):
        await release.wait()
        return echo(request)

    connection, transport = open_connection(dispatch, in_flight_max=4)
    feed(connection, b"".join(api_versions_frame(i) for i in range(4)))
    assert transport.reading is False
    release.set()
    await asyncio.wait(list(connection._in_order))
    assert transport.reading is True
    assert correlation_ids(transport) == [0, 1, 2, 3]


async def test_reading_pauses_while_the_write_buffer_is_full():
    connection, transport = open_connection(lambda request: asyncio.sleep(0, echo(request)))
    connection.pause_writing()
    assert transport.reading is False
    connection.resume_writing()
    assert transport.reading is True


async def test_a_failing_handler_closes_the_connection():
    async def dispatch(request):
        raise RuntimeError("bug")

    connection, transport = open_connection(dispatch)
    feed(connection, api_versions_frame(1))
    await asyncio.wait(list(connection._in_order))
    assert transport.closed


async def test_api_versions_request_is_decoded_from_a_reused_buffer():
    seen: list[str | None] = []

    async def dispatch(request):
        seen.append(request.client_id)
        return echo(request)

    connection, _ = open_connection(dispatch)
    for i in range(3):
        feed(connection, api_versions_frame(i))
    await asyncio.wait(list(connection._in_order))
    assert seen == ["test"] * 3
    assert int(ApiKey.API_VERSIONS) in codec.SUPPORTED_VERSIONS


# --- memory: the receive buffer, the request memory, the queued bytes --------------------------

READ_BYTES = 64 * 1024  # what one read of a busy socket delivers, as the shared buffer's size


def big_frame(correlation_id: int, frame_bytes: int) -> bytes:
    """An ApiVersions v0 request padded with trailing bytes (ignored) to `frame_bytes` in all."""
    header = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, correlation_id, 4) + b"test"
    body = header + bytes(frame_bytes - 4 - len(header))
    return struct.pack(">i", len(body)) + body


def feed_in_reads(connection: KafkaConnection, data: bytes, transport: RecordingTransport) -> bytes:
    """`feed`, at most READ_BYTES a read; what was left unread when reading paused."""
    while data and transport.reading:  # bounded: each turn reads, or reading paused
        data = feed(connection, data[:READ_BYTES], transport) + data[READ_BYTES:]
    return data


def held_until(release: asyncio.Event):
    async def dispatch(request):
        await release.wait()
        return echo(request)

    return dispatch


async def test_a_size_prefix_announcing_a_big_frame_costs_only_what_arrives():
    memory = RequestMemory(1 << 30)
    connection, transport = open_connection(held_until(asyncio.Event()), memory=memory, max_request_bytes=100 << 20)
    frame_start = big_frame(1, 100 << 20)[:4 + (1 << 20)]  # the prefix, and 1 MiB of the frame
    feed(connection, frame_start[:4], transport)
    assert connection.receive_buffer_bytes <= OWN_BUFFER_MIN_BYTES
    assert memory.used_bytes == 0
    assert feed_in_reads(connection, frame_start[4:], transport) == b""
    assert connection.receive_buffer_bytes <= 2 * len(frame_start)
    # Reserved once the buffer had to grow: the growth to the whole frame, and its decoded size.
    assert memory.used_bytes == ((100 << 20) - BASELINE_BYTES) + ((100 << 20) - 4)


async def test_a_buffer_grown_for_big_frames_is_kept_while_they_come_and_given_back_after():
    memory = RequestMemory(1 << 30)
    connection, transport = open_connection(lambda request: asyncio.sleep(0, echo(request)), memory=memory,
                                            max_request_bytes=8 << 20)
    assert feed_in_reads(connection, big_frame(1, 4 << 20), transport) == b""
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1]
    grown = connection.receive_buffer_bytes
    assert grown == 4 << 20
    connection.trim()  # a big frame came since the last sweep: kept, for the next one
    assert connection.receive_buffer_bytes == grown
    assert feed_in_reads(connection, big_frame(2, 4 << 20), transport) == b""
    await asyncio.wait(list(connection._in_order))
    assert connection.receive_buffer_bytes == grown, "the next big frame read into the same buffer"
    connection.trim()
    connection.trim()  # none since the last: given back
    assert connection.receive_buffer_bytes == 0
    assert memory.used_bytes == 0
    feed(connection, api_versions_frame(3), transport)
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1, 2, 3]


async def test_a_connection_waits_for_memory_another_holds_and_reads_on_once_it_comes_back():
    memory = RequestMemory(6 << 20)
    release_first, release_second = asyncio.Event(), asyncio.Event()
    first, first_transport = open_connection(held_until(release_first), memory=memory, max_request_bytes=8 << 20)
    second, second_transport = open_connection(held_until(release_second), memory=memory, max_request_bytes=8 << 20)
    assert feed_in_reads(first, big_frame(1, 4 << 20), first_transport) == b""
    assert memory.exhausted
    unread = feed_in_reads(second, big_frame(2, 4 << 20), second_transport)
    assert second_transport.reading is False and unread, "the second waits for memory, its buffer full"
    release_first.set()
    await asyncio.wait(list(first._in_order))
    assert second_transport.reading is True, "memory came back with the first's answer"
    assert feed_in_reads(second, unread, second_transport) == b""
    release_second.set()
    await asyncio.wait(list(second._in_order))
    assert correlation_ids(second_transport) == [2]


async def test_small_requests_are_read_while_big_ones_wait_for_memory():
    memory = RequestMemory(1 << 20)
    holder, holder_transport = open_connection(held_until(asyncio.Event()), memory=memory, max_request_bytes=4 << 20)
    assert feed_in_reads(holder, big_frame(1, 2 << 20), holder_transport) == b""
    assert memory.exhausted
    small, small_transport = open_connection(lambda request: asyncio.sleep(0, echo(request)), memory=memory)
    feed(small, api_versions_frame(7), small_transport)
    await asyncio.wait(list(small._in_order))
    assert correlation_ids(small_transport) == [7]


async def test_the_requests_a_connection_holds_are_bounded_in_bytes_one_always_allowed():
    release = asyncio.Event()
    connection, transport = open_connection(held_until(release), max_request_bytes=1 << 20)
    unread = feed_in_reads(connection, big_frame(1, 600 << 10) + big_frame(2, 600 << 10), transport)
    assert len(connection._in_order) == 1, "the second would pass 1 MiB queued: it waits"
    assert transport.reading is False
    release.set()
    await asyncio.wait(list(connection._in_order))
    assert feed_in_reads(connection, unread, transport) == b""
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1, 2]


async def test_idleness_counts_from_the_last_complete_request_or_answer():
    release = asyncio.Event()
    connection, transport = open_connection(held_until(release))
    now_s = asyncio.get_running_loop().time()
    feed(connection, api_versions_frame(1), transport)
    assert connection.idle_s(now_s + 60) == 0, "a request being handled: not idle"
    release.set()
    await asyncio.wait(list(connection._in_order))
    answered_s = connection.last_active_s
    feed(connection, api_versions_frame(2)[:10], transport)  # a frame begun, never finished
    assert connection.last_active_s == answered_s
    assert connection.idle_s(answered_s + 60) == 60


async def test_a_request_answered_at_once_as_memory_comes_back_does_not_overtake_the_answer_that_freed_it():
    memory = RequestMemory(1)  # exhausted by any request
    release = asyncio.Event()

    def answer_at_once(unsupported: codec.UnsupportedVersion) -> list[bytes]:
        return [struct.pack(">ii", 4, unsupported.correlation_id)]

    connection, transport = open_connection(held_until(release), memory=memory, on_unsupported=answer_at_once)
    feed(connection, api_versions_frame(1) + api_versions_frame(2, version=99), transport)
    assert len(connection._in_order) == 1, "the second waits for memory the first holds"
    release.set()
    await asyncio.wait(list(connection._in_order))
    assert correlation_ids(transport) == [1, 2]
