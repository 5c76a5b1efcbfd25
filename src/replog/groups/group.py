"""One consumer group's membership, as a state machine (Kafka's ClassicGroup and the classic
GroupCoordinator's handling of it).

States and their transitions (anything else raises):

    EMPTY                 no members; offsets may still be kept
    PREPARING_REBALANCE   waiting for every known member to (re)join, at most the rebalance
                          timeout; a group that was EMPTY waits group.initial.rebalance.delay.ms
                          first, longer by that much for each member that joins, so that
                          consumers started together land in one generation
    COMPLETING_REBALANCE  a generation formed; waiting for the leader's assignment (SyncGroup)
    STABLE                the leader's assignment is handed out; heartbeats keep members alive
    DEAD                  unloaded (this broker stopped coordinating it) or deleted

    EMPTY -> PREPARING_REBALANCE -> COMPLETING_REBALANCE -> STABLE -> PREPARING_REBALANCE ...
    PREPARING_REBALANCE -> EMPTY (the last member left or timed out); any -> DEAD

Sans-IO-ish: no task and no clock of its own. Time comes from `clock_ms`; deadlines go to the
coordinator's `Timers` under keys naming this group; answers that must wait (a JoinGroup until
the generation forms, a SyncGroup until the leader's assignment is written) are callbacks the
group keeps and calls once. Writing the assignment to the log is the caller's: `sync` returns a
`PersistAssignment` for the leader's request, and `assignment_persisted` finishes the sync.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import logging
import uuid
from collections.abc import Callable

from kio.schema.errors import ErrorCode

from .records import GroupValue, MemberValue
from .timers import Timers

logger = logging.getLogger(__name__)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY, GroupState.DEAD}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.STABLE, GroupState.DEAD}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.DEAD: frozenset({GroupState.DEAD}),
}


class IllegalTransition(RuntimeError):
    pass


@dataclasses.dataclass(frozen=True)
class GroupLimits:
    """The broker's group settings (config.py: group.*)."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 1000


@dataclasses.dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's preference
    require_known_member_id: bool  # JoinGroup v4+: a new member gets its id first (MEMBER_ID_REQUIRED)


@dataclasses.dataclass(frozen=True)
class JoinResult:
    error: int
    member_id: str = UNKNOWN_MEMBER_ID
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = UNKNOWN_MEMBER_ID
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # for the leader: (id, instance id, metadata)
    skip_assignment: bool = False


@dataclasses.dataclass(frozen=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclasses.dataclass(frozen=True)
class PersistAssignment:
    """The leader's assignment is ready: write `value` to the log, then `assignment_persisted`."""

    generation: int
    value: GroupValue


JoinResponder = Callable[[JoinResult], None]
SyncResponder = Callable[[SyncResult], None]


@dataclasses.dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    awaiting_join: JoinResponder | None = None
    awaiting_sync: SyncResponder | None = None

    def metadata(self, protocol: str) -> bytes:
        return next(metadata for name, metadata in self.protocols if name == protocol)

    def same_protocols(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols


class Group:
    def __init__(self, group_id: str, limits: GroupLimits, timers: Timers, clock_ms: Callable[[], int],
                 on_emptied: Callable[["Group"], None] = lambda group: None):
        """`on_emptied`: called when a rebalance leaves the group without members, so that the
        caller writes the new (empty) generation, as Kafka does."""
        self.group_id = group_id
        self.limits = limits
        self._timers = timers
        self._clock_ms = clock_ms
        self._on_emptied = on_emptied
        self.state = GroupState.EMPTY
        self.state_timestamp_ms = clock_ms()
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group instance id -> member id
        # Ids handed out with MEMBER_ID_REQUIRED, not members until they join with them.
        self.pending_members: set[str] = set()
        self._new_member_joined = False
        self._initial_delay_end_ms: int | None = None  # set while the initial delay runs

    # -- views -----------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"Group({self.group_id!r}, {self.state.value}, generation={self.generation}, members={len(self.members)})"

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def _log(self, message: str, member_id: str = "", **fields) -> None:
        extra = "".join(f" {name}={value}" for name, value in fields.items())
        logger.info("%s group=%s generation=%d state=%s member=%s%s", message, self.group_id, self.generation,
                    self.state.value, member_id or "-", extra)

    def _transition(self, state: GroupState) -> None:
        if state not in _TRANSITIONS[self.state]:
            raise IllegalTransition(f"group {self.group_id!r} cannot go from {self.state.value} to {state.value}")
        self.state = state
        self.state_timestamp_ms = self._clock_ms()

    # -- JoinGroup -------------------------------------------------------------------------

    def join(self, request: JoinRequest, respond: JoinResponder) -> None:
        error = self._join_refusal(request)
        if error is not None:
            respond(JoinResult(error, request.member_id))
        elif request.member_id == UNKNOWN_MEMBER_ID:
            self._join_unknown_member(request, respond)
        else:
            self._join_known_member(request, respond)

    def _join_refusal(self, request: JoinRequest) -> int | None:
        limits = self.limits
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if not limits.min_session_timeout_ms <= request.session_timeout_ms <= limits.max_session_timeout_ms:
            return ErrorCode.invalid_session_timeout
        if not request.protocol_type or not request.protocols:
            return ErrorCode.inconsistent_group_protocol
        if self.members and not self._supports(request.protocol_type, request.protocols):
            return ErrorCode.inconsistent_group_protocol
        return None

    def _supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        names = {name for name, _ in protocols}
        return protocol_type == self.protocol_type and bool(names & self._candidate_protocols())

    def _candidate_protocols(self) -> set[str]:
        members = iter(self.members.values())
        candidates = {name for name, _ in next(members).protocols}
        for member in members:  # bounded by the group's size
            candidates &= {name for name, _ in member.protocols}
        return candidates

    def _join_unknown_member(self, request: JoinRequest, respond: JoinResponder) -> None:
        instance = request.group_instance_id
        if instance is not None and instance in self.static_members:
            self._replace_static_member(request, respond)
            return
        if len(self.members) + len(self.pending_members) >= self.limits.max_size:
            respond(JoinResult(ErrorCode.group_max_size_reached))
            return
        member_id = f"{instance or request.client_id}-{uuid.uuid4()}"
        if instance is None and request.require_known_member_id:
            # KIP-394: the id comes back first, so that a client that times out and retries
            # rejoins as the same member rather than leaving a ghost behind.
            self.pending_members.add(member_id)
            self._schedule_session_expiry(member_id, request.session_timeout_ms)
            self._log("member id required", member_id)
            respond(JoinResult(ErrorCode.member_id_required, member_id))
            return
        self._add_member_and_rebalance(member_id, request, respond)

    def _join_known_member(self, request: JoinRequest, respond: JoinResponder) -> None:
        member_id = request.member_id
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            self._add_member_and_rebalance(member_id, request, respond)
            return
        error = self._member_validation(member_id, request.group_instance_id)
        if error is not None:
            respond(JoinResult(error, member_id))
            return
        member = self.members[member_id]
        if self.state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(member, request, respond)
        elif self.state is GroupState.COMPLETING_REBALANCE and member.same_protocols(request.protocols):
            # A retried join of this very generation: answer it again.
            respond(self._join_result(member))
        elif self.state is GroupState.STABLE and member_id != self.leader_id and member.same_protocols(request.protocols):
            # A follower with nothing new (it lost its join answer): its generation stands.
            respond(self._join_result(member, with_members=False))
        else:
            self._update_member_and_rebalance(member, request, respond)

    def _member_validation(self, member_id: str, group_instance_id: str | None) -> int | None:
        """Kafka's validateMember. A request naming a group.instance.id is judged by the member
        that instance has now (KIP-345): a static member's id changes each time its instance
        rejoins anew, so a request with another id comes from a replaced instance (a zombie),
        which FENCED_INSTANCE_ID stops; UNKNOWN_MEMBER_ID would make it rejoin and replace the
        live one in turn."""
        if group_instance_id is None:
            return None if member_id in self.members else ErrorCode.unknown_member_id
        known = self.static_members.get(group_instance_id)
        if known is None:
            return ErrorCode.unknown_member_id
        return None if known == member_id else ErrorCode.fenced_instance_id

    def _add_member_and_rebalance(self, member_id: str, request: JoinRequest, respond: JoinResponder) -> None:
        member = Member(member_id, request.group_instance_id, request.client_id, request.client_host,
                        request.session_timeout_ms, request.rebalance_timeout_ms, request.protocol_type,
                        request.protocols, awaiting_join=respond)
        if not self.members:
            self.protocol_type = request.protocol_type
        self.members[member_id] = member
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member_id
        self._new_member_joined = True
        self._schedule_session_expiry(member_id, member.session_timeout_ms)
        self._log("member joined", member_id, instance=member.group_instance_id)
        self._rebalance_or_check_join(f"member {member_id} joined")

    def _update_member_and_rebalance(self, member: Member, request: JoinRequest, respond: JoinResponder) -> None:
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        self._await_join(member, respond)
        self._rebalance_or_check_join(f"member {member.member_id} rejoined")

    @staticmethod
    def _await_join(member: Member, respond: JoinResponder) -> None:
        """A join from a member whose earlier join still waits (sent again on another
        connection) supersedes it: the earlier one is told to rejoin, so none waits forever."""
        if member.awaiting_join is not None:
            member.awaiting_join(JoinResult(ErrorCode.rebalance_in_progress, member.member_id))
        member.awaiting_join = respond

    def _replace_static_member(self, request: JoinRequest, respond: JoinResponder) -> None:
        """A known instance joins without its member id (it restarted): it takes the old
        member's place under a new id, fencing the old one, without a rebalance if nothing else
        changed (KIP-345)."""
        instance = request.group_instance_id
        old = self.members.pop(self.static_members[instance])
        new_id = f"{instance}-{uuid.uuid4()}"
        member = dataclasses.replace(old, member_id=new_id, client_id=request.client_id, client_host=request.client_host,
                                     session_timeout_ms=request.session_timeout_ms,
                                     rebalance_timeout_ms=request.rebalance_timeout_ms, awaiting_join=None,
                                     awaiting_sync=None)
        self._answer_replaced(old)
        self.members[new_id] = member
        self.static_members[instance] = new_id
        if self.leader_id == old.member_id:
            self.leader_id = new_id
        self._timers.cancel(self._session_key(old.member_id))
        self._schedule_session_expiry(new_id, member.session_timeout_ms)
        self._log("static member replaced", new_id, instance=instance, previous=old.member_id)
        if self.state is GroupState.STABLE and member.same_protocols(request.protocols):
            respond(self._join_result(member, with_members=member.member_id == self.leader_id, skip_assignment=True))
            return
        member.protocols = request.protocols
        self._await_join(member, respond)
        self._rebalance_or_check_join(f"static member {instance} rejoined")

    @staticmethod
    def _answer_replaced(old: Member) -> None:
        if old.awaiting_join is not None:
            old.awaiting_join(JoinResult(ErrorCode.fenced_instance_id, old.member_id))
        if old.awaiting_sync is not None:
            old.awaiting_sync(SyncResult(ErrorCode.fenced_instance_id))

    def _rebalance_or_check_join(self, reason: str) -> None:
        if self.state in (GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(reason)
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    def _join_result(self, member: Member, *, with_members: bool = True, skip_assignment: bool = False) -> JoinResult:
        members = ()
        if with_members and member.member_id == self.leader_id:
            members = tuple((other.member_id, other.group_instance_id, other.metadata(self.protocol_name))
                            for other in self.members.values())
        return JoinResult(ErrorCode.none, member.member_id, self.generation, self.protocol_type, self.protocol_name,
                          self.leader_id or UNKNOWN_MEMBER_ID, members, skip_assignment)

    # -- rebalances ------------------------------------------------------------------------

    def prepare_rebalance(self, reason: str) -> None:
        """To PREPARING_REBALANCE: every member must join again within the rebalance timeout."""
        if self.state is GroupState.COMPLETING_REBALANCE:
            self._answer_syncs_with(ErrorCode.rebalance_in_progress)
        self._timers.cancel(self._key("sync"))
        was_empty = self.state is GroupState.EMPTY
        self._transition(GroupState.PREPARING_REBALANCE)
        self._new_member_joined = False
        now = self._clock_ms()
        if was_empty:
            # Consumers started together should land in one generation, not one each.
            delay_ms = min(self.limits.initial_rebalance_delay_ms, self._rebalance_timeout_ms())
            self._initial_delay_end_ms = now + self._rebalance_timeout_ms()
            self._timers.schedule(self._key("join"), now + delay_ms, self._initial_delay_expired)
        else:
            self._initial_delay_end_ms = None
            self._timers.schedule(self._key("join"), now + self._rebalance_timeout_ms(), self._join_deadline_expired)
        self._log("preparing rebalance", reason=repr(reason))
        self._maybe_complete_join()  # every member may be in already (or none left)

    def _initial_delay_expired(self) -> None:
        """The initial delay waits again while members keep arriving, up to the rebalance timeout."""
        now = self._clock_ms()
        remaining_ms = self._initial_delay_end_ms - now
        if self._new_member_joined and remaining_ms > 0:
            self._new_member_joined = False
            delay_ms = min(self.limits.initial_rebalance_delay_ms, remaining_ms)
            self._timers.schedule(self._key("join"), now + delay_ms, self._initial_delay_expired)
            return
        self._complete_join()

    def _join_deadline_expired(self) -> None:
        self._complete_join()

    def _rebalance_timeout_ms(self) -> int:
        return max((member.rebalance_timeout_ms for member in self.members.values()), default=0)

    def _all_members_joined(self) -> bool:
        return not self.pending_members and all(member.awaiting_join is not None for member in self.members.values())

    def _maybe_complete_join(self) -> None:
        """A rebalance ends early once every member has joined, except during the initial delay,
        which waits for members not yet known (Kafka's InitialDelayedJoin never ends early)."""
        if self._initial_delay_end_ms is None and self._all_members_joined():
            self._complete_join()

    def _complete_join(self) -> None:
        """The rebalance's end: members that did not join are out, and the next generation
        forms (COMPLETING_REBALANCE, waiting for the leader's assignment), or the group is empty."""
        if self.state is not GroupState.PREPARING_REBALANCE:
            return
        self._timers.cancel(self._key("join"))
        self._initial_delay_end_ms = None
        for member in [member for member in self.members.values() if member.awaiting_join is None]:
            self._remove_member(member, "did not rejoin in time")
        self.generation += 1
        if not self.members:
            # The protocol type stays (Kafka's initNextGeneration): an emptied group of
            # consumers is still listed and described as one, not as a simple group.
            self.protocol_name = self.leader_id = None
            self._transition(GroupState.EMPTY)
            self._log("group is empty")
            self._on_emptied(self)
            return
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(GroupState.COMPLETING_REBALANCE)
        self._log("generation formed", leader=self.leader_id, protocol=self.protocol_name, members=len(self.members))
        for member in self.members.values():  # bounded by the group's size
            respond, member.awaiting_join = member.awaiting_join, None
            member.assignment = b""
            respond(self._join_result(member))
            self._schedule_session_expiry(member.member_id, member.session_timeout_ms)
        self._timers.schedule(self._key("sync"), self._clock_ms() + self._rebalance_timeout_ms(), self._sync_deadline_expired)

    def _select_protocol(self) -> str:
        """Each member votes for the first protocol it lists that every member supports; most
        votes wins, ties going to the leader's preference."""
        candidates = self._candidate_protocols()
        votes = collections.Counter(next(name for name, _ in member.protocols if name in candidates)
                                    for member in self.members.values())
        leader = self.members.get(self.leader_id) or next(iter(self.members.values()))
        preference = [name for name, _ in leader.protocols if name in candidates]
        return max(preference, key=lambda name: (votes[name], -preference.index(name)))

    def _sync_deadline_expired(self) -> None:
        """Members that never sent their SyncGroup after the generation formed are gone."""
        if self.state is not GroupState.COMPLETING_REBALANCE:
            return
        for member in [member for member in self.members.values() if member.awaiting_sync is None]:
            self._remove_member(member, "did not sync in time")
        self.prepare_rebalance("members did not sync in time")

    # -- SyncGroup -------------------------------------------------------------------------

    def sync(self, member_id: str, group_instance_id: str | None, generation: int, protocol_type: str | None,
             protocol_name: str | None, assignments: dict[str, bytes], respond: SyncResponder) -> PersistAssignment | None:
        error = self._member_refusal(member_id, group_instance_id, generation)
        if error is None and (protocol_type not in (None, self.protocol_type) or protocol_name not in (None, self.protocol_name)):
            error = ErrorCode.inconsistent_group_protocol
        if error is None and self.state is GroupState.PREPARING_REBALANCE:
            error = ErrorCode.rebalance_in_progress
        if error is not None:
            respond(SyncResult(error))
            return None
        member = self.members[member_id]
        self._schedule_session_expiry(member_id, member.session_timeout_ms)
        if self.state is GroupState.STABLE:
            respond(self._sync_result(member))
            return None
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncResult(ErrorCode.rebalance_in_progress))  # superseded, as a join
        member.awaiting_sync = respond
        if member_id != self.leader_id:
            return None
        for other in self.members.values():  # bounded by the group's size
            other.assignment = assignments.get(other.member_id, b"")
        self._timers.cancel(self._key("sync"))
        return PersistAssignment(self.generation, self.snapshot())

    def assignment_persisted(self, generation: int, error: int) -> None:
        """The leader's assignment of `generation` was written (or not: `error`)."""
        if self.state is not GroupState.COMPLETING_REBALANCE or generation != self.generation:
            return  # a rebalance started meanwhile, and answered the waiting syncs
        if error != ErrorCode.none:
            self._answer_syncs_with(error)
            self.prepare_rebalance(f"assignment not written error={error}")
            return
        self._transition(GroupState.STABLE)
        self._log("group stable", leader=self.leader_id, members=len(self.members))
        for member in self.members.values():  # bounded by the group's size
            if member.awaiting_sync is not None:
                respond, member.awaiting_sync = member.awaiting_sync, None
                respond(self._sync_result(member))

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(ErrorCode.none, self.protocol_type, self.protocol_name, member.assignment)

    def _answer_syncs_with(self, error: int) -> None:
        for member in self.members.values():  # bounded by the group's size
            if member.awaiting_sync is not None:
                respond, member.awaiting_sync = member.awaiting_sync, None
                respond(SyncResult(error))

    # -- Heartbeat, LeaveGroup, commits ----------------------------------------------------

    def _member_refusal(self, member_id: str, group_instance_id: str | None, generation: int) -> int | None:
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = self._member_validation(member_id, group_instance_id)
        if error is not None:
            return error
        if generation != self.generation:
            return ErrorCode.illegal_generation
        return None

    def heartbeat(self, member_id: str, group_instance_id: str | None, generation: int) -> int:
        error = self._member_refusal(member_id, group_instance_id, generation)
        if error is not None:
            return error
        self._schedule_session_expiry(member_id, self.members[member_id].session_timeout_ms)
        if self.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    def leave(self, member_id: str, group_instance_id: str | None) -> int:
        """One member leaves (LeaveGroup v3+ names several: one call each). A static member may
        leave by its instance id alone."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if member_id == UNKNOWN_MEMBER_ID and group_instance_id is not None:
            member_id = self.static_members.get(group_instance_id, UNKNOWN_MEMBER_ID)
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            self._timers.cancel(self._session_key(member_id))
            self._maybe_complete_join_if_preparing()
            return ErrorCode.none
        error = self._member_validation(member_id, group_instance_id)
        if error is not None:
            return error
        self._remove_member_and_rebalance(self.members[member_id], "left the group")
        return ErrorCode.none

    def commit_refusal(self, member_id: str, group_instance_id: str | None, generation: int,
                       transactional: bool = False) -> int | None:
        """Whether an OffsetCommit (TxnOffsetCommit if `transactional`) may write for this group:
        a commit from outside any generation (generation -1, no member: an admin or a consumer
        that assigns itself partitions) only while the group has no members; a member's only for
        its generation. Kafka's validateOffsetCommit: a transactional commit naming no member
        passes (TxnOffsetCommit before v3 cannot name one), and the group's state is not checked
        for it: the transaction's end decides."""
        if self.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and member_id == UNKNOWN_MEMBER_ID and group_instance_id is None:
            # Kafka's validateOffsetCommit: once the group has members, only they commit.
            return None if transactional or self.state is GroupState.EMPTY else ErrorCode.unknown_member_id
        error = self._member_refusal(member_id, group_instance_id, generation)
        if error is not None:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE and not transactional:
            return ErrorCode.rebalance_in_progress
        return None

    def _maybe_complete_join_if_preparing(self) -> None:
        if self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    # -- members leaving -------------------------------------------------------------------

    def _session_key(self, member_id: str) -> tuple:
        return ("session", self.group_id, member_id)

    def _key(self, kind: str) -> tuple:
        return (kind, self.group_id)

    def _schedule_session_expiry(self, member_id: str, session_timeout_ms: int) -> None:
        self._timers.schedule(self._session_key(member_id), self._clock_ms() + session_timeout_ms,
                              lambda: self._session_expired(member_id))

    def _session_expired(self, member_id: str) -> None:
        if member_id in self.pending_members:
            self.pending_members.discard(member_id)
            self._log("pending member expired", member_id)
            self._maybe_complete_join_if_preparing()
            return
        member = self.members.get(member_id)
        if member is None:
            return
        if member.awaiting_join is not None or member.awaiting_sync is not None:
            # A member waiting for our answer cannot heartbeat meanwhile (Kafka's shouldKeepAlive):
            # the rebalance's own deadlines judge it.
            self._schedule_session_expiry(member_id, member.session_timeout_ms)
            return
        self._remove_member_and_rebalance(member, "session timed out")

    def _remove_member_and_rebalance(self, member: Member, reason: str) -> None:
        self._remove_member(member, reason)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self.prepare_rebalance(f"member {member.member_id} {reason}")
        elif self.state is GroupState.PREPARING_REBALANCE:
            self._maybe_complete_join()

    def _remove_member(self, member: Member, reason: str) -> None:
        del self.members[member.member_id]
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == member.member_id:
            del self.static_members[member.group_instance_id]
        self._timers.cancel(self._session_key(member.member_id))
        if member.awaiting_join is not None:
            member.awaiting_join(JoinResult(ErrorCode.unknown_member_id, member.member_id))
        if member.awaiting_sync is not None:
            member.awaiting_sync(SyncResult(ErrorCode.unknown_member_id))
        self._log("member removed", member.member_id, reason=repr(reason))

    # -- loading, unloading, the log's view ------------------------------------------------

    def snapshot(self) -> GroupValue:
        members = tuple(
            MemberValue(member.member_id, member.group_instance_id, member.client_id, member.client_host,
                        member.rebalance_timeout_ms, member.session_timeout_ms,
                        member.metadata(self.protocol_name) if self.protocol_name else b"", member.assignment)
            for member in self.members.values()
        )
        return GroupValue(self.protocol_type or "", self.generation, self.protocol_name, self.leader_id,
                          self.state_timestamp_ms, members)

    def restore(self, value: GroupValue) -> None:
        """Take the state a previous coordinator wrote: the generation, and its members as
        STABLE, each with a fresh session (Kafka's loadGroup). Only on a new group."""
        if self.state is not GroupState.EMPTY or self.members or self.generation:
            raise IllegalTransition(f"group {self.group_id!r} is in use; only a new group is restored")
        self.generation = value.generation
        self.protocol_type = value.protocol_type or None
        self.protocol_name = value.protocol
        self.leader_id = value.leader
        for stored in value.members:  # bounded by the stored group's size
            protocols = ((value.protocol, stored.subscription),) if value.protocol else ()
            self.members[stored.member_id] = Member(
                stored.member_id, stored.group_instance_id, stored.client_id, stored.client_host,
                stored.session_timeout_ms, stored.rebalance_timeout_ms, value.protocol_type, protocols,
                assignment=stored.assignment)
            if stored.group_instance_id is not None:
                self.static_members[stored.group_instance_id] = stored.member_id
            self._schedule_session_expiry(stored.member_id, stored.session_timeout_ms)
        if self.members:
            # Not a transition: the group is being made, in the state its last coordinator left.
            self.state = GroupState.STABLE
        self._log("group loaded")

    def unload(self, error: int) -> None:
        """This broker stops coordinating the group: answer every waiting request with `error`
        (NOT_COORDINATOR: the client looks for the new coordinator), forget its timers."""
        for member in self.members.values():  # bounded by the group's size
            if member.awaiting_join is not None:
                member.awaiting_join(JoinResult(error, member.member_id))
                member.awaiting_join = None
            if member.awaiting_sync is not None:
                member.awaiting_sync(SyncResult(error))
                member.awaiting_sync = None
        group_id = self.group_id
        self._timers.cancel_matching(lambda key: len(key) > 1 and key[1] == group_id)
        self._transition(GroupState.DEAD)
        self._log("group unloaded")
