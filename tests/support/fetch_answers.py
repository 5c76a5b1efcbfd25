"""The Fetch handler's answer as a follower reads it, for tests that drive the handler directly."""

from __future__ import annotations

import struct

from replog.net.codec import EncodedBody
from replog.net.fetch_decoding import FIRST_TOPIC_ID_VERSION, FetchedPartition, decode_fetch_response
from replog.storage.segment import HeldSlice


def decode_answer(body: EncodedBody, api_version: int = FIRST_TOPIC_ID_VERSION) -> tuple[int, int, list[FetchedPartition]]:
    """(error code, session id, partitions) of a flexible version's answer `body`; the log
    ranges it holds are read and released."""
    pieces = [struct.pack(">i", 1) + b"\0"]  # correlation id, the flexible header's tagged fields
    for part in body.parts:
        if isinstance(part, HeldSlice):
            pieces.append(part.read_from(0))
            part.close()
        else:
            pieces.append(part)
    return decode_fetch_response(api_version, b"".join(pieces))
