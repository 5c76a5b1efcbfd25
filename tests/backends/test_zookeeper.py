"""What only the ZooKeeper backend does: its kazoo handler's select, one watch on the server for all a
store's watches, and one reader per watched node."""

from __future__ import annotations

import asyncio
import collections
import os
import resource
import socket

import pytest

from replog.coord_backends import DataEvent
from replog.coord_backends.base import TRANSACTION_OPS_MAX, CreateOp, commit_in_batches
from replog.coord_backends.zookeeper import MultiRead, PollingHandler, ZooKeeperStore
from tests.backends.conftest import SESSION_TIMEOUT_MS
from tests.support.servers import four_letter, unique_root, zookeeper_watch_count
from tests.support.polling import next_within, wait_until


def test_select_reports_the_ready_descriptors_of_each_list():
    handler = PollingHandler()
    left, right = socket.socketpair()
    with left, right:
        assert handler.select([left], [], [], 0) == ([], [], [])
        assert handler.select([left], [right], [], 0) == ([], [right], [])
        right.send(b"x")
        assert handler.select([left, right], [], [], 0) == ([left], [], [])
        # kazoo passes descriptors and socket objects alike.
        assert handler.select([left.fileno()], [left.fileno()], [], None) == ([left.fileno()], [left.fileno()], [])


def test_select_reports_a_hang_up_as_readable():
    handler = PollingHandler()
    left, right = socket.socketpair()
    with left:
        right.close()
        assert handler.select([left], [], [], 0) == ([left], [], [])


def test_select_takes_descriptors_above_select_2s_limit():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    handler = PollingHandler()
    left, right = socket.socketpair()
    high = os.dup2(left.fileno(), 1050)
    try:
        right.send(b"x")
        assert handler.select([high], [], [], 0) == ([high], [], [])
    finally:
        os.close(high)
        left.close()
        right.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.fixture
async def counted_store(zookeeper_server):
    """A ZooKeeper store and a count of the reads its kazoo client sent, by kind: "nodes read"
    counts each node of a multiRead, "multiRead" the requests."""
    store = ZooKeeperStore(zookeeper_server.address, unique_root(), session_timeout_ms=SESSION_TIMEOUT_MS)
    await store.start()
    reads: collections.Counter[str] = collections.Counter()
    client = store._kazoo()
    for name in ("get_async", "exists_async", "get_children_async"):
        def counted(*args, _name=name, _send=getattr(client, name), **kwargs):
            reads[_name] += 1
            return _send(*args, **kwargs)
        setattr(client, name, counted)

    def counted_call(request, result, _send=client._call):
        if isinstance(request, MultiRead):
            reads["multiRead"] += 1
            reads["nodes read"] += len(request.paths)
        return _send(request, result)

    client._call = counted_call
    yield store, reads
    await store.close()


def nodes_read(reads: collections.Counter[str]) -> int:
    return reads["nodes read"] + reads["get_async"] + reads["exists_async"] + reads["get_children_async"]


async def test_watches_of_one_node_share_its_reads(counted_store):
    store, reads = counted_store
    await store.create("/leader", b"0")
    first = await store.watch_data("/leader")
    assert (await next_within(first)).data == b"0"
    opened = nodes_read(reads)
    second = await store.watch_data("/leader")
    third = await store.watch_data("/leader")
    assert nodes_read(reads) == opened, "a watch of a node read since its last change costs no read"
    assert (await next_within(second)).data == (await next_within(third)).data == b"0"
    before_change = nodes_read(reads)
    await store.set("/leader", b"1")
    for watch in (first, second, third):
        assert (await next_within(watch)).data == b"1"
    assert nodes_read(reads) == before_change + 1, "one change is read once, whatever the watches of it"
    for watch in (first, second, third):
        await watch.close()
    assert not store._readers, "the reader stops with the last watch of its node"
    async with await store.watch_data("/leader") as again:
        assert (await next_within(again)).data == b"1"


async def test_watches_opened_together_read_their_nodes_in_few_requests(counted_store):
    """A topic's creation, or a broker's start, opens three watches per partition: each read a
    request, they were most of what a broker asked ZooKeeper then."""
    store, reads = counted_store
    paths = [f"/partitions/{index}" for index in range(3 * TRANSACTION_OPS_MAX)]
    await commit_in_batches(store, [CreateOp("/partitions"), *(CreateOp(path, str(index).encode()) for index, path in enumerate(paths))])
    absent = "/partitions/absent"
    watches = await asyncio.gather(*(store.watch_data(path) for path in [*paths, absent]))
    try:
        assert [(await next_within(watch)).data for watch in watches] == [str(index).encode() for index in range(len(paths))] + [None]
        assert reads["nodes read"] == len(paths) + 1
        assert reads["multiRead"] <= 5, "joined: at most TRANSACTION_OPS_MAX nodes a request, one request in flight"
        assert reads["get_async"] == 0
    finally:
        for watch in watches:
            await watch.close()


async def test_a_deleted_node_is_absent_to_its_watches_without_a_read(counted_store):
    """A controlled shutdown deletes thousands of leader nodes at once, and every broker watches
    every one of them: each was read again, to find it gone."""
    store, reads = counted_store
    await store.create("/leader", b"0")
    async with await store.watch_data("/leader") as watch:
        assert (await next_within(watch)).data == b"0"
        before = nodes_read(reads)
        await store.delete("/leader")
        assert await next_within(watch) == DataEvent(None, None)
        assert nodes_read(reads) == before
        await store.create("/leader", b"1")
        assert (await next_within(watch)).data == b"1"
        assert nodes_read(reads) == before + 1, "a node created again is read"
        async with await store.watch_data("/leader") as opened_after:
            assert (await next_within(opened_after)).data == b"1"


async def test_a_watch_of_a_watched_node_starts_from_the_openers_own_writes(counted_store):
    """Its opener may have written just before, while the reader's read of that write is still
    to come (the state-change queue's consumption wait had this)."""
    store, _ = counted_store
    await store.create("/queue", b"")
    async with await store.watch_children("/queue") as listener:
        assert await next_within(listener) == ()
        for round_ in range(20):
            await store.create(f"/queue/request-{round_}", b"")
            async with await store.watch_children("/queue") as waiter:
                assert f"request-{round_}" in await next_within(waiter)


async def test_data_and_children_watches_of_one_node_are_apart(counted_store):
    store, reads = counted_store
    await store.create("/parent", b"")
    async with await store.watch_data("/parent") as data, await store.watch_children("/parent") as children:
        assert await next_within(data) == DataEvent(b"", 0)
        assert await next_within(children) == ()
        await store.create("/parent/child", b"")
        assert await next_within(children) == ("child",)


def server_watch_count(address: str) -> int:
    # A server answers ruok (scripts/zookeeper.sh waits for it) before mntr, which says "not
    # currently serving requests" until the server has loaded its database.
    def reported() -> tuple[int] | None:
        count = zookeeper_watch_count(four_letter(address, "mntr"))
        return None if count is None else (count,)

    return wait_until(reported, "ZooKeeper's mntr to report its watch count")[0]


async def test_the_server_holds_one_watch_for_a_store_however_many_nodes_it_watches(private_zookeeper_server):
    address = private_zookeeper_server.address
    before = server_watch_count(address)
    root = unique_root()
    store = ZooKeeperStore(address, root, session_timeout_ms=SESSION_TIMEOUT_MS)
    writer = ZooKeeperStore(address, root, session_timeout_ms=SESSION_TIMEOUT_MS)
    await store.start()
    # mntr counts the recursive watch in its data and its children tables.
    per_store = server_watch_count(address) - before
    assert per_store in (1, 2)
    await writer.start()
    try:
        assert server_watch_count(address) == before + 2 * per_store
        nodes = [f"/node-{number}" for number in range(20)]
        for node in nodes:
            await writer.create(node, b"0")
        watches = [await store.watch_data(node) for node in nodes]
        watches += [await store.watch_children(node) for node in nodes]
        watches.append(missing := await store.watch_data("/not-yet"))
        assert server_watch_count(address) == before + 2 * per_store, "watching nodes adds no watch on the server"
        for node in nodes:
            await writer.set(node, b"1")
            await writer.create(f"{node}/child", b"")
        await writer.create("/not-yet", b"here")
        for node, watch in zip(nodes, watches):
            assert (await next_within(watch)).data == b"0"
            assert (await next_within(watch)).data == b"1"
        for watch in watches[len(nodes):-1]:
            assert await next_within(watch) == ()
            assert await next_within(watch) == ("child",)
        assert (await next_within(missing)).data is None
        assert (await next_within(missing)).data == b"here"
        await asyncio.gather(*(watch.close() for watch in watches))
        assert not store._readers
    finally:
        await store.close()
        await writer.close()
    assert server_watch_count(address) == before
