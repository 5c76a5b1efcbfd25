"""Client quotas on a served connection (in-process): a request over its quota is answered at
once with throttle_time_ms and the connection takes its next request only once the throttle
is over (KIP-219); a client too old to wait by itself gets its answer only then; muting holds
up no other connection; a muted connection closes; exempt requests are not counted."""

from __future__ import annotations

import asyncio
import datetime
import struct
import types

from replog.config import defaults
from replog.net import codec
from replog.net.client_throttles import client_throttles, counted, set_throttle_ms, with_throttle
from replog.net.codec import ApiKey, EncodedBody
from replog.net.handlers import HANDLERS
from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics
from replog.security.client_quotas import ClientQuotaEntity, ClientQuotas
from replog.security.quota_limits import QuotaType
from replog.security.quota_manager import ClientQuotaManagers
from tests.support.polling import eventually

_SIZE = struct.Struct(">i")
THROTTLE_MS = 1000  # a request-time quota far exceeded is throttled one window, quota.window.size.seconds


def _list_groups(correlation_id: int, version: int) -> bytes:
    return codec.encode_request(ApiKey.LIST_GROUPS, version, correlation_id, "greedy",
                                codec.build(codec.request_schema(ApiKey.LIST_GROUPS, version), {}))


async def _answer(reader: asyncio.StreamReader, version: int) -> tuple[int, object]:
    (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
    return codec.decode_response(ApiKey.LIST_GROUPS, version, await reader.readexactly(size))


async def _serving(monkeypatch):
    """A server whose ListGroups handler notes the loop time of each request it handles, with a
    request_percentage quota no request can stay within on client id "greedy"."""
    handled: list[float] = []

    async def list_groups(services, request):
        handled.append(asyncio.get_running_loop().time())
        return codec.build_response(request, {"throttle_time": 0, "error_code": 0, "groups": []})

    monkeypatch.setitem(HANDLERS, ApiKey.LIST_GROUPS, list_groups)
    limits = ClientQuotas()
    limits.set_entity(ClientQuotaEntity(None, "greedy"), {QuotaType.REQUEST: 1e-9})
    server = KafkaServer(types.SimpleNamespace(), "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=BrokerMetrics(),
                         quotas=ClientQuotaManagers(limits, defaults()))
    await server.start()
    return server, handled


async def test_a_throttled_connection_takes_its_next_request_after_the_throttle(monkeypatch):
    server, handled = await _serving(monkeypatch)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        other_reader, other_writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_list_groups(1, 4))
        correlation_id, body = await asyncio.wait_for(_answer(reader, 4), 10)
        assert correlation_id == 1 and body.throttle_time == datetime.timedelta(milliseconds=THROTTLE_MS)
        assert len(handled) == 1
        writer.write(_list_groups(2, 4))
        # Another connection is served meanwhile (its client is throttled too, from now on).
        other_writer.write(_list_groups(1, 4))
        assert (await asyncio.wait_for(_answer(other_reader, 4), 10))[0] == 1
        assert len(handled) == 2
        assert (await asyncio.wait_for(_answer(reader, 4), 10))[0] == 2
        # The mute ends on the loop's timer (which may fire a clock resolution early).
        assert handled[2] - handled[0] >= THROTTLE_MS / 1000 - 0.01
        writer.close()
        other_writer.close()
    finally:
        await server.stop()


async def test_requests_sent_together_are_each_handled_after_the_throttle(monkeypatch):
    server, handled = await _serving(monkeypatch)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_list_groups(1, 4) + _list_groups(2, 4) + _list_groups(3, 4))  # taken before any mute
        for correlation_id in (1, 2, 3):
            assert (await asyncio.wait_for(_answer(reader, 4), 10))[0] == correlation_id
        assert handled[1] - handled[0] >= THROTTLE_MS / 1000 - 0.01
        assert handled[2] - handled[1] >= THROTTLE_MS / 1000 - 0.01
        writer.close()
    finally:
        await server.stop()


async def test_an_old_client_gets_its_answer_after_the_throttle(monkeypatch):
    server, handled = await _serving(monkeypatch)
    loop = asyncio.get_running_loop()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_list_groups(1, 1))  # ListGroups v1: before KIP-219
        _, body = await asyncio.wait_for(_answer(reader, 1), 10)
        assert body.throttle_time == datetime.timedelta(milliseconds=THROTTLE_MS)
        assert loop.time() - handled[0] >= THROTTLE_MS / 1000 - 0.01
        writer.close()
    finally:
        await server.stop()


async def test_a_muted_connection_closes(monkeypatch):
    server, handled = await _serving(monkeypatch)
    stopped = False
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_list_groups(1, 4))
        await asyncio.wait_for(_answer(reader, 4), 10)
        writer.close()  # by the client, while muted
        await eventually(lambda: server.connection_count == 0, 10, "the muted connection closed")
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(_list_groups(1, 4))
        await asyncio.wait_for(_answer(reader, 4), 10)
        writer.write(_list_groups(2, 4))
        await server.stop()  # by the broker, while muted: the request waiting is not taken
        stopped = True
        assert server.connection_count == 0
        assert len(handled) == 2
    finally:
        if not stopped:
            await server.stop()


def test_follower_fetches_and_pre_authentication_requests_are_exempt():
    def request(api_key: int, body: object = None) -> codec.Request:
        return codec.Request(api_key, 0, 1, "client", body)

    assert not counted(request(ApiKey.FETCH, types.SimpleNamespace(replica_id=2)))
    assert counted(request(ApiKey.FETCH, types.SimpleNamespace(replica_id=-1)))
    assert not counted(request(ApiKey.API_VERSIONS))
    assert not counted(request(ApiKey.SASL_AUTHENTICATE))
    assert counted(request(ApiKey.PRODUCE))


def test_a_throttle_is_set_in_bodies_the_handlers_encoded():
    body = EncodedBody([b"\0\0\0\0rest", b"log bytes"], throttle_at=0)
    throttled = with_throttle(body, 1234)
    assert set_throttle_ms(throttled) == 1234 and throttled.parts[1:] == [b"log bytes"]
    assert with_throttle(EncodedBody([b"v0"]), 1234) == EncodedBody([b"v0"])


def test_who_waits_is_kafkas_per_api_and_version():
    def throttles_itself(api_key: int, version: int) -> bool:
        return client_throttles(codec.Request(api_key, version, 1, "client", None))

    assert not throttles_itself(ApiKey.PRODUCE, 5) and throttles_itself(ApiKey.PRODUCE, 6)
    assert not throttles_itself(ApiKey.FETCH, 7) and throttles_itself(ApiKey.FETCH, 8)
    assert throttles_itself(ApiKey.ELECT_LEADERS, 0)
    assert not throttles_itself(ApiKey.DESCRIBE_CLUSTER, 2)  # Kafka's response does not say so: the broker waits
    assert not throttles_itself(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4)
