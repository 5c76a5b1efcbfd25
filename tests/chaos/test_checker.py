"""The checker must be able to fail: replica logs written through replica/'s Log, healthy and
then broken one way at a time, each caught."""

from __future__ import annotations

from replog.storage.checkpoint import OffsetCheckpoint
from replog.storage.log import Log, LogConfig
from replog.replica.manager import HIGH_WATERMARK_CHECKPOINT_FILE
from tests.support.checker import Observed, read_replica, violations
from tests.support.harness import record_batch

TOPIC, PARTITION = "chaos", 0
BROKERS = (0, 1, 2)


def write_replica(data_dir, appends: list[tuple[int, tuple[bytes, ...]]], high_watermark: int) -> None:
    """`appends`: (leader epoch, record values) per batch, appended as a leader would."""
    log = Log(data_dir / f"{TOPIC}-{PARTITION}", LogConfig(), clock=lambda: 0)
    for epoch, values in appends:
        log.append(record_batch(*values), epoch)
    log.close()
    OffsetCheckpoint(data_dir / HIGH_WATERMARK_CHECKPOINT_FILE).write({(TOPIC, PARTITION): high_watermark})


HEALTHY = [(0, (b"1", b"2")), (0, (b"3",)), (1, (b"4", b"5"))]
LEADER_LINES = {0: [f"INFO became leader topic={TOPIC} partition={PARTITION} broker=0 epoch=0 isr=(0, 1, 2)"],
                1: [f"INFO became leader topic={TOPIC} partition={PARTITION} broker=1 epoch=1 leo=3"], 2: []}


def check(tmp_path, logs: dict[int, list], *, acknowledged=(b"1", b"2", b"3", b"4", b"5"), samples=(2, 3, 5),
          high_watermark=5, outputs=None) -> list[str]:
    replicas = {}
    for broker, appends in logs.items():
        write_replica(tmp_path / f"broker-{broker}", appends, min(high_watermark, sum(len(v) for _, v in appends)))
        replicas[broker] = read_replica(tmp_path / f"broker-{broker}", broker, TOPIC, PARTITION)
    observed = Observed(frozenset(acknowledged), frozenset(BROKERS), tuple(samples), outputs or LEADER_LINES)
    return violations(replicas, observed, TOPIC, PARTITION)


def test_identical_logs_with_every_acknowledged_record_pass(tmp_path):
    assert check(tmp_path, {broker: HEALTHY for broker in BROKERS}) == []


def test_a_replica_diverging_at_an_offset_is_caught(tmp_path):
    divergent = [(0, (b"1", b"2")), (0, (b"X",)), (1, (b"4", b"5"))]
    problems = check(tmp_path, {0: HEALTHY, 1: HEALTHY, 2: divergent})
    assert any("differs from broker 0 below the HW" in problem for problem in problems)
    assert any(problem.startswith("offset 2:") for problem in problems)
    assert any("lacks 1 acknowledged records" in problem for problem in problems)


def test_a_tail_rewritten_above_the_hw_is_caught_as_offset_reuse(tmp_path):
    zombie_tail = [*HEALTHY, (1, (b"zombie",))]
    new_tail = [*HEALTHY, (2, (b"6",))]
    outputs = {**LEADER_LINES, 2: [f"became leader topic={TOPIC} partition={PARTITION} broker=2 epoch=2"]}
    problems = check(tmp_path, {0: zombie_tail, 1: new_tail, 2: new_tail}, outputs=outputs)
    assert [problem.split(" crc ")[0] for problem in problems] == ["offset 5: broker 0 has epoch 1"] * 2
    assert [problem.split(", ")[1].split(" crc ")[0] for problem in problems] == ["broker 1 epoch 2", "broker 2 epoch 2"]


def test_a_lost_or_duplicated_acknowledged_record_is_caught(tmp_path):
    duplicated = [*HEALTHY, (1, (b"3",))]
    problems = check(tmp_path, {0: HEALTHY, 1: HEALTHY, 2: duplicated}, acknowledged=(b"1", b"2", b"3", b"6"))
    assert sum("lacks 1 acknowledged records, first [b'6']" in problem for problem in problems) == 3
    assert any("broker 2 (ISR) holds 1 acknowledged records more than once" in problem for problem in problems)


def test_a_high_watermark_going_backwards_is_caught(tmp_path):
    problems = check(tmp_path, {broker: HEALTHY for broker in BROKERS}, samples=(2, 5, 3))
    assert problems == ["HW went back from 5 to 3 (samples 1 and 2)"]
    problems = check(tmp_path / "again", {broker: HEALTHY for broker in BROKERS}, samples=(2, 6))
    assert problems == ["the highest HW checkpoint 5 is below the HW clients saw, 6"]


def test_two_leaders_in_one_epoch_or_an_unled_epoch_is_caught(tmp_path):
    outputs = {**LEADER_LINES, 2: [f"became leader topic={TOPIC} partition={PARTITION} broker=2 epoch=1"]}
    assert check(tmp_path, {broker: HEALTHY for broker in BROKERS}, outputs=outputs) == ["epoch 1 had leaders [1, 2]"]
    unled = {0: LEADER_LINES[0], 1: [], 2: []}
    problems = check(tmp_path / "again", {broker: HEALTHY for broker in BROKERS}, outputs=unled)
    assert problems == [f"broker {broker}: batches of epoch 1, which nobody said it led" for broker in BROKERS]
