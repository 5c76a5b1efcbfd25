"""Produce requests carrying wrong, hostile or valid record batches, and decompression bombs: each
case writes to a partition of its own, then checks the partition's high watermark and that a
well-behaved consumer still reads it.
"""

from __future__ import annotations

import dataclasses
import struct
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import NamedTuple

from . import batches
from .batches import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD, CONTROL_BIT, GIB, TRANSACTIONAL_BIT
from .cases import CHECK_SOURCE, FRAME_SOURCE, Case, Target

# The compacted topic's segment.ms: how often a record appended to it rolls its segment.
COMPACTED_SEGMENT_MS = 1000
COMPACTED_SEGMENT_S = COMPACTED_SEGMENT_MS / 1000
from .wire import Connection, Ending, error_name, high_watermark, produce_errors, produce_frame

BATCH_WAIT_S = 30.0


class Expect(NamedTuple):
    """What Kafka does with a batch: "refused", "accepted", or "either" (only the broker's
    health and the partition's readability are checked); and why."""

    outcome: str
    why: str


REFUSED_LIKE_KAFKA = "Kafka's LogValidator refuses it"


@dataclasses.dataclass
class BatchCase(Case):
    """Produce requests to one partition of the plain or the compacted topic, one for each of
    `records()`; then the partition's high watermark and readability."""

    name: str
    records: Callable[[], list[bytes]]  # one Produce request each
    expect: Expect
    compacted: bool = False
    partition: int = 0
    read_from_start: bool = True  # False: the probe reads from after the case (bombs, which a consumer would inflate)
    kind: str = "batch"
    record_sets: int = 1  # entries for the partition in each request (>1: the same partition named again)

    def topic(self, target: Target) -> str:
        return target.compacted_topic if self.compacted else target.batch_topic

    def frames(self, target: Target) -> list[bytes]:
        topic = self.topic(target)
        return [produce_frame(topic, self.partition, records, record_sets=[records] * self.record_sets)
                for records in self.records()]

    def run(self, target: Target) -> list[str]:
        topic = self.topic(target)
        with Connection(target.host, target.port, source=CHECK_SOURCE, tls=target.tls) as checks:
            before = high_watermark(checks, topic, self.partition)
            frames = self.frames(target)
            with Connection(target.host, target.port, source=FRAME_SOURCE, timeout_s=BATCH_WAIT_S,
                            tls=target.tls) as connection:
                exchange = connection.exchange(frames, len(frames), BATCH_WAIT_S)
            after = high_watermark(checks, topic, self.partition)
        problems = []
        errors = [code for answer in exchange.answers for code in produce_errors(answer)]
        accepted = errors.count(0)
        if self.expect.outcome == "refused" and accepted:
            problems.append(f"accepted (error 0 for {accepted} of {len(errors)} answers), yet {self.expect.why}; "
                            f"the high watermark moved from {before} to {after}")
        if self.expect.outcome == "accepted" and (accepted < len(frames) or exchange.ending is not Ending.ANSWERED):
            problems.append(f"a valid batch was not accepted: {exchange.ending.value}, errors "
                            f"{[error_name(code) for code in errors]}")
        if not accepted and before is not None and after is not None and after != before:
            problems.append(f"refused, yet the high watermark moved from {before} to {after}")
        if exchange.ending is Ending.SILENT:
            problems.append(f"{len(frames) - len(exchange.answers)} of {len(frames)} Produce requests were neither "
                            f"answered nor refused within {BATCH_WAIT_S:.0f} s")
        untouched = not accepted and after == before  # refused, nothing appended: nothing to read
        if target.probe is not None and before is not None and not untouched:
            start = before if self.read_from_start else (after if after is not None else before)
            problems += target.probe.readable(topic, self.partition, start)
        return problems

    def reproducer(self) -> bytes:
        first = self.records()[0]
        return produce_frame("<topic>", self.partition, first, record_sets=[first] * self.record_sets)


# Batches -------------------------------------------------------------------------------------

def _records(count: int, *, deltas: list[int] | None = None, timestamp_deltas: list[int] | None = None) -> list[bytes]:
    deltas = list(range(count)) if deltas is None else deltas
    timestamp_deltas = [0] * count if timestamp_deltas is None else timestamp_deltas
    return [batches.record(delta, b"key-%d" % index, b"value-%d" % index, timestamp_delta=timestamp_delta)
            for index, (delta, timestamp_delta) in enumerate(zip(deltas, timestamp_deltas))]


def _one(make: Callable[[], bytes]) -> Callable[[], list[bytes]]:
    return lambda: [bytes(make())]


_CODECS = {"gzip": CODEC_GZIP, "snappy": CODEC_SNAPPY, "lz4": CODEC_LZ4, "zstd": CODEC_ZSTD}


def batch_cases() -> Iterator[BatchCase]:
    """Valid batches first (each codec: the encoder and the broker agree), then wrong ones."""
    three = b"".join(_records(3))
    refused = Expect("refused", REFUSED_LIKE_KAFKA)
    # Kafka reads offset deltas only to rewrite a compressed batch's; replog keeps batches as
    # they came, so a batch whose records contradict their offsets must not be stored at all.
    deltas_refused = Expect("refused", "its offset deltas contradict the offsets replog would store as they came")
    yield BatchCase("valid: 3 records, uncompressed", _one(lambda: batches.batch(_records(3))), Expect("accepted", ""))
    for label, codec in _CODECS.items():
        yield BatchCase(f"valid: 3 records, {label}", _one(lambda codec=codec: batches.batch(
            batches.compressed(codec, three), record_count=3, attributes=codec)), Expect("accepted", ""))
    yield BatchCase("valid: 3 records, snappy in xerial framing", _one(lambda: batches.batch(
        batches.xerial([batches.compressed(CODEC_SNAPPY, three)]), record_count=3, attributes=CODEC_SNAPPY)), Expect("accepted", ""))

    wrong: list[tuple[str, Callable[[], bytes], Expect]] = [
        ("count 2**31-1 with an empty body (61 bytes)", lambda: batches.batch(b"", record_count=2**31 - 1), refused),
        ("40 bytes of garbage claiming 3 records", lambda: batches.batch(bytes(range(40)), record_count=3), refused),
        ("count 0, no records", lambda: batches.batch(b"", record_count=0, last_offset_delta=0), refused),
        ("count 5 over 3 records", lambda: batches.batch(_records(3), record_count=5), refused),
        ("count 1 over 3 records", lambda: batches.batch(_records(3), record_count=1), refused),
        ("last offset delta 100 over 3 records", lambda: batches.batch(_records(3), last_offset_delta=100), refused),
        ("last offset delta -1", lambda: batches.batch(_records(3), last_offset_delta=-1), refused),
        ("offset deltas 0, 0, 0", lambda: batches.batch(_records(3, deltas=[0, 0, 0])), deltas_refused),
        ("offset deltas 0, 2, 1", lambda: batches.batch(_records(3, deltas=[0, 2, 1])), deltas_refused),
        ("offset deltas 0, 1, 5 with last offset delta 2", lambda: batches.batch(_records(3, deltas=[0, 1, 5])), deltas_refused),
        ("offset delta -1", lambda: batches.batch(_records(3, deltas=[-1, 0, 1])), deltas_refused),
        ("timestamp 2**62", lambda: batches.batch(_records(3), base_timestamp=2**62),
         Expect("refused", "log.message.timestamp.after.max.ms (1 hour, Kafka 4's default) refuses it")),
        ("timestamp delta 2**62", lambda: batches.batch(_records(3, timestamp_deltas=[0, 0, 2**62])),
         Expect("refused", "log.message.timestamp.after.max.ms (1 hour) refuses it")),
        ("max timestamp below a record's", lambda: batches.batch(_records(3, timestamp_deltas=[0, 0, 5000]),
                                                                max_timestamp=batches.now_ms() - 1000),
         Expect("either", "Kafka rewrites the max timestamp")),
        ("timestamp -2**62", lambda: batches.batch(_records(3), base_timestamp=-(2**62)), Expect("either", "")),
        ("timestamp -5", lambda: batches.batch(_records(3), base_timestamp=-5), Expect("either", "")),
        ("a record running 100 bytes past its batch", lambda: batches.batch(
            _records(2) + [batches.record(2, b"k", b"v", length=120)]), refused),
        ("16 bytes after the last record", lambda: batches.batch(_records(3) + [b"\x01" * 16]), refused),
        ("a record of negative length", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", length=-7)]), refused),
        ("a key of length -2", lambda: batches.batch(
            _records(2) + [batches.varint(7) + b"\x00\x00\x04" + batches.varint(-2) + batches.varint(1) + b"v\x00"]),
         Expect("refused", "librdkafka stops reading the partition at it (Kafka reads any negative length as null)")),
        ("a value claiming 2**31-1 bytes", lambda: batches.batch(
            _records(2) + [batches.varint(12) + b"\x00\x00\x04" + batches.varint(1) + b"k" + batches.varint(2**31 - 1) + b"v\x00"]),
         refused),
        ("a header count of 2**31-1", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", header_count=2**31 - 1)]), refused),
        ("a header count of -1", lambda: batches.batch(_records(2) + [batches.record(2, b"k", b"v", header_count=-1)]), refused),
        ("a varint 11 bytes long", lambda: batches.batch(_records(2) + [b"\xff" * 11 + b"\x01"]), refused),
        ("control bit from a client", lambda: batches.batch(_records(1), attributes=CONTROL_BIT), refused),
        ("transactional bit, no transaction", lambda: batches.batch(
            _records(1), attributes=TRANSACTIONAL_BIT, producer_id=4242, producer_epoch=0, base_sequence=0),
         Expect("refused", "replog has no transactions, so none was begun")),
        ("producer id without a sequence", lambda: batches.batch(_records(1), producer_id=4243, producer_epoch=0, base_sequence=-1), refused),
        ("producer epoch -2 with a producer id", lambda: batches.batch(_records(1), producer_id=4244, producer_epoch=-2, base_sequence=0),
         Expect("either", "")),
        ("magic 0", lambda: batches.legacy_message(0, b"k", b"v"), Expect("refused", "Produce v3+ carries magic 2 only")),
        ("magic 1", lambda: batches.legacy_message(1, b"k", b"v"), Expect("refused", "Produce v3+ carries magic 2 only")),
        ("magic 3", lambda: batches.batch(_records(1), magic=3), refused),
        ("codec 5", lambda: batches.batch(_records(1), attributes=5), refused),
        ("codec 7", lambda: batches.batch(_records(1), attributes=7), refused),
        ("a wrong CRC", lambda: batches.batch(_records(1), crc=0x12345678), refused),
        ("batch length 1 MB over 100 bytes", lambda: batches.batch(_records(1), batch_length=1 << 20), refused),
        ("batch length 10", lambda: batches.batch(_records(1), batch_length=10), refused),
        ("base offset 12345 and leader epoch 99 from the client",
         lambda: _at_base_offset(batches.batch(_records(2), leader_epoch=99), 12345), Expect("either", "the broker assigns them")),
        ("two batches back to back", lambda: batches.batch(_records(1)) + batches.batch(_records(1)),
         Expect("refused", "Produce v3+ carries one batch per partition")),
        ("2,000 batches, 2,000 producer ids, timestamp 2**62", lambda: b"".join(
            batches.batch(_records(1), producer_id=10_000 + index, producer_epoch=0, base_sequence=0, base_timestamp=2**62)
            for index in range(2000)), Expect("refused", "Produce v3+ carries one batch per partition")),
    ]
    for label, codec in _CODECS.items():
        wrong.append((f"{label} body of garbage", lambda codec=codec: batches.batch(bytes(range(200)), record_count=3,
                                                                                   attributes=codec), refused))
        wrong.append((f"{label} body with count 5 over 3 records", lambda codec=codec: batches.batch(
            batches.compressed(codec, three), record_count=5, attributes=codec), refused))
    for label, make, expect in wrong:
        yield BatchCase(label, _one(make), expect)
    yield BatchCase("the same partition named 200 times in one request", _one(lambda: batches.batch(_records(1))),
                    Expect("either", "Kafka answers each entry"), record_sets=200)
    yield BatchCase("2,000 producer ids, one request each", lambda: [
        bytes(batches.batch(_records(1), producer_id=20_000 + index, producer_epoch=0, base_sequence=0))
        for index in range(2000)], Expect("either", "Kafka accepts idempotent batches of any producer id"))


def _at_base_offset(batch: bytearray, base_offset: int) -> bytearray:
    struct.pack_into(">q", batch, 0, base_offset)  # outside the CRC
    return batch


# Decompression bombs ---------------------------------------------------------------------------

# Each fits in one default max.message.bytes (1 MiB) batch: gzip and zstd inflate past GiBs;
# lz4 (at most 255:1) and snappy (about 21:1) inflate a 1 MiB batch to 250 MB and 20 MB, so
# theirs are also told to announce 4 GiB where their formats announce a size.
_LIE_BYTES = 2**32 - 1


def bomb_bodies() -> Iterator[tuple[str, int, Callable[[], bytes]]]:
    yield "gzip, 1 GiB", CODEC_GZIP, lambda: batches.gzip_bomb(GIB - (8 << 20))
    yield "zstd, 4 GiB", CODEC_ZSTD, lambda: batches.zstd_bomb(4 * GIB)
    yield "lz4 frame, 240 MiB", CODEC_LZ4, lambda: batches.lz4_bomb(240 << 20)
    yield "lz4 frame announcing 4 GiB", CODEC_LZ4, lambda: batches.lz4_bomb(64 << 20, content_size=_LIE_BYTES)
    yield "snappy raw, 20 MiB", CODEC_SNAPPY, lambda: batches.snappy_bomb(20 << 20)
    yield "snappy raw announcing 4 GiB", CODEC_SNAPPY, lambda: batches.snappy_bomb(1 << 20, announced_bytes=_LIE_BYTES)
    yield "snappy xerial, 20 MiB", CODEC_SNAPPY, lambda: batches.xerial([batches.snappy_bomb(20 << 20)])
    yield "snappy xerial announcing 4 GiB", CODEC_SNAPPY, lambda: batches.xerial(
        [batches.snappy_bomb(1 << 20, announced_bytes=_LIE_BYTES)])


def bomb_cases() -> Iterator[BatchCase]:
    for label, codec, body in bomb_bodies():
        for compacted in (False, True):
            yield BatchCase(f"{label} on a {'compacted' if compacted else 'plain'} topic",
                            _one(lambda body=body, codec=codec: batches.batch(body(), record_count=1, attributes=codec)),
                            Expect("either", "a bounded reader may refuse it or take it"), compacted=compacted,
                            read_from_start=False, kind="bomb")


@dataclasses.dataclass
class CleanerPass(Case):
    """Waits for a pass of the log cleaner after the bombs: the cleaner decompresses what the
    compacted topic holds, away from any request. A record is appended to each of `partitions`
    (the bombs') every segment.ms until the pass comes, so that their segments roll and there is
    something to clean whether the bombs were taken or refused."""

    partitions: list[int]
    kind: str = "bomb"
    name: str = "a log cleaner pass over the compacted topic after the bombs"
    timeout_s: float = 30.0

    def run(self, target: Target) -> list[str]:
        if target.metrics_address is None or target.probe is None:
            return []
        before = _cleaner_passes(target.metrics_address)
        problems = []
        with Connection(target.host, target.port, source=CHECK_SOURCE, tls=target.tls) as checks:
            for partition in self.partitions:
                start = high_watermark(checks, target.compacted_topic, partition)
                problems += target.probe.readable(target.compacted_topic, partition, start or 0)
        deadline = time.monotonic() + self.timeout_s
        next_roll = time.monotonic() + COMPACTED_SEGMENT_S
        while time.monotonic() < deadline:  # bounded by the deadline
            passes = _cleaner_passes(target.metrics_address)
            if passes is None or before is None or passes > before:
                return problems
            if time.monotonic() >= next_roll:
                next_roll = time.monotonic() + COMPACTED_SEGMENT_S
                for partition in self.partitions:
                    problems += target.probe.readable(target.compacted_topic, partition, 0)
            time.sleep(0.2)
        return [*problems, f"no log cleaner pass within {self.timeout_s:.0f} s"]


def _cleaner_passes(metrics_address: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("replog_log_cleaner_passes_total"))


