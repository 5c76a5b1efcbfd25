"""The ACL feed keeps an authorizer equal to the store's ACLs: loaded first, then changed by
each notification, and loaded again whole when notifications were missed."""

from __future__ import annotations

import asyncio
import logging

import pytest

from replog.coord_backends.base import Watch
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import ACL_CHANGES
from replog.security import acl_records
from replog.security.acl_feed import AclFeed
from replog.security.authorizer import AclAuthorizer
from replog.tasks import cancel_and_wait
from tests.replication.test_wedges import fail_once
from tests.security.acl_writes import ALICE_WRITES, ORDERS, PAYMENTS, may_write, notify_change, set_acls
from tests.support.polling import eventually

TIMEOUT_S = 5


@pytest.fixture
async def store(tmp_path):
    async with MemoryStore(str(tmp_path / "coordination.sqlite")) as opened:
        yield opened


@pytest.fixture
async def running(store):
    """Starts a feed on `store` once the test's ACLs are written; its authorizer."""
    tasks = []

    async def start():
        authorizer = AclAuthorizer()
        feed = AclFeed(store, authorizer)
        await feed.load()
        tasks.append(asyncio.create_task(feed.run()))
        return authorizer

    yield start
    for task in tasks:
        await cancel_and_wait(task)


async def test_load_then_each_change_reaches_the_index(store, running):
    await set_acls(store, ORDERS, [ALICE_WRITES])
    authorizer = await running()
    assert may_write(authorizer, "orders-1") and not may_write(authorizer, "payments")

    await set_acls(store, PAYMENTS, [ALICE_WRITES])
    await eventually(lambda: may_write(authorizer, "payments"), TIMEOUT_S, "a new pattern's ACLs applied")
    await set_acls(store, ORDERS, [])
    await eventually(lambda: not may_write(authorizer, "orders-1"), TIMEOUT_S, "a removed pattern forgotten")
    assert authorizer.acl_count == 1


async def test_pruned_notifications_mean_a_full_load(store, running, monkeypatch, caplog):
    # The children as a ZooKeeper watch may deliver them, skipping states: a notification
    # created and pruned between two deliveries is never seen.
    watch = Watch()

    async def watch_children(path):
        watch.offer(tuple(await store.children(path)))
        return watch

    monkeypatch.setattr(store, "watch_children", watch_children)
    await notify_change(store, acl_records.change_notice(PAYMENTS))
    authorizer = await running()

    await set_acls(store, ORDERS, [ALICE_WRITES])
    for name in await store.children(ACL_CHANGES):
        await store.delete(f"{ACL_CHANGES}/{name}")
    await set_acls(store, PAYMENTS, [ALICE_WRITES])
    with caplog.at_level(logging.INFO):
        watch.offer(tuple(await store.children(ACL_CHANGES)))
        await eventually(lambda: may_write(authorizer, "payments") and may_write(authorizer, "orders-1"), TIMEOUT_S,
                         "everything loaded again")
    assert "notifications missed" in caplog.text


async def test_a_corrupt_notification_means_a_full_load_and_a_corrupt_node_is_skipped(store, running, caplog):
    await store.create(acl_records.node_path(PAYMENTS), b"not an ACL node", make_parents=True)
    await set_acls(store, ORDERS, [ALICE_WRITES])
    with caplog.at_level(logging.WARNING):
        authorizer = await running()
    assert may_write(authorizer, "orders-1") and authorizer.acl_count == 1
    assert "unreadable ACL node skipped" in caplog.text

    await set_acls(store, PAYMENTS, [ALICE_WRITES], notify=False)
    await notify_change(store, b"{not json")
    await eventually(lambda: may_write(authorizer, "payments"), TIMEOUT_S, "everything loaded again")


async def test_a_store_failure_is_retried_with_a_full_load(store, running):
    authorizer = await running()
    injected = fail_once(store, "get_many", applies=False, matches=lambda paths: True)
    await set_acls(store, ORDERS, [ALICE_WRITES])
    await eventually(lambda: may_write(authorizer, "orders-1"), TIMEOUT_S, "the change applied after the failure")
    assert injected
    await set_acls(store, PAYMENTS, [ALICE_WRITES])
    await eventually(lambda: may_write(authorizer, "payments"), TIMEOUT_S, "changes followed after the retry")
