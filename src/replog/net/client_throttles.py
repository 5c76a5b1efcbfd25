"""Client quotas on the wire: what each request counts against the quotas of its principal's
user and its client id (security/quota_manager.py), the throttle time its response carries,
and who waits it out.

Counted, as Kafka counts them: a Produce's request size against producer_byte_rate (KIP-13), a
Fetch's response size against consumer_byte_rate, and the time the handler ran (its own steps,
not the time it waited for replication or a long poll: Kafka's request-thread time) against
request_percentage (KIP-124). Exempt, as in Kafka: follower fetches (replica_id >= 0), and the
requests a client sends before it may be throttled (ApiVersions, SASL). A handler may have set
a throttle of its own (the controller mutation quota); the response carries the largest.

Who waits (KIP-219): from the versions in CLIENT_THROTTLES_FROM on, the client does: the answer
goes at once, and the broker mutes the connection meanwhile. Before them, and for the APIs not
there (Kafka's responses that do not say their client throttles, replog's own), the client
does not know to wait, so the broker holds the answer back for the throttle time, muted too,
as Kafka does. A throttled Fetch still carries its records (Kafka answers it empty): the connection's
mute holds the rate to the quota all the same, and no fetch session has to forget what it sent.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import time
import types
from collections.abc import Coroutine
from typing import Any

from replog.security.quota_limits import user_of_principal
from replog.security.quota_manager import NANOS_TO_PERCENTAGE, ClientQuotaManagers
from replog.storage.segment import HeldSlice

from .codec import ApiKey, EncodedBody, Request

_I32 = struct.Struct(">i")

EXEMPT_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})

# The first version of each API whose client waits out the throttle itself (Kafka's
# shouldClientThrottle, per response, as Kafka 4 has it); an API not here: none.
CLIENT_THROTTLES_FROM: dict[int, int] = {
    ApiKey.PRODUCE: 6, ApiKey.FETCH: 8, ApiKey.LIST_OFFSETS: 3, ApiKey.METADATA: 6, ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4, ApiKey.FIND_COORDINATOR: 2, ApiKey.JOIN_GROUP: 3, ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2, ApiKey.SYNC_GROUP: 2, ApiKey.DESCRIBE_GROUPS: 2, ApiKey.LIST_GROUPS: 2,
    ApiKey.CREATE_TOPICS: 3, ApiKey.DELETE_TOPICS: 2, ApiKey.INIT_PRODUCER_ID: 1, ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1, ApiKey.DESCRIBE_LOG_DIRS: 1, ApiKey.CREATE_PARTITIONS: 1, ApiKey.DELETE_GROUPS: 1,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 0, ApiKey.OFFSET_DELETE: 0, ApiKey.ELECT_LEADERS: 0,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0, ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0, ApiKey.UNREGISTER_BROKER: 0,
}


def client_throttles(request: Request) -> bool:
    """Whether the client of `request` waits out a throttle itself (KIP-219)."""
    first = CLIENT_THROTTLES_FROM.get(request.api_key)
    return first is not None and request.api_version >= first


def counted(request: Request) -> bool:
    """Whether `request` counts against its client's quotas."""
    if request.api_key in EXEMPT_APIS:
        return False
    return request.api_key != ApiKey.FETCH or request.body.replica_id < 0


@types.coroutine
def run_timed(handler: Coroutine, spent_s: list[float]):
    """Await `handler`, adding to spent_s[0] the time its steps ran, not the time it waited."""
    send: Any = handler.send
    value: Any = None
    while True:  # one turn per suspension of the handler
        started_s = time.perf_counter()
        try:
            yielded = send(value)
        except StopIteration as done:
            spent_s[0] += time.perf_counter() - started_s
            return done.value
        spent_s[0] += time.perf_counter() - started_s
        try:
            value, send = (yield yielded), handler.send
        except GeneratorExit:
            handler.close()
            raise
        except BaseException as error:  # thrown in by the task (cancellation): the handler's to handle
            value, send = error, handler.throw


def throttle_time_ms(quotas: ClientQuotaManagers, request: Request, body: Any, handler_s: float) -> int:
    """Record `request` against its client's quotas; the longest throttle that applies now,
    the one its handler set included."""
    user, client_id = user_of_principal(request.principal), request.client_id or ""
    throttle_ms = quotas.request.record(user, client_id, handler_s * NANOS_TO_PERCENTAGE)
    if request.api_key == ApiKey.PRODUCE:
        throttle_ms = max(throttle_ms, quotas.produce.record(user, client_id, request.size_bytes))
    elif request.api_key == ApiKey.FETCH and isinstance(body, EncodedBody):
        throttle_ms = max(throttle_ms, quotas.fetch.record(user, client_id, _size_bytes(body)))
    return max(throttle_ms, set_throttle_ms(body))


def _size_bytes(body: EncodedBody) -> int:
    return sum(part.size_bytes if isinstance(part, HeldSlice) else len(part) for part in body.parts)


def set_throttle_ms(body: Any) -> int:
    """The throttle time a response body carries already (0 if it has none)."""
    if isinstance(body, EncodedBody):
        return 0 if body.throttle_at is None else _I32.unpack_from(body.parts[0], body.throttle_at)[0]
    value = getattr(body, "throttle_time", 0)
    return int(value.total_seconds() * 1000) if isinstance(value, datetime.timedelta) else int(value)


def with_throttle(body: Any, throttle_ms: int) -> Any:
    """`body` carrying `throttle_ms`, where its version has the field."""
    if isinstance(body, EncodedBody):
        if body.throttle_at is None:
            return body
        first = bytearray(body.parts[0])
        _I32.pack_into(first, body.throttle_at, throttle_ms)
        return body._replace(parts=[bytes(first), *body.parts[1:]])
    if dataclasses.is_dataclass(body) and any(field.name == "throttle_time" for field in dataclasses.fields(body)):
        return dataclasses.replace(body, throttle_time=datetime.timedelta(milliseconds=throttle_ms))
    return body
