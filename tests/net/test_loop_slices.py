"""Handlers answer a big request in slices (net/loop_slices.py): the response encoded in steps
is byte for byte what kio writes, and another connection is answered while a big request is
still being handled."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import struct
import types

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
from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.partition import AppendResult
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


def _missing_partitions_services():
    """A broker that hosts nothing: every partition a Produce or Fetch names is unknown."""

    def get_partition(topic: str, partition: int):
        raise UnknownTopicOrPartitionError(f"{topic}-{partition}")

    return types.SimpleNamespace(replicas=types.SimpleNamespace(get_partition=get_partition),
                                 unknown_partition_error=lambda topic, partition: ErrorCode.unknown_topic_or_partition,
                                 metrics=BrokerMetrics(), now_ms=lambda: 0, authorizer=None,
                                 metadata=types.SimpleNamespace(brokers={}, lives={}, topics={}))


def _big_metadata() -> tuple[object, bytes]:
    return metadata_services("cluster"), codec.encode_request(ApiKey.METADATA, 12, 1, "big", codec.build(
        codec.request_schema(ApiKey.METADATA, 12), {
            "topics": [{"name": f"absent-{index}", "topic_id": None} for index in range(40_000)],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}))


def _big_produce() -> tuple[object, bytes]:
    return _missing_partitions_services(), codec.encode_request(ApiKey.PRODUCE, 9, 1, "big", codec.build(
        codec.request_schema(ApiKey.PRODUCE, 9), {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
            {"name": "absent", "partition_data": [{"index": index, "records": None} for index in range(40_000)]}]}))


def _big_fetch() -> tuple[object, bytes]:
    return _missing_partitions_services(), codec.encode_request(ApiKey.FETCH, 4, 1, "big", codec.build(
        codec.request_schema(ApiKey.FETCH, 4), {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                                                "isolation_level": 0, "topics": [{"topic": "absent", "partitions": [
                                                    {"partition": index, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                                                    for index in range(40_000)]}]}))


@pytest.mark.parametrize("api_key,big_request", [(ApiKey.METADATA, _big_metadata), (ApiKey.PRODUCE, _big_produce),
                                                  (ApiKey.FETCH, _big_fetch)], ids=["metadata", "produce", "fetch"])
def test_another_connection_is_answered_while_a_big_request_is_handled(monkeypatch, api_key, big_request):
    # 40,000 topics or partitions none of which is here, through a real server and its
    # connections; the broker is a stub. ApiVersions is sent only once the big request's handler
    # runs.
    started = asyncio.Event()
    original = HANDLERS[api_key]

    async def handler_that_says_it_started(services, request):
        started.set()
        return await original(services, request)

    monkeypatch.setitem(HANDLERS, int(api_key), handler_that_says_it_started)
    services, big = big_request()
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


def test_a_produce_answered_in_slices_keeps_its_appends_ahead_of_the_connections_next_one():
    """Appends started in one step land in arrival order; one request's started in slices must
    too, or a partition named by it and by the next request on the connection (an idempotent
    producer's next batch) would take the later batch first."""
    appends: list[tuple[int, int]] = []  # (correlation id, partition) in the order appended

    class Partition:
        def __init__(self, index: int):
            self.index = index

        async def append_as_leader(self, records, acks, timeout_ms, appended, verification_guard=None):
            appends.append((records[0], self.index))
            return AppendResult(ErrorCode.none, 0, -1, 0, 1)

    services = _missing_partitions_services()
    services.replicas.get_partition = lambda topic, index: Partition(index)
    shared = 39_999

    def produce(correlation_id: int, partitions: range) -> bytes:
        return codec.encode_request(ApiKey.PRODUCE, 9, correlation_id, "producer", codec.build(
            codec.request_schema(ApiKey.PRODUCE, 9), {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
                {"name": "topic", "partition_data": [{"index": index, "records": bytes([correlation_id])}
                                                     for index in partitions]}]}))

    async def exchange() -> None:
        server = KafkaServer(services, "127.0.0.1", 0, max_request_bytes=1 << 27, metrics=BrokerMetrics())
        await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(produce(1, range(shared + 1)) + produce(2, range(shared, shared + 1)))
            for correlation_id in (1, 2):
                assert _SIZE.unpack_from(await asyncio.wait_for(_answer(reader), 120))[0] == correlation_id
            writer.close()
        finally:
            await server.stop()

    asyncio.run(exchange())
    assert [correlation_id for correlation_id, partition in appends if partition == shared] == [1, 2]
