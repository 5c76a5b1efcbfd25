"""One hosted partition's leadership on this broker, as a sans-IO state machine.

`decide(state, event) -> (state, actions)` is the whole policy: it reads nothing and writes
nothing. The driver (driver.py) turns store notifications, session events, elections, the ends
of the ISR upkeep and of the follower fetcher, and timers into events, and carries out the
actions: store reads and deletes, elections, opening the replica as leader or follower, starting
and stopping the ISR upkeep (docs/design.md §5.3) and the fetcher. The deterministic simulator
(tests/sim/) runs the same driver and this function under injected faults.

Roles:

    NONE           started, or gave leadership up: waits for the leader node's next value
    ELECTING       the leader node is absent: leaderElection is running (§4.1)
    LEADER         leads at `epoch` through the leader node it created at `leader_version`
    FENCED_LEADER  leads, but the session is in doubt: no writes, no HW advance, until the
                   leader node is seen to have survived with the session
    FOLLOWER       follows `leader` at `epoch`; `fetching` while its fetcher runs
    CLOSED         stopped; takes nothing but Stop again

The rule that keeps a partition from wedging (docs/design.md §4.5): whenever the leader node is seen
naming this broker at a leadership this broker does not hold (an election whose aftermath
failed, an ISR write whose lost reply fenced the leader, a resignation whose delete failed, a
node left by this broker's previous process), the node is deleted at the version seen, so that
the replicas in sync elect again at once instead of waiting for this broker's session to end,
which while it is healthy never comes. A delete that fails is retried after a backoff, through a
fresh read of the node.

Every store failure of an action becomes StoreFailed, which re-reads the leader node after a
backoff that doubles up to RETRY_MAX_S: the store's answer, not a guess, decides what comes next.
"""

from __future__ import annotations

import dataclasses
import enum

from replog.coord_backends.paths import IsrRecord, LeaderRecord

RETRY_FIRST_S = 0.1
RETRY_MAX_S = 5.0


class IllegalTransition(RuntimeError):
    pass


class Role(enum.Enum):
    NONE = "none"
    ELECTING = "electing"
    LEADER = "leader"
    FENCED_LEADER = "fenced-leader"
    FOLLOWER = "follower"
    CLOSED = "closed"


LEADING = frozenset({Role.LEADER, Role.FENCED_LEADER})


@dataclasses.dataclass(frozen=True)
class State:
    broker_id: int
    role: Role = Role.NONE
    epoch: int = -1
    leader: int = -1  # the broker followed
    leader_version: int | None = None  # of the leader node this broker created, while leading
    fetching: bool = False
    session_in_doubt: bool = False
    retries: int = 0  # consecutive failures since the last success: the backoff's exponent


# -- events ---------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class LeaderNode:
    """The leader node's value, from the watch or a read (`read`); None when absent."""
    record: LeaderRecord | None
    version: int | None = None
    read: bool = False  # read just now, not delivered by the watch, which may deliver it late


@dataclasses.dataclass(frozen=True)
class Elected:
    isr: IsrRecord
    assigned: tuple[int, ...]
    leader_version: int
    isr_version: int


@dataclasses.dataclass(frozen=True)
class NotElected:
    """Not eligible, or another broker won the race: its record arrives through the watch."""


@dataclasses.dataclass(frozen=True)
class SessionSuspended:
    pass


@dataclasses.dataclass(frozen=True)
class SessionConnected:
    pass


@dataclasses.dataclass(frozen=True)
class SessionLost:
    pass


@dataclasses.dataclass(frozen=True)
class UpkeepFenced:
    """An ISR write of the leadership at `epoch` met another version of the leader or ISR node."""
    epoch: int


@dataclasses.dataclass(frozen=True)
class UpkeepEnded:
    """The ISR upkeep of the leadership at `epoch` failed: a bug. `reason` for the log."""
    epoch: int
    reason: str


@dataclasses.dataclass(frozen=True)
class PreferredReplicaReady:
    """checkLoadBalancing: the preferred replica is alive and in sync, this one is not it."""
    epoch: int


@dataclasses.dataclass(frozen=True)
class MovedOff:
    """A reassignment this leader carried out moved the partition off this broker
    (reassignment.py): the replicas it moved to are the ISR, and elect once this one resigns."""
    epoch: int


@dataclasses.dataclass(frozen=True)
class FetcherEnded:
    """The fetcher following `leader` at `epoch` stopped: the leader refused us, or it failed."""
    leader: int
    epoch: int
    reason: str


@dataclasses.dataclass(frozen=True)
class BrokerPresumedGone:
    """`broker`'s process is gone: its address refused a connection (net/leader_connections.py)."""
    broker: int


@dataclasses.dataclass(frozen=True)
class StoreFailed:
    reason: str


@dataclasses.dataclass(frozen=True)
class ElectionDeferred:
    """The replica may not run for leader now: its topic id is not the one the broker's view of
    the topic holds (a deleted topic's replica, which a reconcile replaces, or a view that lags
    the store). As after a store failure, the read a backoff ends with decides again: returning
    NotElected would leave a partition whose view lagged without a leader until its next event."""
    reason: str


@dataclasses.dataclass(frozen=True)
class RecheckDue:
    pass


@dataclasses.dataclass(frozen=True)
class Stop:
    pass


Event = (LeaderNode | Elected | NotElected | SessionSuspended | SessionConnected | SessionLost | UpkeepFenced
         | UpkeepEnded | PreferredReplicaReady | MovedOff | FetcherEnded | BrokerPresumedGone | StoreFailed | ElectionDeferred
         | RecheckDue | Stop)


# -- actions --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Elect:
    pass


@dataclasses.dataclass(frozen=True)
class Lead:
    """becomeLeader: stop fetching, open the replica as leader, start the ISR upkeep fenced on
    these versions (the ones the election's own transaction wrote)."""
    elected: Elected


@dataclasses.dataclass(frozen=True)
class Follow:
    """becomeFollower: stop any upkeep or fetcher, open the replica as follower, fetch."""
    leader: int
    epoch: int


@dataclasses.dataclass(frozen=True)
class Fence:
    pass


@dataclasses.dataclass(frozen=True)
class LiftFence:
    pass


@dataclasses.dataclass(frozen=True)
class StopLeading:
    """Stop the upkeep and close the replica (its log stays): it takes no more writes."""


@dataclasses.dataclass(frozen=True)
class ReleaseLeaderNode:
    """Delete the leader node if it is still at `version`."""
    version: int | None


@dataclasses.dataclass(frozen=True)
class DeposeLeader:
    """Delete the leader node if it still names `leader` at `epoch`: a leader whose process is
    gone would otherwise hold it until its session expires."""
    leader: int
    epoch: int


@dataclasses.dataclass(frozen=True)
class ReadLeaderNode:
    pass


@dataclasses.dataclass(frozen=True)
class RecheckAfter:
    delay_s: float


@dataclasses.dataclass(frozen=True)
class Shutdown:
    """Stop the upkeep and the fetcher for good."""


Action = (Elect | Lead | Follow | Fence | LiftFence | StopLeading | ReleaseLeaderNode | DeposeLeader | ReadLeaderNode
          | RecheckAfter | Shutdown)


def backoff_s(retries: int) -> float:
    return min(RETRY_FIRST_S * 2 ** min(retries, 16), RETRY_MAX_S)


def decide(state: State, event: Event) -> tuple[State, list[Action]]:
    """The next state and what to do; see the module docstring."""
    if state.role is Role.CLOSED:
        return state, []
    handler = _HANDLERS[type(event)]
    return handler(state, event)


def _on_leader_node(state: State, event: LeaderNode) -> tuple[State, list[Action]]:
    record = event.record
    if record is None:
        if state.role in LEADING and not event.read:
            # An absence the watch delivered late may be of an earlier node (etcd's watch hands
            # over every past change, in order, and under churn a driver reads them after its
            # own election): acted on, it gave up the leadership just won, and then released
            # its node as a wedge. Only the node's current state may end a leadership.
            return state, [ReadLeaderNode()]
        return _elect(state)
    if record.leader_epoch < state.epoch:
        # A value the watch delivered late: this leadership has seen or written a newer epoch
        # (epochs only grow), and the newer value or its deletion is on its way. Acting on it
        # would follow a leader that is gone or, as a version is reused by a node created again,
        # release the current node instead of the stale one.
        return state, []
    if record.leader == state.broker_id:
        return _on_own_node(state, event)
    if state.role is Role.FOLLOWER and state.fetching and (state.leader, state.epoch) == (record.leader, record.leader_epoch):
        return _succeeded(state), []
    stop = [StopLeading()] if state.role in LEADING else []
    # Following the same leader again after it refused us keeps the backoff growing.
    same = state.role is Role.FOLLOWER and (state.leader, state.epoch) == (record.leader, record.leader_epoch)
    following = dataclasses.replace(state, role=Role.FOLLOWER, leader=record.leader, epoch=record.leader_epoch,
                                    leader_version=None, fetching=True, retries=state.retries if same else 0)
    return following, [*stop, Follow(record.leader, record.leader_epoch)]


def _on_own_node(state: State, event: LeaderNode) -> tuple[State, list[Action]]:
    """The node names this broker: fine if it is this leadership's node, a wedge otherwise."""
    ours = (state.role in LEADING and state.epoch == event.record.leader_epoch
            and state.leader_version == event.version)
    if not ours:
        stop = [StopLeading()] if state.role in LEADING else []
        return _given_up(state), [*stop, ReleaseLeaderNode(event.version)]
    if state.role is Role.FENCED_LEADER and not state.session_in_doubt:
        return dataclasses.replace(state, role=Role.LEADER, retries=0), [LiftFence()]
    return _succeeded(state), []


def _elect(state: State) -> tuple[State, list[Action]]:
    stop = [StopLeading()] if state.role in LEADING else []
    electing = dataclasses.replace(state, role=Role.ELECTING, leader=-1, leader_version=None, fetching=False)
    return electing, [*stop, Elect()]


def _on_elected(state: State, event: Elected) -> tuple[State, list[Action]]:
    _require(state, Role.ELECTING, event)
    leading = dataclasses.replace(state, role=Role.LEADER, epoch=event.isr.leader_epoch, leader=state.broker_id,
                                  leader_version=event.leader_version, fetching=False, retries=0)
    if state.session_in_doubt:
        # Elected just before the session went into doubt: wait for its verdict.
        return dataclasses.replace(leading, role=Role.FENCED_LEADER), [Lead(event), Fence()]
    return leading, [Lead(event)]


def _on_not_elected(state: State, event: NotElected) -> tuple[State, list[Action]]:
    _require(state, Role.ELECTING, event)
    return dataclasses.replace(state, role=Role.NONE), []


def _on_suspended(state: State, event: SessionSuspended) -> tuple[State, list[Action]]:
    state = dataclasses.replace(state, session_in_doubt=True)
    if state.role is Role.LEADER:
        return dataclasses.replace(state, role=Role.FENCED_LEADER), [Fence()]
    return state, []


def _on_connected(state: State, event: SessionConnected) -> tuple[State, list[Action]]:
    # Whatever the role, the store may have changed while the session was away: look again.
    return dataclasses.replace(state, session_in_doubt=False), [ReadLeaderNode()]


def _on_lost(state: State, event: SessionLost) -> tuple[State, list[Action]]:
    """Our leader node went with the session. A node won since in a new session, if the watch
    ran first, is released by the read that CONNECTED brings."""
    state = dataclasses.replace(state, session_in_doubt=True)
    if state.role in LEADING:
        return _given_up(state), [Fence(), StopLeading()]
    return state, []


def _leads_at(state: State, epoch: int) -> bool:
    """Events of a leadership ended since are stale."""
    return state.role in LEADING and state.epoch == epoch


def _on_upkeep_fenced(state: State, event: UpkeepFenced) -> tuple[State, list[Action]]:
    if not _leads_at(state, event.epoch):
        return state, []
    return _given_up(state), [StopLeading(), ReadLeaderNode()]


def _on_upkeep_ended(state: State, event: UpkeepEnded) -> tuple[State, list[Action]]:
    """A leader without ISR upkeep would hold acks=all for ever: stop leading, and let the
    release of the node start a leadership (and an upkeep) afresh."""
    if not _leads_at(state, event.epoch):
        return state, []
    return _given_up(state), [Fence(), StopLeading(), ReadLeaderNode()]


def _resign(state: State, event: PreferredReplicaReady | MovedOff) -> tuple[State, list[Action]]:
    """Stop taking writes, then release the node. For the preferred replica: it races without
    waiting while this one waits PreferredReplicaTime, so it wins and this one follows. For a
    leader moved off: it is out of the ISR, so it cannot win again.

    A fenced leader resigns too: the upkeep that sent the event has ended, so a leadership kept
    would take writes without ISR upkeep once the fence lifts, holding acks=all for ever behind
    a follower that is gone (an etcd restart answered an upkeep's store read in that window).
    A release that fails while the session is in doubt is retried through the node's next read."""
    if not _leads_at(state, event.epoch):
        return state, []
    return _given_up(state), [StopLeading(), ReleaseLeaderNode(state.leader_version)]


def _on_fetcher_ended(state: State, event: FetcherEnded) -> tuple[State, list[Action]]:
    """The leader refused us: the store says next who leads, either through the watch or
    through the read this backoff ends with (a leader still becoming leader refuses too)."""
    if state.role is not Role.FOLLOWER or (state.leader, state.epoch) != (event.leader, event.epoch):
        return state, []
    stalled = dataclasses.replace(state, fetching=False, retries=state.retries + 1)
    return stalled, [RecheckAfter(backoff_s(state.retries))]


def _on_broker_presumed_gone(state: State, event: BrokerPresumedGone) -> tuple[State, list[Action]]:
    """A follower deposes its leader once the leader's process is known gone, so that the
    replicas in sync elect now rather than after the dead leader's session times out.

    Safe even were the presumption wrong (the leader alive but deposed): an election takes an
    ISR member, whose fetches the old leader's HW waited for, so nothing that leader
    acknowledged is missing from the winner, which stopped fetching from it before it led; and
    the election's ISR write moves the ISR version on, so the old leader's next ISR write is
    fenced. What a wrong deposal costs is an election."""
    if state.role is not Role.FOLLOWER or state.leader != event.broker:
        return state, []
    return state, [DeposeLeader(state.leader, state.epoch)]


def _on_store_failed(state: State, event: StoreFailed | ElectionDeferred) -> tuple[State, list[Action]]:
    """The read this backoff ends with decides again; a follower whose start failed half-way
    starts its fetcher again then."""
    role = Role.NONE if state.role is Role.ELECTING else state.role
    failed = dataclasses.replace(state, role=role, fetching=False, retries=state.retries + 1)
    return failed, [RecheckAfter(backoff_s(state.retries))]


def _on_recheck(state: State, event: RecheckDue) -> tuple[State, list[Action]]:
    return state, [ReadLeaderNode()]


def _on_stop(state: State, event: Stop) -> tuple[State, list[Action]]:
    return dataclasses.replace(state, role=Role.CLOSED, fetching=False), [Shutdown()]


def _require(state: State, role: Role, event: Event) -> None:
    """An election's outcome arrives only while electing: the driver runs one action at a time."""
    if state.role is not role:
        raise IllegalTransition(f"{type(event).__name__} while {state.role.value}")


def _given_up(state: State) -> State:
    return dataclasses.replace(state, role=Role.NONE, leader=-1, leader_version=None, fetching=False)


def _succeeded(state: State) -> State:
    return dataclasses.replace(state, retries=0) if state.retries else state


_HANDLERS = {
    LeaderNode: _on_leader_node,
    Elected: _on_elected,
    NotElected: _on_not_elected,
    SessionSuspended: _on_suspended,
    SessionConnected: _on_connected,
    SessionLost: _on_lost,
    UpkeepFenced: _on_upkeep_fenced,
    UpkeepEnded: _on_upkeep_ended,
    PreferredReplicaReady: _resign,
    MovedOff: _resign,
    FetcherEnded: _on_fetcher_ended,
    BrokerPresumedGone: _on_broker_presumed_gone,
    StoreFailed: _on_store_failed,
    ElectionDeferred: _on_store_failed,
    RecheckDue: _on_recheck,
    Stop: _on_stop,
}
