"""The protocol layer over real sockets: frames, limits, ordering, and bad input."""

from __future__ import annotations

import asyncio
import os
import struct

import pytest

from replog.net import codec
from replog.net.codec import ApiKey, EncodedBody
from replog.net.handlers import HANDLERS
from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics
from replog.storage.segment import FileSlice, HeldSlice
from tests.support.frames import api_versions_frame, read_response

MAX_REQUEST_BYTES = 1024 * 1024


async def connection_closed(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 10) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
async def server():
    kafka = KafkaServer(None, "127.0.0.1", 0, max_request_bytes=MAX_REQUEST_BYTES, metrics=BrokerMetrics())
    await kafka.start()
    yield kafka
    await kafka.stop()


@pytest.fixture
async def connect(server):
    writers = []

    async def open_connection():
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writers.append(writer)
        return reader, writer

    yield open_connection
    for writer in writers:
        writer.close()


async def test_api_versions_lists_what_we_speak(connect):
    reader, writer = await connect()
    writer.write(api_versions_frame(7))
    correlation_id, body = await read_response(reader)
    assert correlation_id == 7
    error_code, count = struct.unpack_from(">hi", body)
    assert error_code == 0
    listed = {struct.unpack_from(">hhh", body, 6 + 6 * i)[0] for i in range(count)}
    assert int(ApiKey.API_VERSIONS) in listed


async def test_unsupported_api_versions_version_gets_error_35_and_the_list_in_v0(connect):
    reader, writer = await connect()
    writer.write(api_versions_frame(8, version=99))
    correlation_id, body = await read_response(reader)
    assert correlation_id == 8
    assert struct.unpack_from(">h", body)[0] == 35
    writer.write(api_versions_frame(9, version=3))
    assert (await read_response(reader))[0] == 9


async def test_frames_split_across_reads_and_many_per_read(connect):
    reader, writer = await connect()
    frames = b"".join(api_versions_frame(i) for i in range(50))
    for start in range(0, len(frames), 7):
        writer.write(frames[start:start + 7])
        await writer.drain()
    assert [(await read_response(reader))[0] for _ in range(50)] == list(range(50))


async def test_frame_larger_than_the_initial_buffer_is_received(connect, monkeypatch):
    received = []

    async def record(services, request):
        received.append(request.client_id)
        return await original(services, request)

    original = HANDLERS[ApiKey.API_VERSIONS]
    monkeypatch.setitem(HANDLERS, int(ApiKey.API_VERSIONS), record)
    reader, writer = await connect()
    client_id = "x" * 30_000
    # 100 KB: more than the initial receive buffer, less than socket.request.max.bytes.
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 5, len(client_id)) + client_id.encode() + b"\0" * 70_000
    writer.write(struct.pack(">i", len(body)) + body)
    assert (await read_response(reader))[0] == 5
    assert received == [client_id]


@pytest.mark.parametrize(
    "frame, why",
    [
        (struct.pack(">i", MAX_REQUEST_BYTES + 1), "over socket.request.max.bytes"),
        (struct.pack(">i", -5), "negative size"),
        (struct.pack(">i", 3) + b"abc", "shorter than a header"),
        (struct.pack(">ihhi", 8, 999, 0, 1), "unknown api key"),
        (struct.pack(">ihhih", 10, int(ApiKey.API_VERSIONS), 0, 1, 50), "client id runs past the frame"),
    ],
)
async def test_bad_frames_close_the_connection_and_the_server_keeps_serving(connect, frame, why, caplog):
    reader, writer = await connect()
    writer.write(frame)
    assert await connection_closed(reader), why
    assert any("closing connection" in record.getMessage() for record in caplog.records)
    reader, writer = await connect()
    writer.write(api_versions_frame(11))
    assert (await read_response(reader))[0] == 11


async def test_trailing_bytes_after_the_body_are_ignored(connect):
    reader, writer = await connect()
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 12, 1) + b"c" + b"trailing junk"
    writer.write(struct.pack(">i", len(body)) + body)
    assert (await read_response(reader))[0] == 12


def test_decoding_is_sans_io():
    frame = api_versions_frame(21, version=3)[4:]
    request = codec.decode_request(frame)
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) == (18, 3, 21, "test")
    assert request.body.client_software_name == "kcat"


# --- log bytes sent from their file -------------------------------------------------------------


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "segment.log"
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    yield fd
    os.close(fd)


def answering_with(monkeypatch, piece: FileSlice, current=lambda: True) -> None:
    """ApiVersions answered by a response whose body is `piece`, held as Fetch holds log bytes."""
    async def handler(services, request):
        return EncodedBody([HeldSlice(piece, current)])

    monkeypatch.setitem(HANDLERS, int(ApiKey.API_VERSIONS), handler)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_log_bytes_go_from_their_file_to_the_socket_without_being_read_into_python(connect, monkeypatch, log_file):
    content = bytes(range(256)) * 64  # 16 KiB: what a socket takes at once
    os.write(log_file, content)
    fds_before = open_fds()
    answering_with(monkeypatch, FileSlice(log_file, 0, len(content)))

    def read_from(self, skipped_bytes):
        raise AssertionError("log bytes were read into Python")

    monkeypatch.setattr(HeldSlice, "read_from", read_from)
    reader, writer = await connect()
    writer.write(api_versions_frame(11))
    assert await read_response(reader) == (11, content)
    assert open_fds() == fds_before + 2, "the held descriptor is closed once sent (the client's socket pair remains)"


async def test_log_bytes_past_a_full_socket_follow_through_the_transport_in_order(connect, monkeypatch, log_file):
    content = os.urandom(8 << 20)  # more than a socket takes before the client reads
    os.write(log_file, content)
    answering_with(monkeypatch, FileSlice(log_file, 0, len(content)))
    reader, writer = await connect()
    writer.write(api_versions_frame(12))
    writer.write(api_versions_frame(13))
    assert await read_response(reader) == (12, content)
    assert await read_response(reader) == (13, content)


async def test_log_bytes_a_truncation_rewrote_after_the_read_close_the_connection(connect, monkeypatch, log_file):
    os.write(log_file, b"x" * 100)
    answering_with(monkeypatch, FileSlice(log_file, 0, 100), current=lambda: False)
    reader, writer = await connect()
    writer.write(api_versions_frame(14))
    assert await connection_closed(reader)
