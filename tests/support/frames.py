"""Kafka frames by hand, for tests that talk to a server over a raw socket."""

from __future__ import annotations

import asyncio
import struct

from replog.net.codec import ApiKey


def api_versions_frame(correlation_id: int, version: int = 0) -> bytes:
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, version, correlation_id, 4) + b"test"
    if version >= 3:
        body += b"\x00" + b"\x05kcat" + b"\x021" + b"\x00"  # tagged fields, software name/version, tagged fields
    return struct.pack(">i", len(body)) + body


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
    payload = await asyncio.wait_for(reader.readexactly(size), 10)
    return struct.unpack_from(">i", payload)[0], payload[4:]
