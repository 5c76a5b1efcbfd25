"""The group state machine on a manual clock: joins, rebalances, generations, member ids,
static members, session expiry. No I/O: answers are captured, time is advanced by hand."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from replog.groups import UNKNOWN_MEMBER_ID, Group, GroupLimits, GroupState, JoinRequest
from replog.groups.group import IllegalTransition
from replog.groups.timers import Timers

SESSION_MS, REBALANCE_MS, DELAY_MS = 10_000, 30_000, 3_000


class Harness:
    def __init__(self, initial_delay_ms: int = DELAY_MS):
        self.now_ms = 0
        self.timers = Timers()
        self.emptied: list[int] = []
        self.group = Group("g", GroupLimits(initial_rebalance_delay_ms=initial_delay_ms), self.timers,
                           lambda: self.now_ms, lambda group: self.emptied.append(group.generation))

    def advance(self, ms: int) -> None:
        self.now_ms += ms
        self.timers.fire_due(self.now_ms)

    def join(self, member_id=UNKNOWN_MEMBER_ID, *, instance=None, protocols=(("range", b"r"),), v4=True,
             session_ms=SESSION_MS) -> list:
        answers: list = []
        request = JoinRequest(member_id, instance, "client", "/127.0.0.1", session_ms, REBALANCE_MS, "consumer",
                              tuple(protocols), require_known_member_id=v4)
        self.group.join(request, answers.append)
        return answers

    def join_new(self, **options) -> list:
        """A v4+ member: MEMBER_ID_REQUIRED, then the join with the id it was given."""
        (required,) = self.join(**options)
        assert required.error == ErrorCode.member_id_required and required.member_id
        return self.join(required.member_id, **options)

    def sync(self, member_id: str, generation: int, assignments: dict | None = None) -> tuple[list, object]:
        answers: list = []
        persist = self.group.sync(member_id, None, generation, "consumer", None, assignments or {}, answers.append)
        return answers, persist


def formed(harness: Harness, *pending: list) -> list:
    """Advance through the initial delay, which waits again for each member that joined during
    it (at most the rebalance timeout), until every pending join is answered."""
    for _ in range(REBALANCE_MS // DELAY_MS):
        if all(pending):
            break
        harness.advance(DELAY_MS)
    return [answers[0] for answers in pending]


def test_member_id_required_round_trip_then_first_generation_after_the_initial_delay():
    harness = Harness()
    first = harness.join_new()
    assert first == [] and harness.group.state is GroupState.PREPARING_REBALANCE
    harness.advance(DELAY_MS - 1)
    assert first == []  # the initial delay waits for more members
    harness.advance(1)
    (answer,) = first
    assert answer.error == ErrorCode.none and answer.generation == 1 and answer.leader == answer.member_id
    assert [member_id for member_id, _, _ in answer.members] == [answer.member_id]
    assert harness.group.state is GroupState.COMPLETING_REBALANCE


def test_members_joining_during_the_delay_share_a_generation_and_the_leader_assigns():
    harness = Harness()
    one, two = harness.join_new(), harness.join_new()
    harness.advance(DELAY_MS)
    assert one == [] and two == []  # the second member arrived during the delay, which waits again
    leader, follower = formed(harness, one, two)
    assert leader.generation == follower.generation == 1
    assert len(leader.members) == 2 and follower.members == ()
    follower_sync, persist = harness.sync(follower.member_id, 1)
    assert persist is None and follower_sync == []
    leader_sync, persist = harness.sync(leader.member_id, 1, {leader.member_id: b"a", follower.member_id: b"b"})
    assert persist is not None and persist.generation == 1 and len(persist.value.members) == 2
    harness.group.assignment_persisted(1, ErrorCode.none)
    assert harness.group.state is GroupState.STABLE
    assert leader_sync[0].assignment == b"a" and follower_sync[0].assignment == b"b"


def stable_group(harness: Harness, members: int = 2) -> list:
    pending = [harness.join_new() for _ in range(members)]
    answers = formed(harness, *pending)
    leader = next(answer for answer in answers if answer.members)
    harness.sync(leader.member_id, leader.generation, {answer.member_id: answer.member_id.encode() for answer in answers})
    harness.group.assignment_persisted(leader.generation, ErrorCode.none)
    assert harness.group.state is GroupState.STABLE
    return answers


def test_rejoin_starts_a_rebalance_that_heartbeats_report_and_a_new_generation_ends():
    harness = Harness()
    one, two = stable_group(harness)
    rejoined = harness.join(one.member_id)
    assert harness.group.state is GroupState.PREPARING_REBALANCE and rejoined == []
    assert harness.group.heartbeat(two.member_id, None, 1) == ErrorCode.rebalance_in_progress
    second = harness.join(two.member_id)  # every member is back: no waiting for the timeout
    assert rejoined[0].generation == second[0].generation == 2


def test_stale_generation_and_unknown_member_are_refused():
    harness = Harness()
    one, _ = stable_group(harness)
    assert harness.group.heartbeat(one.member_id, None, 0) == ErrorCode.illegal_generation
    assert harness.group.heartbeat("nobody", None, 1) == ErrorCode.unknown_member_id
    answers, _ = harness.sync(one.member_id, 7)
    assert answers[0].error == ErrorCode.illegal_generation
    assert harness.group.commit_refusal(one.member_id, None, 0) == ErrorCode.illegal_generation
    assert harness.group.commit_refusal("nobody", None, 1) == ErrorCode.unknown_member_id
    assert harness.group.commit_refusal(one.member_id, None, 1) is None
    assert harness.join("nobody")[0].error == ErrorCode.unknown_member_id
    assert harness.group.state is GroupState.STABLE  # refusals change nothing


def test_a_transactional_commit_ignores_the_groups_state_and_may_name_no_member():
    """Kafka's validateOffsetCommit with isTransactional: TxnOffsetCommit before v3 names no
    member, and a transaction's offsets wait for its end whatever the group's state then."""
    harness = Harness()
    (member,) = formed(harness, harness.join_new())
    assert harness.group.state is GroupState.COMPLETING_REBALANCE
    assert harness.group.commit_refusal(member.member_id, None, 1) == ErrorCode.rebalance_in_progress
    assert harness.group.commit_refusal(member.member_id, None, 1, transactional=True) is None
    assert harness.group.commit_refusal(UNKNOWN_MEMBER_ID, None, -1) == ErrorCode.unknown_member_id
    assert harness.group.commit_refusal(UNKNOWN_MEMBER_ID, None, -1, transactional=True) is None
    assert harness.group.commit_refusal(member.member_id, None, 0, transactional=True) == ErrorCode.illegal_generation


def test_session_expiry_removes_the_silent_member_and_the_rest_rebalance():
    harness = Harness()
    one, two = stable_group(harness)
    harness.advance(SESSION_MS - 1)
    assert harness.group.heartbeat(one.member_id, None, 1) == ErrorCode.none
    harness.advance(1)  # two said nothing for a whole session
    assert two.member_id not in harness.group.members
    assert harness.group.state is GroupState.PREPARING_REBALANCE
    rejoined = harness.join(one.member_id)
    assert rejoined[0].generation == 2 and [m for m, _, _ in rejoined[0].members] == [one.member_id]


def test_leaving_last_member_empties_the_group_and_reports_it():
    harness = Harness()
    (only,) = stable_group(harness, members=1)
    assert harness.group.leave(only.member_id, None) == ErrorCode.none
    assert harness.group.state is GroupState.EMPTY and harness.group.generation == 2
    assert harness.emptied == [2]
    # Still a group of consumers (Kafka keeps the protocol type), also as written to the log.
    assert harness.group.protocol_type == harness.group.snapshot().protocol_type == "consumer"
    assert harness.group.protocol_name is None and harness.group.leader_id is None
    assert harness.group.leave(only.member_id, None) == ErrorCode.unknown_member_id


def test_static_member_rejoining_after_a_restart_keeps_the_generation_and_fences_its_old_id():
    harness = Harness()
    (answer,) = formed(harness, harness.join(instance="host-1"))  # static members get their id at once
    harness.sync(answer.member_id, 1, {answer.member_id: b"mine"})
    harness.group.assignment_persisted(1, ErrorCode.none)
    (again,) = harness.join(instance="host-1")
    assert again.error == ErrorCode.none and again.generation == 1 and again.member_id != answer.member_id
    assert harness.group.state is GroupState.STABLE
    # The replaced instance is told it is fenced (fatal to it), not that it is unknown (which
    # would make it rejoin and replace the new one in turn), whatever it sends.
    old, group = answer.member_id, harness.group
    assert group.heartbeat(old, "host-1", 1) == ErrorCode.fenced_instance_id
    assert harness.join(old, instance="host-1")[0].error == ErrorCode.fenced_instance_id
    synced: list = []
    assert group.sync(old, "host-1", 1, "consumer", None, {}, synced.append) is None
    assert [answer.error for answer in synced] == [ErrorCode.fenced_instance_id]
    assert group.commit_refusal(old, "host-1", 1) == ErrorCode.fenced_instance_id
    assert group.leave(old, "host-1") == ErrorCode.fenced_instance_id
    # Without its instance id, an old id is merely unknown; an instance never seen is unknown.
    assert group.heartbeat(old, None, 1) == ErrorCode.unknown_member_id
    assert group.heartbeat(again.member_id, "host-2", 1) == ErrorCode.unknown_member_id
    assert group.heartbeat(again.member_id, "host-1", 1) == ErrorCode.none
    assert group.state is GroupState.STABLE and list(group.members) == [again.member_id]
    answers, _ = harness.sync(again.member_id, 1)
    assert answers[0].assignment == b"mine"


def test_protocol_is_the_one_most_members_prefer_among_those_all_support():
    harness = Harness()
    one = harness.join_new(protocols=(("cooperative-sticky", b"c"), ("range", b"r")))
    two = harness.join_new(protocols=(("range", b"r"), ("cooperative-sticky", b"c")))
    three = harness.join_new(protocols=(("range", b"r"),))
    answers = formed(harness, one, two, three)
    assert {answer.protocol_name for answer in answers} == {"range"}
    refused = harness.join(protocols=(("roundrobin", b"x"),))
    assert refused[0].error == ErrorCode.inconsistent_group_protocol


def test_invalid_session_timeout_is_refused():
    harness = Harness()
    assert harness.join(session_ms=10)[0].error == ErrorCode.invalid_session_timeout
    assert harness.group.state is GroupState.EMPTY


def test_members_that_do_not_rejoin_in_time_are_removed():
    harness = Harness()
    one, two = stable_group(harness)
    harness.join(one.member_id)
    for _ in range(REBALANCE_MS // SESSION_MS):  # heartbeats keep two alive, but it never rejoins
        harness.advance(SESSION_MS - 1)
        assert harness.group.heartbeat(two.member_id, None, 1) == ErrorCode.rebalance_in_progress
    harness.advance(REBALANCE_MS % SESSION_MS + REBALANCE_MS // SESSION_MS)
    assert list(harness.group.members) == [one.member_id] and harness.group.generation == 2


def test_illegal_transitions_raise():
    harness = Harness()
    with pytest.raises(IllegalTransition):
        harness.group._transition(GroupState.STABLE)


def test_unload_answers_waiting_members_not_coordinator():
    harness = Harness()
    pending = harness.join_new()
    harness.group.unload(ErrorCode.not_coordinator)
    assert pending[0].error == ErrorCode.not_coordinator
    assert harness.group.state is GroupState.DEAD and len(harness.timers) == 0


def test_a_restored_group_keeps_its_generation_and_members():
    harness = Harness()
    one, two = stable_group(harness)
    restored = Harness()
    restored.group.restore(harness.group.snapshot())
    assert (restored.group.state, restored.group.generation) == (GroupState.STABLE, 1)
    assert restored.group.heartbeat(one.member_id, None, 1) == ErrorCode.none
    answers, _ = restored.sync(two.member_id, 1)
    assert answers[0].assignment == two.member_id.encode()
    restored.advance(SESSION_MS)  # members that never come back to the new coordinator expire
    assert (restored.group.members, restored.group.state, restored.group.generation) == ({}, GroupState.EMPTY, 2)
    assert restored.emptied == [2]
    with pytest.raises(IllegalTransition):
        harness.group.restore(harness.group.snapshot())


def test_before_v4_a_new_member_joins_at_once_without_member_id_required():
    harness = Harness()
    pending = harness.join(v4=False)
    assert pending == [] and len(harness.group.members) == 1 and not harness.group.pending_members
    (answer,) = formed(harness, pending)
    assert (answer.error, answer.generation) == (ErrorCode.none, 1)


def test_pending_member_that_never_joins_with_its_id_expires():
    harness = Harness()
    (required,) = harness.join()
    assert harness.group.pending_members == {required.member_id}
    harness.advance(SESSION_MS)
    assert not harness.group.pending_members
    assert harness.join(required.member_id)[0].error == ErrorCode.unknown_member_id


def test_a_join_sent_again_supersedes_the_waiting_one_which_is_told_to_rejoin():
    harness = Harness()
    one, two = stable_group(harness)
    first = harness.join(one.member_id)
    again = harness.join(one.member_id)
    assert first[0].error == ErrorCode.rebalance_in_progress and again == []
    harness.join(two.member_id)
    assert again[0].generation == 2
