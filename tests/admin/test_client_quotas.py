"""Client quotas in the store (admin/client_quotas.py) on every backend: Kafka's ZooKeeper nodes
and notifications, Kafka's refusals, DescribeClientQuotas' filters, and SCRAM credentials and
quotas sharing users' nodes without disturbing each other."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from replog.admin import AdminError
from replog.admin.client_quotas import (
    MATCH_DEFAULT,
    MATCH_EXACT,
    MATCH_SPECIFIED,
    QuotaAlteration,
    QuotaFilter,
    alter_client_quotas,
    describe_client_quotas,
)
from replog.admin.scram_credentials import ScramDeletion, alter_user_scram_credentials, describe_user_scram_credentials
from replog.coord_backends import paths
from replog.security import client_quota_records as records
from replog.security.client_quotas import ClientQuotaEntity
from tests.admin.test_scram_credentials import upsertion

ALICE = (("user", "alice"),)
ALICE_APP = (("user", "alice"), ("client-id", "app"))
DEFAULT_USER_DEFAULT_CLIENT = (("user", None), ("client-id", None))
APP = (("client-id", "app"),)


def setting(entity, **quotas) -> QuotaAlteration:
    return QuotaAlteration(entity, tuple(quotas.items()))


async def configs(store, path: str) -> dict:
    return json.loads((await store.get(path))[0])


async def test_quotas_are_kafkas_entity_config_nodes_with_a_notification_each(store):
    assert await alter_client_quotas(store, [
        setting(ALICE, producer_byte_rate=1048576.0, request_percentage=50.0),
        setting(ALICE_APP, consumer_byte_rate=2048.0),
        setting(DEFAULT_USER_DEFAULT_CLIENT, producer_byte_rate=4096.0),
        setting(APP, controller_mutation_rate=10.5),
    ]) == [None] * 4
    assert await configs(store, "/config/users/alice") == {
        "version": 1, "config": {"producer_byte_rate": "1048576", "request_percentage": "50.0"}}
    assert await configs(store, "/config/users/alice/clients/app") == {"version": 1, "config": {"consumer_byte_rate": "2048"}}
    assert (await configs(store, "/config/users/<default>/clients/<default>"))["config"] == {"producer_byte_rate": "4096"}
    assert (await configs(store, "/config/clients/app"))["config"] == {"controller_mutation_rate": "10.5"}
    notices = await store.children(paths.CONFIG_CHANGES)
    assert len(notices) == 4 and all(name.startswith("config_change_") for name in notices)
    changed = [json.loads((await store.get(f"{paths.CONFIG_CHANGES}/{name}"))[0]) for name in notices]
    assert changed == [{"version": 2, "entity_path": path} for path in
                       ("users/alice", "users/alice/clients/app", "users/<default>/clients/<default>", "clients/app")]


async def test_names_are_url_encoded_and_the_default_is_not(store):
    await alter_client_quotas(store, [setting((("user", "CN=a b/c"), ("client-id", None)), producer_byte_rate=1.0)])
    assert await store.exists("/config/users/CN%3Da%20b%2Fc/clients/<default>") is not None
    assert await records.stored_quotas(store) == {ClientQuotaEntity("CN=a b/c", "<default>"): {"producer_byte_rate": "1"}}


async def test_removing_every_quota_removes_the_node_but_not_a_parent(store):
    await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=10.0), setting(ALICE_APP, producer_byte_rate=20.0),
                                      setting(APP, producer_byte_rate=30.0)])
    assert await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=None), setting(APP, producer_byte_rate=None)]) \
        == [None, None]
    assert await store.exists("/config/clients/app") is None
    assert (await configs(store, "/config/users/alice"))["config"] == {}  # parent of alice's client ids
    assert await records.stored_quotas(store) == {ClientQuotaEntity("alice", "app"): {"producer_byte_rate": "20"}}


@pytest.mark.parametrize("entity, ops, message", [
    ((), {"producer_byte_rate": 1.0}, "Invalid empty client quota entity"),
    ((("user", "a"), ("user", "b")), {"producer_byte_rate": 1.0},
     "Invalid empty client quota entity, duplicate entity entry user"),
    ((("ip", "127.0.0.1"),), {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: ip"),
    ((("group", "g"),), {"producer_byte_rate": 1.0}, "Unhandled client quota entity type: group"),
    ((("user", ""),), {"producer_byte_rate": 1.0}, "Empty user not supported"),
    ((("client-id", "<default>"),), {"producer_byte_rate": 1.0}, "The client-id name <default> names the default entity"),
    (ALICE, {"segment.bytes": 1.0}, "Invalid configuration key segment.bytes"),
    (ALICE, {"SCRAM-SHA-256": 1.0}, "Invalid configuration key SCRAM-SHA-256"),
    (ALICE, {"producer_byte_rate": -5.0}, "Quota producer_byte_rate must be greater than 0"),
    (ALICE, {"request_percentage": 0.0}, "Quota request_percentage must be greater than 0"),
    (ALICE, {"consumer_byte_rate": float("nan")}, "Quota consumer_byte_rate must be greater than 0"),
    (ALICE, {"producer_byte_rate": 1.5}, "producer_byte_rate cannot be a fractional value."),
])
async def test_kafkas_refusals_leave_the_store_as_it_was(store, entity, ops, message):
    alterations = [setting(entity, **ops), setting(APP, request_percentage=25.5)]
    error, made = await alter_client_quotas(store, alterations)
    assert (error.code, error.message) == (ErrorCode.invalid_request, message)
    assert made is None
    assert await records.stored_quotas(store) == {ClientQuotaEntity(None, "app"): {"request_percentage": "25.5"}}


async def test_validate_only_writes_nothing(store):
    assert await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=1.0)], validate_only=True) == [None]
    assert await records.stored_quotas(store) == {}
    assert await store.exists(paths.CONFIG_CHANGES) is None


async def test_a_removal_of_what_is_not_set_is_no_change(store):
    assert await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=None, unknown_key=None)]) == [None]
    assert await store.exists("/config/users/alice") is None


DESCRIBED = [
    (ALICE, {"producer_byte_rate": 10.0}),
    (ALICE_APP, {"producer_byte_rate": 20.0}),
    ((("user", "alice"), ("client-id", None)), {"producer_byte_rate": 30.0}),
    ((("user", None),), {"consumer_byte_rate": 40.0}),
    (DEFAULT_USER_DEFAULT_CLIENT, {"request_percentage": 50.0}),
    (APP, {"producer_byte_rate": 60.0}),
    ((("client-id", None),), {"producer_byte_rate": 70.0}),
]


@pytest.mark.parametrize("components, strict, expected", [
    ((), False, range(7)),
    ((), True, []),
    ((("user", MATCH_EXACT, "alice"),), True, [0]),
    ((("user", MATCH_EXACT, "alice"),), False, [0, 1, 2]),
    ((("user", MATCH_EXACT, "alice"), ("client-id", MATCH_SPECIFIED, None)), True, [1, 2]),
    ((("user", MATCH_DEFAULT, None),), True, [3]),
    ((("user", MATCH_SPECIFIED, None),), True, [0, 3]),
    ((("user", MATCH_SPECIFIED, None),), False, [0, 1, 2, 3, 4]),
    ((("client-id", MATCH_SPECIFIED, None),), True, [5, 6]),
    ((("client-id", MATCH_DEFAULT, None),), False, [2, 4, 6]),
    ((("user", MATCH_EXACT, "bob"),), False, []),
])
async def test_describe_filters_as_kafka(store, components, strict, expected):
    await alter_client_quotas(store, [QuotaAlteration(entity, tuple(values.items())) for entity, values in DESCRIBED])
    described = await describe_client_quotas(store, QuotaFilter(components, strict))
    assert sorted(described, key=repr) == sorted((DESCRIBED[index] for index in expected), key=repr)


@pytest.mark.parametrize("components, code, message", [
    ((("", MATCH_EXACT, "a"),), ErrorCode.invalid_request, "Invalid empty entity type."),
    ((("user", MATCH_EXACT, "a"), ("user", MATCH_SPECIFIED, None)), ErrorCode.invalid_request,
     "Entity type user cannot appear more than once in the filter."),
    ((("group", MATCH_EXACT, "a"),), ErrorCode.unsupported_version, "Unsupported entity type group"),
    ((("user", MATCH_EXACT, None),), ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
    ((("user", MATCH_DEFAULT, "a"),), ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
    ((("user", MATCH_SPECIFIED, "a"),), ErrorCode.invalid_request,
     "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
    ((("user", 7, None),), ErrorCode.unsupported_version, "Unknown match type 7"),
    ((("ip", MATCH_SPECIFIED, None), ("user", MATCH_SPECIFIED, None)), ErrorCode.invalid_request,
     "Invalid entity filter component combination. IP filter component should not be used with user or clientId "
     "filter component."),
])
async def test_describe_refuses_kafkas_bad_filters(store, components, code, message):
    with pytest.raises(AdminError) as raised:
        await describe_client_quotas(store, QuotaFilter(components, False))
    assert (raised.value.code, raised.value.message) == (code, message)


async def test_scram_credentials_and_quotas_share_a_users_node_undisturbed(store):
    await alter_user_scram_credentials(store, [], [upsertion("alice"), upsertion("carol")])
    await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=10.0), setting(DEFAULT_USER_DEFAULT_CLIENT, producer_byte_rate=1.0),
                                      setting((("user", "bob"), ("client-id", "app")), producer_byte_rate=2.0),
                                      setting((("user", None),), producer_byte_rate=3.0)])
    # SCRAM: neither quota-only users (bob, the default) nor quota keys show, and alice keeps hers
    assert [(entry.user, entry.credentials, entry.error) for entry in await describe_user_scram_credentials(store)] == [
        ("alice", (("SCRAM-SHA-512", 4096),), None), ("carol", (("SCRAM-SHA-512", 4096),), None)]
    # quotas: no SCRAM key shows, carol (credentials only) is no quota entity
    assert {names: values for names, values in await describe_client_quotas(store, QuotaFilter())} == {
        ALICE: {"producer_byte_rate": 10.0}, DEFAULT_USER_DEFAULT_CLIENT: {"producer_byte_rate": 1.0},
        (("user", "bob"), ("client-id", "app")): {"producer_byte_rate": 2.0}, (("user", None),): {"producer_byte_rate": 3.0}}
    # removing alice's quota keeps her credential; removing her credential keeps a quota
    await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=None)])
    assert (await configs(store, "/config/users/alice"))["config"].keys() == {"SCRAM-SHA-512"}
    await alter_client_quotas(store, [setting(ALICE, producer_byte_rate=5.0)])
    assert await alter_user_scram_credentials(store, [_deletion("alice")], []) == {"alice": None}
    assert (await configs(store, "/config/users/alice"))["config"] == {"producer_byte_rate": "5"}
    # bob's credential added and removed again: his node stays, as his client id's parent
    await alter_user_scram_credentials(store, [], [upsertion("bob")])
    assert await alter_user_scram_credentials(store, [_deletion("bob")], []) == {"bob": None}
    assert await records.read_quotas(store, ClientQuotaEntity("bob", "app")) == {"producer_byte_rate": "2"}


def _deletion(user: str) -> ScramDeletion:
    return ScramDeletion(user, upsertion(user).mechanism)
