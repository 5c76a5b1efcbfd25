"""What a leader's validation of a produced batch costs in the compiled path, per record and per MB.

    .venv/bin/python bench/batch_validation.py [--rounds R]

For 1 KiB and 16 KiB records, in batches of about 1 MB (librdkafka's batch.size), uncompressed
and in each codec:

- before: the checks a leader made until it read records: header and CRC32C, which
  validate_batches still does for a follower's append (the leader's offset assignment on top
  writes 12 bytes);
- after, uncompressed: records.assign_batches, which also walks every record on the event loop;
- after, compressed: what compressed_checks' thread does (records.check_and_convert: bounded
  decompression into a reused Scratch, then the compiled record walk), plus assign_batches on
  the event loop with the max timestamp the thread found (header and CRC again, no walk).

Then what a topic's compression.type costs where it names another codec than the producer's
(records.check_and_convert re-encoding the batch, in compressed_checks' thread): for 1 KiB
records, each produced codec into each topic codec, ms per MB of uncompressed records for the
check and re-encoding together, the part of it that is re-encoding (less the check alone), and
the size of the stored batch.

Each figure is the median of R rounds of as many calls as fit about 0.2 s; ns per record and MB/s
of uncompressed record bytes are printed, with the compressed batch's size. Record values are
text-like (words from a small vocabulary), so that codecs compress them about as they compress
real payloads. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import pathlib
import random
import statistics
import sys
import time
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from replog.storage.batch_format import (  # noqa: E402
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    NewRecord,
    Scratch,
    encode_batch,
)
from replog.storage.records import CODEC, AppendRules, check_and_convert  # noqa: E402

BATCH_TARGET_BYTES = 1_000_000
NOW_MS = 1_700_000_000_000
RULES = AppendRules(1024 * 1024 + 12 + 16 * 1024, 2**63 - 1, 3_600_000, False, 64 * (1024 * 1024 + 12))
ROUND_S = 0.2
WORDS = [bytes(random.Random(i).choices(b"abcdefghijklmnopqrstuvwxyz", k=random.Random(-i).randint(2, 9)))
         for i in range(500)]


def text(rng: random.Random, size_bytes: int) -> bytes:
    out = bytearray()
    while len(out) < size_bytes:  # bounded: each step adds at least 3 bytes
        out += rng.choice(WORDS) + b" "
    return bytes(out[:size_bytes])


def batch_of(record_bytes: int, codec: int) -> tuple[bytearray, int]:
    """A batch of about BATCH_TARGET_BYTES of records, and its record count."""
    rng = random.Random(record_bytes)
    count = max(1, BATCH_TARGET_BYTES // record_bytes)
    records = [NewRecord(b"key-%d" % i, text(rng, record_bytes)) for i in range(count)]
    return encode_batch(records, NOW_MS, codec), count


def seconds_per_call(call: Callable[[], object], rounds: int) -> float:
    """The median over `rounds` of the mean time of one call, each round about ROUND_S long."""
    started = time.perf_counter()
    calls = 0
    while time.perf_counter() - started < ROUND_S / 4:  # bounded by the time
        call()
        calls += 1
    per_round = max(1, int(calls * 4))
    results = []
    for _ in range(rounds):  # bounded by rounds
        started = time.perf_counter()
        for _ in range(per_round):  # bounded by per_round
            call()
        results.append((time.perf_counter() - started) / per_round)
    return statistics.median(results)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    print(f"batch scans: {CODEC.name}; batches of about {BATCH_TARGET_BYTES} bytes of records; median of {rounds} rounds")
    print(f"{'records':>9} {'codec':>6} {'batch':>9} {'count':>5}  {'before ns/rec':>13} {'MB/s':>7}  "
          f"{'after ns/rec':>12} {'MB/s':>7}  {'of which thread':>15}")
    scratch = Scratch(RULES.uncompressed_bytes_max)
    for record_bytes in (1024, 16 * 1024):
        uncompressed, count = batch_of(record_bytes, CODEC_NONE)
        records_mb = (len(uncompressed) - 61) / 1e6
        for codec in (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD):
            batch, _ = batch_of(record_bytes, codec) if codec != CODEC_NONE else (uncompressed, count)
            before = seconds_per_call(lambda: CODEC.validate_batches(batch, RULES.max_batch_bytes), rounds)
            if codec == CODEC_NONE:
                thread_s = 0.0
                after = seconds_per_call(lambda: CODEC.assign_batches(batch, RULES, 0, 0, NOW_MS), rounds)
            else:
                checked = check_and_convert(batch, RULES, NOW_MS, scratch).records_max_timestamp
                thread_s = seconds_per_call(lambda: check_and_convert(batch, RULES, NOW_MS, scratch), rounds)
                after = thread_s + seconds_per_call(lambda: CODEC.assign_batches(batch, RULES, 0, 0, NOW_MS, checked),
                                                    rounds)
            print(f"{record_bytes // 1024:>6} KiB {CODEC_NAMES[codec]:>6} {len(batch):>9} {count:>5}  "
                  f"{before / count * 1e9:>13.0f} {records_mb / before:>7.0f}  "
                  f"{after / count * 1e9:>12.0f} {records_mb / after:>7.0f}  "
                  f"{thread_s / count * 1e9:>12.0f} ns")
    recompression(rounds, scratch)
    scratch.close()


def recompression(rounds: int, scratch: Scratch) -> None:
    codecs = (CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD)
    print("\nre-encoding for compression.type, 1 KiB records, in compressed_checks' thread")
    print(f"{'produced':>8} {'topic':>6} {'stored':>9}  {'ms/MB':>7} {'of which re-encoding':>20}")
    for produced in codecs:
        batch, _ = batch_of(1024, produced)
        records_mb = (len(batch_of(1024, CODEC_NONE)[0]) - 61) / 1e6
        check_s = seconds_per_call(lambda: check_and_convert(batch, RULES, NOW_MS, scratch), rounds)
        for topic in codecs:
            if topic == produced:
                continue
            rules = RULES._replace(topic_codec=topic)
            stored = len(check_and_convert(batch, rules, NOW_MS, scratch).batch)
            convert_s = seconds_per_call(lambda: check_and_convert(batch, rules, NOW_MS, scratch), rounds)
            print(f"{CODEC_NAMES[produced]:>8} {CODEC_NAMES[topic]:>6} {stored:>9}  "
                  f"{convert_s / records_mb * 1e3:>7.2f} {(convert_s - check_s) / records_mb * 1e3:>17.2f} ms")


if __name__ == "__main__":
    main()
