"""`replog groups list|describe|reset-offsets|delete`, as kafka-consumer-groups does them.

Groups and their committed offsets live in the brokers (their coordinators and
__consumer_offsets, replog.groups), not in the store: every command asks the brokers, through
confluent-kafka's AdminClient (ListGroups, DescribeGroups, OffsetFetch, OffsetCommit,
DeleteGroups) and ListOffsets for the partitions' ends. Through --coord, the door finds the
brokers by their registrations (doors.AdminDoor.group_admin).

    list           every group, its state and kind
    describe       a group's state, members and, per partition it committed: the committed
                   offset, the log end offset, the lag, and the member consuming it
    reset_offsets  new committed offsets for a group without live members, to the earliest or
                   latest offset, an offset, the first at a time, or shifted by N (clamped to
                   each partition's log); a plan only with dry_run
    delete         the groups and their committed offsets; a group with members is refused
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from .errors import AdminError, error_for_code

PartitionKey = tuple[str, int]
REQUEST_TIMEOUT_S = 30.0
NO_OFFSET = -1001  # librdkafka's OFFSET_INVALID: nothing committed


class ResetTo(enum.StrEnum):
    EARLIEST = "earliest"
    LATEST = "latest"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"
    SHIFT = "shift"


@dataclasses.dataclass(frozen=True)
class ResetSpec:
    to: ResetTo
    value: int = 0  # the offset, the time (ms since the epoch) or the shift; unused otherwise


@dataclasses.dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    simple: bool  # offsets committed without ever joining (assign() and commit)


@dataclasses.dataclass(frozen=True)
class Member:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    partitions: tuple[PartitionKey, ...]


@dataclasses.dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    log_end_offset: int | None
    member_id: str | None  # the member it is assigned to, if any

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.log_end_offset is None:
            return None
        return max(self.log_end_offset - self.committed, 0)


@dataclasses.dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    assignor: str
    coordinator: int | None
    members: tuple[Member, ...]
    partitions: tuple[PartitionLag, ...]

    def as_json(self) -> dict:
        return {
            "group": self.group_id, "state": self.state, "assignor": self.assignor, "coordinator": self.coordinator,
            "members": [{"member_id": member.member_id, "client_id": member.client_id, "host": member.host,
                         "group_instance_id": member.group_instance_id,
                         "partitions": [{"topic": topic, "partition": partition} for topic, partition in member.partitions]}
                        for member in self.members],
            "partitions": [{"topic": lag.topic, "partition": lag.partition, "committed": lag.committed,
                            "log_end_offset": lag.log_end_offset, "lag": lag.lag, "member_id": lag.member_id}
                           for lag in self.partitions],
        }


@dataclasses.dataclass(frozen=True)
class OffsetReset:
    topic: str
    partition: int
    before: int | None
    after: int


class ConsumerGroups:
    """The group requests of one AdminClient (confluent-kafka's), each awaited off the loop."""

    def __init__(self, admin, where: str):
        self._admin = admin
        self._where = where

    async def list(self) -> list[GroupListing]:
        result = await self._outcome(self._admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT_S), "groups")
        return sorted((GroupListing(listing.group_id, _state(listing.state), listing.is_simple_consumer_group)
                       for listing in result.valid), key=lambda listing: listing.group_id)

    async def describe(self, group_id: str) -> GroupDescription:
        description = await self._outcome(
            self._admin.describe_consumer_groups([group_id], request_timeout=REQUEST_TIMEOUT_S)[group_id], group_id)
        state = _state(description.state)
        if state == "Dead":
            raise AdminError(ErrorCode.group_id_not_found, f"group {group_id!r} does not exist; `replog groups list` shows the groups")
        members = tuple(Member(member.member_id, member.client_id, member.host, member.group_instance_id,
                               tuple(sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)))
                        for member in description.members)
        committed = await self.committed(group_id)
        owner = {key: member.member_id for member in members for key in member.partitions}
        keys = sorted(set(committed) | set(owner))
        ends = await self.log_offsets(keys, ResetSpec(ResetTo.LATEST))
        lags = tuple(PartitionLag(topic, partition, committed.get((topic, partition)), ends.get((topic, partition)),
                                  owner.get((topic, partition))) for topic, partition in keys)
        coordinator = description.coordinator.id if description.coordinator is not None else None
        return GroupDescription(group_id, state, description.partition_assignor or "", coordinator, members, lags)

    async def committed(self, group_id: str) -> dict[PartitionKey, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = [ConsumerGroupTopicPartitions(group_id)]
        answer = await self._outcome(self._admin.list_consumer_group_offsets(
            request, request_timeout=REQUEST_TIMEOUT_S)[group_id], group_id)
        return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.offset >= 0}

    async def log_offsets(self, partitions: Collection[PartitionKey], spec: ResetSpec) -> dict[PartitionKey, int]:
        """Each partition's earliest or latest offset, or its first at or after a time (its
        latest when none is)."""
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        if not partitions:
            return {}
        kinds = {ResetTo.EARLIEST: OffsetSpec.earliest, ResetTo.LATEST: OffsetSpec.latest}
        kind = OffsetSpec.for_timestamp(spec.value) if spec.to is ResetTo.TIMESTAMP else kinds[spec.to]()
        asked = {TopicPartition(topic, partition): kind for topic, partition in sorted(partitions)}
        futures = self._admin.list_offsets(asked, request_timeout=REQUEST_TIMEOUT_S)
        found = {}
        for tp, future in futures.items():
            found[tp.topic, tp.partition] = (await self._outcome(future, f"{tp.topic}-{tp.partition}")).offset
        return found

    async def alter(self, group_id: str, offsets: Mapping[PartitionKey, int]) -> None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        request = [ConsumerGroupTopicPartitions(group_id, [TopicPartition(topic, partition, offset)
                                                           for (topic, partition), offset in sorted(offsets.items())])]
        answer = await self._outcome(self._admin.alter_consumer_group_offsets(
            request, request_timeout=REQUEST_TIMEOUT_S)[group_id], group_id)
        for tp in answer.topic_partitions:
            if tp.error is not None:
                raise error_for_code(tp.error.code(), f"group {group_id!r}, {tp.topic}-{tp.partition}: {tp.error.str()}")

    async def delete(self, group_id: str) -> None:
        await self._outcome(self._admin.delete_consumer_groups([group_id], request_timeout=REQUEST_TIMEOUT_S)[group_id],
                            group_id)

    async def _outcome(self, future, subject: str):
        from confluent_kafka import KafkaException

        try:
            return await asyncio.wrap_future(future)
        except KafkaException as exception:
            error = exception.args[0]
            raise error_for_code(error.code(), f"{subject}: {error.str()} ({self._where})") from None


async def reset_offsets(groups: ConsumerGroups, group_id: str, topics: Sequence[str] | None, spec: ResetSpec, *,
                        dry_run: bool, partitions_of) -> list[OffsetReset]:
    """New committed offsets for the group's partitions of `topics` (None: every topic it
    committed); `partitions_of(topic)` lists a topic's partitions. Refused while the group has
    members: they would commit over the reset, as Kafka refuses it."""
    listing = {listed.group_id: listed for listed in await groups.list()}
    if group_id in listing and listing[group_id].state not in ("Empty", "Dead", "Unknown"):
        members = len((await groups.describe(group_id)).members)
        raise AdminError(ErrorCode.non_empty_group, f"group {group_id!r} has {members} live members ({listing[group_id].state}): "
                                          "stop its consumers, then reset")
    committed = await groups.committed(group_id) if group_id in listing else {}
    if topics is None:
        keys = sorted(committed)
    else:
        keys = sorted({(topic, partition) for topic in topics for partition in await partitions_of(topic)})
    if not keys:
        raise AdminError(ErrorCode.group_id_not_found, f"group {group_id!r} committed no offsets to reset; name the topics "
                                             "with --topic")
    earliest = await groups.log_offsets(keys, ResetSpec(ResetTo.EARLIEST))
    latest = await groups.log_offsets(keys, ResetSpec(ResetTo.LATEST))
    if spec.to in (ResetTo.EARLIEST, ResetTo.LATEST):
        wanted = earliest if spec.to is ResetTo.EARLIEST else latest
    elif spec.to is ResetTo.TIMESTAMP:
        wanted = {key: offset if offset >= 0 else latest[key] for key, offset in (await groups.log_offsets(keys, spec)).items()}
    elif spec.to is ResetTo.OFFSET:
        wanted = dict.fromkeys(keys, spec.value)
    else:
        wanted = {key: committed.get(key, latest[key]) + spec.value for key in keys}
    resets = [OffsetReset(*key, committed.get(key), min(max(wanted[key], earliest[key]), latest[key])) for key in keys]
    if not dry_run:
        await groups.alter(group_id, {(reset.topic, reset.partition): reset.after for reset in resets})
    return resets


def _state(state) -> str:
    """A group state as Kafka's tools name it (Stable, Empty, ...)."""
    name = getattr(state, "name", str(state))
    return {"PREPARING_REBALANCING": "PreparingRebalance", "COMPLETING_REBALANCING": "CompletingRebalance"}.get(
        name, name.title())
