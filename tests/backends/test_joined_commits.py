"""Transactions committed together (coord_backends/joined.py), over memory, ZooKeeper and etcd."""

from __future__ import annotations

import asyncio

import pytest

from replog.coord_backends import BadVersion
from replog.coord_backends.base import TRANSACTION_OPS_MAX, SetOp
from replog.coord_backends.joined import JoinedCommits
from tests.backends.conftest import backend, connect, counting_transactions, store, url  # noqa: F401  (fixtures)

NODES = TRANSACTION_OPS_MAX + TRANSACTION_OPS_MAX // 2


async def nodes(store, count: int) -> list[tuple[str, int]]:
    """`count` nodes, each with the version a compare-and-set on it must name."""
    made = []
    for index in range(count):
        path = f"/joined/n{index}"
        await store.create(path, b"0", make_parents=True)
        made.append((path, await store.exists(path)))
    return made


async def test_commits_asked_for_together_go_out_as_few_transactions_each_with_its_own_results(store):
    made = await nodes(store, NODES)
    committed = counting_transactions(store)
    joined = JoinedCommits(store)
    try:
        results = await asyncio.gather(*(joined.commit([SetOp(path, b"1", version)]) for path, version in made))
    finally:
        await joined.close()
    assert committed == [TRANSACTION_OPS_MAX, NODES - TRANSACTION_OPS_MAX]
    for (path, _), (new_version,) in zip(made, results):
        assert await store.get(path) == (b"1", new_version)


async def test_a_refused_commit_fails_alone(store):
    made = await nodes(store, 3)
    stale_path, stale_version = made[1]
    await store.set(stale_path, b"someone else's", stale_version)
    joined = JoinedCommits(store)
    try:
        outcomes = await asyncio.gather(*(joined.commit([SetOp(path, b"1", version)]) for path, version in made),
                                        return_exceptions=True)
    finally:
        await joined.close()
    assert isinstance(outcomes[1], BadVersion)
    assert (await store.get(made[0][0]))[0] == b"1" and (await store.get(made[2][0]))[0] == b"1"
    assert (await store.get(stale_path))[0] == b"someone else's"


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
