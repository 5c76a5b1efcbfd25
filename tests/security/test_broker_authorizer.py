"""A broker with authorizer.class.name answers from the store's ACLs before it serves, and
follows their changes; without it, it has no authorizer."""

from __future__ import annotations

import logging

from replog.coord_backends.memory import MemoryStore
from replog.security.acls import CLUSTER_NAME, AclOperation, ResourceType
from tests.net.in_process_broker import in_process_broker
from tests.security.acl_writes import ALICE, ALICE_WRITES, HOST, ORDERS, PAYMENTS, may_write, set_acls
from tests.support.polling import eventually

WAIT_S = 10


async def test_the_broker_loads_the_stores_acls_before_serving_and_follows_them(tmp_path, caplog):
    async with MemoryStore(str(tmp_path / "store.db")) as store:
        await set_acls(store, ORDERS, [ALICE_WRITES])
    with caplog.at_level(logging.INFO, logger="replog.broker"):
        async with in_process_broker(tmp_path, **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                                                  "super.users": "User:broker"}) as broker:
            authorizer = broker.authorizer
            assert "authorizer loaded broker=1 acls=1 " in caplog.text
            assert may_write(authorizer, "orders-1") and not may_write(authorizer, "payments")
            assert authorizer.authorize("User:broker", HOST, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
            assert not authorizer.authorize(ALICE, HOST, AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)

            await set_acls(broker.store, PAYMENTS, [ALICE_WRITES])
            await eventually(lambda: may_write(authorizer, "payments"), WAIT_S, "the new ACL followed")


async def test_without_an_authorizer_class_there_is_no_authorizer(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        assert broker.authorizer is None
