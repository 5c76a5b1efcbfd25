"""A blocking Kafka connection for hostile bytes: send anything, then read what comes back,
answers or a close, within a deadline. Also the well-formed requests a case checks with
(ApiVersions, ListOffsets, Produce), encoded and decoded by replog's codec.

Source addresses: any 127.0.0.x may be bound as a connection's source, which is how a flood
from "many hosts" is sent from one process. Against an SSL listener a connection completes its
TLS handshake first, and its hostile bytes travel inside TLS.
"""

from __future__ import annotations

import enum
import itertools
import socket
import ssl
import struct
import time
from typing import Any, NamedTuple

from kio.schema.errors import ErrorCode

from replog.net import codec
from replog.net.codec import ApiKey

from .seeds import CLIENT_ID

SIZE = struct.Struct(">i")
ANSWER_TIMEOUT_S = 10.0
_correlation_ids = itertools.count(1000)


class Ending(enum.Enum):
    ANSWERED = "answered"  # every frame sent was answered, the connection open
    CLOSED = "closed"  # the broker closed the connection (after answering some, maybe)
    SILENT = "silent"  # neither within the deadline: a request that waits, or a broker that hangs


class Exchange(NamedTuple):
    ending: Ending
    answers: list[bytes]  # response frames, size prefix stripped


def connect(host: str, port: int, source: str | None, timeout_s: float, tls: ssl.SSLContext | None) -> socket.socket:
    """A socket to the broker, its TLS handshake done if `tls` (the handshake's failure raises
    ssl.SSLError, an OSError)."""
    sock = socket.create_connection((host, port), timeout=timeout_s, source_address=(source, 0) if source else None)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


class Connection:
    """One TCP connection to the broker, TLS over it for an SSL listener; closed on leaving the `with`."""

    def __init__(self, host: str, port: int, *, source: str | None = None, timeout_s: float = ANSWER_TIMEOUT_S,
                 tls: ssl.SSLContext | None = None):
        self.sock = connect(host, port, source, timeout_s, tls)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._pending = bytearray()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        # RST rather than FIN: a fuzzer opens tens of thousands of connections, and its side's
        # TIME_WAIT states would exhaust the ephemeral ports.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """False if the broker has closed the connection already."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def exchange(self, frames: list[bytes] | tuple[bytes, ...], answers_expected: int, timeout_s: float) -> Exchange:
        """Send `frames` (raw bytes, size prefixes as they are) and read up to
        `answers_expected` response frames, the close, or the deadline, whichever comes first."""
        for frame in frames:
            if not self.send(frame):
                return Exchange(Ending.CLOSED, [])
        return self.read_answers(answers_expected, timeout_s)

    def read_answers(self, answers_expected: int, timeout_s: float) -> Exchange:
        answers: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(answers) < answers_expected:  # bounded by the deadline
            frame = self._take_frame()
            if frame is not None:
                answers.append(frame)
                continue
            left_s = deadline - time.monotonic()
            if left_s <= 0:
                return Exchange(Ending.SILENT, answers)
            self.sock.settimeout(left_s)
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                return Exchange(Ending.SILENT, answers)
            except OSError:
                return Exchange(Ending.CLOSED, answers)
            if not chunk:
                return Exchange(Ending.CLOSED, answers)
            self._pending += chunk
        return Exchange(Ending.ANSWERED, answers)

    def _take_frame(self) -> bytes | None:
        if len(self._pending) < SIZE.size:
            return None
        (size,) = SIZE.unpack_from(self._pending)
        if len(self._pending) < SIZE.size + size:
            return None
        frame = bytes(self._pending[SIZE.size:SIZE.size + size])
        del self._pending[:SIZE.size + size]
        return frame

    def request(self, api_key: int, version: int, values: dict, timeout_s: float = ANSWER_TIMEOUT_S) -> Any | None:
        """A well-formed request and its decoded answer; None if the broker closed or was silent."""
        schema = codec.request_schema(api_key, version)
        frame = codec.encode_request(api_key, version, next(_correlation_ids), CLIENT_ID, codec.build(schema, values))
        exchange = self.exchange([frame], 1, timeout_s)
        if exchange.ending is not Ending.ANSWERED:
            return None
        return codec.decode_response(api_key, version, exchange.answers[0])[1]


def api_versions_answered(host: str, port: int, timeout_s: float = ANSWER_TIMEOUT_S, source: str | None = None,
                          tls: ssl.SSLContext | None = None) -> bool:
    """Whether the broker answers ApiVersions on a connection of its own within `timeout_s`."""
    try:
        with Connection(host, port, source=source, timeout_s=timeout_s, tls=tls) as connection:
            answer = connection.request(ApiKey.API_VERSIONS, 3, {"client_software_name": CLIENT_ID,
                                                                  "client_software_version": "1.0"}, timeout_s)
            return answer is not None and answer.error_code == 0
    except OSError:
        return False


def high_watermark(connection: Connection, topic: str, partition: int) -> int | None:
    """The partition's high watermark (ListOffsets, latest, read uncommitted, as a consumer asks
    it); None if not answered."""
    answer = connection.request(ApiKey.LIST_OFFSETS, 7, {
        "replica_id": -1, "isolation_level": 0,
        "topics": [{"name": topic, "partitions": [{"partition_index": partition, "current_leader_epoch": -1,
                                                   "timestamp": -1}]}]})
    if answer is None:
        return None
    found = answer.topics[0].partitions[0]
    return found.offset if found.error_code == 0 else None


def produce_frame(topic: str, partition: int, records: bytes, *, version: int = 9, acks: int = 1,
                  timeout_ms: int = 10_000, correlation_id: int = 1, transactional_id: str | None = None,
                  record_sets: list[bytes] | None = None) -> bytes:
    """A Produce request of `records` (or of several `record_sets`, each a partition's entry
    of its own, all for `partition`) to one partition."""
    sets = record_sets if record_sets is not None else [records]
    values = {"transactional_id": transactional_id, "acks": acks, "timeout": timeout_ms,
              "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": records_bytes}
                                                                for records_bytes in sets]}]}
    schema = codec.request_schema(ApiKey.PRODUCE, version)
    return codec.encode_request(ApiKey.PRODUCE, version, correlation_id, CLIENT_ID, codec.build(schema, values))


def produce_errors(answer_frame: bytes, version: int = 9) -> list[int]:
    """The error code of every partition a Produce answer names."""
    _, body = codec.decode_response(ApiKey.PRODUCE, version, answer_frame)
    return [int(partition.error_code) for topic in body.responses for partition in topic.partition_responses]


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
