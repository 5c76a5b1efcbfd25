"""Cases below any Kafka frame, at an SSL listener's TLS layer: bytes that are no handshake, a
handshake garbled or cut short, handshakes left hanging, and a record layer broken after a
handshake completed. Each attacks with connections of its own; a client that says something
no TLS server accepts must see its connection closed at once, one that stalls may be left to
the handshake timeout, and a TLS client is served meanwhile. Whether the broker survived and
serves TLS is checked after every case by the runner (arena.py), as for every case.
"""

from __future__ import annotations

import dataclasses
import random
import select
import socket
import ssl
import struct
import time

from .cases import FRAME_SOURCE, FRAME_WAIT_S, LIMIT_CHECK_TIMEOUT_S, SLOW_SOURCE, Case, Target
from .seeds import Names, encode, request_values

HANDSHAKE_RECORD = 0x16
APPLICATION_DATA_RECORD = 0x17
STALLED_HANDSHAKES = 64  # under the listener's bound on handshakes under way (server.HANDSHAKES_PENDING_MAX)


def client_hello() -> bytes:
    """The first flight of a TLS client: a ClientHello as Python's ssl sends it."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    connection = context.wrap_bio(incoming, outgoing, server_hostname="localhost")
    try:
        connection.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def _open(target: Target, source: str = FRAME_SOURCE) -> socket.socket:
    sock = socket.create_connection((target.host, target.port), timeout=FRAME_WAIT_S, source_address=(source, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST: no TIME_WAIT left behind
    return sock


def _closed_within(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the broker closes `sock` within `timeout_s`, whatever it sends before (an alert)."""
    deadline = time.monotonic() + timeout_s
    while (left_s := deadline - time.monotonic()) > 0:  # bounded by the deadline
        readable, _, _ = select.select([sock], [], [], left_s)
        if not readable:
            return False
        try:
            if sock.recv(1 << 16) == b"":
                return True
        except OSError:
            return True
    return False


@dataclasses.dataclass
class TlsBytesCase(Case):
    """`data` where a TLS client's first flight belongs. `refused`: no TLS server could take it
    for the start of a handshake, so the connection must close at once; otherwise it may wait
    for more, up to the handshake timeout, and the case leaves it after FRAME_WAIT_S."""

    name: str
    data: bytes
    refused: bool
    kind: str = "tls"

    def run(self, target: Target) -> list[str]:
        with _open(target) as sock:
            try:
                sock.sendall(self.data)
            except OSError:
                return []  # closed already: refused
            if self.refused and not _closed_within(sock, FRAME_WAIT_S):
                return [f"not closed within {FRAME_WAIT_S:.0f} s"]
        return []

    def reproducer(self) -> bytes:
        return self.data


@dataclasses.dataclass
class BrokenRecordCase(Case):
    """A handshake completed, then bytes the session's keys did not protect: an application-data
    record of random bytes (its tag cannot verify), or a record announcing more than TLS allows.
    The broker must close the connection at once."""

    name: str
    record: bytes
    kind: str = "tls"

    def run(self, target: Target) -> list[str]:
        with _open(target) as sock:
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            session = target.tls.wrap_bio(incoming, outgoing, server_hostname=target.host)
            if not _handshake(sock, session, incoming, outgoing):
                return ["the handshake of a well-formed client did not complete"]
            sock.sendall(outgoing.read() + self.record)
            if not _closed_within(sock, FRAME_WAIT_S):
                return [f"not closed within {FRAME_WAIT_S:.0f} s"]
        return []

    def reproducer(self) -> bytes:
        return self.record


def _handshake(sock: socket.socket, session: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO) -> bool:
    """Drive `session`'s handshake over `sock`, through the BIOs, so that the socket stays ours
    to write raw bytes to afterwards."""
    deadline = time.monotonic() + FRAME_WAIT_S
    while time.monotonic() < deadline:  # bounded by the deadline; each turn sends or reads a flight
        try:
            session.do_handshake()
            return True
        except ssl.SSLWantReadError:
            pass
        sock.sendall(outgoing.read())
        data = sock.recv(1 << 16)
        if not data:
            return False
        incoming.write(data)
    return False


@dataclasses.dataclass
class StalledHandshakes(Case):
    """STALLED_HANDSHAKES connections that send half a ClientHello, or nothing, and wait: a TLS
    client's ApiVersions is answered meanwhile."""

    name: str
    sent: bytes
    kind: str = "tls"

    def run(self, target: Target) -> list[str]:
        stalled = []
        try:
            for _ in range(STALLED_HANDSHAKES):
                stalled.append(_open(target, SLOW_SOURCE))
                if self.sent:
                    stalled[-1].sendall(self.sent)
            if not target.answers_api_versions():
                return [f"a TLS client's ApiVersions was not answered within {LIMIT_CHECK_TIMEOUT_S:.0f} s while "
                        f"{STALLED_HANDSHAKES} handshakes stalled"]
            return []
        finally:
            for sock in stalled:
                sock.close()

    def reproducer(self) -> bytes:
        return self.sent


def tls_cases(names: Names, seed: int = 7) -> list[Case]:
    """The TLS layer's cases, the same in every run."""
    rng = random.Random(seed)
    hello = client_hello()
    api_versions = encode(18, 3, request_values(18, 3, names))
    garbled = bytearray(hello)
    for index in rng.sample(range(5, len(garbled)), 16):  # the record header left whole
        garbled[index] ^= 0xFF
    record_max_bytes = 16384 + 256  # TLS 1.3's ciphertext bound: plaintext 2^14 plus expansion
    return [
        TlsBytesCase("plaintext Kafka (ApiVersions) to the TLS port", api_versions, refused=True),
        TlsBytesCase("random bytes for a ClientHello", rng.randbytes(1024), refused=True),
        TlsBytesCase("an SSLv2 ClientHello", bytes([0x80, 0x2E, 0x01, 0x00, 0x02]) + rng.randbytes(0x2B), refused=True),
        TlsBytesCase("a ClientHello with 16 bytes of its body flipped", bytes(garbled), refused=True),
        TlsBytesCase("a handshake record announcing 2^16-1 bytes", bytes([HANDSHAKE_RECORD, 3, 1, 0xFF, 0xFF]),
                     refused=True),
        TlsBytesCase("a record of an unknown content type", bytes([0xFF, 3, 3, 0, 16]) + rng.randbytes(16),
                     refused=True),
        TlsBytesCase("a ClientHello, then a second one", hello + hello, refused=True),
        TlsBytesCase("half a ClientHello, then silence", hello[:len(hello) // 2], refused=False),
        TlsBytesCase("a handshake record header alone", hello[:5], refused=False),
        BrokenRecordCase("random bytes as application data after the handshake",
                         bytes([APPLICATION_DATA_RECORD, 3, 3, 0, 64]) + rng.randbytes(64)),
        BrokenRecordCase("an application-data record longer than TLS allows",
                         bytes([APPLICATION_DATA_RECORD, 3, 3]) + struct.pack(">H", record_max_bytes + 1)
                         + rng.randbytes(record_max_bytes + 1)),
        BrokenRecordCase("a handshake record after the handshake, garbled", bytes(garbled)),
        StalledHandshakes(f"{STALLED_HANDSHAKES} connections that say nothing", b""),
        StalledHandshakes(f"{STALLED_HANDSHAKES} connections that stop halfway through a ClientHello",
                          hello[:len(hello) // 2]),
    ]
