"""The leader node must never go on naming a broker that does not lead (docs/design.md §4.5).

Over one broker in this process (one_broker.py) whose ISR upkeep soon shrinks the other
replica, which never fetches. Faults are injected into the broker's own store client. After
each, the partition must get a working leader again: the leader node names a broker whose
replica leads, unfenced, at the node's epoch.
"""

from __future__ import annotations

from replog.coord_backends import CoordinationUnavailable, paths
from replog.coord_backends.paths import LeaderRecord
from tests.replication.one_broker import LEADER, TOPIC, WAIT_S
from tests.support.polling import eventually


def fail_once(store, method: str, applies: bool, matches) -> list[bool]:
    """Make the next call of `store.method` whose arguments satisfy `matches` fail with a
    connection error, after applying it if `applies` (a lost reply). Returns a list that
    records the injection."""
    original = getattr(store, method)
    injected: list[bool] = []

    async def faulty(*args, **kwargs):
        if injected or not matches(*args, **kwargs):
            return await original(*args, **kwargs)
        injected.append(True)
        if applies:
            await original(*args, **kwargs)
        raise CoordinationUnavailable("injected: connection lost")

    setattr(store, method, faulty)
    return injected


def touches(path: str):
    def matches(*args, **kwargs) -> bool:
        first = args[0] if args else None
        ops = first if isinstance(first, list) else []
        return first == path or any(op.path == path for op in ops)
    return matches


async def test_an_isr_write_whose_reply_was_lost_does_not_wedge_the_partition(cluster):
    """An ISR write whose lost reply fenced the leader: the shrink applies, its reply is lost, the
    retry meets BadVersion and the leader fences itself; its leader node must not go on naming it."""
    injected = fail_once(cluster.broker.store, "_commit", applies=True, matches=touches(paths.isr(TOPIC, 0)))
    await cluster.create_partition()
    await eventually(lambda: _true(injected), WAIT_S, "the ISR shrink to be written with its reply lost")
    await cluster.wait_for_working_leader("a working leader after the lost reply")


async def test_a_store_error_right_after_winning_does_not_wedge_the_partition(cluster):
    """An election whose aftermath failed: its transaction applied, then the next store read failed."""
    store = cluster.broker.store
    won: list[bool] = []
    original_commit = store._commit

    async def commit_and_note(ops):
        result = await original_commit(ops)
        if any(op.path == paths.leader(TOPIC, 0) for op in ops):
            won.append(True)
        return result

    store._commit = commit_and_note
    original_get = store.get

    async def get_failing_once_after_the_win(path, *args, **kwargs):
        if won and len(won) == 1:
            won.append(False)  # once
            raise CoordinationUnavailable("injected: connection lost")
        return await original_get(path, *args, **kwargs)

    store.get = get_failing_once_after_the_win
    await cluster.create_partition()
    await eventually(lambda: _true(len(won) > 1), WAIT_S, "a store read to fail right after the election")
    await cluster.wait_for_working_leader("a working leader after the failed read")


async def test_a_failed_resignation_delete_does_not_wedge_the_partition(cluster):
    """A resignation whose delete failed: the leader stopped taking writes to hand leadership
    back, and its delete of the leader node failed."""
    await cluster.create_partition()
    first = await cluster.wait_for_working_leader("the first leader")
    injected = fail_once(cluster.broker.store, "delete", applies=False, matches=touches(paths.leader(TOPIC, 0)))
    leadership = next(iter(cluster.broker.hosted.leaderships.values()))
    await _resign(leadership)
    await eventually(lambda: _true(injected), WAIT_S, "the resignation's delete to fail")
    again = await cluster.wait_for_working_leader("a working leader after the failed delete")
    assert again.leader_epoch > first.leader_epoch


async def _resign(leadership) -> None:
    """What the ISR upkeep does when the preferred replica is back in sync."""
    from replog.replication import leadership as machine
    leadership._post(machine.PreferredReplicaReady(leadership.state.epoch))


async def _true(value) -> bool:
    return bool(value)


async def test_an_isr_upkeep_that_fails_is_replaced_by_a_new_leadership(cluster, monkeypatch):
    """No task dies unnoticed (docs/design.md §4.5): the upkeep's task ending on a bug must not
    leave a leader without ISR upkeep."""
    from replog.replication.commit import IsrMaintainer

    await cluster.create_partition()
    first = await cluster.wait_for_working_leader("the first leader")
    original_check = IsrMaintainer.check
    failed: list[bool] = []

    async def check_failing_once(self):
        if not failed:
            failed.append(True)
            raise RuntimeError("injected: a bug in the ISR upkeep")
        return await original_check(self)

    monkeypatch.setattr(IsrMaintainer, "check", check_failing_once)
    await eventually(lambda: _true(failed), WAIT_S, "the upkeep to fail")
    await eventually(lambda: _newer_working_leader(cluster, first), WAIT_S, "a new leadership with its upkeep")
    # The new leadership's upkeep runs: the follower that never fetches is shrunk away.
    await eventually(lambda: _isr_is(cluster, (LEADER,)), WAIT_S, "the new upkeep to shrink the ISR")


async def test_a_session_follower_that_fails_fences_every_leader_and_fails_the_broker(cluster, monkeypatch):
    """No task dies unnoticed (docs/design.md §4.5, §4.6): without its session follower a broker
    would lead on through a lost session."""
    from replog.coord_backends import SessionState
    from replog.replication.driver import PartitionLeadership

    await cluster.create_partition()
    await cluster.wait_for_working_leader("the first leader")
    original = PartitionLeadership.session_changed

    def failing(self, session):
        if session is SessionState.CONNECTED:
            raise RuntimeError("injected: a bug in the session follower")
        original(self, session)

    monkeypatch.setattr(PartitionLeadership, "session_changed", failing)
    cluster.broker.store._session.publish(SessionState.SUSPENDED)
    cluster.broker.store._session.publish(SessionState.CONNECTED)
    await eventually(lambda: _true(cluster.broker.failed.is_set()), WAIT_S, "the broker to fail")
    assert cluster.broker.replicas.hosted(TOPIC, 0).fenced


async def _newer_working_leader(cluster, first: LeaderRecord) -> bool:
    found = await cluster.leader_record()
    return await cluster.working_leader() and found[0].leader_epoch > first.leader_epoch


async def _isr_is(cluster, isr: tuple[int, ...]) -> bool:
    return await cluster.isr() == isr
