"""The group coordinator of one broker: the groups whose __consumer_offsets partition this
broker leads, their membership (group.py) and their committed offsets.

Ownership follows leadership of the partitions of __consumer_offsets (ownership.py):
- immigration: on becoming a partition's leader, its groups and offsets are read from its log
  (offsets_log.load); meanwhile requests for them answer COORDINATOR_LOAD_IN_PROGRESS;
- emigration: on ceasing to lead it (follower, closed), its groups are dropped, their waiting
  requests answered NOT_COORDINATOR, and later requests too, so that clients look up the new
  coordinator.

Writes (committed offsets, each generation's assignment, deletions) are appended to the
partition with acks=-1 and applied to memory once committed; reads are served from memory.
Offsets committed in a transaction (TxnOffsetCommit) are written as the producer's transactional
batch and held pending (pending_offsets.py) until the transaction's marker is written to the
partition: `complete_transaction` then applies or drops them (docs/design.md §16.6).

Offsets expire as in Kafka (KIP-211): those of a group that has stayed empty for
offsets.retention.minutes, and each offset committed outside any group (no members ever) that
old; a group left with neither members nor offsets goes too. Tombstones delete them from the
log. A group's time as empty counts from its last state change seen here (a group loaded after
a failover starts again from the load), so offsets may be kept longer than the retention, never
shorter.

Tasks: one task group, run by `run`, owns the timer task (every group's deadlines in one
Timers heap) and the loads and group writes; one failing ends the coordinator, which the
broker notices.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Iterable, Iterator

from kio.schema.errors import ErrorCode

from replog.replica.partition import Partition

from . import offsets_log
from .offsets_log import Verify
from .pending_offsets import PendingOffsets
from .group import (UNKNOWN_MEMBER_ID, Group, GroupLimits, GroupState, JoinRequest, JoinResult, PersistAssignment,
                    SyncResult)
from .ownership import Owned, PartitionOwner
from .placement import OFFSETS_TOPIC, partition_for
from .records import GroupKey, OffsetKey, OffsetValue, encode_group_value, encode_key, encode_offset_value
from .timers import Timers

logger = logging.getLogger(__name__)

NO_OFFSET = -1


@dataclasses.dataclass(frozen=True)
class CoordinatorConfig:
    limits: GroupLimits
    offset_metadata_max_bytes: int = 4096
    commit_timeout_ms: int = 5000  # Kafka's offsets.commit.timeout.ms
    groups_max: int = 100_000  # groups held in memory; a join creating one more is refused
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000


@dataclasses.dataclass(frozen=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclasses.dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str


class GroupCoordinator(PartitionOwner):
    topic = OFFSETS_TOPIC
    keys = "groups"

    def __init__(self, broker_id: int, config: CoordinatorConfig, hosted: Callable[[str, int], Partition | None],
                 partition_count: Callable[[], int], clock_ms: Callable[[], int], wall_clock_ms: Callable[[], int]):
        """`hosted(topic, partition)`: the replica this broker hosts, if any; `partition_count`:
        the partitions of __consumer_offsets that groups are placed by (offsets.topic.num.partitions);
        `clock_ms` for deadlines, `wall_clock_ms` for commit timestamps."""
        super().__init__(broker_id, partition_count)
        self.config = config
        self._hosted = hosted
        self._clock_ms = clock_ms
        self._wall_clock_ms = wall_clock_ms
        self._timers_changed = asyncio.Event()
        self.timers = Timers(self._timers_changed.set)
        self._groups: dict[str, Group] = {}
        self._offsets: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        self._pending_offsets = PendingOffsets()
        # One transactional write per producer at a time: each batch takes the sequence after
        # the last one's. Producer id -> (its lock, the writes holding or awaiting it); an entry
        # goes with its last write.
        self._producer_writes: dict[int, tuple[asyncio.Lock, int]] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    def _started(self, tasks: asyncio.TaskGroup) -> None:
        self._schedule_expiry()
        tasks.create_task(self._drive_timers(), name="group-timers")

    async def _drive_timers(self) -> None:
        while True:  # until cancelled with the coordinator
            self.timers.fire_due(self._clock_ms())
            self._timers_changed.clear()
            deadline = self.timers.next_deadline_ms()
            delay_s = None if deadline is None else max(0, deadline - self._clock_ms()) / 1000
            try:
                async with asyncio.timeout(delay_s):
                    await self._timers_changed.wait()
            except TimeoutError:
                pass

    # -- immigration and emigration ----------------------------------------------------------

    async def _read(self, partition: Partition) -> offsets_log.Table:
        return await offsets_log.load(partition)

    def _loaded(self, index: int, table: offsets_log.Table, epoch: int) -> int:
        for group_id, offsets in table.offsets.items():  # bounded by the partition's groups
            self._offsets[group_id] = offsets
            self._group(group_id)
        self._pending_offsets.merge(table.pending)
        for group_id in table.pending.groups():  # bounded by the partition's groups
            self._group(group_id)
        for group_id, value in table.groups.items():  # bounded by the partition's groups
            self._groups.pop(group_id, None)
            self._group(group_id).restore(value)
        return len(set(table.groups) | set(table.offsets))

    def _dropped(self, index: int) -> int:
        leaving = self._placed_in(self._groups, index)
        for group_id in leaving:  # bounded by the partition's groups
            self._groups.pop(group_id).unload(ErrorCode.not_coordinator)
            self._offsets.pop(group_id, None)
        for group_id in self._placed_in(self._offsets, index):  # bounded by the partition's groups
            del self._offsets[group_id]
        for group_id in self._placed_in(self._pending_offsets.groups(), index):  # bounded by the partition's groups
            self._pending_offsets.discard(group_id)
        return len(leaving)

    def _group(self, group_id: str) -> Group:
        group = self._groups.get(group_id)
        if group is None:
            group = Group(group_id, self.config.limits, self.timers, self._clock_ms, self._group_emptied)
            self._groups[group_id] = group
        return group

    def _forget_if_unused(self, group: Group) -> None:
        """A group made by a join that was refused holds nothing worth keeping: memory is
        bounded by real groups, not by refused requests."""
        if group.state is GroupState.EMPTY and group.is_empty and not self._offsets.get(group.group_id) \
                and not self._pending_offsets.pending(group.group_id) and group.generation == 0 and self._groups.get(group.group_id) is group:
            del self._groups[group.group_id]
            group.unload(ErrorCode.unknown_member_id)

    # -- membership --------------------------------------------------------------------------

    async def join(self, group_id: str, request: JoinRequest) -> JoinResult:
        error = self.owns(group_id)
        if error is not None:
            return JoinResult(error, request.member_id)
        group = self._groups.get(group_id)
        if group is None:
            if request.member_id != UNKNOWN_MEMBER_ID:
                return JoinResult(ErrorCode.unknown_member_id, request.member_id)
            if len(self._groups) >= self.config.groups_max:
                return JoinResult(ErrorCode.coordinator_not_available)
            group = self._group(group_id)
        answer: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        group.join(request, _resolver(answer))
        result = await answer
        if result.error != ErrorCode.none:
            self._forget_if_unused(group)
        return result

    async def sync(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                   protocol_type: str | None, protocol_name: str | None, assignments: dict[str, bytes]) -> SyncResult:
        error = self.owns(group_id)
        if error is not None:
            return SyncResult(error)
        group = self._groups.get(group_id)
        if group is None:
            return SyncResult(ErrorCode.unknown_member_id)
        answer: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        persist = group.sync(member_id, group_instance_id, generation, protocol_type, protocol_name, assignments,
                             _resolver(answer))
        if persist is not None:
            # Not in the leader's request: the other members wait on it even if the leader's
            # connection goes.
            self._spawn(lambda: self._persist_assignment(group, persist), f"persist-group-{group_id}")
        return await answer

    async def _persist_assignment(self, group: Group, persist: PersistAssignment) -> None:
        error = await self._write(group.group_id, [(encode_key(GroupKey(group.group_id)), encode_group_value(persist.value))])
        group.assignment_persisted(persist.generation, error)

    def _group_emptied(self, group: Group) -> None:
        """A rebalance left the group empty: its new generation is written, so that a later
        coordinator does not hand out a generation already used."""
        value = group.snapshot()
        self._spawn(lambda: self._write(group.group_id, [(encode_key(GroupKey(group.group_id)), encode_group_value(value))]),
                    f"persist-empty-group-{group.group_id}")

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        error = self.owns(group_id)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        return group.heartbeat(member_id, group_instance_id, generation)

    def leave(self, group_id: str, members: Iterable[tuple[str, str | None]]) -> tuple[int, list[int]]:
        """(group error, an error per member)."""
        error = self.owns(group_id)
        if error is not None:
            return error, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in members]
        return ErrorCode.none, [group.leave(member_id, instance_id) for member_id, instance_id in members]

    # -- committed offsets -------------------------------------------------------------------

    async def commit(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                     commits: list[OffsetCommit]) -> list[int]:
        """An error per commit, in order."""
        error = self._commit_refusal(group_id, member_id, group_instance_id, generation)
        if error is not None:
            return [error] * len(commits)
        errors, values = self._offset_values(commits)
        if not values:
            return errors
        owner = self._partitions.get(self.partition_of(group_id))
        write_error, base_offset = await self._write_at(group_id, self._offset_records(group_id, values))
        if write_error == ErrorCode.none and self._partitions.get(self.partition_of(group_id)) is owner:
            self._offsets.setdefault(group_id, {}).update(_written_at(values, base_offset))
            self._group(group_id)
        logger.debug("committed offsets group=%s generation=%d member=%s partitions=%d error=%d",
                     group_id, generation, member_id or "-", len(values), write_error)
        return [write_error if error == ErrorCode.none else error for error in errors]

    async def commit_transactional(self, group_id: str, producer_id: int, producer_epoch: int, member_id: str,
                                   group_instance_id: str | None, generation: int, commits: list[OffsetCommit],
                                   verify: Verify | None = None) -> list[int]:
        """TxnOffsetCommit: an error per commit, in order. The offsets are written in the
        producer's open transaction and held pending until its marker (`complete_transaction`).
        A member's commit must come from the group's current generation (KIP-447: a producer
        of a generation the group has left behind is fenced by ILLEGAL_GENERATION, or
        FENCED_INSTANCE_ID for a replaced static member). `verify`: asks the transaction
        coordinator whether the transaction is open, for a producer new to the partition."""
        error = ErrorCode.invalid_group_id if not group_id else \
            self._commit_refusal(group_id, member_id, group_instance_id, generation, transactional=True)
        if error is not None:
            return [error] * len(commits)
        errors, values = self._offset_values(commits)
        if not values:
            return errors
        index = self.partition_of(group_id)
        owner = self._partitions.get(index)
        write_error, base_offset = await self._write_transactional(index, producer_id, producer_epoch,
                                                                   self._offset_records(group_id, values), verify)
        # Nothing is awaited between the write's answer and this: a marker after these offsets
        # is answered later (the commit queue answers in log order), so it finds them pending.
        if write_error == ErrorCode.none and self._partitions.get(index) is owner:
            self._pending_offsets.add(producer_id, group_id, _written_at(values, base_offset))
            self._group(group_id)
        logger.debug("committed offsets in a transaction group=%s generation=%d member=%s producer=%d epoch=%d "
                     "partitions=%d error=%d", group_id, generation, member_id or "-", producer_id, producer_epoch,
                     len(values), write_error)
        return [write_error if error == ErrorCode.none else error for error in errors]

    async def _write_transactional(self, index: int, producer_id: int, producer_epoch: int,
                                   records: list[tuple[bytes, bytes | None]], verify: Verify | None) -> tuple[int, int]:
        partition = self._hosted(OFFSETS_TOPIC, index)
        if partition is None or not isinstance(self._partitions.get(index), Owned):
            return ErrorCode.not_coordinator, -1
        lock, writes = self._producer_writes.get(producer_id, (asyncio.Lock(), 0))
        self._producer_writes[producer_id] = (lock, writes + 1)
        try:
            async with lock:
                return await offsets_log.append_transactional(partition, records, producer_id, producer_epoch,
                                                              self.config.commit_timeout_ms, self._wall_clock_ms(), verify)
        finally:
            lock, writes = self._producer_writes.pop(producer_id)
            if writes > 1:
                self._producer_writes[producer_id] = (lock, writes - 1)

    def complete_transaction(self, producer_id: int, partition_index: int, committed: bool) -> None:
        """The producer's transaction marker is written to partition `partition_index` of
        __consumer_offsets: its pending offsets of the groups placed there are applied if it
        committed, dropped if not. A partition still loading reads the marker from its log."""
        if not isinstance(self._partitions.get(partition_index), Owned):
            return
        count = self._partition_count()
        ended = self._pending_offsets.end(producer_id, committed, self._offsets,
                                          lambda group_id: partition_for(group_id, count) == partition_index)
        if ended:
            logger.debug("ended a transaction's offsets topic=%s partition=%d producer=%d committed=%s groups=%d",
                         OFFSETS_TOPIC, partition_index, producer_id, committed, len(ended))

    def _offset_values(self, commits: list[OffsetCommit]) -> tuple[list[int], dict[tuple[str, int], OffsetValue]]:
        """(an error per commit, the value of each accepted one's partition)."""
        errors = [ErrorCode.offset_metadata_too_large
                  if len((commit.metadata or "").encode("utf-8")) > self.config.offset_metadata_max_bytes
                  else ErrorCode.none for commit in commits]
        now_ms = self._wall_clock_ms()
        values = {(commit.topic, commit.partition): OffsetValue(commit.offset, commit.leader_epoch, commit.metadata or "", now_ms)
                  for commit, error in zip(commits, errors) if error == ErrorCode.none}
        return errors, values

    @staticmethod
    def _offset_records(group_id: str, values: dict[tuple[str, int], OffsetValue]) -> list[tuple[bytes, bytes | None]]:
        return [(encode_key(OffsetKey(group_id, topic, partition)), encode_offset_value(value))
                for (topic, partition), value in values.items()]

    def _commit_refusal(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                        transactional: bool = False) -> int | None:
        error = self.owns(group_id)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            # Kafka: with no group, only a commit from outside group management (generation
            # -1) may create one; anything else is from a generation this group never had.
            if generation >= 0:
                return ErrorCode.illegal_generation
            return ErrorCode.coordinator_not_available if len(self._groups) >= self.config.groups_max else None
        return group.commit_refusal(member_id, group_instance_id, generation, transactional)

    def fetch(self, group_id: str, partitions: list[tuple[str, int]] | None) -> tuple[int, dict[tuple[str, int], OffsetValue | None]]:
        """(group error, committed offset per asked partition, None where none); every
        committed partition when `partitions` is None."""
        error = self.owns(group_id)
        if error is not None:
            return error, {}
        committed = self._offsets.get(group_id, {})
        if partitions is None:
            return ErrorCode.none, dict(committed)
        return ErrorCode.none, {key: committed.get(key) for key in partitions}

    def unstable_offsets(self, group_id: str) -> set[tuple[str, int]]:
        """The group's partitions with offsets committed in a transaction not ended yet, which
        OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        return self._pending_offsets.pending(group_id)

    def committed_offsets(self) -> Iterator[tuple[str, str, int, int]]:
        """(group, topic, partition, offset) of every offset committed to a group coordinated
        here (held only while its partition is led and loaded here), for the lag metrics."""
        for group_id, committed in self._offsets.items():  # bounded by groups_max
            for (topic, partition), value in committed.items():  # bounded by the group's partitions
                yield group_id, topic, partition, value.offset

    async def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> int:
        return (await self._write_at(group_id, records))[0]

    async def _write_at(self, group_id: str, records: list[tuple[bytes, bytes | None]]) -> tuple[int, int]:
        """(a group error code, the offset of the first record)."""
        index = self.partition_of(group_id)
        partition = self._hosted(OFFSETS_TOPIC, index)
        if partition is None or not isinstance(self._partitions.get(index), Owned):
            return ErrorCode.not_coordinator, -1
        return await offsets_log.append(partition, records, self.config.commit_timeout_ms, self._wall_clock_ms())

    # -- offset expiry -------------------------------------------------------------------------

    def _schedule_expiry(self) -> None:
        self.timers.schedule(("expire-offsets",), self._clock_ms() + self.config.offsets_retention_check_interval_ms,
                             self._expire_offsets)

    def _expire_offsets(self) -> None:
        now_ms, wall_ms = self._clock_ms(), self._wall_clock_ms()
        for group_id, group in list(self._groups.items()):  # bounded by groups_max
            if self.owns(group_id) is not None or group.state is not GroupState.EMPTY or not group.is_empty:
                continue
            committed = self._offsets.get(group_id, {})
            # Kafka's: an offset with a transactional one pending stays, and so does its group.
            pending = self._pending_offsets.pending(group_id)
            expired = {key: value for key, value in committed.items()
                       if key not in pending and self._expired(group, value, now_ms, wall_ms)}
            if expired or not (committed or pending):
                self._spawn(lambda group=group, expired=expired: self._delete_expired(group, expired),
                            f"expire-offsets-{group_id}")
        self._schedule_expiry()

    def _expired(self, group: Group, value: OffsetValue, now_ms: int, wall_ms: int) -> bool:
        retention_ms = self.config.offsets_retention_ms
        if group.protocol_type is None:
            return value.commit_timestamp_ms + retention_ms <= wall_ms  # a simple group: per commit
        return group.state_timestamp_ms + retention_ms <= now_ms

    async def _delete_expired(self, group: Group, expired: dict[tuple[str, int], OffsetValue]) -> None:
        group_id = group.group_id
        committed = self._offsets.get(group_id, {})
        goes = len(expired) == len(committed) and not self._pending_offsets.pending(group_id)
        tombstones = [(encode_key(OffsetKey(group_id, topic, partition)), None) for topic, partition in expired]
        if goes:
            tombstones.append((encode_key(GroupKey(group_id)), None))
        if await self._write(group_id, tombstones) != ErrorCode.none:
            return  # the next check tries again
        for key, value in expired.items():  # bounded by the group's offsets
            if committed.get(key) is value:  # not committed again meanwhile
                del committed[key]
        if goes and not committed and not self._pending_offsets.pending(group_id) \
                and self._groups.get(group_id) is group and group.is_empty:
            del self._groups[group_id]
            self._offsets.pop(group_id, None)
            group.unload(ErrorCode.coordinator_not_available)
        logger.info("expired offsets group=%s generation=%d partitions=%d group_removed=%s", group_id,
                    group.generation, len(expired), goes)

    # -- administration ----------------------------------------------------------------------

    def list_groups(self) -> tuple[int, list[GroupListing]]:
        if self.loading:
            return ErrorCode.coordinator_load_in_progress, []
        return ErrorCode.none, [GroupListing(group.group_id, group.protocol_type or "", group.state.value)
                                for group in self._groups.values()]

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        error = self.owns(group_id)
        if error is not None:
            return error, None
        return ErrorCode.none, self._groups.get(group_id)

    async def delete_group(self, group_id: str) -> int:
        error = self.owns(group_id)
        if error is not None:
            return error
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found
        if group.state is not GroupState.EMPTY or not group.is_empty:
            return ErrorCode.non_empty_group
        # Kafka's: pending transactional offsets go too, their tombstones outdating them.
        tombstones = [(encode_key(OffsetKey(group_id, topic, partition)), None)
                      for topic, partition in set(self._offsets.get(group_id, {})) | self._pending_offsets.pending(group_id)]
        tombstones.append((encode_key(GroupKey(group_id)), None))
        error = await self._write(group_id, tombstones)
        if error == ErrorCode.none and self._groups.get(group_id) is group and group.state is GroupState.EMPTY:
            group.unload(ErrorCode.group_id_not_found)
            del self._groups[group_id]
            self._offsets.pop(group_id, None)
            self._pending_offsets.discard(group_id)
            logger.info("deleted group group=%s generation=%d", group_id, group.generation)
        return error

    async def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[int, list[int]]:
        """OffsetDelete: (group error, an error per partition). Only while no member consumes."""
        error = self.owns(group_id)
        if error is not None:
            return error, []
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, []
        if group.state is not GroupState.EMPTY:
            return ErrorCode.none, [ErrorCode.group_subscribed_to_topic for _ in partitions]
        committed = self._offsets.get(group_id, {})
        pending = self._pending_offsets.pending(group_id)
        present = [key for key in partitions if key in committed or key in pending]
        error = await self._write(group_id, [(encode_key(OffsetKey(group_id, *key)), None) for key in present]) \
            if present else ErrorCode.none
        if error == ErrorCode.none:
            for key in present:  # bounded by the request's partitions
                committed.pop(key, None)
            self._pending_offsets.discard(group_id, present)
        return ErrorCode.none, [error for _ in partitions]


def _written_at(values: dict[tuple[str, int], OffsetValue], base_offset: int) -> dict[tuple[str, int], OffsetValue]:
    """`values` with the log offsets their records took, in order from `base_offset`."""
    return {key: dataclasses.replace(value, record_offset=base_offset + position)
            for position, (key, value) in enumerate(values.items())}


def _resolver(future: asyncio.Future) -> Callable[[object], None]:
    """A group's callback for a waiting request; the request may have gone (its connection
    closed), and then there is no one to answer."""
    def resolve(result: object) -> None:
        if not future.done():
            future.set_result(result)
    return resolve
