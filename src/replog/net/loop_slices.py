"""Request handling in slices: a handler whose work grows with its request's items gives the
event loop back once it has held it for SLICE_S, so that no other client waits on one big
request for longer than that.

Without slices (bench/big_requests.py --stall measures it), a ListOffsets request of a few
hundred thousand partitions held the loop for seconds, a DescribeConfigs of as many resources
for far longer; meanwhile no other client got an answer, not even to ApiVersions. A handler calls `pause()` between items
(it returns at once until the slice is used up), and `respond()` builds and writes its response
in slices too (codec.body_encoding), where kio's writer would take one call for all of it.

Concurrency: a LoopSlices belongs to one request's handler; nothing is shared.
"""

from __future__ import annotations

import asyncio
import time

from . import codec

# Long enough that the loop's turns in between (microseconds each) cost a big request little;
# short enough that another client's request, which takes three turns of the loop (read, handle,
# write), waits a few milliseconds behind a request of the most items a request may hold
# (bench/big_requests.py --stall prints that wait).
SLICE_S = 0.002


class LoopSlices:
    """The time one request has held the event loop since it last gave it back."""

    __slots__ = ("_slice_ends_s",)

    def __init__(self) -> None:
        self._slice_ends_s = time.perf_counter() + SLICE_S

    async def pause(self) -> None:
        """Give the loop back if this slice is used up."""
        if time.perf_counter() >= self._slice_ends_s:
            await asyncio.sleep(0)
            self._slice_ends_s = time.perf_counter() + SLICE_S


async def respond(request: codec.Request, values: dict, slices: LoopSlices | None = None) -> codec.EncodedBody:
    """The response `codec.build_response(request, values)` would be, encoded in slices."""
    slices = slices or LoopSlices()
    schema = codec.response_schema(request.api_key, request.api_version)
    steps = codec.body_encoding(schema, values)
    while True:  # bounded by the response's steps
        try:
            next(steps)
        except StopIteration as done:
            return codec.EncodedBody([done.value], int(values.get("error_code", 0)),
                                     0 if codec.leads_with_throttle(schema) else None)
        await slices.pause()
