"""Handlers answer a big request in slices (net/loop_slices.py): the response encoded in steps
is byte for byte what kio writes, and another connection is answered while a big request is
still being handled."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records

from replog.net import codec, loop_slices
from replog.net.codec import ApiKey, SUPPORTED_VERSIONS
from replog.net.handlers import HANDLERS
from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics
from tests.net.test_metadata_encoding import services as metadata_services

st.register_type_strategy(Records, st.binary(max_size=40))
_SIZE = struct.Struct(">i")


def all_versions():
    return [(api_key, version) for api_key, (low, high) in SUPPORTED_VERSIONS.items() for version in range(low, high + 1)]


def plain(entity) -> dict:
    """A response entity as the plain data a handler gives `codec.build`."""
    return {field.name: _plain_value(getattr(entity, field.name)) for field in dataclasses.fields(entity)}


def _plain_value(value):
    if dataclasses.is_dataclass(value):
        return plain(value)
    if isinstance(value, tuple):
        return [_plain_value(item) for item in value]
    return value


@pytest.mark.parametrize("api_key,version", all_versions())
def test_a_body_encoded_in_steps_is_what_kio_writes(monkeypatch, api_key, version):
    monkeypatch.setattr(codec, "ITEMS_PER_STEP", 1)  # every array of two items or more is spliced
    schema = codec.response_schema(api_key, version)

    @settings(max_examples=10, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(body=st.from_type(schema))
    def encoded_alike(body):
        out = io.BytesIO()
        entity_writer(schema)(out, body)
        steps = codec.body_encoding(schema, plain(body))
        with pytest.raises(StopIteration) as done:
            while True:  # bounded by the steps
                next(steps)
        assert done.value.value == out.getvalue()

    encoded_alike()


def test_respond_encodes_what_build_response_would_and_keeps_the_error_code(monkeypatch):
    monkeypatch.setattr(loop_slices, "SLICE_S", 0.0)  # every pause gives the loop back
    request = codec.Request(ApiKey.OFFSET_DELETE, 0, 7, None, None)
    values = {"throttle_time": 0, "error_code": ErrorCode.group_id_not_found,
              "topics": [{"name": f"t{index}", "partitions": [{"partition_index": 0, "error_code": 0}]} for index in range(200)]}
    out = io.BytesIO()
    entity_writer(codec.response_schema(ApiKey.OFFSET_DELETE, 0))(out, codec.build_response(request, values))
    assert asyncio.run(loop_slices.respond(request, values)) == codec.EncodedBody([out.getvalue()], ErrorCode.group_id_not_found)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
    return await reader.readexactly(size)


def test_another_connection_is_answered_while_a_big_request_is_handled(monkeypatch):
    # Metadata of 100,000 unknown topics, through a real server and its connections; the
    # metadata cache is a stub. ApiVersions is sent only once the big request's handler runs.
    started = asyncio.Event()
    original = HANDLERS[ApiKey.METADATA]

    async def metadata_that_says_it_started(services, request):
        started.set()
        return await original(services, request)

    monkeypatch.setitem(HANDLERS, int(ApiKey.METADATA), metadata_that_says_it_started)
    services = metadata_services("cluster")
    big = codec.encode_request(ApiKey.METADATA, 12, 1, "big", codec.build(codec.request_schema(ApiKey.METADATA, 12), {
        "topics": [{"name": f"absent-{index}", "topic_id": None} for index in range(100_000)],
        "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))
    api_versions = codec.encode_request(ApiKey.API_VERSIONS, 3, 2, "small", codec.build(
        codec.request_schema(ApiKey.API_VERSIONS, 3), {"client_software_name": "test", "client_software_version": "1"}))

    async def exchange() -> list[str]:
        server = KafkaServer(services, "127.0.0.1", 0, max_request_bytes=1 << 27, metrics=BrokerMetrics())
        await server.start()
        events: list[str] = []
        try:
            big_reader, big_writer = await asyncio.open_connection("127.0.0.1", server.port)
            small_reader, small_writer = await asyncio.open_connection("127.0.0.1", server.port)
            big_writer.write(big)
            # Its answer's first bytes: a large answer takes many reads to arrive whole.
            big_begins = asyncio.ensure_future(big_reader.readexactly(_SIZE.size))
            big_begins.add_done_callback(lambda _: events.append("big answer begins"))
            await asyncio.wait_for(started.wait(), 60)
            small_writer.write(api_versions)
            await asyncio.wait_for(_answer(small_reader), 60)
            events.append("ApiVersions answered")
            (size,) = _SIZE.unpack(await asyncio.wait_for(big_begins, 120))
            assert _SIZE.unpack_from(await asyncio.wait_for(big_reader.readexactly(size), 120))[0] == 1  # its correlation id
            for writer in (big_writer, small_writer):
                writer.close()
        finally:
            await server.stop()
        return events

    assert asyncio.run(exchange()) == ["ApiVersions answered", "big answer begins"]
