"""The ACL feed on every backend: a change written by one client reaches another client's
authorizer (how long it took is printed), and pruned notifications (ZooKeeper numbers the next
one past the deleted ones) lose no change."""

from __future__ import annotations

import asyncio
import time

from replog.coord_backends.paths import ACL_CHANGES
from replog.security.acl_feed import AclFeed
from replog.security.authorizer import AclAuthorizer
from replog.tasks import cancel_and_wait
from tests.security.acl_writes import ALICE_WRITES, ORDERS, PAYMENTS, may_write, set_acls
from tests.support.polling import eventually

WAIT_S = 10


async def test_a_change_reaches_another_clients_authorizer(connect, backend):
    writer, reader = await connect(), await connect()
    authorizer = AclAuthorizer()
    feed = AclFeed(reader, authorizer)
    await feed.load()
    following = asyncio.create_task(feed.run())
    try:
        started_s = time.perf_counter()
        await set_acls(writer, ORDERS, [ALICE_WRITES])
        await eventually(lambda: may_write(authorizer, "orders-1"), WAIT_S, "the new ACL applied")
        print(f"{backend}: an ACL change reached another client's authorizer in "
              f"{(time.perf_counter() - started_s) * 1e3:.1f} ms")

        for name in await writer.children(ACL_CHANGES):  # a writer pruning every notification
            await writer.delete(f"{ACL_CHANGES}/{name}")
        await set_acls(writer, PAYMENTS, [ALICE_WRITES])
        await set_acls(writer, ORDERS, [])
        await eventually(lambda: may_write(authorizer, "payments") and not may_write(authorizer, "orders-1"), WAIT_S,
                         "the changes after the pruning applied")
    finally:
        await cancel_and_wait(following)
