"""Checking producers' compressed batches, and re-encoding batches in their topic's
compression.type, off the event loop: a small dedicated thread pool.

A compressed batch's records can only be read once decompressed, up to its topic's
uncompressed_bytes_max (batch_format.py): tens of milliseconds for a batch that inflates to tens
of MiB; compressing a batch anew for a topic's compression.type costs as much again or more. That
work (records.check_and_convert) runs here rather than on the event loop, so that one client's
batch never holds up another client's requests; decompression, compression and the compiled
record walk release the GIL, so they run beside the loop.

Bounds: THREADS threads. Each decompresses into a Scratch of its own, mapped at the largest limit
it was asked for (address space, at most batch_format's ceiling per thread), of which at most
SCRATCH_KEPT_BYTES stay resident between batches: what a larger batch filled is given back after
it. Jobs wait in the pool's queue, which the requests in flight bound (one job per partition of
a produce request being served).

Concurrency: `check` is called from an event loop; each thread owns its scratch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from replog.storage.batch_format import Scratch
from replog.storage.records import AppendRules, CheckedBatch, check_and_convert

THREADS = 2
SCRATCH_KEPT_BYTES = 4 << 20

_pool: concurrent.futures.ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_thread_state = threading.local()


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(THREADS, thread_name_prefix="compressed-checks")
        return _pool


def _check_in_thread(batch, rules: AppendRules, now_ms: int) -> CheckedBatch:
    scratch: Scratch | None = getattr(_thread_state, "scratch", None)
    if scratch is None or scratch.capacity_bytes < rules.uncompressed_bytes_max:
        if scratch is not None:
            scratch.close()
        scratch = _thread_state.scratch = Scratch(rules.uncompressed_bytes_max)
    try:
        return check_and_convert(batch, rules, now_ms, scratch)
    finally:
        scratch.give_back_beyond(SCRATCH_KEPT_BYTES)


async def check(batch, rules: AppendRules, now_ms: int) -> CheckedBatch:
    """records.check_and_convert of a producer's batch, in the pool: the batch and its records'
    max timestamp, for Log.assign_as_leader; raises its refusals."""
    return await asyncio.get_running_loop().run_in_executor(_executor(), _check_in_thread, batch, rules, now_ms)
