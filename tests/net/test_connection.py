"""KafkaConnection without sockets: ordering and bounds, observed through a recording transport."""

from __future__ import annotations

import asyncio
import struct

from replog.net import codec
from replog.net.codec import ApiKey
from replog.net.framing import KafkaConnection
from tests.net.test_framing import api_versions_frame


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


def feed(connection: KafkaConnection, data: bytes) -> None:
    while data:
        buffer = connection.get_buffer(-1)
        taken = min(len(buffer), len(data))
        buffer[:taken] = data[:taken]
        connection.buffer_updated(taken)
        data = data[taken:]


def open_connection(dispatch, in_flight_max: int = 64) -> tuple[KafkaConnection, RecordingTransport]:
    connection = KafkaConnection(dispatch, lambda unsupported: None, max_request_bytes=1 << 20, in_flight_max=in_flight_max, connections=set())
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
