"""Idempotent producer state: duplicates, gaps, epochs, sequence wrap, restart and truncation."""

import logging
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from replog.storage.log import Log, LogConfig
from replog.replica.producer_state import (
    BATCHES_KEPT_PER_PRODUCER,
    NO_PRODUCER_EPOCH,
    SNAPSHOT_SUFFIX,
    SNAPSHOTS_KEPT,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
    ProducerStateManager,
    increment_sequence,
)
from tests.support.producer_batches import producer_batch
from tests.support.log_fixtures import ManualClock

MAX_SEQUENCE = 2**31 - 1
PID = 4000


def open_state(directory: Path) -> tuple[Log, ProducerStateManager]:
    log = Log(directory, LogConfig(segment_bytes=300), ManualClock())
    state = ProducerStateManager(directory, log.topic, log.partition)
    state.load(log)
    return log, state


def append(log: Log, state: ProducerStateManager, batch_bytes: bytearray) -> tuple[int, bool]:
    """(first offset, whether it was a duplicate): what the partition does around the log."""
    run = log.assign_as_leader(batch_bytes, leader_epoch=0)
    check = state.check(batch_bytes)
    if check.duplicate is not None:
        return check.duplicate.first_offset, True
    log.write_assigned(batch_bytes, run, leader_epoch=0)
    first_offset = run.last_offset - run.record_count + 1
    state.record_append(check, first_offset)
    return first_offset, False


def batch(base_sequence: int, records: int = 1, epoch: int = 0, pid: int = PID, timestamp_ms: int = 0) -> bytearray:
    return producer_batch(records, pid, epoch, base_sequence, max_timestamp=timestamp_ms)


@pytest.fixture
def opened(tmp_path):
    return open_state(tmp_path / "orders-0")


def test_retry_of_any_of_the_last_five_batches_is_a_duplicate_with_its_original_offsets(opened):
    log, state = opened
    firsts = [append(log, state, batch(seq * 2, records=2))[0] for seq in range(7)]
    end_offset = log.log_end_offset
    for kept in range(7 - BATCHES_KEPT_PER_PRODUCER, 7):
        assert append(log, state, batch(kept * 2, records=2)) == (firsts[kept], True)
    assert log.log_end_offset == end_offset
    with pytest.raises(OutOfOrderSequenceError):  # older than the window: no longer recognisable
        state.check(batch(0, records=2))


def test_a_sequence_gap_or_overlap_is_out_of_order(opened):
    log, state = opened
    append(log, state, batch(0, records=3))
    for wrong in (batch(4), batch(2, records=2), batch(1, records=2)):
        with pytest.raises(OutOfOrderSequenceError):
            state.check(wrong)
    assert append(log, state, batch(3)) == (3, False)


def test_an_unknown_producer_may_start_at_any_sequence(opened):
    # As Kafka: retention may have removed all of a live producer's batches.
    log, state = opened
    assert append(log, state, batch(1234)) == (0, False)
    assert state.producers[PID].last_sequence == 1234


def test_older_epoch_is_fenced_and_a_new_epoch_starts_at_zero(opened):
    log, state = opened
    append(log, state, batch(0, epoch=3))
    with pytest.raises(InvalidProducerEpochError):
        state.check(batch(1, epoch=2))
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(1, epoch=4))
    append(log, state, batch(0, epoch=4))
    with pytest.raises(InvalidProducerEpochError):  # the old epoch's batch is no longer a duplicate
        state.check(batch(0, epoch=3))
    assert state.producers[PID].epoch == 4


def test_sequences_wrap_after_int32_max(opened):
    log, state = opened
    append(log, state, batch(MAX_SEQUENCE - 1))
    append(log, state, batch(MAX_SEQUENCE, records=3))  # MAX, 0, 1
    assert state.producers[PID].last_sequence == 1
    with pytest.raises(OutOfOrderSequenceError):
        state.check(batch(MAX_SEQUENCE + 1 - 2**31 + 5))
    assert append(log, state, batch(2)) == (4, False)
    assert append(log, state, batch(MAX_SEQUENCE, records=3)) == (1, True)
    assert increment_sequence(MAX_SEQUENCE, 1) == 0


def test_non_idempotent_batches_are_not_checked_or_kept(opened):
    log, state = opened
    append(log, state, producer_batch(2))
    assert append(log, state, producer_batch(2)) == (2, False)
    assert state.producers == {}


def snapshot_offsets(directory: Path) -> list[int]:
    return sorted(int(path.stem) for path in directory.glob("*" + SNAPSHOT_SUFFIX))


def test_clean_restart_loads_the_snapshot_and_reads_no_header(tmp_path, caplog):
    log, state = open_state(tmp_path / "orders-0")
    append(log, state, batch(0, records=2, timestamp_ms=77))
    append(log, state, batch(0, pid=PID + 1, epoch=2))
    before = dict(state.producers)
    state.take_snapshot(log.log_end_offset)
    log.close()

    with caplog.at_level(logging.DEBUG, logger="replog.replica.producer_state"):
        log, state = open_state(tmp_path / "orders-0")
    assert state.producers == before
    assert "from='snapshot at 3' batches_read=0" in caplog.text
    assert append(log, state, batch(0, records=2)) == (0, True)


def test_crash_restart_rebuilds_from_the_log_headers(tmp_path):
    log, state = open_state(tmp_path / "orders-0")
    for seq in range(0, 40, 4):  # several segments
        append(log, state, batch(seq, records=4, timestamp_ms=seq))
    before = dict(state.producers)
    log.close_handles()

    log, state = open_state(tmp_path / "orders-0")
    assert len(log.segments) > 1
    assert state.producers == before


def test_crash_restart_reads_only_the_headers_after_the_newest_snapshot(tmp_path, caplog):
    log, state = open_state(tmp_path / "orders-0")
    for i in range(10):  # two producers, five batches of two records each
        append(log, state, batch(i // 2 * 2, records=2, pid=PID + i % 2))
    state.take_snapshot(log.log_end_offset)
    for seq in range(10, 16):  # the log moves on past the snapshot, then the broker crashes
        append(log, state, batch(seq))
    before = dict(state.producers)
    log.close_handles()

    with caplog.at_level(logging.DEBUG, logger="replog.replica.producer_state"):
        log, state = open_state(tmp_path / "orders-0")
    assert state.producers == before
    assert "from='snapshot at 20' batches_read=6" in caplog.text


def test_snapshots_past_the_log_end_are_deleted_and_an_older_one_serves(tmp_path):
    log, state = open_state(tmp_path / "orders-0")
    append(log, state, batch(0))
    state.take_snapshot(log.log_end_offset)
    append(log, state, batch(1))
    state.take_snapshot(log.log_end_offset)
    append(log, state, batch(2))

    log.truncate_to(1)
    state.load(log)
    assert snapshot_offsets(tmp_path / "orders-0") == [1]
    assert state.producers[PID].last_sequence == 0
    assert append(log, state, batch(1, records=3)) == (1, False)


def test_only_the_newest_snapshots_are_kept(opened, tmp_path):
    log, state = opened
    for seq in range(SNAPSHOTS_KEPT + 2):
        append(log, state, batch(seq))
        state.take_snapshot(log.log_end_offset)
    assert snapshot_offsets(tmp_path / "orders-0") == list(range(3, SNAPSHOTS_KEPT + 3))


@pytest.mark.parametrize("truncated", [False, True])
def test_a_background_snapshot_is_installed_unless_the_log_was_truncated_meanwhile(opened, tmp_path, truncated):
    log, state = opened
    append(log, state, batch(0))
    append(log, state, batch(1))
    pending = state.prepare_snapshot(log.log_end_offset)
    pending.write()  # in another thread, in the broker
    assert snapshot_offsets(tmp_path / "orders-0") == []
    if truncated:
        pending.discard()
    else:
        pending.install()
    assert snapshot_offsets(tmp_path / "orders-0") == ([] if truncated else [2])
    assert [path.name for path in (tmp_path / "orders-0").iterdir() if path.name.endswith(".tmp")] == []


def test_damaged_snapshot_falls_back_to_a_rebuild(tmp_path):
    log, state = open_state(tmp_path / "orders-0")
    append(log, state, batch(0))
    state.take_snapshot(log.log_end_offset)
    log.close()
    snapshot = next((tmp_path / "orders-0").glob("*" + SNAPSHOT_SUFFIX))
    snapshot.write_text("0\n3\ngarbage\n")

    _, state = open_state(tmp_path / "orders-0")
    assert state.producers[PID].last_sequence == 0


def test_reload_after_truncation_rolls_the_state_back(opened):
    log, state = opened
    append(log, state, batch(0, records=2))
    append(log, state, batch(2, records=2))
    log.truncate_to(2)
    state.load(log)
    assert state.producers[PID].last_sequence == 1
    assert append(log, state, batch(2, records=2)) == (2, False)  # appended again, not a duplicate


def test_truncation_of_all_a_producers_batches_forgets_it(opened):
    log, state = opened
    append(log, state, batch(5))
    log.truncate_to(0)
    state.load(log)
    assert state.producers == {}


def test_truncate_head_forgets_producers_wholly_below_the_log_start(opened):
    log, state = opened
    append(log, state, batch(0, pid=1))
    append(log, state, batch(0, pid=2))
    state.truncate_head(1)
    assert list(state.producers) == [2]


def test_silent_producers_expire(opened):
    log, state = opened
    append(log, state, batch(0, pid=1, timestamp_ms=1_000))
    append(log, state, batch(0, pid=2, timestamp_ms=5_000))
    assert state.remove_expired(now_ms=10_000, expiration_ms=6_000) == 1
    assert list(state.producers) == [2]


# -- model test ------------------------------------------------------------------------------

class SequenceModel:
    """Kafka's rules written plainly: the whole history per producer, modular arithmetic."""

    def __init__(self):
        self.epochs: dict[int, int] = {}
        self.history: dict[int, list[tuple[int, int, int]]] = {}  # (first seq, last seq, first offset)

    def expect(self, pid: int, epoch: int, base_sequence: int, records: int) -> tuple[str, int | None]:
        last_sequence = (base_sequence + records - 1) % 2**31
        history = self.history.get(pid, [])
        if pid in self.epochs and epoch == self.epochs[pid]:
            for first, last, offset in history[-BATCHES_KEPT_PER_PRODUCER:]:
                if (first, last) == (base_sequence, last_sequence):
                    return "duplicate", offset
        current = self.epochs.get(pid, NO_PRODUCER_EPOCH)
        if epoch < current:  # for a producer never seen too: as Kafka, below -1 is older than none
            return "fenced", None
        if current == NO_PRODUCER_EPOCH:
            return "append", None
        if epoch > self.epochs[pid]:
            return ("append", None) if base_sequence == 0 else ("out_of_order", None)
        return ("append", None) if base_sequence == (history[-1][1] + 1) % 2**31 else ("out_of_order", None)

    def appended(self, pid: int, epoch: int, base_sequence: int, records: int, first_offset: int) -> None:
        if self.epochs.get(pid) != epoch:
            self.history[pid] = []
        self.epochs[pid] = epoch
        self.history[pid].append((base_sequence, (base_sequence + records - 1) % 2**31, first_offset))


def next_sequences(model: SequenceModel, pid: int) -> list[int]:
    """Sequences worth trying for `pid`: the next, a retry, a gap, zero, and near the wrap."""
    history = model.history.get(pid)
    if not history:
        return [0, MAX_SEQUENCE - 1]
    last = history[-1][1]
    retry = history[max(len(history) - BATCHES_KEPT_PER_PRODUCER - 1, 0)][0]
    return [(last + 1) % 2**31, retry, history[-1][0], (last + 3) % 2**31, 0]


operations = st.lists(
    st.tuples(st.sampled_from([1, 2]), st.integers(-2, 2), st.integers(0, 4), st.integers(1, 3),
              st.sampled_from(["append", "append", "append", "clean_restart", "crash_restart"])),
    min_size=1, max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(operations)
def test_producer_state_matches_the_model_and_survives_restarts(steps):
    outcomes = {OutOfOrderSequenceError: "out_of_order", InvalidProducerEpochError: "fenced"}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "orders-0"
        log, state = open_state(directory)
        model = SequenceModel()
        for pid, epoch, sequence_choice, records, action in steps:
            if action == "clean_restart":
                state.take_snapshot(log.log_end_offset)
                log.close()
            elif action == "crash_restart":
                log.close_handles()
            if action != "append":
                before = dict(state.producers)
                log, state = open_state(directory)
                assert state.producers == before
                continue
            options = next_sequences(model, pid)
            base_sequence = options[sequence_choice % len(options)]
            expected, expected_offset = model.expect(pid, epoch, base_sequence, records)
            event(expected)
            try:
                first_offset, duplicate = append(log, state, batch(base_sequence, records, epoch, pid))
            except (OutOfOrderSequenceError, InvalidProducerEpochError) as error:
                assert outcomes[type(error)] == expected
                continue
            if duplicate:
                assert (expected, expected_offset) == ("duplicate", first_offset)
            else:
                assert expected == "append"
                model.appended(pid, epoch, base_sequence, records, first_offset)
        log.close()


history_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from([PID, PID + 1, PID + 2]), st.integers(1, 4)),
        st.tuples(st.just("new_epoch"), st.sampled_from([PID, PID + 1, PID + 2]), st.none()),
        st.tuples(st.just("snapshot"), st.none(), st.none()),
        st.tuples(st.just("truncate"), st.none(), st.floats(0, 1)),
        st.tuples(st.just("crash_restart"), st.none(), st.none()),
        st.tuples(st.just("clean_restart"), st.none(), st.none()),
    ),
    min_size=1, max_size=50,
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(history_steps)
def test_state_loaded_from_snapshots_equals_the_state_of_every_header(log_codec, steps):
    """Whatever mix of snapshots, truncations and restarts happened, the state loaded is the
    state a reader of every batch header of the log finds (after a crash, through what the
    recovery scan of either codec summed up)."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "orders-0"
        log, state = open_state(directory)
        sequences: dict[int, int] = {}
        epochs: dict[int, int] = {}
        for action, pid, amount in steps:
            if action == "new_epoch":  # the producer restarted: InitProducerId bumped its epoch
                epochs[pid] = epochs.get(pid, 0) + 1
                sequences[pid] = 0
                continue
            if action == "append":
                sequence = sequences.get(pid, 0)
                append(log, state, batch(sequence, records=amount, epoch=epochs.get(pid, 0), pid=pid))
                sequences[pid] = sequence + amount
                continue
            if action == "snapshot":
                state.take_snapshot(log.log_end_offset)
                continue
            if action == "truncate":
                log.truncate_to(int(amount * log.log_end_offset))
                state.load(log)
            elif action == "crash_restart":
                log.close_handles()
                log, state = open_state(directory)
            else:
                state.take_snapshot(log.log_end_offset)
                log.close()
                log, state = open_state(directory)
            every_header = ProducerStateManager(Path(tmp) / "no-snapshots", log.topic, log.partition)
            (Path(tmp) / "no-snapshots").mkdir(exist_ok=True)
            every_header.load(log)
            assert state.producers == every_header.producers
            # the next sequence and epoch of each producer are what the log's state says
            sequences = {pid: entry.last_sequence + 1 for pid, entry in state.producers.items()}
            epochs = {pid: entry.epoch for pid, entry in state.producers.items()}
        log.close()


def test_a_producer_whose_epoch_went_back_after_it_expired_loads_as_its_headers_say(tmp_path):
    log, state = open_state(tmp_path / "orders-0")
    append(log, state, batch(0, epoch=1))
    log.flush()  # as the background flush does: log durable, recovery point and snapshot at its end
    log.checkpoint_recovery_point()
    state.take_snapshot(log.log_end_offset)
    # The producer expired, then wrote at epoch 2 and, restarted from an old state, at epoch 1 again.
    log.append(batch(0, epoch=2), leader_epoch=0)
    log.append(batch(5, epoch=1), leader_epoch=0)
    log.close_handles()

    log, state = open_state(tmp_path / "orders-0")
    assert (state.producers[PID].epoch, [b.first_sequence for b in state.producers[PID].batches]) == (1, [5])
