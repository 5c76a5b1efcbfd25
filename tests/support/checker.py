"""The chaos runs' log checker: reads every replica's files after the brokers have stopped and
lists every way the replicas break the replication contract.

What a run hands in (`Observed`): the records the producer saw acknowledged (acks=all), the
ISR at the end, the HW as clients saw it through the run (ListOffsets latest, in order), and
each broker's output, whose "became leader ... broker=B epoch=E" lines say who led when.

What is read (`read_replica`): the partition's log through replica/'s own Log (segments,
indexes, recovery), every batch's header and records, and the HW from the broker's
replication-offset-checkpoint.

The invariants (Kafka's Raft simulation checks the same after every step):
- every acknowledged record is in the log of every ISR member, exactly once;
- all replicas hold the same batches (offsets, leader epochs, bytes) below the HW;
- no offset holds different data on two replicas, anywhere in their logs;
- the HW never went backwards, as sampled, and no checkpoint is below what clients saw;
- never two brokers led in one epoch, and every batch was written in an epoch someone led.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import Counter
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatch

from replog.storage.checkpoint import OffsetCheckpoint
from replog.storage.log import Log, LogConfig
from replog.replica.manager import HIGH_WATERMARK_CHECKPOINT_FILE
from replog.storage.records import batch_headers, verify_batch

LEADER_LINE = re.compile(r"became leader topic=(?P<topic>\S+) partition=(?P<partition>\d+) broker=(?P<broker>\d+) epoch=(?P<epoch>\d+)")
READ_BYTES_MAX = 1 << 30  # a chaos run writes a few MB; anything near this is a runaway log


@dataclasses.dataclass(frozen=True)
class Batch:
    base_offset: int
    last_offset: int
    leader_epoch: int
    crc: int
    values: tuple[bytes, ...]


@dataclasses.dataclass(frozen=True)
class Replica:
    broker_id: int
    batches: tuple[Batch, ...]
    log_end_offset: int
    high_watermark: int

    @functools.cached_property
    def by_base_offset(self) -> dict[int, Batch]:
        return {batch.base_offset: batch for batch in self.batches}


@dataclasses.dataclass(frozen=True)
class Observed:
    acknowledged: frozenset[bytes]
    isr: frozenset[int]
    high_watermark_samples: tuple[int, ...]
    broker_outputs: dict[int, list[str]]


def read_replica(data_dir: Path, broker_id: int, topic: str, partition: int) -> Replica:
    """One broker's replica of `topic`-`partition`, read offline (the broker must be stopped)."""
    log = Log(data_dir / f"{topic}-{partition}", LogConfig(), clock=lambda: 0)
    try:
        buf = b"".join(piece.read() for piece in log.read(log.log_start_offset, READ_BYTES_MAX))
        log_end_offset = log.log_end_offset
    finally:
        log.close()
    batches = []
    for header in batch_headers(buf):  # bounded by the log's size
        verify_batch(buf, header)
        records = DefaultRecordBatch(buf[header.position:header.position + header.size_bytes])
        batches.append(Batch(header.base_offset, header.last_offset, header.partition_leader_epoch, header.crc,
                             tuple(bytes(record.value) for record in records)))
    checkpointed = OffsetCheckpoint(data_dir / HIGH_WATERMARK_CHECKPOINT_FILE).read()
    return Replica(broker_id, tuple(batches), log_end_offset, checkpointed.get((topic, partition), 0))


def leaders_by_epoch(broker_outputs: dict[int, list[str]], topic: str, partition: int) -> dict[int, set[int]]:
    """Epoch -> the brokers that said they became its leader."""
    leaders: dict[int, set[int]] = {}
    for lines in broker_outputs.values():
        for line in lines:  # bounded by the output of a run
            found = LEADER_LINE.search(line)
            if found and found["topic"] == topic and int(found["partition"]) == partition:
                leaders.setdefault(int(found["epoch"]), set()).add(int(found["broker"]))
    return leaders


def violations(replicas: dict[int, Replica], observed: Observed, topic: str, partition: int) -> list[str]:
    """Every broken invariant, one line each; empty when the run kept them all."""
    return [
        *_acknowledged_on_every_isr_member(replicas, observed),
        *_identical_below_high_watermark(replicas, observed),
        *_no_offset_reused(replicas),
        *_high_watermark_monotonic(replicas, observed),
        *_one_leader_per_epoch(replicas, leaders_by_epoch(observed.broker_outputs, topic, partition)),
    ]


def _acknowledged_on_every_isr_member(replicas: dict[int, Replica], observed: Observed) -> list[str]:
    problems = []
    for broker in sorted(observed.isr):
        counts = Counter(value for batch in replicas[broker].batches for value in batch.values)
        missing = sorted(value for value in observed.acknowledged if counts[value] == 0)
        repeated = sorted(value for value in observed.acknowledged if counts[value] > 1)
        if missing:
            problems.append(f"broker {broker} (ISR) lacks {len(missing)} acknowledged records, first {missing[:5]}")
        if repeated:
            problems.append(f"broker {broker} (ISR) holds {len(repeated)} acknowledged records more than once, first {repeated[:5]}")
    return problems


def _identical_below_high_watermark(replicas: dict[int, Replica], observed: Observed) -> list[str]:
    high_watermark = max(replica.high_watermark for replica in replicas.values())
    reference = replicas[min(observed.isr)]
    committed = [batch for batch in reference.batches if batch.base_offset < high_watermark]
    problems = []
    for replica in replicas.values():
        if replica.broker_id in observed.isr and replica.log_end_offset < high_watermark:
            problems.append(f"broker {replica.broker_id} (ISR) ends at {replica.log_end_offset}, below the HW {high_watermark}")
        own = [batch for batch in replica.batches if batch.base_offset < min(high_watermark, replica.log_end_offset)]
        if own != committed[:len(own)]:
            problems.append(f"broker {replica.broker_id} differs from broker {reference.broker_id} below the HW {high_watermark}")
    return problems


def _no_offset_reused(replicas: dict[int, Replica]) -> list[str]:
    problems = []
    ordered = sorted(replicas.values(), key=lambda replica: replica.broker_id)
    for index, replica in enumerate(ordered):
        for other in ordered[index + 1:]:  # bounded by the replication factor
            for batch in replica.batches:  # bounded by the log
                theirs = other.by_base_offset.get(batch.base_offset)
                if theirs is not None and theirs != batch:
                    problems.append(f"offset {batch.base_offset}: broker {replica.broker_id} has epoch {batch.leader_epoch} "
                                    f"crc {batch.crc:#x}, broker {other.broker_id} epoch {theirs.leader_epoch} crc {theirs.crc:#x}")
                    break
    return problems


def _high_watermark_monotonic(replicas: dict[int, Replica], observed: Observed) -> list[str]:
    samples = observed.high_watermark_samples
    problems = [f"HW went back from {earlier} to {later} (samples {index} and {index + 1})"
                for index, (earlier, later) in enumerate(zip(samples, samples[1:])) if later < earlier]
    highest_checkpoint = max(replica.high_watermark for replica in replicas.values())
    if samples and highest_checkpoint < max(samples):
        problems.append(f"the highest HW checkpoint {highest_checkpoint} is below the HW clients saw, {max(samples)}")
    problems += [f"broker {replica.broker_id}: HW checkpoint {replica.high_watermark} beyond its log end {replica.log_end_offset}"
                 for replica in replicas.values() if replica.high_watermark > replica.log_end_offset]
    return problems


def _one_leader_per_epoch(replicas: dict[int, Replica], leaders: dict[int, set[int]]) -> list[str]:
    problems = [f"epoch {epoch} had leaders {sorted(brokers)}" for epoch, brokers in sorted(leaders.items()) if len(brokers) > 1]
    for replica in replicas.values():
        epochs = [batch.leader_epoch for batch in replica.batches]
        if epochs != sorted(epochs):
            problems.append(f"broker {replica.broker_id}: leader epochs go down along the log")
        problems += [f"broker {replica.broker_id}: batches of epoch {epoch}, which nobody said it led"
                     for epoch in sorted(set(epochs) - set(leaders))]
    return problems
