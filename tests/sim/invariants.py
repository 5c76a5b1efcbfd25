"""The replication contract, checked on the live replicas after every step of a schedule (the
chaos checker, tests/chaos/checker.py, checks the same on the files after a run).

After every step (one iteration of the event loop), on every broker not crashed:
- one leader per epoch: no two brokers ever hold a partition's replica as LEADER at the same
  leader epoch (so an epoch is never reused by two brokers);
- the HW of a replica never goes back while it leads at one epoch;
- every replica the store names in the ISR (so electable) holds every acknowledged record;
- every record acknowledged with acks=all at leader epoch E, at offset O, is at offset O in the
  log of every replica that leads, unfenced, at an epoch >= E. This is the exact form of "no
  acknowledged write is lost": a leader never truncates its own log, so a record missing from
  a later leader's log is gone for good once the followers truncate to it (Kafka's KIP-101 and
  KAFKA-7128 losses end that way). It is checked incrementally: each leader's log is read only
  at the offsets of acknowledgements it has not been checked against yet.

Every CONVERGENCE_CHECK_S of virtual time and at the end (it reads whole logs):
- the logs of any two replicas agree (same record at each offset) below the smaller of their
  two HWs.

A violation raises Violation at the step that broke the rule, which ends the schedule there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from replog.replica.partition import Partition, ReplicaState
from replog.storage.records import batch_headers

CONVERGENCE_CHECK_S = 1.0
READ_ALL_BYTES = 1 << 26


class Violation(AssertionError):
    pass


@dataclasses.dataclass(frozen=True)
class Ack:
    number: int  # the record's number (its timestamp)
    topic: str
    partition: int
    offset: int
    epoch: int  # the leader epoch of the replica that acknowledged it


def records_below(replica: Partition, end: int) -> dict[int, int]:
    """offset -> record number, of the log's batches below `end` (one record per batch)."""
    found: dict[int, int] = {}
    if end <= replica.log_start_offset:
        return found
    for piece in replica.log.read(replica.log_start_offset, READ_ALL_BYTES):
        for header in batch_headers(piece.read()):
            if header.base_offset >= end:
                return found
            found[header.base_offset] = header.max_timestamp
    return found


def record_at(replica: Partition, offset: int) -> int | None:
    if not replica.log_start_offset <= offset < replica.log_end_offset:
        return None
    pieces = replica.log.read(offset, 1)
    header = batch_headers(pieces[0].read())[0]
    return header.max_timestamp if header.base_offset == offset else None


def _require_acknowledged(replica: Partition, acks: list[Ack], up_to_epoch: int | None, holder: str) -> None:
    """Every one of `acks` of the replica's partition (acknowledged at `up_to_epoch` or before,
    if given) is in the replica's log at its offset."""
    for ack in acks:
        if (ack.topic, ack.partition) != (replica.topic, replica.partition_id) or (up_to_epoch is not None and ack.epoch > up_to_epoch):
            continue
        found = record_at(replica, ack.offset)
        if found != ack.number:
            raise Violation(
                f"{holder} ({replica.state.value} epoch={replica.leader_epoch} hw={replica.high_watermark} "
                f"leo={replica.log_end_offset} isr={sorted(replica.isr)}), has {'record ' + str(found) if found is not None else 'no record'} "
                f"at {replica.topic}-{replica.partition_id} offset {ack.offset}, where record {ack.number} was acknowledged at epoch {ack.epoch}")


class Checker:
    def __init__(self, trace, store_isr: Callable[[str, int], tuple[int, ...]]):
        self._trace = trace
        self._store_isr = store_isr  # the ISR the store names now: who is electable
        self.acks: list[Ack] = []
        self._epoch_leaders: dict[tuple[str, int, int], int] = {}
        self._seen_leaders: set[tuple[str, int, int]] = set()
        self._high_watermarks: dict[tuple[int, str, int, int], int] = {}
        self._acks_checked: dict[tuple[int, str, int, int], int] = {}
        # (broker, topic, partition) of store ISR members -> (acks checked, log end offset then)
        self._members_checked: dict[tuple[int, str, int], tuple[int, int]] = {}
        self._members: dict[tuple[str, int], tuple[int, ...]] = {}  # the store's ISR at the last step
        self._next_convergence_check_s = 0.0

    def acknowledged(self, ack: Ack) -> None:
        self.acks.append(ack)

    def check_step(self, brokers: Mapping[int, Any], partitions: list[tuple[str, int]], now_s: float) -> None:
        for broker in brokers.values():
            if broker.owner.crashed:
                continue
            for replica in broker.replicas.partitions:
                if replica.state is ReplicaState.LEADER:
                    self._check_leader(broker.broker_id, replica)
        for topic, partition in partitions:
            self._check_isr_members(brokers, topic, partition)
        if now_s >= self._next_convergence_check_s:
            self._next_convergence_check_s = now_s + CONVERGENCE_CHECK_S
            self.check_convergence(brokers.values())

    def _check_leader(self, broker_id: int, replica: Partition) -> None:
        topic, partition, epoch = replica.topic, replica.partition_id, replica.leader_epoch
        first = self._epoch_leaders.setdefault((topic, partition, epoch), broker_id)
        if first != broker_id:
            raise Violation(f"two leaders in one epoch: {topic}-{partition} epoch {epoch} led by broker {first} and broker {broker_id}")
        if (topic, partition, epoch) not in self._seen_leaders:
            self._seen_leaders.add((topic, partition, epoch))
            self._trace(f"leader {topic}-{partition} epoch={epoch} broker={broker_id} isr={sorted(replica.isr)} "
                        f"hw={replica.high_watermark} leo={replica.log_end_offset}")
        key = (broker_id, topic, partition, epoch)
        previous = self._high_watermarks.get(key, -1)
        if replica.high_watermark < previous:
            raise Violation(f"HW went back: {topic}-{partition} broker {broker_id} epoch {epoch} from {previous} to {replica.high_watermark}")
        self._high_watermarks[key] = replica.high_watermark
        if replica.fenced:
            return
        checked = self._acks_checked.get(key, 0)
        _require_acknowledged(replica, self.acks[checked:], epoch, f"acknowledged record lost: broker {broker_id}, leading")
        self._acks_checked[key] = len(self.acks)

    def _check_isr_members(self, brokers: Mapping[int, Any], topic: str, partition: int) -> None:
        """Every replica the store names in sync holds every acknowledged record: elections
        rely on it, so a replica admitted without one (KIP-497, KAFKA-7128) is caught when it
        is admitted, not only if it later wins an election. A crashed broker's replica counts
        too: its files stay, unless its machine lost power: then the files lost their unflushed
        tail, and the rule is that the broker leaves the ISR before it can be elected, so it is
        checked again once restarted. A replica not open yet is checked once it is."""
        members = self._store_isr(topic, partition)
        if members != self._members.get((topic, partition)):
            self._members[(topic, partition)] = members
            for key in [key for key in self._members_checked if key[1:] == (topic, partition) and key[0] not in members]:
                del self._members_checked[key]  # left the ISR: checked afresh if it joins again
        for broker_id in members:
            replica = brokers[broker_id].replicas.hosted(topic, partition)
            if replica is None or brokers[broker_id].lost_power:
                continue
            key = (broker_id, topic, partition)
            checked, log_end_seen = self._members_checked.get(key, (0, -1))
            if replica.log_end_offset < log_end_seen:
                checked = 0  # truncated since: check everything again
            elif checked == len(self.acks):
                continue
            _require_acknowledged(replica, self.acks[checked:], None,
                                  f"ISR member without an acknowledged record: broker {broker_id}, in the store's ISR {sorted(members)}")
            self._members_checked[key] = (len(self.acks), replica.log_end_offset)

    def check_convergence(self, brokers) -> None:
        hosted: dict[tuple[str, int], list[tuple[int, Partition]]] = {}
        for broker in brokers:
            if not broker.owner.crashed:
                for replica in broker.replicas.partitions:
                    hosted.setdefault((replica.topic, replica.partition_id), []).append((broker.broker_id, replica))
        for (topic, partition), replicas in hosted.items():
            contents = {broker_id: records_below(replica, replica.high_watermark) for broker_id, replica in replicas}
            for index, (first_id, first) in enumerate(replicas):
                for second_id, second in replicas[index + 1:]:
                    below = min(first.high_watermark, second.high_watermark)
                    for offset in range(max(first.log_start_offset, second.log_start_offset), below):
                        mine, theirs = contents[first_id].get(offset), contents[second_id].get(offset)
                        if mine != theirs:
                            raise Violation(
                                f"logs disagree below the HW: {topic}-{partition} offset {offset}: broker {first_id} has "
                                f"{mine} (hw={first.high_watermark}), broker {second_id} has {theirs} (hw={second.high_watermark})")
