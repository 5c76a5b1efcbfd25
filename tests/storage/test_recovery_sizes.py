"""Crash recovery at the sizes clients really write, against a model of what was appended.

Segments of several MiB hold batches from 61 bytes to 8 MiB (console producers, Java's 16 KiB
batch.size, librdkafka's ~1 MB, message.max.bytes raised); the log is killed without closing
(nothing flushed, not opened as closed cleanly, index files as far as rolls wrote them), its tail is
optionally damaged the ways a crash damages it, and it is reopened. Then every batch before the
damage must be served byte-identical at its offsets and found by its timestamp, nothing after the
damage may be served, and appends must go on at the right offset.

Damage falls only on what a crash can damage: data past the recovery point (flushed data is not
rescanned, as in Kafka) and index files. A flipped byte stays out of the 8 bytes of a batch that
no check can see: the low half of the base offset and the leader epoch lie outside the CRC, and a
change there that keeps offsets increasing is indistinguishable from a real offset or epoch.
"""

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.log_fixtures import ManualClock, background_flush, read_all
from tests.support.batches import build_batch
from replog.storage.errors import OffsetOutOfRangeError
from replog.storage.log import Log, LogConfig
from replog.storage.records import HEADER_SIZE_BYTES

# Each test runs once per append-path and recovery codec (conftest.CODECS).
pytestmark = pytest.mark.usefixtures("log_codec")

MIB = 1 << 20
LOG_BYTES_MAX = 32 * MIB
BATCHES_MAX = 1500
# Recovery fsyncs everything it rescanned: on a file system in memory that costs nothing, and the
# test is about what recovery keeps, not about the disk.
SCRATCH_ROOT = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None

batch_sizes = st.one_of(
    st.integers(HEADER_SIZE_BYTES, 4 << 10),
    st.integers(4 << 10, 128 << 10),
    st.integers(128 << 10, MIB),
    st.integers(MIB, 8 * MIB),
)
# A producer sends runs of batches of about one size (whatever its batch.size and traffic give).
batch_runs = st.tuples(batch_sizes, st.integers(1, 200))


@dataclasses.dataclass
class StoredBatch:
    base_offset: int
    next_offset: int
    max_timestamp: int
    leader_epoch: int
    data: bytes
    segment_base: int
    position: int


@dataclasses.dataclass(frozen=True)
class Scenario:
    config: LogConfig
    sizes: list[int]
    record_counts: list[int]
    epoch_bumps: list[bool]
    flushed_batches: int | None  # flush (and checkpoint the recovery point) after this many batches
    background_flush: bool  # that flush the partition's background one, which writes the active index


@st.composite
def scenarios(draw) -> Scenario:
    segment_bytes = draw(st.integers(2 * MIB, 12 * MIB))
    target_bytes = draw(st.integers(4 * MIB, LOG_BYTES_MAX), label="log bytes")
    sizes = []
    total_bytes = 0
    while total_bytes < target_bytes and len(sizes) < BATCHES_MAX:  # bounded by BATCHES_MAX
        size, repeat = draw(batch_runs)
        size = min(size, segment_bytes)
        for i in range(min(repeat, BATCHES_MAX - len(sizes))):
            # about one size: every batch lies differently across read buffers and pages
            jittered = max(HEADER_SIZE_BYTES, size - i % 13)
            if total_bytes + jittered > LOG_BYTES_MAX:
                break
            sizes.append(jittered)
            total_bytes += jittered
    count = len(sizes)
    return Scenario(
        # Written under a raised message.max.bytes; reopened under the default (see the test).
        LogConfig(segment_bytes=segment_bytes, index_interval_bytes=draw(st.sampled_from([0, 4096, MIB])),
                  max_message_bytes=segment_bytes),
        sizes,
        draw(st.lists(st.integers(1, 2000), min_size=count, max_size=count)),
        draw(st.lists(st.booleans(), min_size=count, max_size=count)),
        draw(st.none() | st.integers(0, count)),
        draw(st.booleans()),
    )


def write_and_kill(directory: Path, scenario: Scenario) -> tuple[list[StoredBatch], int]:
    """Append the scenario's batches, then drop the log as a killed process would. Returns the
    batches as stored and the recovery point."""
    log = Log(directory, scenario.config, ManualClock())
    stored = []
    epoch = 0
    for i, (size, records, bump) in enumerate(zip(scenario.sizes, scenario.record_counts, scenario.epoch_bumps)):
        if i == scenario.flushed_batches:
            flush(log, scenario)
        epoch += bump
        # As many records as the size holds: a record takes at least 7 bytes.
        records = max(1, min(records, (size - HEADER_SIZE_BYTES) // 8))
        batch = build_batch(record_count=records, payload_bytes=size - HEADER_SIZE_BYTES, max_timestamp=1000 + 10 * i,
                            fill=i % 251 + 1)
        first, last = log.append(batch, leader_epoch=epoch)  # writes offsets and epoch into `batch`
        active = log.segments[-1]
        stored.append(StoredBatch(first, last + 1, 1000 + 10 * i, epoch, bytes(batch), active.base_offset,
                                  active.size_bytes - len(batch)))
    if scenario.flushed_batches == len(scenario.sizes):
        flush(log, scenario)
    recovery_point = log.recovery_point
    log.close_handles()
    return stored, recovery_point


def flush(log: Log, scenario: Scenario) -> None:
    if scenario.background_flush:
        background_flush(log)
    else:
        log.flush()
        log.checkpoint_recovery_point()


def segment_file(directory: Path, base_offset: int, suffix: str = ".log") -> Path:
    return directory / f"{base_offset:020d}{suffix}"


def damage(directory: Path, stored: list[StoredBatch], recovery_point: int, data) -> int:
    """Damage the killed log one way; returns how many batches (from the first) must survive."""
    kind = data.draw(st.sampled_from(["none", "cut", "flip", "zero_tail", "index"]), label="damage")
    if kind == "none":
        return len(stored)
    if kind == "index":
        segment_base = data.draw(st.sampled_from(sorted({b.segment_base for b in stored})), label="segment")
        path = segment_file(directory, segment_base, data.draw(st.sampled_from([".index", ".timeindex"])))
        how = data.draw(st.sampled_from(["delete", "truncate", "garbage"]), label="index damage")
        if path.exists() and how == "delete":
            path.unlink()
        elif path.exists() and how == "truncate":
            os.truncate(path, data.draw(st.integers(0, path.stat().st_size), label="keep bytes"))
        elif how == "garbage":
            path.write_bytes(os.urandom(data.draw(st.integers(1, 4096), label="garbage bytes")))
        return len(stored)
    # A crash loses only what was not flushed.
    exposed = [i for i, batch in enumerate(stored) if batch.base_offset >= recovery_point]
    if not exposed:
        return len(stored)
    hit = data.draw(st.sampled_from(exposed), label="damaged batch")
    batch = stored[hit]
    path = segment_file(directory, batch.segment_base)
    if kind == "flip":
        # Bytes 0-3 (the high half of the base offset: any change leaves the segment's offset
        # range), 8-11 (length) and 16 on; not the 8 bytes no check can see (module docstring).
        checkable = data.draw(st.integers(0, len(batch.data) - 9), label="flipped byte")
        at = batch.position + checkable + (0 if checkable < 4 else 4 if checkable < 8 else 8)
        with open(path, "r+b") as file:
            file.seek(at)
            byte = file.read(1)[0]
            file.seek(at)
            file.write(bytes([byte ^ (1 << data.draw(st.integers(0, 7), label="bit"))]))
    elif kind == "cut":
        # Strictly inside the batch: a cut on a batch boundary of a segment that is not the last
        # is no damage a scan can see (Kafka's recovery keeps what follows it too).
        os.truncate(path, batch.position + data.draw(st.integers(1, len(batch.data) - 1), label="cut at"))
    else:
        # From a byte that is not zero already: a batch's last bytes may be (a record without
        # headers ends in a zero count), and zeros written over zeros leave it whole.
        last_nonzero = len(batch.data.rstrip(b"\0")) - 1
        start = batch.position + data.draw(st.integers(0, last_nonzero), label="zeros from")
        with open(path, "r+b") as file:
            end = file.seek(0, os.SEEK_END) + data.draw(st.integers(0, 4096), label="zeros past the end")
            file.seek(start)
            file.write(bytes(end - start))
    return hit


def assert_serves_exactly(log: Log, survivors: list[StoredBatch]) -> None:
    expected_end = survivors[-1].next_offset if survivors else 0
    assert (log.log_start_offset, log.log_end_offset) == (0, expected_end)
    assert read_all(log, 0) == b"".join(batch.data for batch in survivors)
    for batch in survivors:  # bounded by BATCHES_MAX
        for offset in (batch.base_offset, batch.next_offset - 1):
            assert read_all(log, offset, max_bytes=1)[:len(batch.data)] == batch.data, offset
        assert log.offset_for_timestamp(batch.max_timestamp) == (batch.base_offset, batch.max_timestamp)
    assert log.read(expected_end, MIB) == []
    with pytest.raises(OffsetOutOfRangeError):
        log.read(expected_end + 1, MIB)
    epoch_starts = {}
    for batch in survivors:
        epoch_starts.setdefault(batch.leader_epoch, batch.base_offset)
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == sorted(epoch_starts.items())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
@given(scenario=scenarios(), data=st.data())
def test_killed_log_serves_every_whole_batch_before_the_damage(scenario, data):
    with tempfile.TemporaryDirectory(dir=SCRATCH_ROOT) as root:
        directory = Path(root) / "big-0"
        stored, recovery_point = write_and_kill(directory, scenario)
        survivors = stored[:damage(directory, stored, recovery_point, data)]

        # Batches written under a higher limit than today's are kept whole all the same.
        log = Log(directory, dataclasses.replace(scenario.config, max_message_bytes=LogConfig().max_message_bytes),
                  ManualClock())
        try:
            assert_serves_exactly(log, survivors)
            expected_end = log.log_end_offset
            batch = build_batch(record_count=3, payload_bytes=100, max_timestamp=99_999)
            assert log.append(batch, leader_epoch=1000) == (expected_end, expected_end + 2)
            assert read_all(log, expected_end) == bytes(batch)
        finally:
            log.close_handles()
