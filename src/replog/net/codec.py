"""Kafka request decoding and response encoding (via kio), and the versions replog speaks.

Sans-IO: bytes in, typed entities out, and back. A request frame (without its 4-byte size) is
`api_key i16, api_version i16, correlation_id i32, client_id string, [tagged fields], body`;
the request header version (1 or 2) and response header version (0 or 1) follow from whether
the API version is "flexible", which kio's schemas know. ApiVersions always answers with
response header v0, so that a client can read the answer to a version it guessed wrong.

Version ranges start at the Kafka 4 floor and are contiguous, crossing from non-flexible to
flexible versions, so librdkafka, kcat, kafka-python and aiokafka (non-flexible only) all find
a common version. Maxima stop before the versions that replace topic names by topic ids.

replog's own APIs (replog_apis.py: StateChangeEvents, key 32000) are read and written the same
way, from schemas declared there.

Every frame, request or response, is checked (frame_check.py) before a reader builds anything
from it. A response may be written in steps (body_encoding), for a handler that answers a big
request in slices (loop_slices.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import io
import struct
import types
import typing
from collections.abc import Generator
from functools import cache
from typing import Any, Callable, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.schema.describe_transactions.v0 import response as describe_transactions_v0
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial._introspect import get_field_tag
from kio.serial._serialize import get_field_writer
from kio.static.primitive import TZAware

from . import frame_check, replog_apis

_REQUEST_PREFIX = struct.Struct(">hhi")
_SIZE = struct.Struct(">i")
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    INCREMENTAL_ALTER_CONFIGS = 44
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    UNREGISTER_BROKER = 64
    STATE_CHANGE_EVENTS = replog_apis.STATE_CHANGE_EVENTS  # replog's own


# api key -> (min version, max version) that replog implements: static, so that the client
# (net/client.py) knows them without importing the server's handlers, each of which must
# implement its API's whole range here (handlers/__init__.py checks that one exists).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 12),
    ApiKey.FETCH: (4, 13),  # 13 offered to replog's followers only (handlers/api_versions.py)
    ApiKey.LIST_OFFSETS: (1, 8),
    ApiKey.METADATA: (0, 12),
    # The group APIs: from the Kafka 4 floor (JoinGroup 2, OffsetCommit 2, OffsetFetch 1) to the
    # last versions before topic ids (OffsetFetch 10).
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 5),
    ApiKey.JOIN_GROUP: (2, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),  # 5 only as 4: transactions v2 (KIP-890 part 2) are not offered
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),  # 6 is KIP-939's two-phase commit, not implemented
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),  # 4+ from brokers only: KIP-890's verification
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    # 5 asks for an epoch bump at every end (KIP-890 part 2, transaction version 2): not implemented.
    ApiKey.END_TXN: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_ACLS: (1, 3),  # Kafka 4's range: v0 predates pattern types
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.WRITE_TXN_MARKERS: (1, 2),  # Kafka 4's: v0 went with KIP-896; v2 adds the marker's transaction version
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.UNREGISTER_BROKER: (0, 0),
    ApiKey.STATE_CHANGE_EVENTS: (0, 0),
}


# api key -> its own body decoder, `decode(frame, body_offset, api_version) -> body`, for APIs
# whose bodies kio would copy more than needed (Produce). Any IndexError, ValueError or
# struct.error it raises means a malformed frame.
BODY_DECODERS: dict[int, Callable[[memoryview | bytes, int, int], Any]] = {}


RESPONSE_ITEMS_MAX = 20 * frame_check.ITEMS_MAX  # see decode_response


class FrameError(Exception):
    """The frame cannot be answered: the connection is closed (as Kafka closes it)."""


class WireReader:
    """Kafka's primitive types from a frame, flexible or not: for the bodies read by hand rather
    than through kio (Produce requests, handlers/produce.py; Fetch responses, fetch_decoding.py)."""

    def __init__(self, frame: memoryview | bytes, position: int, flexible: bool):
        self.frame, self.position, self.flexible = frame, position, flexible

    def fixed(self, layout: struct.Struct) -> int:
        (value,) = self.fields(layout)
        return value

    def fields(self, layout: struct.Struct) -> tuple:
        values = layout.unpack_from(self.frame, self.position)
        self.position += layout.size
        return values

    def uvarint(self) -> int:
        value = shift = 0
        for _ in range(5):  # a uvarint of an int32 has at most 5 bytes
            byte = self.frame[self.position]
            self.position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
        raise ValueError("uvarint longer than 5 bytes")

    def length(self, plain: struct.Struct) -> int:
        """A string/bytes/array length; -1 for null. Never more than the bytes left."""
        count = self.uvarint() - 1 if self.flexible else self.fixed(plain)
        if count < -1 or count > len(self.frame) - self.position:
            raise ValueError(f"length {count} with {len(self.frame) - self.position} bytes left")
        return count

    def chunk(self, size: int) -> memoryview:
        view = memoryview(self.frame)[self.position:self.position + size]
        if len(view) != size:
            raise ValueError("field runs past the frame")
        self.position += size
        return view

    def string(self) -> str | None:
        size = self.length(_I16)
        return None if size < 0 else str(self.chunk(size), "utf-8")

    def records(self) -> bytearray | None:
        size = self.length(_I32)
        return None if size < 0 else bytearray(self.chunk(size))

    def tagged_fields(self) -> None:
        """Skips a flexible entity's tagged fields: none carries what the hand-read bodies use."""
        if self.flexible:
            count = self.uvarint()  # not a length: no null, no offset of 1
            if count > (len(self.frame) - self.position) // 2:
                raise ValueError(f"{count} tagged fields with {len(self.frame) - self.position} bytes left")
            for _ in range(count):  # bounded: each takes at least 2 bytes
                self.uvarint()
                self.chunk(self.uvarint())


def wire_length(count: int, flexible: bool, plain: struct.Struct) -> bytes:
    """A string/bytes/array length as written: a uvarint of count + 1 in flexible versions, else
    `plain` (the writing side of WireReader.length, for the bodies written by hand)."""
    if not flexible:
        return plain.pack(count)
    value, out = count + 1, bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def wire_string(text: str | None, flexible: bool) -> bytes:
    """A (nullable) string as written: its length (wire_length), then its UTF-8 bytes."""
    if text is None:
        return wire_length(-1, flexible, _I16)
    encoded = text.encode()
    return wire_length(len(encoded), flexible, _I16) + encoded


class UnsupportedVersion(Exception):
    """A known API at a version replog does not speak; carries what is needed to answer."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"api {api_key} version {api_version} is not supported")
        self.api_key, self.api_version, self.correlation_id = api_key, api_version, correlation_id


class Overtaken:
    """Whether a later request arrived on the connection of a request still being served. A
    connection's responses leave in request order, so a long poll (Fetch's max_wait) would hold
    the later request's answer: it should answer now with what it has. Kafka's own network
    layer reads nothing more from a connection until it answered, so no client relies on a
    parked fetch staying parked."""

    __slots__ = ("happened", "_listener")

    def __init__(self) -> None:
        self.happened = False
        self._listener: Callable[[], None] | None = None

    def listen(self, listener: Callable[[], None]) -> None:
        """Call `listener` when it happens (at once if it has)."""
        self._listener = listener
        if self.happened:
            listener()

    def set(self) -> None:
        if not self.happened:
            self.happened = True
            if self._listener is not None:
                self._listener()


ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal of a client that did not authenticate


@dataclasses.dataclass(frozen=True, slots=True)
class Request:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any
    # Set by the connection (net/framing.py) for a request that may wait; None where nothing
    # can overtake it (a handler called directly).
    overtaken: Overtaken | None = None
    # The peer's IP address, set by the connection: the host ACLs name (net/authorization.py).
    # "" for a handler called directly.
    client_host: str = ""
    # Set by the connection for Produce: held while a request's appends are started, so that one
    # answered in slices keeps its appends ahead of the connection's next request's, in arrival
    # order, as appends started in one step would be.
    appends_in_order: asyncio.Lock | None = None
    # The name of the listener the request came in on: answers that name brokers give that
    # listener's addresses. "" for a handler called directly.
    listener: str = ""
    # Who sent it (net/principals.py): User:ANONYMOUS, or the user a client certificate maps to,
    # or the user SASL authenticated (net/sasl_session.py).
    principal: str = ANONYMOUS
    # Set by the connection of a SASL listener for SaslHandshake and SaslAuthenticate: its
    # session (net/sasl_session.py), which they advance. None elsewhere.
    sasl: Any = None
    # The request's frame, size prefix excluded: what a Produce counts against producer_byte_rate,
    # as Kafka counts a request's size. 0 for a request built directly.
    size_bytes: int = 0


def _load_request_schema(api_key: int, api_version: int) -> type:
    own = replog_apis.SCHEMAS.get((api_key, api_version))
    return own[0] if own else load_request_schema(api_key, api_version)


def _load_response_schema(api_key: int, api_version: int) -> type:
    own = replog_apis.SCHEMAS.get((api_key, api_version))
    return own[1] if own else load_response_schema(api_key, api_version)


@cache
def _request_codec(api_key: int, api_version: int):
    schema = _load_request_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    return entity_reader(header_schema), entity_reader(schema), frame_check.compile_message(header_schema, schema)


@cache
def _response_codec(api_key: int, api_version: int):
    schema = _load_response_schema(api_key, api_version)
    return schema, schema.__header_schema__, entity_writer(schema.__header_schema__), entity_writer(schema)


def peek(frame: memoryview | bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) of a frame; FrameError if it is too short."""
    if len(frame) < _REQUEST_PREFIX.size:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than a request header")
    return _REQUEST_PREFIX.unpack_from(frame)


def decode_request(frame: memoryview | bytes, listener: str = "", principal: str = ANONYMOUS,
                   client_host: str = "") -> Request:
    """Decode one request frame, which `principal` sent on `listener` from `client_host`;
    trailing bytes after the body are ignored, as Kafka does.

    The frame is checked first (frame_check): a length or count the bytes left cannot hold, a
    null the schema does not allow, or more than frame_check.ITEMS_MAX items is a FrameError
    before any reader reserves memory for it."""
    api_key, api_version, correlation_id = peek(frame)
    versions = SUPPORTED_VERSIONS.get(api_key)
    if versions is None:
        raise FrameError(f"unknown or unsupported api key {api_key}")
    if not versions[0] <= api_version <= versions[1]:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    read_header, read_body, program = _request_codec(api_key, api_version)
    if isinstance(frame, memoryview):
        frame = frame.toreadonly()  # kio's native reader refuses writable buffers
    try:
        frame_check.check(program, frame, 0, frame_check.ITEMS_MAX)
        header, header_size = read_header(frame, 0)
        own_decoder = BODY_DECODERS.get(api_key)
        body = own_decoder(frame, header_size, api_version) if own_decoder else read_body(frame, header_size)[0]
    except Exception as error:  # kio raises several types for truncated or garbled input
        raise FrameError(f"malformed api {api_key} v{api_version} request: {type(error).__name__}: {error}") from None
    return Request(api_key, api_version, correlation_id, header.client_id, body, listener=listener, principal=principal,
                   client_host=client_host, size_bytes=len(frame))


def response_schema(api_key: int, api_version: int) -> type:
    return _response_codec(api_key, api_version)[0]


class EncodedBody(NamedTuple):
    """A response body a handler encoded itself, as parts written without joining them (the
    Fetch path, where the parts are log bytes)."""

    parts: list[bytes]
    error_code: int = 0  # the response's own, which the server counts as it does an entity's
    # Where in parts[0] the body's throttle_time_ms is, which the server sets for a client over
    # its quota (net/client_throttles.py); None where the version has none.
    throttle_at: int | None = None


@cache
def leads_with_throttle(schema: type) -> bool:
    """Whether a response body of `schema` begins with its throttle_time_ms, as most do."""
    fields = dataclasses.fields(schema)
    return bool(fields) and fields[0].name == "throttle_time"


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> list[bytes]:
    """The whole response frame as parts: size prefix and header first."""
    _, header_schema, write_header, write_body = _response_codec(api_key, api_version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    write_header(out, header_schema(correlation_id=correlation_id))
    if isinstance(body, EncodedBody):
        size = out.tell() - _SIZE.size + sum(len(part) for part in body.parts)
        out.seek(0)
        out.write(_SIZE.pack(size))
        return [out.getvalue(), *body.parts]
    write_body(out, body)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - _SIZE.size)
    del frame
    return [out.getvalue()]


@cache
def _request_writers(api_key: int, api_version: int):
    schema = _load_request_schema(api_key, api_version)
    return schema, schema.__header_schema__, entity_writer(schema.__header_schema__), entity_writer(schema)


def request_schema(api_key: int, api_version: int) -> type:
    return _request_writers(api_key, api_version)[0]


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """The whole request frame, size prefix first (the client side of `decode_request`)."""
    _, header_schema, write_header, write_body = _request_writers(api_key, api_version)
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    header = header_schema(request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id)
    write_header(out, header)
    write_body(out, body)
    frame = out.getbuffer()
    _SIZE.pack_into(frame, 0, len(frame) - _SIZE.size)
    del frame
    return out.getvalue()


# Kafka answers a DescribeTransactions start time of -1 for an id with no open transaction,
# which kio's schema refuses (its instants are never negative): such responses are read with the
# field nullable, -1 as None.
_TransactionStateRead = dataclasses.make_dataclass(
    "TransactionState", [("transaction_start_time", TZAware | None,
                          dataclasses.field(metadata={"kafka_type": "datetime_i64"}, default=None))],
    bases=(describe_transactions_v0.TransactionState,), frozen=True, slots=True, kw_only=True)
_RESPONSES_READ_AS = {(ApiKey.DESCRIBE_TRANSACTIONS, 0): dataclasses.make_dataclass(
    "DescribeTransactionsResponse", [("transaction_states", tuple[_TransactionStateRead, ...])],
    bases=(describe_transactions_v0.DescribeTransactionsResponse,), frozen=True, slots=True, kw_only=True)}


@cache
def _response_readers(api_key: int, api_version: int):
    schema = _RESPONSES_READ_AS.get((api_key, api_version)) or _load_response_schema(api_key, api_version)
    program = frame_check.compile_message(schema.__header_schema__, schema)
    return entity_reader(schema.__header_schema__), entity_reader(schema), program


def response_program(api_key: int, api_version: int) -> frame_check.Program:
    """The frame check's program of a response, for the responses read by hand (Fetch)."""
    return _response_readers(api_key, api_version)[2]


def decode_response(api_key: int, api_version: int, frame: memoryview | bytes) -> tuple[int, Any]:
    """(correlation_id, body) of one response frame without its size prefix (the client side of
    `encode_response`). The body is a copy: the frame's buffer may be reused at once.

    A broker that does not speak the ApiVersions version asked answers error 35
    UNSUPPORTED_VERSION in the v0 body, whatever version was asked, so such an answer is read
    as v0; its error code is the first field of every version's body, after the v0 header that
    every ApiVersions response has.

    The frame is checked first, as a request is (decode_request), with a larger budget of
    items: a response holds what was asked and the cluster's size besides. A Metadata response
    naming every topic of a cluster of 500,000 partitions (RF 3) holds about 3.5M items.
    """
    if isinstance(frame, memoryview):
        frame = frame.toreadonly()  # kio's native reader refuses writable buffers
    try:
        if api_key == ApiKey.API_VERSIONS and _I16.unpack_from(frame, _I32.size)[0] == ErrorCode.unsupported_version:
            api_version = 0
        read_header, read_body, program = _response_readers(api_key, api_version)
        frame_check.check(program, frame, 0, RESPONSE_ITEMS_MAX)
        header, header_size = read_header(frame, 0)
        return header.correlation_id, read_body(frame, header_size)[0]
    except Exception as error:  # kio raises several types for truncated or garbled input
        raise FrameError(f"malformed api {api_key} v{api_version} response: {type(error).__name__}: {error}") from None


def _milliseconds(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def _instant(value: Any) -> Any:
    """kio's datetime_i64 from milliseconds since the epoch, whose null is Kafka's -1."""
    if isinstance(value, int):
        return None if value == -1 else _EPOCH + datetime.timedelta(milliseconds=value)
    return value


_ERROR_CODES = {int(code): code for code in ErrorCode}  # a lookup: ErrorCode(value) took 3 us


def _error_code(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, ErrorCode):
        code = _ERROR_CODES.get(value)
        return ErrorCode(value) if code is None else code
    return value


@cache
def _field_plan(schema: type) -> tuple[tuple[str, type | None, bool, Callable | None], ...]:
    """Per field: (name, nested entity class or None, whether the value is a tuple of them,
    converter from the plain value a handler holds: ints for error codes, milliseconds and
    instants)."""
    hints = typing.get_type_hints(schema)
    plan = []
    for field in dataclasses.fields(schema):
        hint = hints[field.name]
        if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
            hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
        is_tuple = typing.get_origin(hint) is tuple
        candidates = typing.get_args(hint) if is_tuple else (hint,)
        nested = next((arg for arg in candidates if dataclasses.is_dataclass(arg)), None)
        kafka_type = field.metadata.get("kafka_type", "")
        convert = (_error_code if kafka_type == "error_code" else _milliseconds if kafka_type.startswith("timedelta")
                   else _instant if kafka_type == "datetime_i64" else None)
        plan.append((field.name, nested, is_tuple, convert))
    return tuple(plan)


def build(schema: type, values: dict) -> Any:
    """An entity of `schema` from plain data: nested entities from dicts (or lists of dicts),
    keys the schema's version lacks ignored, absent keys left to the schema's defaults.

    Lets a handler describe one response for every version it supports.
    """
    kwargs = {}
    for name, nested, is_tuple, convert in _field_plan(schema):
        if name not in values:
            continue
        value = values[name]
        if convert is not None:
            value = convert(value)
        elif nested is not None and value is not None:
            value = tuple(build(nested, item) for item in value) if is_tuple else build(nested, value)
        elif is_tuple and value is not None:
            value = tuple(value)
        kwargs[name] = value
    return schema(**kwargs)


def build_response(request: Request, values: dict) -> Any:
    return build(response_schema(request.api_key, request.api_version), values)


# At most this many array items are built and written in one step of body_encoding: a few
# hundred microseconds of kio's writer.
ITEMS_PER_STEP = 64


def body_encoding(schema: type, values: dict) -> Generator[None, None, bytes]:
    """The bytes of `build(schema, values)` as kio writes them, written in steps: the generator
    yields between steps, so that its caller may let others run (net/loop_slices.py), and returns
    the bytes. A step builds and writes about ITEMS_PER_STEP array items; the entity around a
    larger array is written by kio with the array empty, and the array's items are spliced in
    where kio wrote its empty length."""
    if _items_in(values, ITEMS_PER_STEP) <= ITEMS_PER_STEP:
        yield
        return _written(schema, build(schema, values))
    plan = _write_plan(schema)
    arrays = {name: nested for name, nested, tagged in plan if nested is not None and not tagged}
    shell = build(schema, values | {name: () for name in arrays if values.get(name)})
    written = _written(schema, shell)
    parts, copied, offset = [], 0, 0  # in `written`: copied up to `copied`; fields start at `offset`
    empty = len(wire_length(0, schema.__flexible__, _I32))
    for name, nested, tagged in plan:
        items = values.get(name) if name in arrays else None
        if tagged:
            continue
        if not items:
            offset += _field_size(schema, name, getattr(shell, name))
            continue
        parts += [written[copied:offset], wire_length(len(items), schema.__flexible__, _I32)]
        yield from _items_encoding(nested, items, parts)
        copied = offset = offset + empty
    parts.append(written[copied:])
    return b"".join(parts)


def _items_encoding(schema: type, items: list[dict], parts: list[bytes]) -> Generator[None, None, None]:
    """Appends the bytes of an array's items to `parts`, yielding once about ITEMS_PER_STEP items
    (theirs and those they hold) were written; an item holding more is written in steps of its own."""
    write = entity_writer(schema)
    may_hold_items = any(nested is not None and not tagged for _, nested, tagged in _write_plan(schema))
    out, written = io.BytesIO(), 0
    for item in items:  # bounded by the response's items
        held = _items_in(item, ITEMS_PER_STEP) if may_hold_items else 0
        if held > ITEMS_PER_STEP:
            parts += [out.getvalue(), (yield from body_encoding(schema, item))]
            out = io.BytesIO()
            continue
        write(out, build(schema, item))
        written += 1 + held
        if written >= ITEMS_PER_STEP:
            written = 0
            yield
    parts.append(out.getvalue())


def _items_in(values: dict, limit: int) -> int:
    """The items of the lists nested in `values` (a response's plain data), counted up to just
    past `limit`."""
    pending, count = [values], 0
    while pending:  # bounded: stops past `limit` items
        for nested in pending.pop().values():
            if isinstance(nested, (list, tuple)) and nested and isinstance(nested[0], dict):
                count += len(nested)
                if count > limit:
                    return count
                pending += nested
    return count


def _written(schema: type, entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(schema)(out, entity)
    return out.getvalue()


@cache
def _write_plan(schema: type) -> tuple[tuple[str, type | None, bool], ...]:
    """Per field, in kio's order for the non-tagged ones: (name, the entity class of an array of
    entities or None, whether it is tagged)."""
    return tuple((name, nested if is_tuple else None, get_field_tag(field) is not None)
                 for (name, nested, is_tuple, _), field in zip(_field_plan(schema), dataclasses.fields(schema)))


@cache
def _field_writer(schema: type, name: str) -> Callable:
    field = next(field for field in dataclasses.fields(schema) if field.name == name)
    return get_field_writer(field, schema.__flexible__, False, False)


def _field_size(schema: type, name: str, value: Any) -> int:
    out = io.BytesIO()
    _field_writer(schema, name)(out, value)
    return out.tell()
