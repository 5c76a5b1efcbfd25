"""What `replog reassign generate|execute|verify|cancel` decides, through either Admin (admin_interface.py),
as kafka-reassign-partitions does. Plans are `{(topic, partition): replicas}`; their files are
read and written by reassignment_plan.py, and the CLI only parses and prints.

    generate  the topics' assignment now, and the planner's balanced one over the brokers given
    execute   starts the moves that change something; answers the assignment before them, the
              rollback plan (a move already in flight is refused: its rollback would be lost)
    verify    per partition: done, in progress (replicas being added: whether each is in the
              ISR yet, and how many offsets and bytes it is behind its leader, asked of the
              brokers) or not on its target with no move in flight (cancelled, refused, or
              never executed); once nothing moves in the cluster, the brokers' throttle rates
              go (remove_throttle_when_settled)
    cancel    ends the moves in flight; each partition goes back to the replicas it had when
              its move began, which the leader never stopped replicating to
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
from collections.abc import Callable, Collection, Mapping, Sequence

from replog.admin import (
    AdminError,
    BrokerNotAvailable,
    NoReassignmentInProgress,
    ReassignmentInProgress,
    UnknownTopicOrPartition,
)
from replog.admin.planner import Plan, plan_balance
from replog.admin.reassignment import PartitionKey
from replog.admin.topics import PartitionDescription

from .admin_interface import Admin
from .replica_logs import ReplicaLog

Assignment = dict[PartitionKey, tuple[int, ...]]

VERIFY_POLL_S = 0.5


def subject(key: PartitionKey) -> str:
    return f"{key[0]}-{key[1]}"


@dataclasses.dataclass(frozen=True)
class Refusals:
    """Partitions an Admin refused, while the others of the same request went ahead (as in Kafka)."""

    refused: Mapping[PartitionKey, AdminError]

    def first_error(self) -> AdminError | None:
        """One error that stands for all: the first partition's, counting the others."""
        if not self.refused:
            return None
        error = self.refused[min(self.refused)]
        others = len(self.refused) - 1
        if others:
            return AdminError(error.code, f"{error} (and {others} more partitions refused)")
        return error


@dataclasses.dataclass(frozen=True)
class Started(Refusals):
    rollback: Assignment  # every partition of the plan as it was: execute this to undo the moves
    started: tuple[PartitionKey, ...]
    unchanged: tuple[PartitionKey, ...]  # on their targets already: nothing to move


@dataclasses.dataclass(frozen=True)
class Cancelled(Refusals):
    cancelled: tuple[PartitionKey, ...]
    idle: tuple[PartitionKey, ...]  # no move in flight: nothing to cancel


class State(enum.StrEnum):
    DONE = "done"
    MOVING = "in progress"
    NOT_ON_TARGET = "not on target"


@dataclasses.dataclass(frozen=True)
class CatchingUp:
    """A replica being added, against its leader's log; None where a broker did not tell (down,
    or no leader now)."""

    broker: int
    in_sync: bool
    offsets_behind: int | None
    bytes_behind: int | None

    def as_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class PartitionProgress:
    topic: str
    partition: int
    target: tuple[int, ...]
    replicas: tuple[int, ...]
    state: State
    adding: tuple[CatchingUp, ...] = ()
    removing: tuple[int, ...] = ()
    leader_log_end_offset: int | None = None  # what the adding replicas catch up to, while moving

    def as_json(self) -> dict:
        return {
            "topic": self.topic, "partition": self.partition, "status": str(self.state),
            "target": list(self.target), "replicas": list(self.replicas),
            "adding": [replica.as_json() for replica in self.adding], "removing": list(self.removing),
            "leader_log_end_offset": self.leader_log_end_offset,
        }


def verified_json(progress: Sequence[PartitionProgress]) -> dict:
    return {"partitions": [partition.as_json() for partition in progress],
            "done": all(partition.state is State.DONE for partition in progress)}


async def generate(admin: Admin, topics: Sequence[str], broker_ids: Collection[int]) -> tuple[Assignment, Plan]:
    """The topics' assignment now, and the planner's over `broker_ids` (each one registered)."""
    current = _assignment(await _described(admin, topics))
    registered = dict(await admin.registered_brokers())
    unknown = sorted(set(broker_ids) - set(registered))
    if unknown:
        raise BrokerNotAvailable(f"brokers {unknown} are not registered (running brokers: {sorted(registered)}); "
                                 "plans are made onto running brokers, for their racks")
    return current, plan_balance(current, [(broker, registered[broker]) for broker in sorted(broker_ids)],
                                 size_bytes=await admin.partition_sizes())


async def execute(admin: Admin, plan: Mapping[PartitionKey, Sequence[int]], *,
                  throttle_bytes_per_s: int | None = None) -> Started:
    """Start the plan's moves; `throttle_bytes_per_s` bounds what each moving partition's leader
    sends the replicas it adds (replica/throttle.py)."""
    current = _assignment(await _partitions(admin, plan))
    moving = await admin.list_reassignments(plan)
    if moving:
        more = f" (and {len(moving) - 1} more)" if len(moving) > 1 else ""
        raise ReassignmentInProgress(
            f"partition {subject((moving[0].topic, moving[0].partition))} is being moved already{more}: "
            "`replog reassign verify` follows a move, `replog reassign cancel` ends it")
    changes = {key: tuple(target) for key, target in plan.items() if tuple(target) != current[key]}
    outcomes = await admin.alter_reassignments(changes, throttle_bytes_per_s=throttle_bytes_per_s) if changes else {}
    refused = {key: error for key, error in outcomes.items() if error is not None}
    return Started(refused=refused, rollback=current,
                   started=tuple(sorted(key for key in changes if key not in refused)),
                   unchanged=tuple(sorted(set(plan) - set(changes))))


async def verify(admin: Admin, plan: Mapping[PartitionKey, Sequence[int]]) -> list[PartitionProgress]:
    described = await _partitions(admin, plan)
    moving = {(status.topic, status.partition): status for status in await admin.list_reassignments(plan)}
    asked: dict[int, set[PartitionKey]] = {}
    for key, status in moving.items():
        leader = described[key].leader
        for broker in (*status.adding, *([] if leader is None else [leader])):
            asked.setdefault(broker, set()).add(key)
    logs = await admin.replica_logs(asked) if asked else {}
    progress = []
    for key in sorted(plan):
        target, now = tuple(plan[key]), described[key]
        status = moving.get(key)
        if status is None:
            state = State.DONE if now.replicas == target else State.NOT_ON_TARGET
            progress.append(PartitionProgress(*key, target, now.replicas, state))
            continue
        leader_log = None if now.leader is None else logs.get((now.leader, *key))
        adding = tuple(_catching_up(broker, broker in now.isr, leader_log, logs.get((broker, *key)))
                       for broker in status.adding)
        progress.append(PartitionProgress(*key, target, status.replicas, State.MOVING, adding, status.removing,
                                          None if leader_log is None else leader_log.log_end_offset))
    return progress


def _catching_up(broker: int, in_sync: bool, leader: ReplicaLog | None, replica: ReplicaLog | None) -> CatchingUp:
    if leader is None or replica is None:
        return CatchingUp(broker, in_sync, None, None)
    offsets_behind = None
    if leader.log_end_offset is not None and replica.log_end_offset is not None:
        offsets_behind = max(leader.log_end_offset - replica.log_end_offset, 0)
    # Retention may have deleted segments on one replica before the other: a size never goes below 0.
    return CatchingUp(broker, in_sync, offsets_behind, max(leader.size_bytes - replica.size_bytes, 0))


async def wait_until_settled(admin: Admin, plan: Mapping[PartitionKey, Sequence[int]],
                             on_progress: Callable[[list[PartitionProgress]], None]) -> list[PartitionProgress]:
    """verify, again and again, until no partition of the plan is in progress; `on_progress`
    hears each round. A move waiting for a broker that is down waits with it: stopping the
    wait (Ctrl-C) leaves the moves going, and cancel ends them."""
    while True:  # until every move ends, done or cancelled
        progress = await verify(admin, plan)
        on_progress(progress)
        if all(partition.state is not State.MOVING for partition in progress):
            return progress
        await asyncio.sleep(VERIFY_POLL_S)


async def remove_throttle_when_settled(admin: Admin, progress: Sequence[PartitionProgress]) -> bool:
    """Once no partition moves, the plan's or any other (a rate throttles every move its broker
    leads), the brokers' configured throttle rates go, as kafka-reassign-partitions --verify
    removes the throttle its execute set; whether there was one."""
    if any(partition.state is State.MOVING for partition in progress) or await admin.list_reassignments():
        return False
    return await admin.remove_throttle_rates()


async def cancel(admin: Admin, partitions: Collection[PartitionKey]) -> Cancelled:
    await _partitions(admin, partitions)
    outcomes = await admin.alter_reassignments(dict.fromkeys(partitions))
    idle = tuple(sorted(key for key, error in outcomes.items() if isinstance(error, NoReassignmentInProgress)))
    refused = {key: error for key, error in outcomes.items() if error is not None and key not in idle}
    return Cancelled(refused=refused, cancelled=tuple(sorted(set(outcomes) - set(idle) - set(refused))), idle=idle)


def not_on_target_error(progress: Sequence[PartitionProgress]) -> AdminError | None:
    """verify's failure: partitions off their targets with no move left to bring them there."""
    stuck = [partition for partition in progress if partition.state is State.NOT_ON_TARGET]
    if not stuck:
        return None
    first = stuck[0]
    more = f" (and {len(stuck) - 1} more partitions)" if len(stuck) > 1 else ""
    return AdminError(NoReassignmentInProgress.code,
                      f"partition {first.topic}-{first.partition} is on {list(first.replicas)}, not its target "
                      f"{list(first.target)}, and no move is in flight{more}: cancelled, refused, or never executed")


async def _described(admin: Admin, topics: Collection[str]) -> dict[PartitionKey, PartitionDescription]:
    return {(status.name, partition.partition): partition
            for status in await admin.describe_topics(sorted(set(topics))) for partition in status.partitions}


async def _partitions(admin: Admin, partitions: Collection[PartitionKey]) -> dict[PartitionKey, PartitionDescription]:
    """The named partitions' descriptions; UnknownTopicOrPartition if one does not exist, before
    anything is changed."""
    described = await _described(admin, {topic for topic, _ in partitions})
    missing = sorted(set(partitions) - set(described))
    if missing:
        topic = missing[0][0]
        count = sum(1 for name, _ in described if name == topic)
        raise UnknownTopicOrPartition(f"partition {subject(missing[0])} does not exist (topic {topic!r} has {count} partitions)")
    return {key: described[key] for key in partitions}


def _assignment(described: Mapping[PartitionKey, PartitionDescription]) -> Assignment:
    return {key: tuple(partition.replicas) for key, partition in sorted(described.items())}
