"""replog's own async Kafka client: one connection to one broker, for followers (Fetch as a
replica, OffsetForLeaderEpoch), admin tools and the Spark connector.

Versions: on open the client asks ApiVersions (v3, then v0 if the broker answers error 35
UNSUPPORTED_VERSION, as Kafka clients do) and picks, per API, the highest version that both the
broker and replog's codec speak (`codec.SUPPORTED_VERSIONS`), so it talks to replog and to any
Kafka broker alike.

Requests are pipelined: each gets a correlation id and joins a queue in the order it is
written; Kafka answers a connection's requests in order, so each response must match the
front of the queue, and anything else means the stream cannot be trusted and the connection is
closed. At most `in_flight_max` requests wait for answers; more wait for a slot.

Timeouts: a request without an answer within its timeout (waiting for a slot included) closes
the connection and fails with `BrokerUnavailable`, along with every other request on it. Closing
rather than forgetting the one request: answers come in order, so every later answer would
queue behind the missing one, and on a closed connection a late answer can never be taken for
a later request's.

Receiving: each frame's 4-byte size, then exactly its body, is read into buffers reused for
the life of the connection (fresh large allocations page-fault, page by page, on every use). Decoding copies
what it keeps, so the buffer is free again as soon as a frame is decoded.

SASL (SASL_PLAINTEXT, SASL_SSL): after ApiVersions, SaslHandshake v1 names the mechanism and
SaslAuthenticate carries its messages (security/sasl_client.py) until the exchange completes; a
broker that refuses raises SaslAuthenticationFailed with its message. When the broker gives the
session a lifetime (KIP-368, SaslAuthenticate v1+), the connection re-authenticates on the same
socket once a random 85-95% of it has passed, as Kafka's clients do, so that a long-lived
follower connection is never cut: the first request after that point starts it; the
re-authentication waits for the requests on the wire to be answered, sends its own alone, and
holds every other request back until it ends. It runs in a task of the connection's own, which
no caller's cancellation interrupts; if it fails, the connection fails.

Per-partition errors are results, not exceptions: the convenience methods return Kafka error
codes (kio's `ErrorCode`, an IntEnum) for the caller to act on, as a follower must.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import random
import struct
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from replog import __version__
from replog.security.sasl import SaslClientError
from replog.storage.control_batches import Marker
from replog.security.sasl_client import mechanism_client
from replog.replication.fetcher import EpochAsk, FetchSpec

from . import codec
from .client_security import NO_SECURITY, ClientSecurity
from .codec import ApiKey
from .fetch_decoding import FIRST_SESSION_VERSION, FIRST_TOPIC_ID_VERSION, FetchedPartition, decode_fetch_response
from .fetch_requests import encode_fetch_request, named_by_id
from .fetch_rounds import RoundAnswer, RoundChanges
from .fetch_sessions import FetcherSession, outside_session

CONSUMER_REPLICA_ID = -1
NO_LEADER_EPOCH = -1
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
READ_UNCOMMITTED = 0
TRANSACTION_COORDINATOR_KEY = 1  # FindCoordinator's key type for a transactional id
# The transaction requests' versions, fixed: the first each Kafka 4 broker answers, and all
# that an operator's tool needs of them.
FIND_COORDINATOR_VERSION = 3
DESCRIBE_PRODUCERS_VERSION = 0
DESCRIBE_TRANSACTIONS_VERSION = 0
LIST_TRANSACTIONS_VERSION = 1
API_VERSIONS_PROBE_VERSION = 3
CLIENT_SOFTWARE_NAME = "replog"
# The most SaslAuthenticate rounds a mechanism takes (SCRAM: 2; OAUTHBEARER's error: 2).
SASL_ROUNDS_MAX = 4
# KIP-368: where in the session's lifetime Kafka's clients re-authenticate (ClientReauthenticator).
REAUTHENTICATE_AT_RATIO = (0.85, 0.95)

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_REQUEST_TIMEOUT_S = 30.0
# Enough to keep a connection busy; bounds what is written and unanswered when a broker stalls.
DEFAULT_IN_FLIGHT_MAX = 32
# Bounds the receive buffer; a Fetch answer is bounded by the max_bytes the caller asked for.
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024
INITIAL_BUFFER_BYTES = 64 * 1024
WRITE_BUFFER_HIGH_BYTES = 8 * 1024 * 1024

_SIZE = struct.Struct(">i")
_CORRELATION_ID = struct.Struct(">i")
_CORRELATION_ID_LIMIT = 1 << 31


# ErrorCode(value) goes through the enum machinery, and a follower's fetch converts one code per
# partition: a dict lookup is cheaper, which shows in a restarting broker's event loop.
_ERROR_CODES = {code.value: code for code in ErrorCode}


def _replica_result(found: FetchedPartition | None) -> ReplicaFetchResult | None:
    if found is None:
        return None
    return ReplicaFetchResult(_error_code(found.error_code), found.high_watermark, found.log_start_offset, found.records)


def _error_code(value: int) -> ErrorCode:
    code = _ERROR_CODES.get(value)
    return ErrorCode(value) if code is None else code  # an unknown code: ValueError, as before


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _epoch_ms(instant: datetime.datetime | None) -> int:
    """Milliseconds since the epoch, -1 for Kafka's null (read as None)."""
    return -1 if instant is None else (instant - _EPOCH) // datetime.timedelta(milliseconds=1)


class BrokerUnavailable(ConnectionError):
    """The connection failed (refused, timed out, lost or closed); it is closed for good."""


class BrokerRefused(BrokerUnavailable):
    """Nothing listens at the broker's address: its host answered, its process is gone (a host
    that is down or cut off times out instead)."""


class ConnectionLost(BrokerUnavailable):
    """The broker's end closed or reset the connection. Right after connecting, a process being
    killed does this: its kernel completed the handshake for its listener's backlog, then
    closed everything it had."""


class ProtocolError(BrokerUnavailable):
    """The broker sent something that cannot be read or matched; the connection is closed."""


class SaslAuthenticationFailed(BrokerUnavailable):
    """The broker refused this client's SASL authentication, or proved nothing itself; the
    message names the broker, the mechanism and Kafka's message, never a password or token."""


class NoCommonVersion(Exception):
    """The broker and replog speak no common version of an API."""


class ReplicaFetchResult(NamedTuple):
    error_code: ErrorCode
    high_watermark: int
    log_start_offset: int
    records: bytes


class EpochEndOffset(NamedTuple):
    error_code: ErrorCode
    leader_epoch: int
    end_offset: int


class ProduceResult(NamedTuple):
    error_code: ErrorCode
    base_offset: int


class MarkerWrite(NamedTuple):
    """One marker of a WriteTxnMarkers request, and the partitions it goes to."""

    marker: Marker
    partitions: Collection[tuple[str, int]]


class ListedOffset(NamedTuple):
    error_code: ErrorCode
    offset: int
    timestamp: int


class ProducerState(NamedTuple):
    """One producer of a partition, as its leader describes it (DescribeProducers, KIP-664)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no transaction open in the partition


class TransactionListing(NamedTuple):
    transactional_id: str
    producer_id: int
    state: str


class TransactionDescription(NamedTuple):
    error_code: ErrorCode
    transactional_id: str
    state: str
    timeout_ms: int
    start_time_ms: int  # -1 while no transaction is open
    producer_id: int
    producer_epoch: int
    partitions: tuple[tuple[str, int], ...]


class BrokerAddress(NamedTuple):
    host: str
    port: int
    rack: str | None


class PartitionMetadata(NamedTuple):
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class TopicMetadata(NamedTuple):
    error_code: ErrorCode
    partitions: dict[int, PartitionMetadata]


class ClusterMetadata(NamedTuple):
    controller_id: int
    brokers: dict[int, BrokerAddress]
    topics: dict[str, TopicMetadata]


class _Pending(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int
    answer: asyncio.Future
    decode: Callable[[int, memoryview], Any] | None  # (api_version, frame) -> body; None: kio's


class _FrameReceiver(asyncio.BufferedProtocol):
    """Transport callbacks: reads a frame's size, then exactly its body, into reused buffers and
    hands each whole frame (without its size) to the connection."""

    def __init__(self, connection: BrokerConnection, max_response_bytes: int):
        self._connection = connection
        self._max_response_bytes = max_response_bytes
        self._size_prefix = bytearray(_SIZE.size)
        self._body = bytearray(INITIAL_BUFFER_BYTES)
        self._body_bytes: int | None = None  # None while reading the size prefix
        self._filled = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH_BYTES)  # type: ignore[attr-defined]
        self._connection._transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        reason = f": {exc}" if exc else ""
        self._connection._fail(ConnectionLost(f"{self._connection.peer}: connection lost{reason}"))

    def pause_writing(self) -> None:
        self._connection._writable.clear()

    def resume_writing(self) -> None:
        self._connection._writable.set()

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body_bytes is None:
            return memoryview(self._size_prefix)[self._filled:]
        return memoryview(self._body)[self._filled:self._body_bytes]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._body_bytes is None:
            if self._filled == _SIZE.size:
                self._start_body(_SIZE.unpack(self._size_prefix)[0])
        elif self._filled == self._body_bytes:
            with memoryview(self._body) as body:
                self._connection._on_frame(body[:self._body_bytes])
            self._body_bytes, self._filled = None, 0

    def _start_body(self, size: int) -> None:
        if not _CORRELATION_ID.size <= size <= self._max_response_bytes:
            self._connection._fail(ProtocolError(f"{self._connection.peer}: response frame of {size} bytes "
                                                 f"(at most {self._max_response_bytes} accepted)"))
            return
        if size > len(self._body):
            # A new buffer rather than a resized one: the transport may still hold a view of it.
            self._body = bytearray(min(max(size, 2 * len(self._body)), self._max_response_bytes))
        self._body_bytes, self._filled = size, 0


class BrokerConnection:
    """One connection to one broker; open it with `await BrokerConnection.open(host, port)`."""

    def __init__(self, peer: str, *, client_id: str, request_timeout_s: float, in_flight_max: int):
        self.peer = peer
        self.client_id = client_id
        self.request_timeout_s = request_timeout_s
        self._transport: asyncio.Transport | None = None
        self._pending: collections.deque[_Pending] = collections.deque()
        self._slots = asyncio.Semaphore(in_flight_max)
        self._writable = asyncio.Event()
        self._writable.set()
        self._next_correlation_id = 0
        self._fetch_session = FetcherSession()  # a follower's, with this broker as its leader
        self._failure: BrokerUnavailable | None = None
        self._versions: dict[int, int] = {}
        self._broker_versions: dict[int, tuple[int, int]] = {}
        self._security: ClientSecurity = NO_SECURITY
        self.authentications = 0  # SASL exchanges completed here, re-authentications included
        # KIP-368: loop time at which to re-authenticate; None while the session has no lifetime.
        self._reauthenticate_at: float | None = None
        self._reauthentication: asyncio.Task | None = None
        # Cleared while a re-authentication has the wire to itself.
        self._others_may_send = asyncio.Event()
        self._others_may_send.set()
        self._drained: asyncio.Future | None = None  # what a re-authentication waits on: no request unanswered

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        *,
        client_id: str = "replog",
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        in_flight_max: int = DEFAULT_IN_FLIGHT_MAX,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: ClientSecurity = NO_SECURITY,
    ) -> BrokerConnection:
        """Connect as `security` says (over TLS for SSL and SASL_SSL, checking that the
        certificate names `host` where its context checks names) and negotiate versions;
        BrokerUnavailable if either fails in time."""
        connection = cls(f"{host}:{port}", client_id=client_id, request_timeout_s=request_timeout_s, in_flight_max=in_flight_max)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout_s):
                await loop.create_connection(lambda: _FrameReceiver(connection, max_response_bytes), host, port, ssl=security.tls)
        except (OSError, TimeoutError) as error:
            unavailable = BrokerRefused if isinstance(error, ConnectionRefusedError) else BrokerUnavailable
            raise unavailable(f"{host}:{port}: cannot connect within {connect_timeout_s}s: {error!r}") from None
        try:
            await connection._negotiate_versions()
            if security.uses_sasl:
                connection._security = security
                await connection._authenticate()
        except BaseException:
            connection.close()
            raise
        return connection

    async def __aenter__(self) -> BrokerConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._failure is not None

    @property
    def in_flight(self) -> int:
        """Requests written and not yet answered."""
        return len(self._pending)

    def close(self) -> None:
        """Close now; requests still waiting fail with BrokerUnavailable."""
        self._fail(BrokerUnavailable(f"{self.peer}: connection closed by this client"))

    # versions
    async def _negotiate_versions(self) -> None:
        answer = await self.request(ApiKey.API_VERSIONS, API_VERSIONS_PROBE_VERSION,
                                    {"client_software_name": CLIENT_SOFTWARE_NAME, "client_software_version": __version__})
        if answer.error_code == ErrorCode.unsupported_version:
            answer = await self.request(ApiKey.API_VERSIONS, 0, {})
        if answer.error_code != ErrorCode.none:
            raise BrokerUnavailable(f"{self.peer}: ApiVersions answered {answer.error_code.name}")
        self._broker_versions = {int(api.api_key): (int(api.min_version), int(api.max_version)) for api in answer.api_keys}
        for api_key, (broker_min, broker_max) in self._broker_versions.items():
            ours = codec.SUPPORTED_VERSIONS.get(api_key)
            if ours is not None and max(ours[0], broker_min) <= min(ours[1], broker_max):
                self._versions[api_key] = min(ours[1], broker_max)

    def version_for(self, api_key: int) -> int:
        """The negotiated version: the highest both this broker and replog speak."""
        try:
            return self._versions[api_key]
        except KeyError:
            theirs = self._broker_versions.get(api_key, "none")
            ours = codec.SUPPORTED_VERSIONS.get(api_key, "none")
            raise NoCommonVersion(f"{self.peer}: no common version of api {api_key}: the broker speaks {theirs}, replog {ours}") from None

    # SASL
    async def _authenticate(self) -> None:
        """One SASL exchange on this connection (the first, or a re-authentication)."""
        security = self._security
        mechanism = security.sasl_mechanism
        try:
            client = mechanism_client(mechanism, security.sasl_username, security.sasl_password, security.sasl_oauthbearer_token)
        except ValueError as error:
            raise self._not_authenticated(str(error)) from None
        try:
            # SaslHandshake v1 (codec's only): the mechanism's messages then travel in SaslAuthenticate.
            handshake_version, version = self.version_for(ApiKey.SASL_HANDSHAKE), self.version_for(ApiKey.SASL_AUTHENTICATE)
        except NoCommonVersion as error:
            raise self._not_authenticated(str(error)) from None
        handshake = await self._sasl_request(ApiKey.SASL_HANDSHAKE, handshake_version, {"mechanism": mechanism})
        if handshake.error_code != ErrorCode.none:
            enabled = f" (the broker enables {', '.join(handshake.mechanisms) or 'none'})" if handshake.mechanisms else ""
            raise self._not_authenticated(f"SaslHandshake answered {handshake.error_code.name.upper()}{enabled}")
        message = client.first()
        for _ in range(SASL_ROUNDS_MAX):
            answer = await self._sasl_request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": message})
            if answer.error_code != ErrorCode.none:
                raise self._not_authenticated(f"{answer.error_code.name.upper()}: {answer.error_message or 'no message'}")
            try:
                message = client.evaluate(answer.auth_bytes)
            except SaslClientError as error:
                raise self._not_authenticated(str(error)) from None
            if message is None:
                break
        else:
            raise self._not_authenticated(f"the exchange did not end within {SASL_ROUNDS_MAX} rounds")
        self.authentications += 1
        lifetime = getattr(answer, "session_lifetime", None)  # v1+
        lifetime_s = lifetime.total_seconds() if lifetime is not None else 0
        self._reauthenticate_at = (asyncio.get_running_loop().time() + lifetime_s * random.uniform(*REAUTHENTICATE_AT_RATIO)
                                   if lifetime_s > 0 else None)

    def _not_authenticated(self, why: str) -> SaslAuthenticationFailed:
        security = self._security
        who = f" as {security.sasl_username}" if security.sasl_username else ""
        return SaslAuthenticationFailed(f"{self.peer}: SASL authentication{who} with {security.sasl_mechanism} failed: {why}")

    async def _sasl_request(self, api_key: int, version: int, values: dict) -> Any:
        return await self._request(api_key, version, values, None, None, authenticating=True)

    async def _reauthenticate_if_due(self) -> None:
        if self._reauthenticate_at is None or asyncio.get_running_loop().time() < self._reauthenticate_at:
            return
        if self._reauthentication is None or self._reauthentication.done():
            self._reauthentication = asyncio.create_task(self._reauthenticate(), name=f"reauthenticate-{self.peer}")
            # Its failure is the connection's, which every user sees; retrieved here in case no caller waits.
            self._reauthentication.add_done_callback(lambda task: task.cancelled() or task.exception())
        # Shielded: one caller giving up must not cut the exchange short for the others.
        await asyncio.shield(self._reauthentication)

    async def _reauthenticate(self) -> None:
        """KIP-368 on this connection: the requests on the wire answered first, then the
        exchange alone; any failure fails the connection, whose users reconnect."""
        self._others_may_send.clear()
        try:
            if self._pending:
                self._drained = asyncio.get_running_loop().create_future()
                await self._drained
            await self._authenticate()
        except BaseException as error:
            self._fail(error if isinstance(error, BrokerUnavailable)
                       else BrokerUnavailable(f"{self.peer}: re-authentication failed: {error!r}"))
            raise
        finally:
            self._drained = None
            self._others_may_send.set()

    # requests
    async def request(self, api_key: int, api_version: int | None, values: dict, *, timeout_s: float | None = None,
                      decode: Callable[[int, memoryview], Any] | None = None) -> Any:
        """Send one request built from `values` (see `codec.build`) at `api_version`, or at the
        negotiated version if None; the decoded response body (by `decode`, if given, else by
        kio), or None for a Produce with acks=0, which Kafka does not answer."""
        return await self._request(api_key, api_version, values, timeout_s, decode, authenticating=False)

    async def _request(self, api_key: int, api_version: int | None, values: dict, timeout_s: float | None,
                       decode: Callable[[int, memoryview], Any] | None, *, authenticating: bool) -> Any:
        version = self.version_for(api_key) if api_version is None else api_version
        body = codec.build(codec.request_schema(api_key, version), values)
        expects_answer = not (api_key == ApiKey.PRODUCE and values.get("acks") == 0)
        return await self._request_frame(
            api_key, version, lambda correlation_id: codec.encode_request(api_key, version, correlation_id, self.client_id, body),
            expects_answer, timeout_s, decode, authenticating=authenticating)

    async def _request_frame(self, api_key: int, version: int, frame: Callable[[int], bytes], expects_answer: bool,
                             timeout_s: float | None, decode: Callable[[int, memoryview], Any] | None, *,
                             authenticating: bool = False) -> Any:
        """Send the request `frame(correlation_id)` writes, and await its answer as `request`;
        `authenticating`: a request of the SASL exchange, which alone may be sent during a
        re-authentication."""
        timeout_s = self.request_timeout_s if timeout_s is None else timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                await self._take_slot(authenticating)
                answer = self._send(api_key, version, frame, expects_answer, decode)
                return None if answer is None else await answer
        except TimeoutError:
            error = BrokerUnavailable(f"{self.peer}: no answer to api {api_key} v{version} within {timeout_s}s; connection closed")
            self._fail(error)
            raise error from None

    async def _take_slot(self, authenticating: bool) -> None:
        self._raise_if_failed()
        if not authenticating:
            await self._reauthenticate_if_due()
        await self._slots.acquire()
        try:
            await self._writable.wait()
            while not (authenticating or self._others_may_send.is_set()):
                # Without the slot meanwhile: the re-authentication needs one.
                self._slots.release()
                await self._others_may_send.wait()
                await self._slots.acquire()
                await self._writable.wait()
            self._raise_if_failed()
        except BaseException:
            self._slots.release()
            raise

    def _send(self, api_key: int, api_version: int, frame: Callable[[int], bytes], expects_answer: bool,
              decode: Callable[[int, memoryview], Any] | None) -> asyncio.Future | None:
        """Write the request and queue it for its answer in one step, so that the queue's order
        is the order on the wire."""
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) % _CORRELATION_ID_LIMIT
        self._transport.write(frame(correlation_id))
        if not expects_answer:
            self._slots.release()
            return None
        answer = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(correlation_id, api_key, api_version, answer, decode))
        return answer

    def _on_frame(self, frame: memoryview) -> None:
        if not self._pending:
            self._fail(ProtocolError(f"{self.peer}: a response to no request"))
            return
        expected = self._pending[0]
        (correlation_id,) = _CORRELATION_ID.unpack_from(frame)
        if correlation_id != expected.correlation_id:
            self._fail(ProtocolError(f"{self.peer}: response to correlation id {correlation_id} where {expected.correlation_id} was due"))
            return
        try:
            if expected.decode is None:
                _, body = codec.decode_response(expected.api_key, expected.api_version, frame)
            else:
                body = expected.decode(expected.api_version, frame)
        except codec.FrameError as error:
            self._fail(ProtocolError(f"{self.peer}: {error}"))
            return
        self._pending.popleft()
        self._slots.release()
        if self._drained is not None and not self._pending and not self._drained.done():
            self._drained.set_result(None)
        if not expected.answer.done():  # its caller may have given up (cancelled)
            expected.answer.set_result(body)

    def _raise_if_failed(self) -> None:
        if self._failure is not None:
            raise type(self._failure)(*self._failure.args)

    def _fail(self, error: BrokerUnavailable) -> None:
        """Close the connection for good and fail every request on it."""
        if self._failure is not None:
            return
        self._failure = error
        if self._transport is not None:
            self._transport.abort()
        while self._pending:
            pending = self._pending.popleft()
            self._slots.release()
            if not pending.answer.done():
                pending.answer.set_exception(type(error)(*error.args))
        if self._drained is not None and not self._drained.done():
            self._drained.set_exception(type(error)(*error.args))
        self._writable.set()  # writers waiting for the transport wake up to the failure

    def _malformed(self, what: str) -> ProtocolError:
        error = ProtocolError(f"{self.peer}: {what}")
        self._fail(error)
        return error

    def _find(self, items: Any, field: str, key: Any, what: str) -> Any:
        """The answer for the topic or partition asked about; a broker that leaves it out is broken."""
        for item in items:
            if getattr(item, field) == key:
                return item
        raise self._malformed(f"the answer lacks {what} {key!r}")

    # what followers, admin tools and the Spark connector need
    async def fetch(
        self,
        topic: str,
        partition: int,
        fetch_offset: int,
        *,
        current_leader_epoch: int = NO_LEADER_EPOCH,
        max_bytes: int,
        max_wait_ms: int,
        min_bytes: int = 1,
    ) -> ReplicaFetchResult:
        """One partition's records from `fetch_offset`, up to the HW, as a consumer."""
        spec = FetchSpec(topic, partition, fetch_offset, current_leader_epoch, max_bytes, max_wait_ms)
        fetched = await self._fetch([spec], CONSUMER_REPLICA_ID, max_bytes, max_wait_ms, min_bytes)
        return fetched.replies[topic, partition]

    async def fetch_as_replica(self, replica_id: int, specs: list[FetchSpec], max_wait_ms: int, max_bytes: int,
                               changes: RoundChanges | None = None) -> RoundAnswer:
        """The follower's fetch (docs/design.md §6.1) of several partitions at once, up to the
        log end, which also tells the leader this replica's log end offset in each. The leader
        answers once any has data, or after `max_wait_ms`. In a fetch session (KIP-227) where
        the leader grants one, whose incremental answers leave out the partitions with nothing
        new (RoundAnswer); `changes`: how `specs` differ from the round before (FetchRounds)."""
        return await self._fetch(specs, replica_id, max_bytes, max_wait_ms, 1, self._fetch_session, changes)

    async def _fetch(self, specs: list[FetchSpec], replica_id: int, max_bytes: int, max_wait_ms: int,
                     min_bytes: int, session: FetcherSession | None = None,
                     changes: RoundChanges | None = None) -> RoundAnswer:
        version = self.version_for(ApiKey.FETCH)
        by_id = version >= FIRST_TOPIC_ID_VERSION and named_by_id(specs)
        if version >= FIRST_TOPIC_ID_VERSION and not by_id:
            version = FIRST_TOPIC_ID_VERSION - 1
        if version < FIRST_SESSION_VERSION:
            session = None
        sent = outside_session(specs, by_id)

        def frame(correlation_id: int) -> bytes:
            nonlocal sent
            if session is not None:  # as it goes on the wire: a session's requests are told apart by order
                sent = session.request(specs, by_id, changes)
            return encode_fetch_request(
                version, correlation_id, self.client_id, replica_id=replica_id, max_wait_ms=max_wait_ms,
                min_bytes=min_bytes, max_bytes=max_bytes, isolation_level=READ_UNCOMMITTED, specs=sent.sent,
                session_id=sent.session_id, session_epoch=sent.epoch, forgotten=sent.forgotten)

        def decode(api_version: int, response: memoryview) -> tuple[int, tuple[list[FetchedPartition], bool] | None]:
            # Here, as each answer comes in, in order, even one its caller gave up on: the
            # session must see every answer.
            refused, session_id, partitions = decode_fetch_response(api_version, response)
            return refused, (partitions, True) if session is None else session.answered(sent, session_id, refused, partitions)

        refused, answered = await self._request_frame(
            ApiKey.FETCH, version, frame, True, self.request_timeout_s + max_wait_ms / 1000,  # the broker may hold it max_wait_ms
            decode)
        if answered is None:  # the session ended: this round goes again, outside any session
            return await self._fetch(specs, replica_id, max_bytes, max_wait_ms, min_bytes)
        if refused != ErrorCode.none:  # v7+: the whole request refused
            return RoundAnswer({(spec.topic, spec.partition): ReplicaFetchResult(_error_code(refused), -1, -1, b"")
                                for spec in specs})
        partitions, complete = answered
        if not partitions:
            fetched = {}
        else:
            # From version 13 on the answer names topics by id.
            name_of = {spec.topic_id: spec.topic for spec in specs}.get if by_id else str
            fetched = {(name_of(found.topic), found.partition): _replica_result(found) for found in partitions}
        if not complete:
            return RoundAnswer(fetched, lambda spec: _replica_result(session.last_told(spec)))
        for spec in specs:
            if (spec.topic, spec.partition) not in fetched:
                raise ProtocolError(f"{self.peer}: fetch answer without {spec.topic}-{spec.partition}")
        return RoundAnswer(fetched)

    async def offsets_for_leader_epochs(self, asks: list[EpochAsk], replica_id: int) -> dict[tuple[str, int], EpochEndOffset]:
        """KIP-101, for each asked partition in one request, by (topic, partition): the largest
        epoch <= its `leader_epoch` the leader knows and where it ended."""
        by_topic: dict[str, list[dict]] = {}
        for ask in asks:
            by_topic.setdefault(ask.topic, []).append(
                {"partition": ask.partition, "current_leader_epoch": ask.current_leader_epoch, "leader_epoch": ask.leader_epoch})
        answer = await self.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, None, {
            "replica_id": replica_id,
            "topics": [{"topic": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
        })
        found = {(topic.topic, partition.partition): EpochEndOffset(partition.error_code, partition.leader_epoch, partition.end_offset)
                 for topic in answer.topics for partition in topic.partitions}
        for ask in asks:
            if (ask.topic, ask.partition) not in found:
                raise self._malformed(f"the answer lacks partition {ask.topic}-{ask.partition}")
        return found

    async def metadata(self, topics: list[str] | None) -> ClusterMetadata:
        """Brokers and the given topics' partitions (every topic if None); topics are never
        created by asking."""
        version = self.version_for(ApiKey.METADATA)
        if topics is None:
            asked = [] if version == 0 else None  # v0 has no null: its empty list means all
        else:
            asked = [{"topic_id": None, "name": name} for name in topics]
        answer = await self.request(ApiKey.METADATA, version, {
            "topics": asked, "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False,
        })
        brokers = {broker.node_id: BrokerAddress(broker.host, broker.port, getattr(broker, "rack", None)) for broker in answer.brokers}
        described = {
            topic.name: TopicMetadata(topic.error_code, {
                found.partition_index: PartitionMetadata(found.error_code, found.leader_id, getattr(found, "leader_epoch", NO_LEADER_EPOCH),
                                                         tuple(found.replica_nodes), tuple(found.isr_nodes))
                for found in topic.partitions})
            for topic in answer.topics
        }
        return ClusterMetadata(getattr(answer, "controller_id", -1), brokers, described)

    async def produce(self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int) -> ProduceResult:
        """Append record batches (v2, opaque bytes); with acks=0 nothing is answered, so the
        result is (NONE, -1)."""
        answer = await self.request(ApiKey.PRODUCE, None, {
            "transactional_id": None, "acks": acks, "timeout": timeout_ms,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
        }, timeout_s=self.request_timeout_s + timeout_ms / 1000)  # acks=all may wait timeout_ms for the ISR
        if answer is None:
            return ProduceResult(ErrorCode.none, -1)
        found = self._find(self._find(answer.responses, "name", topic, "topic").partition_responses, "index", partition, "partition")
        return ProduceResult(found.error_code, found.base_offset)

    async def list_offsets(self, topic: str, partition: int, timestamp: int, *,
                           current_leader_epoch: int = NO_LEADER_EPOCH) -> ListedOffset:
        """The first offset at or after `timestamp` (ms), or EARLIEST_TIMESTAMP/LATEST_TIMESTAMP."""
        answer = await self.request(ApiKey.LIST_OFFSETS, None, {
            "replica_id": CONSUMER_REPLICA_ID, "isolation_level": READ_UNCOMMITTED,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": current_leader_epoch, "timestamp": timestamp}]}],
        })
        found = self._find(self._find(answer.topics, "name", topic, "topic").partitions, "partition_index", partition, "partition")
        return ListedOffset(found.error_code, found.offset, found.timestamp)

    async def high_watermarks(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Each partition's latest offset (its high watermark, read uncommitted), by one
        ListOffsets; a partition answered with an error (not led there, unknown) is left out."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        answer = await self.request(ApiKey.LIST_OFFSETS, None, {
            "replica_id": CONSUMER_REPLICA_ID, "isolation_level": READ_UNCOMMITTED,
            "topics": [{"name": topic, "partitions": [
                {"partition_index": partition, "current_leader_epoch": NO_LEADER_EPOCH, "timestamp": LATEST_TIMESTAMP}
                for partition in indexes]} for topic, indexes in by_topic.items()],
        })
        return {(topic.name, found.partition_index): found.offset for topic in answer.topics
                for found in topic.partitions if found.error_code == ErrorCode.none}

    # -- transactions: what an operator's tool asks (cli/transactions.py) --------------------

    async def find_transaction_coordinator(self, transactional_id: str) -> tuple[ErrorCode, int]:
        """(error, broker id) of the coordinator of `transactional_id`."""
        answer = await self.request(ApiKey.FIND_COORDINATOR, FIND_COORDINATOR_VERSION,
                                    {"key": transactional_id, "key_type": TRANSACTION_COORDINATOR_KEY})
        return _error_code(answer.error_code), int(answer.node_id)

    async def describe_producers(self, topic: str, partition: int) -> tuple[ErrorCode, list[ProducerState]]:
        """The partition's active producers, asked of its leader."""
        answer = await self.request(ApiKey.DESCRIBE_PRODUCERS, DESCRIBE_PRODUCERS_VERSION,
                                    {"topics": [{"name": topic, "partition_indexes": [partition]}]})
        found = self._find(self._find(answer.topics, "name", topic, "topic").partitions, "partition_index", partition, "partition")
        return _error_code(found.error_code), [
            ProducerState(int(state.producer_id), int(state.producer_epoch), int(state.last_sequence),
                          int(state.last_timestamp), int(state.coordinator_epoch), int(state.current_txn_start_offset))
            for state in found.active_producers]

    async def list_transactions(self, states: Iterable[str] = (), producer_ids: Iterable[int] = (),
                                duration_ms: int = -1) -> tuple[ErrorCode, list[TransactionListing]]:
        """The transactions this broker coordinates, filtered by state, producer id and (unless -1)
        having run at least `duration_ms`."""
        answer = await self.request(ApiKey.LIST_TRANSACTIONS, LIST_TRANSACTIONS_VERSION, {
            "state_filters": list(states), "producer_id_filters": list(producer_ids), "duration_filter": duration_ms})
        return _error_code(answer.error_code), [
            TransactionListing(state.transactional_id, int(state.producer_id), state.transaction_state)
            for state in answer.transaction_states]

    async def describe_transactions(self, transactional_ids: Iterable[str]) -> list[TransactionDescription]:
        """The named transactions, asked of their coordinator."""
        answer = await self.request(ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_TRANSACTIONS_VERSION,
                                    {"transactional_ids": list(transactional_ids)})
        return [TransactionDescription(
            _error_code(state.error_code), state.transactional_id, state.transaction_state,
            int(state.transaction_timeout.total_seconds() * 1000), _epoch_ms(state.transaction_start_time),
            int(state.producer_id), int(state.producer_epoch),
            tuple((topic.topic, int(partition)) for topic in state.topics for partition in topic.partitions))
            for state in answer.transaction_states]

    async def write_txn_markers(self, writes: Sequence[MarkerWrite], timeout_s: float | None = None
                                ) -> dict[tuple[int, str, int], ErrorCode]:
        """Each marker written to its partitions, led by this broker, in one WriteTxnMarkers: the
        error of each by (producer id, topic, partition). The answer names markers by producer id
        alone, so no two writes may share one."""
        if len({write.marker.producer_id for write in writes}) != len(writes):
            raise ValueError("two markers of one WriteTxnMarkers request name the same producer")
        markers = []
        for write in writes:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in write.partitions:
                by_topic.setdefault(topic, []).append(partition)
            marker = write.marker
            markers.append({"producer_id": marker.producer_id, "producer_epoch": marker.producer_epoch,
                            "transaction_result": marker.committed, "coordinator_epoch": marker.coordinator_epoch,
                            "topics": [{"name": topic, "partition_indexes": indexes} for topic, indexes in by_topic.items()]})
        answer = await self.request(ApiKey.WRITE_TXN_MARKERS, None, {"markers": markers}, timeout_s=timeout_s)
        found = {(written.producer_id, topic.name, partition.partition_index): _error_code(partition.error_code)
                 for written in answer.markers for topic in written.topics for partition in topic.partitions}
        for write in writes:
            for topic, partition in write.partitions:
                if (write.marker.producer_id, topic, partition) not in found:
                    raise self._malformed(f"the answer lacks producer {write.marker.producer_id}'s {topic}-{partition}")
        return found
