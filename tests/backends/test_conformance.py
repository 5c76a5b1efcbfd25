"""The Store contract, run unchanged against the embedded store, ZooKeeper and etcd."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from replog.coord_backends import (
    TRANSACTION_OPS_MAX,
    BadVersion,
    DataEvent,
    NodeExists,
    NoNode,
    NotEmpty,
    RequestRefused,
    SessionState,
    commit_groups,
    commit_in_batches,
    open_store,
)
from replog.coord_backends.base import COMMITS_IN_FLIGHT_MAX, CreateOp, Transaction
from tests.backends.conftest import SESSION_TIMEOUT_MS, store_url
from tests.support.polling import eventually, first_matching, next_within

HOLDER = os.path.join(os.path.dirname(__file__), "hold_ephemeral.py")


# --- operations -------------------------------------------------------------------------------


async def test_create_get_set_exists_children(store):
    assert await store.create("/a", b"one") == "/a"
    data, version = await store.get("/a")
    assert data == b"one"
    assert await store.exists("/a") == version
    new_version = await store.set("/a", b"two")
    assert new_version != version
    assert await store.get("/a") == (b"two", new_version)
    await store.create("/a/c", b"")
    await store.create("/a/b", b"")
    await store.create("/a/b/deep", b"")
    assert await store.children("/a") == ["b", "c"]
    assert await store.exists("/missing") is None
    assert "a" in await store.children("/")


async def test_binary_data_round_trips(store):
    payload = bytes(range(256)) * 4
    await store.create("/bin", payload)
    assert (await store.get("/bin"))[0] == payload


async def test_create_errors_name_the_path(store):
    await store.create("/dup", b"")
    with pytest.raises(NodeExists, match="/dup"):
        await store.create("/dup", b"")
    with pytest.raises(NoNode, match="/no/parent"):
        await store.create("/no/parent/child", b"")
    assert await store.exists("/no") is None


async def test_make_parents_creates_the_missing_ancestors(store):
    await store.create("/x", b"kept")
    assert await store.create("/x/y/z", b"leaf", make_parents=True) == "/x/y/z"
    assert await store.get("/x/y/z") == (b"leaf", await store.exists("/x/y/z"))
    assert (await store.get("/x"))[0] == b"kept"
    assert await store.children("/x/y") == ["z"]


async def test_read_errors(store):
    with pytest.raises(NoNode, match="/nothing"):
        await store.get("/nothing")
    with pytest.raises(NoNode, match="/nothing"):
        await store.set("/nothing", b"")
    with pytest.raises(NoNode, match="/nothing"):
        await store.children("/nothing")
    with pytest.raises(NoNode, match="/nothing"):
        await store.delete("/nothing")


async def test_compare_and_set(store):
    await store.create("/cas", b"0")
    _, version = await store.get("/cas")
    newer = await store.set("/cas", b"1", version=version)
    with pytest.raises(BadVersion, match="/cas"):
        await store.set("/cas", b"stale", version=version)
    assert await store.get("/cas") == (b"1", newer)


async def test_delete_rules(store):
    await store.create("/d", b"")
    await store.create("/d/child", b"")
    with pytest.raises(NotEmpty, match="/d"):
        await store.delete("/d")
    _, version = await store.get("/d/child")
    await store.set("/d/child", b"moved on")
    with pytest.raises(BadVersion, match="/d/child"):
        await store.delete("/d/child", version=version)
    await store.delete("/d/child", version=await store.exists("/d/child"))
    await store.delete("/d")
    assert await store.exists("/d") is None


async def test_recursive_delete_removes_the_subtree_only(store):
    for path in ["/r/a/1", "/r/a/2", "/r/b", "/rr"]:
        await store.create(path, b"", make_parents=True)
    with pytest.raises(BadVersion):
        await store.delete("/r", version=12345, recursive=True)
    await store.delete("/r", recursive=True)
    assert await store.exists("/r") is None
    assert await store.exists("/r/a/1") is None
    assert await store.exists("/rr") is not None


async def test_invalid_paths_are_rejected(store):
    for bad in ["relative", "/trailing/", "/double//slash", "/dot/../up", "/dot/./here", "/ends/in/..", "/.", "/nul\x00byte"]:
        with pytest.raises(ValueError):
            await store.create(bad, b"")


# --- races and ordering ----------------------------------------------------------------------


async def test_compare_and_set_race_has_exactly_one_winner(connect):
    first, second = await connect(), await connect()
    await first.create("/race", b"start")
    for round_number in range(10):
        _, version = await first.get("/race")
        outcomes = await asyncio.gather(
            first.set("/race", f"first-{round_number}".encode(), version=version),
            second.set("/race", f"second-{round_number}".encode(), version=version),
            return_exceptions=True,
        )
        winners = [outcome for outcome in outcomes if isinstance(outcome, int)]
        losers = [outcome for outcome in outcomes if isinstance(outcome, BadVersion)]
        assert len(winners) == 1 and len(losers) == 1, outcomes


async def test_create_race_has_exactly_one_winner(connect):
    clients = [await connect() for _ in range(3)]
    for round_number in range(5):
        outcomes = await asyncio.gather(
            *(client.create(f"/leader-{round_number}", b"", ephemeral=True) for client in clients),
            return_exceptions=True,
        )
        assert sum(isinstance(outcome, str) for outcome in outcomes) == 1, outcomes
        assert sum(isinstance(outcome, NodeExists) for outcome in outcomes) == 2, outcomes


async def test_sequential_nodes_are_ordered(store):
    await store.create("/queue", b"")
    created = [await store.create("/queue/", str(i).encode(), sequential=True) for i in range(15)]
    names = [path.rsplit("/", 1)[1] for path in created]
    assert names == sorted(names) and len(set(names)) == 15
    assert all(name.isdigit() and len(name) == 10 for name in names)
    assert await store.children("/queue") == names
    prefixed = await store.create("/queue/req-", b"", sequential=True)
    assert prefixed.startswith("/queue/req-") and prefixed[-10:] > names[-1]


async def test_concurrent_sequential_creates_never_collide(connect):
    first, second = await connect(), await connect()
    await first.create("/q", b"")
    created = await asyncio.gather(
        *(client.create("/q/", b"", sequential=True) for _ in range(10) for client in (first, second))
    )
    assert len(set(created)) == 20
    assert await first.children("/q") == sorted(path.rsplit("/", 1)[1] for path in created)


# --- transactions ----------------------------------------------------------------------------


async def test_transaction_applies_everything(store):
    await store.create("/t", b"")
    await store.create("/t/old", b"x")
    _, version = await store.get("/t/old")
    results = await (
        store.transaction()
        .check("/t/old", version)
        .create("/t/new", b"n")
        .create("/t/new/child", b"c")
        .set("/t/old", b"y", version=version)
        .commit()
    )
    assert results[0] is None and results[1] == "/t/new" and results[2] == "/t/new/child"
    assert await store.get("/t/old") == (b"y", results[3])
    results = await store.transaction().delete("/t/new/child").delete("/t/new").commit()
    assert results == [None, None]
    assert await store.children("/t") == ["old"]


async def test_a_transaction_tells_the_version_it_created_a_node_at(store):
    """An election fences its later writes on the leader node it created: the version must be
    the one a read and a check see, without reading the node back."""
    await store.create("/t", b"")
    created, isr_created = await store.transaction().create("/t/leader", b"l", ephemeral=True).create("/t/isr", b"i").commit()
    assert (await store.get("/t/leader"))[1] == created.version
    assert (await store.get("/t/isr"))[1] == isr_created.version
    await store.transaction().check("/t/leader", created.version).set("/t/isr", b"j", isr_created.version).commit()


@pytest.mark.parametrize(
    "failing_step, error",
    [("check", BadVersion), ("create", NodeExists), ("set", NoNode), ("delete", NotEmpty)],
)
async def test_transaction_is_all_or_nothing(store, failing_step, error):
    await store.create("/t", b"")
    await store.create("/t/existing", b"before")
    await store.create("/t/parent", b"")
    await store.create("/t/parent/kid", b"")
    _, version = await store.get("/t/existing")
    txn = store.transaction().create("/t/fresh", b"").set("/t/existing", b"after", version=version)
    failing = {
        "check": lambda: txn.check("/t/existing", version + 1000),
        "create": lambda: txn.create("/t/existing", b""),
        "set": lambda: txn.set("/t/absent", b""),
        "delete": lambda: txn.delete("/t/parent"),
    }
    failing[failing_step]()
    with pytest.raises(error):
        await txn.commit()
    assert await store.exists("/t/fresh") is None
    assert await store.get("/t/existing") == (b"before", version)
    assert await store.children("/t") == ["existing", "parent"]


async def test_a_transaction_of_the_most_operations_commits_on_every_backend_and_one_more_is_refused(store):
    """TRANSACTION_OPS_MAX deletes, each guarded on etcd by a compare of its key and one of its
    children: exactly a stock etcd's 128 compares."""
    await store.create("/many", b"")
    for index in range(TRANSACTION_OPS_MAX + 1):
        await store.create(f"/many/{index}", b"")
    too_many = store.transaction()
    for index in range(TRANSACTION_OPS_MAX + 1):
        too_many.delete(f"/many/{index}")
    with pytest.raises(RequestRefused, match=f"over the limit of {TRANSACTION_OPS_MAX}"):
        await too_many.commit()
    assert len(await store.children("/many")) == TRANSACTION_OPS_MAX + 1
    most = store.transaction()
    for index in range(TRANSACTION_OPS_MAX):
        most.delete(f"/many/{index}")
    await most.commit()
    assert await store.children("/many") == [str(TRANSACTION_OPS_MAX)]


async def test_get_many_reads_each_node_as_get_does_and_refuses_more_than_a_transaction_holds(store):
    await store.create("/some/present", b"data", make_parents=True)
    present = await store.get("/some/present")
    paths = ["/some/present", "/some/absent", "/", *(f"/some/{index}" for index in range(TRANSACTION_OPS_MAX - 3))]
    nodes = await store.get_many(paths)
    assert nodes[:3] == [present, None, await store.get("/")]
    assert nodes[3:] == [None] * (TRANSACTION_OPS_MAX - 3)
    with pytest.raises(RequestRefused, match=f"over the limit of {TRANSACTION_OPS_MAX}"):
        await store.get_many([*paths, "/some/one-more"])
    with pytest.raises(ValueError):
        await store.get_many(["no-slash"])


async def test_commit_in_batches_applies_more_operations_than_one_transaction_holds(store):
    await commit_in_batches(store, [CreateOp("/wide"), *(CreateOp(f"/wide/{index}") for index in range(3 * TRANSACTION_OPS_MAX))])
    assert len(await store.children("/wide")) == 3 * TRANSACTION_OPS_MAX


class CommitsSeen:
    """Transaction.commit, recording each transaction's paths and how many were in flight."""

    def __init__(self, monkeypatch):
        self.paths: list[list[str]] = []
        self.in_flight = self.in_flight_max = 0
        commit = Transaction.commit

        async def seen(transaction):
            self.paths.append([op.path for op in transaction.ops])
            self.in_flight += 1
            self.in_flight_max = max(self.in_flight_max, self.in_flight)
            try:
                return await commit(transaction)
            finally:
                self.in_flight -= 1

        monkeypatch.setattr(Transaction, "commit", seen)


def group_of_three(index: int) -> list[CreateOp]:
    return [CreateOp(f"/groups/{index}"), CreateOp(f"/groups/{index}/a"), CreateOp(f"/groups/{index}/b")]


async def test_commit_groups_commits_each_group_whole_several_transactions_at_once(backend, store, monkeypatch):
    await store.create("/groups")
    commits = CommitsSeen(monkeypatch)
    groups = [group_of_three(index) for index in range(5 * TRANSACTION_OPS_MAX)]
    await commit_groups(store, groups)
    assert len(await store.children("/groups")) == len(groups)
    assert [len(await store.children(f"/groups/{index}")) for index in range(len(groups))] == [2] * len(groups)
    heads = {group[0].path for group in groups}
    for paths_committed in commits.paths:
        assert len(paths_committed) <= TRANSACTION_OPS_MAX
        assert all(path in heads for path in paths_committed[::3]), "a group split between transactions"
    assert commits.in_flight_max <= COMMITS_IN_FLIGHT_MAX
    if backend != "memory":  # the embedded store commits without a round trip to overlap
        assert commits.in_flight_max > 1


async def test_commit_groups_raises_a_refusal_once_no_transaction_is_in_flight(store, monkeypatch):
    await store.create("/groups")
    await store.create("/groups/7")  # refuses the group that creates it
    commits = CommitsSeen(monkeypatch)
    with pytest.raises(NodeExists):
        await commit_groups(store, [group_of_three(index) for index in range(3 * TRANSACTION_OPS_MAX)])
    assert commits.in_flight == 0


async def test_ephemeral_create_in_transaction(connect):
    owner, observer = await connect(), await connect()
    await owner.transaction().create("/eph-txn", b"", ephemeral=True).commit()
    assert await observer.exists("/eph-txn") is not None
    await owner.close()
    assert await observer.exists("/eph-txn") is None


# --- watches ---------------------------------------------------------------------------------


async def test_data_watch_starts_with_the_current_state(store):
    await store.create("/w", b"now")
    async with await store.watch_data("/w") as watch:
        first = await next_within(watch)
        assert first == DataEvent(b"now", await store.exists("/w"))


WATCHED_AT_ONCE = 3 * TRANSACTION_OPS_MAX


async def test_data_watches_opened_at_once_each_start_with_their_own_node_and_see_what_follows(backend, store):
    """A topic's creation opens thousands of watches at once; on etcd their first reads go out
    joined (etcd.py, _FirstReads), and each must still start from its own node."""
    for index in range(0, WATCHED_AT_ONCE, 2):
        await store.create(f"/many/{index}", str(index).encode(), make_parents=True)
    reads = []
    if backend == "etcd":
        read = store._read
        store._read = lambda keys, children_of: reads.append(len(keys)) or read(keys, children_of)
    watches = await asyncio.gather(*(store.watch_data(f"/many/{index}") for index in range(WATCHED_AT_ONCE)))
    try:
        for index, watch in enumerate(watches):
            first = await next_within(watch)
            assert first.data == (str(index).encode() if index % 2 == 0 else None), index
        if backend == "etcd":  # one read starts the shared stream; alone, each watch read once
            assert len(reads) <= 1 + WATCHED_AT_ONCE // TRANSACTION_OPS_MAX + 1
        await store.create("/many/1", b"created")
        await store.set("/many/0", b"changed")
        assert (await next_within(watches[1])).data == b"created"
        assert (await next_within(watches[0])).data == b"changed"
    finally:
        for watch in watches:
            await watch.close()


async def test_data_watch_sees_rapid_updates_in_order(connect):
    writer, watcher = await connect(), await connect()
    await writer.create("/w", b"-1")
    async with await watcher.watch_data("/w") as watch:
        assert (await next_within(watch)).data == b"-1"
        for i in range(100):
            await writer.set("/w", str(i).encode())
        seen: list[int] = []
        while not seen or seen[-1] != 99:
            event = await next_within(watch)
            seen.append(int(event.data))
        # Every update in order, or some coalesced away: never reordered, always ending at the last.
        assert seen == sorted(set(seen)), seen


async def test_data_watch_sees_creation_and_deletion(connect):
    writer, watcher = await connect(), await connect()
    async with await watcher.watch_data("/later") as watch:
        assert await next_within(watch) == DataEvent(None, None)
        await writer.create("/later", b"born")
        assert (await next_within(watch)).data == b"born"
        await writer.delete("/later")
        assert await next_within(watch) == DataEvent(None, None)


async def test_children_watch_sees_creations_and_deletions(connect):
    writer, watcher = await connect(), await connect()
    await writer.create("/parent", b"")
    async with await watcher.watch_children("/parent") as watch:
        assert await next_within(watch) == ()
        await writer.create("/parent/a", b"")
        assert await first_matching(watch, lambda names: names == ("a",))
        await writer.create("/parent/b", b"", ephemeral=True)
        assert await first_matching(watch, lambda names: names == ("a", "b"))
        await writer.create("/parent/a/grandchild", b"")
        await writer.set("/parent/a", b"data changes are not child changes")
        await writer.delete("/parent/a/grandchild")
        await writer.delete("/parent/a")
        assert await first_matching(watch, lambda names: "a" not in names) == ("b",)


async def test_children_created_in_one_transaction_are_offered_as_one_state(connect):
    """A topic's creation adds thousands of children a transaction at a time: a watch that
    offered each child's arrival on its own made its consumer apply every intermediate list."""
    writer, watcher = await connect(), await connect()
    await writer.create("/many", b"")
    names = [f"p{i:02d}" for i in range(40)]
    async with await watcher.watch_children("/many") as watch:
        assert await next_within(watch) == ()
        txn = writer.transaction()
        for name in names:
            txn.create(f"/many/{name}", b"")
        await txn.commit()
        assert await next_within(watch) == tuple(names)


async def test_children_watch_on_missing_parent(connect):
    writer, watcher = await connect(), await connect()
    async with await watcher.watch_children("/notyet") as watch:
        assert await next_within(watch) == ()
        await writer.create("/notyet", b"")
        await writer.create("/notyet/kid", b"")
        assert await first_matching(watch, lambda names: names == ("kid",))


async def test_watches_of_one_node_each_see_every_change_and_close_alone(connect):
    writer, watcher = await connect(), await connect()
    first = await watcher.watch_data("/shared")
    assert await next_within(first) == DataEvent(None, None)
    await writer.create("/shared", b"one")
    assert (await next_within(first)).data == b"one"
    async with await watcher.watch_data("/shared") as second:
        # The second starts from the node as it is now, not from the first's history.
        assert (await next_within(second)).data == b"one"
        await writer.set("/shared", b"two")
        assert (await next_within(first)).data == b"two"
        assert (await next_within(second)).data == b"two"
        await first.close()
        await writer.set("/shared", b"three")
        assert (await next_within(second)).data == b"three"
    async with await watcher.watch_data("/shared") as third:
        assert (await next_within(third)).data == b"three"
        await writer.delete("/shared")
        assert await next_within(third) == DataEvent(None, None)


async def test_closed_watch_ends_iteration(store):
    watch = await store.watch_data("/whatever")
    await next_within(watch)
    await watch.close()
    with pytest.raises(StopAsyncIteration):
        await next_within(watch)


# --- sessions and ephemeral nodes ------------------------------------------------------------


async def test_ephemeral_node_vanishes_at_once_on_clean_close(connect):
    owner, observer = await connect(), await connect()
    await owner.create("/brokers", b"")
    await owner.create("/brokers/1", b"host:port", ephemeral=True)
    assert await observer.exists("/brokers/1") is not None
    await owner.close()
    assert await observer.exists("/brokers/1") is None


async def test_expired_session_drops_ephemerals_and_reports_lost_then_connected(connect):
    owner, observer = await connect(), await connect()
    await owner.create("/mine", b"", ephemeral=True)
    await owner.create("/persistent", b"")
    events = owner.session_events()
    assert await next_within(events) == SessionState.CONNECTED
    await owner.expire_session()
    assert await first_matching(events, lambda state: state == SessionState.LOST)
    assert await first_matching(events, lambda state: state == SessionState.CONNECTED)
    await events.close()
    assert await observer.exists("/mine") is None
    assert await observer.exists("/persistent") is not None
    await owner.create("/mine", b"again", ephemeral=True)
    assert (await observer.get("/mine"))[0] == b"again"


async def test_a_session_outlives_its_event_loop_held_past_the_session_timeout(backend, connect):
    """A broker's event loop may be held for seconds (10,000 partitions starting at once): the
    session must not end for it, since the broker lives. kazoo pings from its own thread; the
    etcd lease was refreshed by a task of the held loop, and expired with every ephemeral node."""
    if backend == "memory":
        pytest.skip("the embedded store's sessions live in this process: no server to time them out")
    owner, observer = await connect(), await connect()
    await owner.create("/held", b"", ephemeral=True)
    time.sleep(SESSION_TIMEOUT_MS / 1000 * 3)  # the fault itself: nothing runs on this loop meanwhile
    assert await observer.exists("/held") is not None, "the session ended while its loop was held"
    await owner.set("/held", b"after")
    assert (await observer.get("/held"))[0] == b"after"


async def test_an_etcd_lease_keeper_that_fails_says_so(backend, connect, caplog):
    """The keeper's thread is the lease's only owner: if it stops on a bug, the session will
    expire, and the log must say why."""
    if backend != "etcd":
        pytest.skip("the lease keeper is etcd's")
    owner = await connect()

    async def refresh_fails(lease_id):
        raise ValueError("injected: a bug in the keeper")

    owner._keeper._client.refresh_lease = refresh_fails

    async def logged() -> bool:
        return any("etcd lease keeper failed" in record.getMessage() for record in caplog.records)

    await eventually(logged, SESSION_TIMEOUT_MS / 1000 * 3, "the keeper's failure in the log")


async def test_watches_survive_session_expiry(connect):
    owner, writer = await connect(), await connect()
    await writer.create("/kept", b"0")
    async with await owner.watch_data("/kept") as watch:
        await next_within(watch)
        await owner.expire_session()
        await writer.set("/kept", b"after expiry")
        assert await first_matching(watch, lambda event: event.data == b"after expiry")


async def test_ephemeral_node_vanishes_when_owner_process_is_killed(backend, url, connect):
    if backend == "memory":
        pytest.skip("the embedded store lives inside its one process; no other process holds a session in it")
    observer = await connect()
    holder = subprocess.Popen(
        [sys.executable, HOLDER, url, "/held", str(SESSION_TIMEOUT_MS)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        ready = await asyncio.wait_for(asyncio.to_thread(holder.stdout.readline), 30)
        assert ready.strip() == "ready"
        assert await observer.exists("/held") is not None
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)

        async def gone() -> bool:
            return await observer.exists("/held") is None

        await eventually(gone, SESSION_TIMEOUT_MS / 1000 * 5, "the killed process's ephemeral node to expire")
    finally:
        holder.kill()
        holder.wait(timeout=10)


# --- server restarts -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["zk", "etcd"])
async def test_client_reconnects_and_watches_keep_delivering_after_server_restart(kind, request, tmp_path):
    server = request.getfixturevalue("private_zookeeper_server" if kind == "zk" else "private_etcd_server")
    url = store_url(kind, server.address, tmp_path)
    # A session longer than the restart, so the client resumes it rather than losing it.
    watcher = open_store(url, session_timeout_ms=20_000)
    writer = open_store(url, session_timeout_ms=20_000)
    await watcher.start()
    await writer.start()
    try:
        await writer.create("/survivor", b"before")
        await writer.create("/dir", b"")
        data_watch = await watcher.watch_data("/survivor")
        child_watch = await watcher.watch_children("/dir")
        states = watcher.session_events()
        assert (await next_within(data_watch)).data == b"before"
        assert await next_within(child_watch) == ()

        await asyncio.to_thread(server.stop)
        assert await first_matching(states, lambda state: state == SessionState.SUSPENDED, timeout_s=30)
        await asyncio.to_thread(server.start)
        assert await first_matching(states, lambda state: state == SessionState.CONNECTED, timeout_s=60)

        async def write_succeeds() -> bool:
            try:
                await writer.set("/survivor", b"after")
                await writer.create("/dir/new", b"")
                return True
            except NodeExists:
                return True
            except Exception:
                return False

        await eventually(write_succeeds, 60, "writes to succeed after the restart")
        assert await first_matching(data_watch, lambda event: event.data == b"after", timeout_s=60)
        assert await first_matching(child_watch, lambda names: names == ("new",), timeout_s=60)
        await data_watch.close()
        await child_watch.close()
        await states.close()
    finally:
        await watcher.close()
        await writer.close()


@contextlib.asynccontextmanager
async def etcd_registration(server, tmp_path):
    """(owner, observer, owner's session events after CONNECTED): the owner holds the
    ephemeral node /registered."""
    url = store_url("etcd", server.address, tmp_path)
    owner, observer = open_store(url, session_timeout_ms=SESSION_TIMEOUT_MS), open_store(url)
    await owner.start()
    await observer.start()
    try:
        await owner.create("/registered", b"", ephemeral=True)
        async with owner.session_events() as states:
            assert await next_within(states) == SessionState.CONNECTED
            yield owner, observer, states
    finally:
        await owner.close()
        await observer.close()


async def test_etcd_outage_longer_than_the_session_keeps_the_lease_etcd_renews_on_restart(private_etcd_server, tmp_path):
    # etcd renews every lease when it restarts, as ZooKeeper restores sessions: the client stays
    # SUSPENDED through the outage instead of giving its lease (and ephemeral nodes) up.
    async with etcd_registration(private_etcd_server, tmp_path) as (owner, observer, states):
        await asyncio.to_thread(private_etcd_server.stop)
        assert await first_matching(states, lambda state: state == SessionState.SUSPENDED, timeout_s=30)
        await asyncio.sleep(SESSION_TIMEOUT_MS / 1000 * 1.5)  # the fault itself: an outage past the TTL
        await asyncio.to_thread(private_etcd_server.start)
        assert await next_within(states, timeout_s=60) == SessionState.CONNECTED, "no LOST in between"
        assert await observer.exists("/registered") is not None


async def test_etcd_lease_gone_on_the_server_reports_lost_and_recovers(private_etcd_server, tmp_path):
    async with etcd_registration(private_etcd_server, tmp_path) as (owner, observer, states):
        # What etcd does to the lease of a client it has not heard from for a TTL.
        await observer._etcd().revoke_lease(owner._lease_id)
        assert await first_matching(states, lambda state: state == SessionState.LOST, timeout_s=30)
        assert await first_matching(states, lambda state: state == SessionState.CONNECTED, timeout_s=30)
        assert await observer.exists("/registered") is None
        await owner.create("/registered", b"again", ephemeral=True)
        assert (await observer.get("/registered"))[0] == b"again"


async def test_closing_a_watch_passes_on_the_cancellation_of_its_closer(store):
    """A task cancelled while it closes a watch is cancelled, not returned from normally: the
    ZooKeeper watch's close awaits its re-reading task, and caught that task's CancelledError
    and its closer's alike (the fetcher's stop had the same bug, found by the simulator)."""
    await store.create("/closing", b"")
    watch = await store.watch_data("/closing")
    closing = asyncio.create_task(watch.close())
    await asyncio.sleep(0)  # into the close
    if closing.done():
        return  # a close with nothing to wait for: no cancellation to pass on
    closing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await closing
