"""How fast the log cleaner compacts a log, on this machine.

    .venv/bin/python bench/log_cleaner.py [--megabytes MB] [--keys K]

Writes a compacted log of about MB MiB (segments of 16 MiB) in batches of 100 records whose
keys are drawn from K, for two record sizes (100 B and 1 KiB values), then runs one cleaning
pass over it as a partition does (Log.begin_clean, CleanJob.run, Log.complete_clean), and
prints the pass's time, MiB/s and records/s of log read, and the log's size before and after.
The job runs on this thread here; a broker runs it in a worker thread, one log at a time.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replog.spark_io.records import OutgoingRecord, encode_batch  # noqa: E402
from replog.storage.log import Log, LogConfig  # noqa: E402

RECORDS_PER_BATCH = 100
SEGMENT_BYTES = 16 << 20
MAP_MAX_BYTES = 128 << 20


def measure(directory: pathlib.Path, megabytes: int, keys: int, value_bytes: int) -> None:
    log = Log(directory / "bench-0", LogConfig(compact=True, segment_bytes=SEGMENT_BYTES),
              clock=lambda: int(time.time() * 1000))
    value = b"v" * value_bytes
    rng = random.Random(0)
    records = 0
    while log.size_bytes < megabytes << 20:
        batch = [OutgoingRecord(b"key-%d" % rng.randrange(keys), value, None) for _ in range(RECORDS_PER_BATCH)]
        log.append(bytearray(encode_batch(batch, "none", 0)), leader_epoch=0)
        records += RECORDS_PER_BATCH
    log.flush()
    size_before = log.size_bytes
    started = time.perf_counter()
    job = log.begin_clean(log.log_end_offset, MAP_MAX_BYTES, None)  # no transaction is open
    cleaned = log.complete_clean(job, job.run())
    elapsed = time.perf_counter() - started
    head_mib = sum(segment.size_bytes for segment in job.segments) / 2**20
    print(f"{value_bytes:>5} B values, {keys} keys: {records:,} records in {size_before / 2**20:.0f} MiB; one pass "
          f"{elapsed:.2f} s over its {head_mib:.0f} MiB head ({head_mib / elapsed:.0f} MiB/s, "
          f"{records * head_mib / (size_before / 2**20) / elapsed:,.0f} records/s); "
          f"{cleaned.records_removed:,} records removed, {size_before / 2**20:.0f} -> {log.size_bytes / 2**20:.1f} MiB")
    log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=128)
    parser.add_argument("--keys", type=int, default=10_000)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for value_bytes in (100, 1024):
            measure(pathlib.Path(scratch) / str(value_bytes), arguments.megabytes, arguments.keys, value_bytes)


if __name__ == "__main__":
    main()
