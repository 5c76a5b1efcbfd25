"""The replication contract, checked on the live replicas after every step of a schedule (the
chaos checker, tests/support/checker.py, checks the same on the files after a run).

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
  two HWs;
- no replica holds a record produced before its topic was last created (a deleted topic's
  record served as the new topic's);
- every record in a log was produced, and sits at the one offset it was first seen at (in a
  log or acknowledged): records never move.

A compacted topic (the schedule's, all its life: alter_config may switch cleaning off and on)
keeps the latest record of each key, not every record: a replica's cleaner removes a record
once a later record of its key lies below that replica's HW. So there "at offset O" above reads
"at offset O, or absent from that log while a later record of its key is in it, one
acknowledged or below that replica's HW or the partition's committed HW (the highest HW an
unfenced leader has had)", for leaders, ISR members and two replicas below their
smaller HW alike; where both replicas hold a record at an offset it is the same one, as
without compaction. A record superseded in one replica may still be in another, or absent
from a follower that fetched past it after its leader had cleaned it; comparing each key's
latest record below the smaller HW instead would be wrong after a restart, whose HW comes from
a checkpoint older than the HW the cleaner had used. A record of an aborted transaction may be
absent too (a cleaner removes those), and never supersedes another. Tombstones are not produced, so no record goes without a
later one of its key. A record's key is the one it was produced with: the
checker reads batch headers only (one record a batch, whose bytes the CRC covers).

All of it holds per incarnation of the topic (incarnations.py): a topic deleted and created
again starts its leader epochs afresh, and loses what it acknowledged on purpose. A replica of
an earlier incarnation still open (its broker has not consumed its close-replica yet) is held
to its own incarnation's rules, and must not act for the new one: acknowledge a record produced
to the new topic, lead at the epoch the new topic's leader node names for its broker, or sit in
the new topic's ISR without the new topic's acknowledged records.

A violation raises Violation at the step that broke the rule, which ends the schedule there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple

from replog.coord_backends.paths import LeaderRecord
from replog.replica.partition import Partition, ReplicaState
from replog.storage.batch_format import CONTROL_BATCH_BIT
from replog.storage.records import batch_headers
from tests.sim.incarnations import Incarnations

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
    incarnation: int  # of the topic whose leader node the producer read


def records_below(replica: Partition, end: int) -> dict[int, int]:
    """offset -> record number, of the log's producer batches below `end` (one record per batch;
    transaction markers are no producer's records)."""
    found: dict[int, int] = {}
    if end <= replica.log_start_offset:
        return found
    for piece in replica.log.read(replica.log_start_offset, READ_ALL_BYTES):
        for header in batch_headers(piece.read()):
            if header.base_offset >= end:
                return found
            if not header.attributes & CONTROL_BATCH_BIT:
                found[header.base_offset] = header.max_timestamp
    return found


def running_leaders(brokers: Mapping[int, Any]) -> Iterator[tuple[int, Partition]]:
    """(broker id, replica) of every replica that leads on a broker not crashed."""
    for broker in brokers.values():
        if not broker.owner.crashed:
            for replica in broker.replicas.partitions:
                if replica.state is ReplicaState.LEADER:
                    yield broker.broker_id, replica


def record_at(replica: Partition, offset: int) -> int | None:
    if not replica.log_start_offset <= offset < replica.log_end_offset:
        return None
    pieces = replica.log.read(offset, 1)  # from the batch holding `offset`, or the next one past a gap
    header = batch_headers(pieces[0].read())[0]
    return header.max_timestamp if header.base_offset == offset else None


class LogContents(NamedTuple):
    """A whole log as the checker reads it."""

    numbers: dict[int, int]  # offset -> record number, in offset order
    offsets_of_key: dict[bytes, list[int]]  # key -> the offsets of its records, in order


class Checker:
    def __init__(self, trace, store_isr: Callable[[str, int], tuple[int, ...]],
                 store_leader: Callable[[str, int], LeaderRecord | None], compacted: bool,
                 aborted: Callable[[int], bool] = lambda number: False):
        self._trace = trace
        self._store_isr = store_isr  # the ISR the store names now: who is electable
        self._store_leader = store_leader  # the leader node now: where producers go
        self._compacted = compacted  # the topic's logs may be cleaned: records may go once superseded
        self._aborted = aborted  # whether record number's transaction aborted: a cleaner removes it
        self.incarnations = Incarnations()
        self.acks: list[Ack] = []
        self._acked_numbers: set[int] = set()
        self._keys: dict[int, bytes] = {}  # record number -> its key, of every record produced
        self._offsets: dict[int, int] = {}  # record number -> the offset it was first seen at
        # (incarnation, topic, partition) -> the highest HW an unfenced leader had: below it, committed
        self._committed: dict[tuple[int, str, int], int] = {}
        self._found: list[str] = []  # violations seen between steps, raised at the next check
        # Keyed by incarnation first: epochs start again with a new topic.
        self._epoch_leaders: dict[tuple[int, str, int, int], int] = {}
        self._seen_leaders: set[tuple[int, str, int, int]] = set()
        self._high_watermarks: dict[tuple[int, int, str, int, int], int] = {}
        self._acks_checked: dict[tuple[int, int, str, int, int], int] = {}
        # (broker, topic, partition) of store ISR members -> (the replica, acks checked, log end offset then)
        self._members_checked: dict[tuple[int, str, int], tuple[Partition, int, int]] = {}
        self._members: dict[tuple[str, int], tuple[int, ...]] = {}  # the store's ISR at the last step
        self._next_convergence_check_s = 0.0

    def produced(self, number: int, key: bytes) -> None:
        """Record `number`, with `key`, is about to be appended (acknowledged or not)."""
        self._keys[number] = key

    def acknowledged(self, ack: Ack, by: Partition) -> None:
        """`ack` was acknowledged by the replica `by`."""
        self.acks.append(ack)
        self._acked_numbers.add(ack.number)
        first = self._first_offset(ack.number, ack.offset)
        if first != ack.offset:
            self._found.append(f"record {ack.number} moved: acknowledged at offset {ack.offset}, it was at {first}")
        if self.incarnations.of(by) != ack.incarnation:
            self._found.append(f"a replica of topic incarnation {self.incarnations.of(by)} acknowledged record {ack.number} "
                               f"produced to incarnation {ack.incarnation}: {ack}")

    def _require_acknowledged(self, broker_id: int, replica: Partition, incarnation: int, acks: list[Ack],
                              up_to_epoch: int | None, holder: str) -> None:
        """Every one of `acks` of the replica's partition and incarnation (acknowledged at
        `up_to_epoch` or before, if given) is in the replica's log at its offset, or, in a
        compacted log, superseded there (`_superseded`)."""
        contents = None  # the whole log, read once if a record is missing from a compacted one
        for ack in acks:
            if ((ack.topic, ack.partition, ack.incarnation) != (replica.topic, replica.partition_id, incarnation)
                    or (up_to_epoch is not None and ack.epoch > up_to_epoch)):
                continue
            found = record_at(replica, ack.offset)
            if found == ack.number:
                continue
            if found is None and self._compacted:
                contents = contents or self._contents(replica, f"broker {broker_id}")
                if self._superseded((incarnation, ack.topic, ack.partition), ack.offset, ack.number, replica, contents):
                    continue
            raise Violation(
                f"{holder} ({replica.state.value} epoch={replica.leader_epoch} hw={replica.high_watermark} "
                f"leo={replica.log_end_offset} isr={sorted(replica.isr)}), has {'record ' + str(found) if found is not None else 'no record'} "
                f"at {replica.topic}-{replica.partition_id} offset {ack.offset}, where record {ack.number} was acknowledged "
                f"at epoch {ack.epoch}{' (and no later record of its key)' if self._compacted else ''}")

    def _superseded(self, partition: tuple[int, str, int], offset: int, number: int, replica: Partition,
                    contents: LogContents) -> bool:
        """Whether record `number`, of `partition` (incarnation, topic, partition) at `offset`,
        may be missing from `replica`, whose log holds `contents`: the log is compacted and holds
        a later record of its key, one acknowledged or below the replica's HW or the partition's
        committed HW (the cleaner cleans below the replica's HW: one that a restart took back to
        its checkpoint may be below what it cleaned with, one that rose in the step that cleaned
        above what the checker saw of the leaders')."""
        if not self._compacted:
            return False
        if self._aborted(number):
            return True
        committed = max(self._committed.get(partition, 0), replica.high_watermark)
        return any(later > offset and (later < committed or contents.numbers[later] in self._acked_numbers)
                   and not self._aborted(contents.numbers[later])
                   for later in contents.offsets_of_key.get(self._keys[number], ()))

    def _contents(self, replica: Partition, holder: str) -> LogContents:
        """The replica's whole log; every record in it must have been produced, at the offset it
        was first seen at (records never move, compacted or not)."""
        numbers = records_below(replica, replica.log_end_offset)
        for offset, number in numbers.items():
            if number not in self._keys:
                raise Violation(f"{holder} has record {number}, never produced, at {replica.topic}-{replica.partition_id} "
                                f"offset {offset}")
            first = self._first_offset(number, offset)
            if first != offset:
                raise Violation(f"record {number} moved: {holder} has it at {replica.topic}-{replica.partition_id} "
                                f"offset {offset}, it was at {first}")
        offsets_of_key: dict[bytes, list[int]] = {}
        for offset, number in numbers.items():
            offsets_of_key.setdefault(self._keys[number], []).append(offset)
        return LogContents(numbers, offsets_of_key)

    def _first_offset(self, number: int, offset: int) -> int:
        """The offset record `number` was first seen at (in a log or acknowledged); `offset` if now."""
        return self._offsets.setdefault(number, offset)

    def check_step(self, brokers: Mapping[int, Any], partitions: list[tuple[str, int]], now_s: float) -> None:
        if self._found:
            raise Violation(self._found[0])
        for broker_id, replica in running_leaders(brokers):
            self._check_leader(broker_id, replica)
        for topic, partition in partitions:
            self._check_named_leader(brokers, topic, partition)
            self._check_isr_members(brokers, topic, partition)
        if now_s >= self._next_convergence_check_s:
            self._next_convergence_check_s = now_s + CONVERGENCE_CHECK_S
            self.check_convergence(brokers.values())

    def _check_leader(self, broker_id: int, replica: Partition) -> None:
        topic, partition, epoch = replica.topic, replica.partition_id, replica.leader_epoch
        incarnation = self.incarnations.of(replica)
        first = self._epoch_leaders.setdefault((incarnation, topic, partition, epoch), broker_id)
        if first != broker_id:
            raise Violation(f"two leaders in one epoch: {topic}-{partition} incarnation {incarnation} epoch {epoch} "
                            f"led by broker {first} and broker {broker_id}")
        if (incarnation, topic, partition, epoch) not in self._seen_leaders:
            self._seen_leaders.add((incarnation, topic, partition, epoch))
            self._trace(f"leader {topic}-{partition} incarnation={incarnation} epoch={epoch} broker={broker_id} "
                        f"isr={sorted(replica.isr)} hw={replica.high_watermark} leo={replica.log_end_offset}")
        key = (incarnation, broker_id, topic, partition, epoch)
        previous = self._high_watermarks.get(key, -1)
        if replica.high_watermark < previous:
            raise Violation(f"HW went back: {topic}-{partition} incarnation {incarnation} broker {broker_id} epoch {epoch} "
                            f"from {previous} to {replica.high_watermark}")
        self._high_watermarks[key] = replica.high_watermark
        if replica.fenced:
            return
        committed_key = (incarnation, topic, partition)
        self._committed[committed_key] = max(self._committed.get(committed_key, 0), replica.high_watermark)
        checked = self._acks_checked.get(key, 0)
        self._require_acknowledged(broker_id, replica, incarnation, self.acks[checked:], epoch,
                                   f"acknowledged record lost: broker {broker_id}, leading")
        self._acks_checked[key] = len(self.acks)

    def _check_named_leader(self, brokers: Mapping[int, Any], topic: str, partition: int) -> None:
        """The broker the leader node names leads on a replica of the current incarnation: one
        of the deleted topic's, at the epoch the new topic gave this broker, would serve the
        deleted topic's log as the new topic's."""
        if self.incarnations.current == 0:
            return  # every replica is of the first incarnation
        record = self._store_leader(topic, partition)
        broker = None if record is None else brokers.get(record.leader)
        if broker is None or broker.owner.crashed:
            return
        replica = broker.replicas.hosted(topic, partition)
        if (replica is not None and replica.state is ReplicaState.LEADER and replica.leader_epoch == record.leader_epoch
                and self.incarnations.of(replica) != self.incarnations.current):
            raise Violation(f"{topic}-{partition} incarnation {self.incarnations.current} is led by broker {broker.broker_id} "
                            f"at epoch {record.leader_epoch} on its replica of incarnation {self.incarnations.of(replica)}")

    def _check_isr_members(self, brokers: Mapping[int, Any], topic: str, partition: int) -> None:
        """Every replica the store names in sync holds every acknowledged record: elections
        rely on it, so a replica admitted without one (KIP-497, KAFKA-7128) is caught when it
        is admitted, not only if it later wins an election. A crashed broker's replica counts
        too: its files stay, unless its machine lost power: then the files lost their unflushed
        tail, and the rule is that the broker leaves the ISR before it can be elected, so it is
        checked again once restarted. A replica not open yet is checked once it is. One its
        broker opened before the topic was created again counts as well: the broker takes it for
        the new topic's until it consumes its close-replica, and its leadership may elect it."""
        members = self._store_isr(topic, partition)
        if members != self._members.get((topic, partition)):
            self._members[(topic, partition)] = members
            for key in [key for key in self._members_checked if key[1:] == (topic, partition) and key[0] not in members]:
                del self._members_checked[key]  # left the ISR: checked afresh if it joins again
        current = self.incarnations.current
        for broker_id in members:
            replica = brokers[broker_id].replicas.hosted(topic, partition)
            if replica is None or brokers[broker_id].lost_power:
                continue
            key = (broker_id, topic, partition)
            checked_replica, checked, log_end_seen = self._members_checked.get(key, (None, 0, -1))
            if replica is not checked_replica or replica.log_end_offset < log_end_seen:
                checked = 0  # another replica, or truncated since: check everything again
            elif checked == len(self.acks):
                continue
            self._require_acknowledged(broker_id, replica, current, self.acks[checked:], None,
                                       f"ISR member without an acknowledged record: broker {broker_id}, in the store's ISR {sorted(members)}")
            self._members_checked[key] = (replica, len(self.acks), replica.log_end_offset)

    def check_convergence(self, brokers) -> None:
        hosted: dict[tuple[int, str, int], list[tuple[int, Partition]]] = {}
        for broker in brokers:
            if not broker.owner.crashed:
                for replica in broker.replicas.partitions:
                    key = (self.incarnations.of(replica), replica.topic, replica.partition_id)
                    hosted.setdefault(key, []).append((broker.broker_id, replica))
        for (incarnation, topic, partition), replicas in hosted.items():
            contents = {broker_id: self._contents(replica, f"broker {broker_id}") for broker_id, replica in replicas}
            first_record = self.incarnations.first_record(incarnation)
            for broker_id, replica in replicas:
                older = next(((offset, number) for offset, number in contents[broker_id].numbers.items()
                              if number < first_record), None)
                if older is not None:
                    raise Violation(f"a deleted topic's record in a replica of the new one: broker {broker_id} has record "
                                    f"{older[1]} at {topic}-{partition} offset {older[0]}, in its replica of incarnation "
                                    f"{incarnation}, created after record {first_record - 1}")
            for index, (first_id, first) in enumerate(replicas):
                for second_id, second in replicas[index + 1:]:
                    below = min(first.high_watermark, second.high_watermark)
                    for offset in range(max(first.log_start_offset, second.log_start_offset), below):
                        mine, theirs = contents[first_id].numbers.get(offset), contents[second_id].numbers.get(offset)
                        if mine == theirs:
                            continue
                        if mine is None and self._superseded((incarnation, topic, partition), offset, theirs, first,
                                                             contents[first_id]):
                            continue
                        if theirs is None and self._superseded((incarnation, topic, partition), offset, mine, second,
                                                               contents[second_id]):
                            continue
                        raise Violation(
                            f"logs disagree below the HW: {topic}-{partition} incarnation {incarnation} offset {offset}: "
                            f"broker {first_id} has {mine} (hw={first.high_watermark}), broker {second_id} has {theirs} "
                            f"(hw={second.high_watermark})")
