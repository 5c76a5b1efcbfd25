"""Transactions committed together and reads made together (coord_backends/joined.py), over
memory, ZooKeeper and etcd."""

from __future__ import annotations

import asyncio

import pytest

from replog.coord_backends import BadVersion, CoordinationUnavailable, NoNode
from replog.coord_backends.base import TRANSACTION_OPS_MAX, SetOp
from replog.coord_backends.joined import (ELECTION_REQUESTS_IN_FLIGHT_MAX, JoinedCommits, JoinedReads, JoinedRequests,
                                         JoinedStore, commit_together)
from tests.backends.conftest import backend, connect, counting_transactions, store, url  # noqa: F401  (fixtures)
from tests.support.polling import eventually

NODES = TRANSACTION_OPS_MAX + TRANSACTION_OPS_MAX // 2


async def nodes(store, count: int) -> list[tuple[str, int]]:
    """`count` nodes, each with the version a compare-and-set on it must name."""
    made = []
    for index in range(count):
        path = f"/joined/n{index}"
        await store.create(path, b"0", make_parents=True)
        made.append((path, await store.exists(path)))
    return made


async def asked_at_once(joined: JoinedRequests, asks: list) -> list:
    """Each ask's answer or error, all asked in one turn of the loop; `joined` closed after."""
    try:
        return await asyncio.gather(*asks, return_exceptions=True)
    finally:
        await joined.close()


async def test_commits_asked_for_together_go_out_as_few_transactions_each_with_its_own_results(store):
    made = await nodes(store, NODES)
    committed = counting_transactions(store)
    joined = JoinedCommits(store)
    results = await asked_at_once(joined, [joined.commit([SetOp(path, b"1", version)]) for path, version in made])
    assert committed == [TRANSACTION_OPS_MAX, NODES - TRANSACTION_OPS_MAX]
    for (path, _), (new_version,) in zip(made, results):
        assert await store.get(path) == (b"1", new_version)


async def test_a_refused_commit_fails_alone(store):
    made = await nodes(store, 3)
    stale_path, stale_version = made[1]
    await store.set(stale_path, b"someone else's", stale_version)
    committed = counting_transactions(store)
    joined = JoinedCommits(store)
    outcomes = await asked_at_once(joined, [joined.commit([SetOp(path, b"1", version)]) for path, version in made])
    assert isinstance(outcomes[1], BadVersion)
    assert committed == [3, 1, 2]  # refused on the stale one's path: it alone, the others together again
    assert (await store.get(made[0][0]))[0] == b"1" and (await store.get(made[2][0]))[0] == b"1"
    assert (await store.get(stale_path))[0] == b"someone else's"


async def test_a_batch_mostly_refused_goes_alone_rather_than_together_again_and_again(store):
    made = await nodes(store, 4)
    for path, version in made[:3]:
        await store.set(path, b"someone else's", version)
    committed = counting_transactions(store)
    outcomes = await commit_together(store, [(path, [SetOp(path, b"1", version)]) for path, version in made])
    assert [isinstance(outcome, BadVersion) for _, outcome in outcomes] == [True, True, True, False]
    assert (await store.get(made[3][0]))[0] == b"1"
    # Together, the first at fault alone, together again, and once half were at fault, each alone.
    assert committed == [4, 1, 3, 1, 1, 1]


async def test_a_commit_given_up_before_it_goes_out_is_not_made(store):
    (kept, kept_version), (given_up, given_up_version) = await nodes(store, 2)
    joined = JoinedCommits(store)
    try:
        committing = asyncio.create_task(joined.commit([SetOp(kept, b"1", kept_version)]))
        giving_up = asyncio.create_task(joined.commit([SetOp(given_up, b"1", given_up_version)]))
        await asyncio.sleep(0)  # both asked for, the committer not yet run
        giving_up.cancel()
        await committing
        with pytest.raises(asyncio.CancelledError):
            await giving_up
    finally:
        await joined.close()
    assert (await store.get(kept))[0] == b"1"
    assert (await store.get(given_up))[0] == b"0"


def counting_reads(store, fail_next: list[bool] | None = None) -> list[int]:
    """How many nodes each get_many of `store` reads from now on, in order; one read fails, as
    the store would, while `fail_next` holds True."""
    read: list[int] = []
    get_many = store.get_many

    async def counted(paths):
        read.append(len(paths))
        if fail_next and fail_next.pop():
            raise CoordinationUnavailable("injected: the store did not answer")
        return await get_many(paths)

    store.get_many = counted
    return read


async def test_reads_asked_for_together_go_out_as_few_requests_each_with_its_own_answer(store):
    made = await nodes(store, NODES)
    read = counting_reads(store)
    joined = JoinedReads(store)
    answers = await asked_at_once(joined, [*(joined.get(path) for path, _ in made), joined.get("/joined/absent")])
    assert read == [TRANSACTION_OPS_MAX, NODES + 1 - TRANSACTION_OPS_MAX]
    assert answers[:-1] == [(b"0", version) for _, version in made]
    assert isinstance(answers[-1], NoNode) and answers[-1].path == "/joined/absent"


def holding_requests(store, released: asyncio.Event) -> list[list[str]]:
    """The paths of each transaction and each read of many nodes `store` sends from now on, in
    order; each is held until `released` is set."""
    in_flight: list[list[str]] = []
    begin, get_many = store.transaction, store.get_many

    def held_transaction():
        started = begin()
        commit = started.commit

        async def held():
            in_flight.append([op.path for op in started.ops])
            await released.wait()
            return await commit()

        started.commit = held
        return started

    async def held_get_many(paths):
        in_flight.append(list(paths))
        await released.wait()
        return await get_many(paths)

    store.transaction, store.get_many = held_transaction, held_get_many
    return in_flight


async def test_asks_go_out_while_requests_are_in_flight_up_to_the_number_allowed(store):
    """ZooKeeper's watched nodes are read so (zookeeper.py): a restarted broker of 10,000
    partitions opens 30,000 watches, which one request at a time read in 8 s."""
    made = await nodes(store, 3)
    released = asyncio.Event()
    in_flight = holding_requests(store, released)
    joined = JoinedReads(store, in_flight_max=2)
    try:
        first = asyncio.ensure_future(joined.get(made[0][0]))
        await eventually(lambda: len(in_flight) == 1, 10, "the first request")
        second, third = asyncio.ensure_future(joined.get(made[1][0])), asyncio.ensure_future(joined.get(made[2][0]))
        await eventually(lambda: len(in_flight) == 2, 10, "a second request while the first is in flight")
        assert in_flight == [[made[0][0]], [made[1][0], made[2][0]]]
        released.set()
        assert await asyncio.gather(first, second, third) == [(b"0", version) for _, version in made]
        fourth = await joined.get(made[0][0])
        assert fourth == (b"0", made[0][1]) and in_flight[2:] == [[made[0][0]]], "an ask after the senders ended starts one"
    finally:
        await joined.close()


@pytest.mark.parametrize("ask", ["commit", "read"])
async def test_a_joined_stores_requests_go_out_while_others_are_in_flight_up_to_the_number_allowed(store, ask):
    """Elections and ISR writes by the thousand (a broker leaving or coming back) wait on the
    store's round trips: one joined request at a time bounded them."""
    if ask == "read" and not store.reads_many_at_once:
        pytest.skip("the embedded store's reads are not joined")
    made = await nodes(store, ELECTION_REQUESTS_IN_FLIGHT_MAX + 1)
    released = asyncio.Event()
    in_flight = holding_requests(store, released)
    joined = JoinedStore(store)

    def asked(path: str, version: int) -> asyncio.Future:
        if ask == "commit":
            return asyncio.ensure_future(joined.transaction().set(path, b"1", version).commit())
        return asyncio.ensure_future(joined.get(path))

    try:
        asks = []
        for count, (path, version) in enumerate(made[:-1], start=1):  # one per turn: each goes alone
            asks.append(asked(path, version))
            await eventually(lambda: len(in_flight) == count, 10, f"request {count} in flight")
        asks.append(asked(*made[-1]))
        for _ in range(10):  # turns enough for a sender, were one free, to send it
            await asyncio.sleep(0)
        assert in_flight == [[path] for path, _ in made[:-1]], "no more than the number allowed in flight"
        released.set()
        await asyncio.gather(*asks)
        assert in_flight[-1] == [made[-1][0]], "the one that waited goes out once one is answered"
        if ask == "commit":
            assert [(await store.get(path))[0] for path, _ in made] == [b"1"] * len(made)
    finally:
        await joined.close()


async def test_a_failed_read_fails_the_reads_it_went_out_with_and_no_others(store):
    (first, version), (second, _) = await nodes(store, 2)
    counting_reads(store, fail_next=[False, True])  # popped from the end: the first request fails
    joined = JoinedReads(store)
    try:
        with pytest.raises(CoordinationUnavailable):
            await joined.get(first)
        assert await joined.get(first) == (b"0", version)  # the reader lives on
        assert (await asyncio.gather(joined.get(second), joined.get(first)))[1] == (b"0", version)
    finally:
        await joined.close()


async def test_a_joined_store_joins_reads_only_where_the_store_reads_many_nodes_in_one_request(store):
    """In the embedded store a read of many nodes is a read each: joined, they would only wait
    for each other. etcd reads them in one range request, ZooKeeper in one multiRead."""
    made = await nodes(store, 3)
    read = counting_reads(store)
    joined = JoinedStore(store)
    answers = await asked_at_once(joined, [joined.get(path) for path, _ in made])
    assert answers == [(b"0", version) for _, version in made]
    assert read == ([3] if store.reads_many_at_once else [])
    assert store.reads_many_at_once == (store.backend in ("etcd", "zk"))
