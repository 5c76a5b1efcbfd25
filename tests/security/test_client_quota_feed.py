"""A broker's client quotas follow the store (security/client_quota_feed.py): everything at the
start, then each change an admin makes, as the throttling asks for them."""

from __future__ import annotations

import asyncio

from replog.admin.client_quotas import QuotaAlteration, alter_client_quotas
from replog.security.client_quota_feed import ClientQuotaFeed
from replog.security.client_quotas import ClientQuotaEntity, ClientQuotas
from replog.security.quota_limits import QuotaType
from tests.backends.conftest import backend, connect, security, store, url  # noqa: F401  (fixtures)
from tests.support.polling import eventually


async def test_a_broker_view_loads_everything_then_follows_changes(store):
    await alter_client_quotas(store, [QuotaAlteration((("user", "alice"),), (("producer_byte_rate", 1024.0),)),
                                      QuotaAlteration((("client-id", None),), (("consumer_byte_rate", 2048.0),))])
    quotas = ClientQuotas()
    feed = ClientQuotaFeed(store, quotas)
    task = asyncio.create_task(feed.run())
    try:
        await asyncio.wait_for(feed.loaded.wait(), 10)
        assert quotas.quota(QuotaType.PRODUCE, "alice", "app") == (("alice", ""), 1024.0)
        assert quotas.quota(QuotaType.FETCH, "bob", "app") == (("", "app"), 2048.0)

        await alter_client_quotas(store, [QuotaAlteration((("user", "alice"), ("client-id", "app")),
                                                          (("producer_byte_rate", 512.0),)),
                                          QuotaAlteration((("client-id", None),), (("consumer_byte_rate", None),))])
        await eventually(lambda: quotas.quota(QuotaType.PRODUCE, "alice", "app") == (("alice", "app"), 512.0), 10,
                         "the new user and client-id quota")
        await eventually(lambda: quotas.quota(QuotaType.FETCH, "bob", "app") is None, 10, "the default's removal")
        assert quotas.entities() == {ClientQuotaEntity("alice", None): {QuotaType.PRODUCE: 1024.0},
                                     ClientQuotaEntity("alice", "app"): {QuotaType.PRODUCE: 512.0}}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
