"""The leadership state machine alone: decide(state, event) -> (state, actions)."""

from __future__ import annotations

import pytest

from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.replication import leadership as machine
from replog.replication.leadership import Role, State, decide

ME, OTHER = 1, 2


def leading(epoch: int = 5, version: int = 0, role: Role = Role.LEADER) -> State:
    return State(ME, role=role, epoch=epoch, leader=ME, leader_version=version)


def elected(epoch: int = 5) -> machine.Elected:
    return machine.Elected(IsrRecord((ME, OTHER), epoch), (ME, OTHER), leader_version=0, isr_version=3)


def test_an_absent_leader_node_starts_an_election_and_a_win_leads():
    state, actions = decide(State(ME), machine.LeaderNode(None))
    assert state.role is Role.ELECTING and actions == [machine.Elect()]
    state, actions = decide(state, elected())
    assert (state.role, state.epoch, state.leader_version) == (Role.LEADER, 5, 0)
    assert actions == [machine.Lead(elected())]


def test_an_election_outcome_outside_an_election_is_illegal():
    with pytest.raises(machine.IllegalTransition):
        decide(leading(), elected())
    with pytest.raises(machine.IllegalTransition):
        decide(State(ME), machine.NotElected())


def test_a_leader_node_naming_us_without_our_leadership_behind_it_is_released():
    """The wedge rule (docs/design.md §4.5): whatever the reason, the node is deleted at the version seen."""
    for state in (State(ME), State(ME, role=Role.FOLLOWER, leader=OTHER, epoch=4, fetching=True),
                  leading(epoch=4), leading(epoch=5, version=7)):
        next_state, actions = decide(state, machine.LeaderNode(LeaderRecord(ME, 5), version=2))
        assert actions[-1] == machine.ReleaseLeaderNode(2)
        assert next_state.role is Role.NONE
        assert (machine.StopLeading() in actions) == (state.role is Role.LEADER)


def test_our_own_node_changes_nothing_while_we_lead_at_its_epoch():
    assert decide(leading(), machine.LeaderNode(LeaderRecord(ME, 5), version=0)) == (leading(), [])


def test_a_leader_node_value_older_than_the_epoch_known_is_ignored():
    """The watch delivers values late. Found by the simulator (seed 28 before the fix): a late
    value naming this broker at its previous epoch released the node of its newer leadership (a
    node created again reuses version 0), and the broker re-elected itself without end."""
    for state in (leading(epoch=6), State(ME, role=Role.FOLLOWER, leader=OTHER, epoch=6, fetching=True)):
        for late in (LeaderRecord(ME, 5), LeaderRecord(OTHER, 5)):
            assert decide(state, machine.LeaderNode(late, version=0)) == (state, [])


def test_a_leader_reads_the_node_before_an_absence_the_watch_delivered_ends_its_leadership():
    """etcd's watch hands over every past change in order: under churn a driver took the
    deletion of an earlier node after its own election, gave the leadership up and released its
    node as a wedge, and the partition's leadership went round the brokers for minutes."""
    for state in (leading(), leading(role=Role.FENCED_LEADER)):
        assert decide(state, machine.LeaderNode(None)) == (state, [machine.ReadLeaderNode()])
        next_state, actions = decide(state, machine.LeaderNode(None, read=True))
        assert next_state.role is Role.ELECTING and actions == [machine.StopLeading(), machine.Elect()]
    assert decide(leading(), machine.LeaderNode(LeaderRecord(ME, 5), version=0, read=True)) == (leading(), [])
    following = State(ME, role=Role.FOLLOWER, leader=OTHER, epoch=4, fetching=True)
    assert decide(following, machine.LeaderNode(None))[1] == [machine.Elect()]


def test_a_suspended_session_fences_and_the_surviving_node_lifts_the_fence_once_connected():
    state, actions = decide(leading(), machine.SessionSuspended())
    assert state.role is Role.FENCED_LEADER and actions == [machine.Fence()]
    # Read while still in doubt: the fence stays.
    assert decide(state, machine.LeaderNode(LeaderRecord(ME, 5), 0)) == (state, [])
    state, actions = decide(state, machine.SessionConnected())
    assert actions == [machine.ReadLeaderNode()]
    state, actions = decide(state, machine.LeaderNode(LeaderRecord(ME, 5), 0))
    assert state.role is Role.LEADER and actions == [machine.LiftFence()]


def test_a_lost_session_gives_leadership_up():
    state, actions = decide(leading(), machine.SessionLost())
    assert state.role is Role.NONE and actions == [machine.Fence(), machine.StopLeading()]


def test_another_leader_is_followed_once_and_a_refusal_rechecks_after_a_growing_backoff():
    state, actions = decide(leading(), machine.LeaderNode(LeaderRecord(OTHER, 6), 0))
    assert actions == [machine.StopLeading(), machine.Follow(OTHER, 6)]
    assert decide(state, machine.LeaderNode(LeaderRecord(OTHER, 6), 0)) == (state, [])
    delays = []
    for _ in range(3):
        state, actions = decide(state, machine.FetcherEnded(OTHER, 6, "refused"))
        delays.append(actions[0].delay_s)
        state, actions = decide(state, machine.LeaderNode(LeaderRecord(OTHER, 6), 0))
        assert actions == [machine.Follow(OTHER, 6)]  # not fetching any more: start again
        state = machine.dataclasses.replace(state, retries=state.retries)  # the backoff carries on
    assert delays == sorted(delays) and delays[0] < delays[-1]


def test_events_of_an_ended_leadership_are_ignored():
    state = leading(epoch=6)
    for stale in (machine.UpkeepFenced(5), machine.UpkeepEnded(5, "x"), machine.PreferredReplicaReady(5),
                  machine.FetcherEnded(OTHER, 5, "x")):
        assert decide(state, stale) == (state, [])


def test_a_leader_resigns_when_its_upkeep_says_so_even_while_fenced():
    """The upkeep ends after sending either event; a leadership kept would run without one."""
    for event in (machine.PreferredReplicaReady(5), machine.MovedOff(5)):
        for role in (Role.LEADER, Role.FENCED_LEADER):
            state, actions = decide(leading(version=7, role=role), event)
            assert state.role is Role.NONE
            assert actions == [machine.StopLeading(), machine.ReleaseLeaderNode(7)]


def test_a_failed_upkeep_stops_leading_and_rereads_the_node():
    state, actions = decide(leading(), machine.UpkeepEnded(5, "boom"))
    assert state.role is Role.NONE
    assert actions == [machine.Fence(), machine.StopLeading(), machine.ReadLeaderNode()]


def test_store_failures_recheck_after_a_backoff_capped_at_the_maximum():
    state = State(ME, role=Role.ELECTING)
    delays = []
    for _ in range(12):
        state, actions = decide(state, machine.StoreFailed("down"))
        delays.append(actions[0].delay_s)
    assert state.role is Role.NONE
    assert delays[0] == machine.RETRY_FIRST_S and delays[-1] == machine.RETRY_MAX_S


def test_a_deferred_election_reads_the_leader_node_again_after_a_backoff_and_elects_if_none_leads():
    """A replica whose topic id the broker's view does not share yet runs again once a backoff
    has passed, rather than leaving the partition without a leader until its next event."""
    state, actions = decide(State(ME, role=Role.ELECTING), machine.ElectionDeferred("another topic id"))
    assert state.role is Role.NONE and actions == [machine.RecheckAfter(machine.RETRY_FIRST_S)]
    state, actions = decide(state, machine.RecheckDue())
    assert actions == [machine.ReadLeaderNode()]
    state, actions = decide(state, machine.LeaderNode(None, read=True))
    assert state.role is Role.ELECTING and actions == [machine.Elect()]


def test_closed_takes_nothing():
    state, actions = decide(leading(), machine.Stop())
    assert state.role is Role.CLOSED and actions == [machine.Shutdown()]
    assert decide(state, machine.LeaderNode(None)) == (state, [])


def test_a_follower_deposes_its_leader_once_the_leader_is_presumed_gone_and_nobody_else_does():
    following = State(ME, role=Role.FOLLOWER, leader=OTHER, epoch=4, fetching=True)
    assert decide(following, machine.BrokerPresumedGone(OTHER)) == (following, [machine.DeposeLeader(OTHER, 4)])
    third = 3
    for state, gone in ((following, third), (leading(), OTHER), (State(ME), OTHER),
                        (State(ME, role=Role.ELECTING), OTHER)):
        assert decide(state, machine.BrokerPresumedGone(gone)) == (state, [])
