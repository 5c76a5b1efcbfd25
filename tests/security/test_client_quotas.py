"""Which client quota applies to a request: Kafka's precedence, entity by entity, per quota type."""

from __future__ import annotations

import pytest

from replog.security.client_quotas import ClientQuotaEntity, ClientQuotas, quotas_of
from replog.security.quota_limits import DEFAULT_ENTITY, QuotaType

D = DEFAULT_ENTITY

# Most specific first, as Kafka's DefaultQuotaCallback walks them, with the metric tags of each
# for a request of user alice from client id app.
PRECEDENCE = [
    (ClientQuotaEntity("alice", "app"), ("alice", "app")),
    (ClientQuotaEntity("alice", D), ("alice", "app")),
    (ClientQuotaEntity("alice", None), ("alice", "")),
    (ClientQuotaEntity(D, "app"), ("alice", "app")),
    (ClientQuotaEntity(D, D), ("alice", "app")),
    (ClientQuotaEntity(D, None), ("alice", "")),
    (ClientQuotaEntity(None, "app"), ("", "app")),
    (ClientQuotaEntity(None, D), ("", "app")),
]


@pytest.mark.parametrize("level", range(len(PRECEDENCE)))
def test_the_most_specific_entity_set_applies(level: int) -> None:
    quotas = ClientQuotas()
    # every entity less specific than `level` has a quota too; each its own limit
    for rank, (entity, _) in enumerate(PRECEDENCE[level:], start=level):
        quotas.set_entity(entity, {QuotaType.PRODUCE: 1000.0 + rank})
    assert quotas.quota(QuotaType.PRODUCE, "alice", "app") == (PRECEDENCE[level][1], 1000.0 + level)


def test_entities_of_other_users_and_clients_do_not_apply() -> None:
    quotas = ClientQuotas()
    quotas.set_entity(ClientQuotaEntity("bob", "app"), {QuotaType.PRODUCE: 1.0})
    quotas.set_entity(ClientQuotaEntity("alice", "other"), {QuotaType.PRODUCE: 2.0})
    quotas.set_entity(ClientQuotaEntity(None, "other"), {QuotaType.PRODUCE: 3.0})
    quotas.set_entity(ClientQuotaEntity("bob", None), {QuotaType.PRODUCE: 4.0})
    assert quotas.quota(QuotaType.PRODUCE, "alice", "app") is None
    assert quotas.quota(QuotaType.PRODUCE, "bob", "x") == (("bob", ""), 4.0)


def test_each_quota_type_is_resolved_on_its_own() -> None:
    quotas = ClientQuotas()
    quotas.set_entity(ClientQuotaEntity("alice", "app"), {QuotaType.PRODUCE: 10.0})
    quotas.set_entity(ClientQuotaEntity(None, D), {QuotaType.FETCH: 20.0, QuotaType.PRODUCE: 30.0})
    assert quotas.quota(QuotaType.PRODUCE, "alice", "app") == (("alice", "app"), 10.0)
    assert quotas.quota(QuotaType.FETCH, "alice", "app") == (("", "app"), 20.0)
    assert quotas.quota(QuotaType.REQUEST, "alice", "app") is None


def test_setting_an_entity_replaces_its_quotas_and_empty_removes_it() -> None:
    quotas = ClientQuotas()
    alice = ClientQuotaEntity("alice", None)
    quotas.set_entity(alice, {QuotaType.PRODUCE: 10.0, QuotaType.FETCH: 20.0})
    quotas.set_entity(alice, {QuotaType.FETCH: 25.0})
    assert quotas.quota(QuotaType.PRODUCE, "alice", "app") is None
    assert quotas.entities() == {alice: {QuotaType.FETCH: 25.0}}
    quotas.set_entity(alice, {})
    assert quotas.entities() == {}


def test_replace_all_forgets_entities_not_named() -> None:
    quotas = ClientQuotas()
    quotas.set_entity(ClientQuotaEntity("alice", None), {QuotaType.PRODUCE: 10.0})
    quotas.replace_all([(ClientQuotaEntity(None, "app"), {QuotaType.REQUEST: 50.0})])
    assert quotas.entities() == {ClientQuotaEntity(None, "app"): {QuotaType.REQUEST: 50.0}}


def test_quotas_of_a_user_node_skip_credentials() -> None:
    configs = {"SCRAM-SHA-256": "salt=...,stored_key=...", "producer_byte_rate": "1048576", "request_percentage": "x"}
    assert quotas_of(configs) == {QuotaType.PRODUCE: 1048576.0}
