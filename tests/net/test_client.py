"""BrokerConnection against a real broker process (versions, produce, fetch, offsets, metadata,
pipelining) and against small local fake brokers for what a healthy broker never does (no
answer, a cut-off answer, a wrong correlation id, an old ApiVersions)."""

from __future__ import annotations

import asyncio
import socket
import struct
import uuid
from typing import Awaitable, Callable

import pytest
from kio.schema.errors import ErrorCode

from replog.net import codec
from replog.net.client import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    BrokerConnection,
    BrokerUnavailable,
    NoCommonVersion,
    ProtocolError,
)
from replog.net.codec import ApiKey
from replog.net.leader_connections import follower_client_id
from replog.replication.fetcher import EpochAsk, FetchSpec
from tests.clients.conftest import broker  # noqa: F401 -- the module's broker process
from tests.support.polling import eventually
from tests.support.batches import build_batch

WAIT_S = 10
FOLLOWER_ID = 1
_BASE_OFFSET_AND_LENGTH = struct.Struct(">qi")


@pytest.fixture
async def connection(broker):
    async with await BrokerConnection.open("127.0.0.1", broker.port, connect_timeout_s=WAIT_S, request_timeout_s=WAIT_S) as opened:
        yield opened


async def create_topic(connection: BrokerConnection) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    answer = await connection.request(ApiKey.CREATE_TOPICS, None, {
        "topics": [{"name": name, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": WAIT_S * 1000, "validate_only": False,
    })
    assert answer.topics[0].error_code == ErrorCode.none, answer
    return name


def batch_base_offsets(records: bytes) -> list[int]:
    """The base offset of every whole batch in a fetched run of batches."""
    offsets, position = [], 0
    while position + _BASE_OFFSET_AND_LENGTH.size <= len(records):
        base_offset, length = _BASE_OFFSET_AND_LENGTH.unpack_from(records, position)
        offsets.append(base_offset)
        position += _BASE_OFFSET_AND_LENGTH.size + length
    return offsets


# against the real broker

@pytest.mark.cluster  # the module's broker process
async def test_negotiates_the_highest_version_both_sides_speak_and_fetch_by_topic_id_only_as_a_follower(broker):
    # Fetch v13 names topics by id, which replog's Metadata does not give clients.
    async with await BrokerConnection.open("127.0.0.1", broker.port, connect_timeout_s=WAIT_S, request_timeout_s=WAIT_S,
                                           client_id="a-consumer") as client:
        for api_key, (_, replog_max) in codec.SUPPORTED_VERSIONS.items():
            assert client.version_for(api_key) == (12 if api_key == ApiKey.FETCH else replog_max)
    async with await BrokerConnection.open("127.0.0.1", broker.port, connect_timeout_s=WAIT_S, request_timeout_s=WAIT_S,
                                           client_id=follower_client_id(FOLLOWER_ID, "life")) as follower:
        for api_key, (_, replog_max) in codec.SUPPORTED_VERSIONS.items():
            assert follower.version_for(api_key) == replog_max
        assert follower.version_for(ApiKey.FETCH) == 13


@pytest.mark.cluster  # the module's broker process
async def test_produced_batches_come_back_to_a_consumer_fetch(connection):
    topic = await create_topic(connection)
    record_counts = [3, 1, 5]
    base_offsets = [(await connection.produce(topic, 0, bytes(build_batch(record_count=count)), acks=-1, timeout_ms=5000))
                    for count in record_counts]
    assert base_offsets == [(ErrorCode.none, 0), (ErrorCode.none, 3), (ErrorCode.none, 4)]
    fetched = await connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=0)
    assert (fetched.error_code, fetched.high_watermark, fetched.log_start_offset) == (ErrorCode.none, 9, 0)
    assert batch_base_offsets(fetched.records) == [0, 3, 4]
    assert await connection.list_offsets(topic, 0, LATEST_TIMESTAMP) == (ErrorCode.none, 9, -1)
    assert (await connection.list_offsets(topic, 0, EARLIEST_TIMESTAMP))[:2] == (ErrorCode.none, 0)


@pytest.mark.cluster  # the module's broker process
async def test_a_response_larger_than_the_first_receive_buffer_arrives_whole(connection):
    topic = await create_topic(connection)
    batch = bytes(build_batch(record_count=2, payload_bytes=300 * 1024))
    assert (await connection.produce(topic, 0, batch, acks=1, timeout_ms=5000)).error_code == ErrorCode.none
    fetched = await connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=0)
    assert fetched.records[61:] == batch[61:]  # past the header, where the broker stamps offset and epoch


@pytest.mark.cluster  # the module's broker process
async def test_an_acks_0_produce_gets_no_answer_and_lands(connection):
    topic = await create_topic(connection)
    assert await connection.produce(topic, 0, bytes(build_batch(record_count=2)), acks=0, timeout_ms=5000) == (ErrorCode.none, -1)

    async def landed() -> bool:
        return (await connection.list_offsets(topic, 0, LATEST_TIMESTAMP)).offset == 2

    await eventually(landed, WAIT_S, "the acks=0 batch to be appended")


@pytest.mark.cluster  # the module's broker process
async def test_metadata_describes_the_broker_and_the_partition(connection, broker):
    topic = await create_topic(connection)
    described = await connection.metadata([topic])
    partition = described.topics[topic].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert described.brokers[partition.leader_id].port == broker.port
    assert partition.replicas == partition.isr == (partition.leader_id,)
    assert partition.leader_epoch >= 0
    assert topic in (await connection.metadata(None)).topics


async def leader_epoch_of(connection: BrokerConnection, topic: str) -> int:
    return (await connection.metadata([topic])).topics[topic].partitions[0].leader_epoch


async def fetch_as_replica(connection: BrokerConnection, topic: str, current_leader_epoch: int):
    spec = FetchSpec(topic, 0, 0, current_leader_epoch, 1 << 20, 0)
    return (await connection.fetch_as_replica(FOLLOWER_ID, [spec], max_wait_ms=0, max_bytes=1 << 20)).replies[topic, 0]


@pytest.mark.cluster  # the module's broker process
async def test_a_fetch_as_a_replica_from_a_connection_of_no_registered_broker_is_refused(connection):
    topic = await create_topic(connection)
    await connection.produce(topic, 0, bytes(build_batch()), acks=-1, timeout_ms=5000)
    refused = await fetch_as_replica(connection, topic, -1)
    assert (refused.error_code, refused.high_watermark, refused.records) == (ErrorCode.topic_authorization_failed, -1, b"")


@pytest.mark.cluster  # the module's broker process
async def test_offset_for_leader_epoch_answers_where_the_epoch_ends(connection):
    topic = await create_topic(connection)
    await connection.produce(topic, 0, bytes(build_batch(record_count=4)), acks=-1, timeout_ms=5000)
    epoch = await leader_epoch_of(connection, topic)
    alone = await connection.offsets_for_leader_epochs([EpochAsk(topic, 0, epoch, epoch)], FOLLOWER_ID)
    assert alone == {(topic, 0): (ErrorCode.none, epoch, 4)}
    missing = await connection.offsets_for_leader_epochs([EpochAsk(f"{topic}-missing", 0, epoch, epoch)], FOLLOWER_ID)
    assert missing[f"{topic}-missing", 0].error_code == ErrorCode.unknown_topic_or_partition
    # Many partitions in one request, each answered on its own.
    together = await connection.offsets_for_leader_epochs(
        [EpochAsk(topic, 0, epoch, epoch), EpochAsk(f"{topic}-missing", 0, epoch, epoch), EpochAsk(topic, 7, epoch, epoch)], FOLLOWER_ID)
    assert together[topic, 0] == (ErrorCode.none, epoch, 4)
    assert together[f"{topic}-missing", 0].error_code == ErrorCode.unknown_topic_or_partition
    assert together[topic, 7].error_code != ErrorCode.none  # a partition the topic does not have


@pytest.mark.cluster  # the module's broker process
async def test_a_leader_epoch_ahead_of_the_leaders_is_unknown_leader_epoch(connection):
    topic = await create_topic(connection)
    epoch = await leader_epoch_of(connection, topic)
    ahead = (await connection.offsets_for_leader_epochs([EpochAsk(topic, 0, epoch, epoch + 1)], FOLLOWER_ID))[topic, 0]
    assert ahead.error_code == ErrorCode.unknown_leader_epoch


@pytest.mark.cluster  # the module's broker process
async def test_pipelined_requests_each_get_their_own_answer(broker):
    async with await BrokerConnection.open("127.0.0.1", broker.port, in_flight_max=8, request_timeout_s=WAIT_S) as connection:
        names = [f"missing-{uuid.uuid4().hex[:8]}-{n}" for n in range(200)]
        answers = await asyncio.gather(*(connection.metadata([name]) for name in names))
        assert [list(answer.topics) for answer in answers] == [[name] for name in names]
        topic = await create_topic(connection)
        produced = await asyncio.gather(*(connection.produce(topic, 0, bytes(build_batch()), acks=1, timeout_ms=5000) for _ in range(50)))
        assert sorted(result.base_offset for result in produced) == list(range(50))


@pytest.mark.cluster  # the module's broker process
async def test_a_parked_fetch_answers_when_a_later_request_arrives_on_its_connection(broker):
    """Responses leave in request order: a fetch parked for its whole wait would hold the
    answer of the request behind it (a follower's next fetch round, a Metadata request)."""
    async with await BrokerConnection.open("127.0.0.1", broker.port, request_timeout_s=WAIT_S) as connection:
        topic = await create_topic(connection)
        parked = asyncio.ensure_future(connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=600_000))
        # Far below the fetch's wait: without the cut, this answer would come after it.
        answered = await asyncio.wait_for(connection.metadata([topic]), WAIT_S)
        assert list(answered.topics) == [topic]
        assert (await parked).records == b""


async def test_connecting_to_a_closed_port_is_broker_unavailable():
    with socket.socket() as bound_not_listening:  # holds the port, so nothing else listens there
        bound_not_listening.bind(("127.0.0.1", 0))
        with pytest.raises(BrokerUnavailable, match="cannot connect"):
            await BrokerConnection.open("127.0.0.1", bound_not_listening.getsockname()[1], connect_timeout_s=WAIT_S)


# against fake brokers

Answer = Callable[[codec.Request, asyncio.StreamWriter], Awaitable[None]]


class FakeBroker:
    """A local server that answers ApiVersions with `versions` (error 35 to versions above
    `api_versions_max`, in v0, as Kafka does) and hands every other request to `answer`."""

    def __init__(self, answer: Answer | None = None, versions: dict[int, tuple[int, int]] | None = None, api_versions_max: int = 4):
        self.answer = answer or never_answer
        self.versions = dict(codec.SUPPORTED_VERSIONS if versions is None else versions)
        self.api_versions_max = api_versions_max
        self.received: list[codec.Request] = []
        self.writers: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        for writer in self.writers:
            writer.close()
        await asyncio.wait_for(self._server.wait_closed(), WAIT_S)

    @property
    def port(self) -> int:
        return self._server.sockets[0].getsockname()[1]

    async def open(self, **options) -> BrokerConnection:
        return await BrokerConnection.open("127.0.0.1", self.port, connect_timeout_s=WAIT_S, **options)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:  # until the client closes the connection
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, api_version, correlation_id = codec.peek(frame)
                if api_key == ApiKey.API_VERSIONS and api_version > self.api_versions_max:
                    self.received.append(codec.Request(api_key, api_version, correlation_id, None, None))
                    writer.writelines(self.api_versions_answer(correlation_id, 0, ErrorCode.unsupported_version))
                    continue
                request = codec.decode_request(frame)
                self.received.append(request)
                if api_key == ApiKey.API_VERSIONS:
                    writer.writelines(self.api_versions_answer(correlation_id, api_version, ErrorCode.none))
                else:
                    await self.answer(request, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass

    def api_versions_answer(self, correlation_id: int, api_version: int, error_code: ErrorCode) -> list[bytes]:
        body = codec.build(codec.response_schema(ApiKey.API_VERSIONS, api_version), {
            "error_code": error_code, "throttle_time": 0,
            "api_keys": [{"api_key": key, "min_version": low, "max_version": high} for key, (low, high) in self.versions.items()],
        })
        return codec.encode_response(ApiKey.API_VERSIONS, api_version, correlation_id, body)


async def never_answer(request: codec.Request, writer: asyncio.StreamWriter) -> None:
    pass


def metadata_answer(request: codec.Request, correlation_id: int | None = None) -> list[bytes]:
    """An answer naming the asked topics as unknown; `correlation_id` overrides the request's."""
    topics = [{"name": topic.name, "error_code": ErrorCode.unknown_topic_or_partition, "partitions": [], "topic_id": None}
              for topic in request.body.topics]
    body = codec.build_response(request, {"throttle_time": 0, "brokers": [], "topics": topics, "cluster_id": None, "controller_id": -1})
    return codec.encode_response(request.api_key, request.api_version, request.correlation_id if correlation_id is None else correlation_id, body)


async def test_api_versions_falls_back_to_v0_when_v3_is_unsupported():
    async with FakeBroker(api_versions_max=2) as fake:
        connection = await fake.open()
        connection.close()
    assert [request.api_version for request in fake.received] == [3, 0]
    assert connection.version_for(ApiKey.FETCH) == codec.SUPPORTED_VERSIONS[ApiKey.FETCH][1]


async def test_no_common_version_is_a_clear_error():
    fetch_from_14_only = {ApiKey.API_VERSIONS: (0, 4), ApiKey.FETCH: (14, 17)}
    async with FakeBroker(versions=fetch_from_14_only) as fake:
        async with await fake.open() as connection:
            with pytest.raises(NoCommonVersion, match=r"api 1: the broker speaks \(14, 17\), replog \(4, 13\)"):
                await connection.fetch("t", 0, 0, max_bytes=1024, max_wait_ms=0)
            with pytest.raises(NoCommonVersion, match="the broker speaks none"):
                connection.version_for(ApiKey.PRODUCE)


async def test_in_flight_requests_are_bounded_and_answered_in_order():
    in_flight_max = 4
    held: list[codec.Request] = []
    release = asyncio.Event()

    async def hold_until_released(request: codec.Request, writer: asyncio.StreamWriter) -> None:
        if release.is_set():
            writer.writelines(metadata_answer(request))
        else:
            held.append(request)

    async with FakeBroker(hold_until_released) as fake:
        async with await fake.open(in_flight_max=in_flight_max, request_timeout_s=WAIT_S) as connection:
            names = [f"topic-{n}" for n in range(3 * in_flight_max)]
            answers = asyncio.gather(*(connection.metadata([name]) for name in names))

            async def bound_reached() -> bool:
                return len(held) == in_flight_max

            await eventually(bound_reached, WAIT_S, "the client to fill its in-flight slots")
            assert connection.in_flight == in_flight_max
            release.set()
            for waiting in held:
                fake.writers[0].writelines(metadata_answer(waiting))
            described = await asyncio.wait_for(answers, WAIT_S)
    assert [list(answer.topics) for answer in described] == [[name] for name in names]
    assert len(fake.received) == 1 + len(names)


async def test_a_cancelled_request_leaves_later_answers_matched_to_their_requests():
    held: list[codec.Request] = []

    async def hold_the_first(request: codec.Request, writer: asyncio.StreamWriter) -> None:
        if not held:
            held.append(request)
            return
        writer.writelines(metadata_answer(held[0]) + metadata_answer(request))  # the late answer first

    async with FakeBroker(hold_the_first) as fake:
        async with await fake.open(request_timeout_s=WAIT_S) as connection:
            given_up = asyncio.ensure_future(connection.metadata(["given-up"]))

            async def first_held() -> bool:
                return bool(held)

            await eventually(first_held, WAIT_S, "the first request to reach the broker")
            given_up.cancel()
            with pytest.raises(asyncio.CancelledError):
                await given_up
            assert list((await connection.metadata(["wanted"])).topics) == ["wanted"]
            assert connection.in_flight == 0


async def test_a_request_without_an_answer_in_time_closes_the_connection():
    async with FakeBroker(never_answer) as fake:
        connection = await fake.open(request_timeout_s=WAIT_S)
        waiting_longer = asyncio.ensure_future(connection.metadata(["other"]))
        with pytest.raises(BrokerUnavailable, match="no answer to api 3"):
            await connection.request(ApiKey.METADATA, None, {"topics": [], "allow_auto_topic_creation": False,
                                                             "include_topic_authorized_operations": False}, timeout_s=0.2)
        assert connection.closed
        with pytest.raises(BrokerUnavailable):
            await asyncio.wait_for(waiting_longer, WAIT_S)
        # A late answer can never be taken for a later request's: there is no later request.
        with pytest.raises(BrokerUnavailable):
            await connection.metadata(["later"])


async def test_a_server_that_accepts_and_never_answers_fails_the_open():
    async def read_until_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()
        writer.close()

    server = await asyncio.start_server(read_until_closed, "127.0.0.1", 0)
    try:
        with pytest.raises(BrokerUnavailable, match="no answer to api 18"):
            await BrokerConnection.open("127.0.0.1", server.sockets[0].getsockname()[1], request_timeout_s=0.2)
    finally:
        server.close()
        await asyncio.wait_for(server.wait_closed(), WAIT_S)


async def half_then_close(request: codec.Request, writer: asyncio.StreamWriter) -> None:
    frame = b"".join(metadata_answer(request))
    writer.write(frame[: len(frame) // 2])
    await writer.drain()
    writer.close()


async def wrong_correlation_id(request: codec.Request, writer: asyncio.StreamWriter) -> None:
    writer.writelines(metadata_answer(request, correlation_id=request.correlation_id + 1))


async def oversized(request: codec.Request, writer: asyncio.StreamWriter) -> None:
    writer.write(struct.pack(">ii", 1 << 30, request.correlation_id))


@pytest.mark.parametrize(("answer", "error", "message"), [
    (half_then_close, BrokerUnavailable, "connection lost"),
    (wrong_correlation_id, ProtocolError, "correlation id"),
    (oversized, ProtocolError, "response frame of 1073741824 bytes"),
])
async def test_a_broken_answer_fails_the_request_and_closes_the_connection(answer, error, message):
    async with FakeBroker(answer) as fake:
        async with await fake.open(request_timeout_s=WAIT_S) as connection:
            with pytest.raises(error, match=message):
                await connection.metadata(["broken"])
            assert connection.closed


def test_every_supported_api_has_a_handler():
    """The versions table is static (that net/client.py imports no handler is an import-linter
    contract in pyproject.toml)."""
    from replog.net import codec
    from replog.net.handlers import HANDLERS

    assert set(HANDLERS) == set(codec.SUPPORTED_VERSIONS)
