"""Stateful property test: random appends, reads, rolls, truncations, retention, flushes, clean
restarts and crashes (optionally tearing the unflushed last batch) against a plain in-memory model
of segments and batches. Any difference in offsets, bytes read, start/end offsets or timestamp
lookups fails."""

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from replog.storage.errors import OffsetOutOfRangeError, RecordListTooLargeError
from replog.storage.log import Log, LogConfig
from tests.support.log_fixtures import ManualClock, read_all
from tests.support.batches import build_batch

# Each test runs once per append-path codec (conftest.CODECS).
pytestmark = pytest.mark.usefixtures("log_codec")


@dataclasses.dataclass
class ModelBatch:
    base_offset: int
    last_offset: int
    max_timestamp: int
    data: bytes


@dataclasses.dataclass
class ModelSegment:
    base_offset: int
    batches: list[ModelBatch] = dataclasses.field(default_factory=list)

    @property
    def size_bytes(self) -> int:
        return sum(len(b.data) for b in self.batches)


batch_spec = st.tuples(st.integers(1, 5), st.integers(0, 150), st.integers(0, 2000), st.integers(0, 255))
batch_specs = st.lists(batch_spec, min_size=1, max_size=3)


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.directory = None
        self.log = None

    @initialize(
        segment_bytes=st.integers(250, 1500),
        segment_ms=st.integers(50, 3000),
        index_interval_bytes=st.integers(0, 400),
        retention_bytes=st.one_of(st.just(-1), st.integers(200, 3000)),
        retention_ms=st.one_of(st.just(-1), st.integers(100, 3000)),
    )
    def open(self, segment_bytes, segment_ms, index_interval_bytes, retention_bytes, retention_ms):
        self.directory = Path(tempfile.mkdtemp(dir=self.tmp_root)) / "model-0"
        self.config = LogConfig(segment_bytes=segment_bytes, segment_ms=segment_ms,
                                index_interval_bytes=index_interval_bytes, retention_bytes=retention_bytes,
                                retention_ms=retention_ms)
        self.clock = ManualClock(now_ms=2000)
        self.log = Log(self.directory, self.config, self.clock)
        self.segments = [ModelSegment(0)]
        self.epoch = 0

    # -- model helpers ---------------------------------------------------------------------

    @property
    def batches(self) -> list[ModelBatch]:
        return [b for s in self.segments for b in s.batches]

    @property
    def log_end_offset(self) -> int:
        active = self.segments[-1]
        return active.batches[-1].last_offset + 1 if active.batches else active.base_offset

    def model_append(self, batches: list[ModelBatch]) -> None:
        active = self.segments[-1]
        size_bytes = sum(len(b.data) for b in batches)
        max_timestamp = max(b.max_timestamp for b in batches)
        if active.batches and (active.size_bytes + size_bytes > self.config.segment_bytes
                               or max_timestamp - active.batches[0].max_timestamp > self.config.segment_ms):
            self.segments.append(ModelSegment(batches[0].base_offset))
        self.segments[-1].batches.extend(batches)

    # -- rules -----------------------------------------------------------------------------

    @rule(spec=batch_spec, epoch_bump=st.integers(0, 1))
    def append(self, spec, epoch_bump):
        """A leader's append: one batch (Produce carries one per partition)."""
        self.epoch += epoch_bump
        n, p, ts, fill = spec
        buf = build_batch(record_count=n, payload_bytes=p, max_timestamp=ts, fill=fill)
        if len(buf) > self.config.segment_bytes:
            with pytest.raises(RecordListTooLargeError):
                self.log.append(buf, self.epoch)
            return
        first, last = self.log.append(buf, self.epoch)
        assert (first, last) == (self.log_end_offset, self.log_end_offset + n - 1)
        self.model_append([ModelBatch(first, last, ts, bytes(buf))])

    @rule(specs=batch_specs, gaps=st.lists(st.integers(0, 3), min_size=3, max_size=3))
    def append_as_follower(self, specs, gaps):
        batches, offset = [], self.log_end_offset
        for (n, p, ts, fill), gap in zip(specs, gaps):
            offset += gap
            data = bytes(build_batch(record_count=n, payload_bytes=p, max_timestamp=ts, fill=fill,
                                     base_offset=offset, leader_epoch=self.epoch))
            batches.append(ModelBatch(offset, offset + n - 1, ts, data))
            offset += n
        buf = b"".join(b.data for b in batches)
        limit = self.config.segment_bytes
        if any(len(b.data) > limit for b in batches):
            with pytest.raises(RecordListTooLargeError):
                self.log.append_as_follower(buf)
            return
        assert self.log.append_as_follower(buf) == (batches[0].base_offset, batches[-1].last_offset)
        # A fetch larger than a segment goes in as runs of whole batches that fit one.
        run: list[ModelBatch] = []
        for batch in batches:
            if run and (len(buf) > limit) and sum(len(b.data) for b in run) + len(batch.data) > limit:
                self.model_append(run)
                run = []
            run.append(batch)
        self.model_append(run)

    @rule(data=st.data(), max_bytes=st.integers(1, 1500), capped=st.booleans())
    def read(self, data, max_bytes, capped):
        start = self.segments[0].base_offset
        offset = data.draw(st.integers(start, self.log_end_offset))
        max_offset = data.draw(st.integers(start, self.log_end_offset + 2)) if capped else None
        batches = self.batches
        first = next((i for i, b in enumerate(batches) if b.last_offset >= offset), len(batches))
        end = len(batches)
        if max_offset is not None:
            end = next((i for i, b in enumerate(batches) if b.last_offset >= max_offset), len(batches))
        expected = b""
        if first < end:
            expected = b"".join(b.data for b in batches[first:end])
            expected = expected[:max(max_bytes, len(batches[first].data))]
        assert read_all(self.log, offset, max_bytes, max_offset) == expected

    @rule(below=st.integers(1, 5), above=st.integers(1, 5))
    def read_out_of_range(self, below, above):
        for offset in (self.segments[0].base_offset - below, self.log_end_offset + above):
            if offset >= 0 or offset < self.segments[0].base_offset:
                with pytest.raises(OffsetOutOfRangeError):
                    self.log.read(offset, 100)

    @rule(timestamp=st.integers(-1, 2100))
    def offset_for_timestamp(self, timestamp):
        expected = next(((b.base_offset, b.max_timestamp) for b in self.batches if b.max_timestamp >= timestamp), None)
        assert self.log.offset_for_timestamp(timestamp) == expected

    @rule()
    def roll(self):
        self.log.roll()
        if self.segments[-1].batches:
            self.segments.append(ModelSegment(self.log_end_offset))

    @rule(data=st.data())
    def truncate_to(self, data):
        offset = data.draw(st.integers(max(self.segments[0].base_offset - 2, 0), self.log_end_offset + 1))
        self.log.truncate_to(offset)
        if offset >= self.log_end_offset:
            return
        if offset <= self.segments[0].base_offset:
            self.segments = [ModelSegment(offset)]
            return
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop()
        active = self.segments[-1]
        active.batches = [b for b in active.batches if b.last_offset < offset]

    @rule(jump=st.integers(0, 10))
    def truncate_fully_and_start_at(self, jump):
        offset = self.log_end_offset + jump
        self.log.truncate_fully_and_start_at(offset)
        self.segments = [ModelSegment(offset)]

    @rule(elapsed_ms=st.integers(0, 3000), data=st.data())
    def retention(self, elapsed_ms, data):
        self.clock.advance(elapsed_ms)
        high_watermark = data.draw(st.one_of(st.none(), st.integers(self.segments[0].base_offset, self.log_end_offset)))
        upper = self.log_end_offset if high_watermark is None else high_watermark
        excess = sum(s.size_bytes for s in self.segments) - self.config.retention_bytes
        expected_deleted = 0
        while len(self.segments) > 1 and self.segments[1].base_offset <= upper:
            oldest = self.segments[0]
            by_time = self.config.retention_ms >= 0 and self.clock() - max(
                b.max_timestamp for b in oldest.batches) > self.config.retention_ms
            by_size = self.config.retention_bytes >= 0 and excess >= oldest.size_bytes
            if not (by_time or by_size):
                break
            excess -= oldest.size_bytes
            self.segments.pop(0)
            expected_deleted += 1
        assert self.log.delete_retained_segments(high_watermark) == expected_deleted

    @rule(data=st.data())
    def flush(self, data):
        offset = data.draw(st.integers(self.segments[0].base_offset, self.log_end_offset))
        self.log.flush(offset)
        assert self.log.recovery_point >= offset or self.log.recovery_point == self.log_end_offset

    @rule()
    def close_and_reopen(self):
        self.log.close()
        self.log = Log(self.directory, self.config, self.clock)

    @rule(tear=st.booleans(), data=st.data())
    def crash_and_reopen(self, tear, data):
        self.log.close_handles()
        active = self.segments[-1]
        if tear and active.batches and active.batches[-1].base_offset >= self.log.recovery_point:
            # a torn write of the last, unflushed batch: lose between 1 byte and all of it
            lost = data.draw(st.integers(1, len(active.batches[-1].data)))
            path = self.directory / f"{active.base_offset:020d}.log"
            os.truncate(path, active.size_bytes - lost)
            active.batches.pop()
        self.log = Log(self.directory, self.config, self.clock)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def offsets_and_contents_match(self):
        if self.log is None:
            return
        assert self.log.log_start_offset == self.segments[0].base_offset
        assert self.log.log_end_offset == self.log_end_offset
        assert [s.base_offset for s in self.log.segments] == [s.base_offset for s in self.segments]
        assert read_all(self.log, self.log.log_start_offset) == b"".join(b.data for b in self.batches)

    @invariant()
    def epoch_cache_lies_within_the_log(self):
        if self.log is None:
            return
        entries = self.log.leader_epoch_cache.entries
        assert all(a.epoch < b.epoch and a.start_offset < b.start_offset for a, b in zip(entries, entries[1:]))
        assert all(self.log.log_start_offset <= e.start_offset <= self.log.log_end_offset for e in entries)

    def teardown(self):
        if self.log is not None:
            self.log.delete()


@pytest.fixture
def log_machine(tmp_path):
    LogMachine.tmp_root = tmp_path
    return LogMachine


def test_log_matches_model(log_machine):
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(log_machine, settings=settings(max_examples=80, stateful_step_count=30, deadline=None))
