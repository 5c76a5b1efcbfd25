"""Users' SCRAM credentials in the store (admin/scram_credentials.py) on every backend: Kafka's
node format, Kafka's refusals and their order, all or none of a user's changes."""

from __future__ import annotations

import json

import pytest
from kio.schema.errors import ErrorCode

from replog.admin.scram_credentials import (
    ScramDeletion,
    ScramUpsertion,
    UserScramCredentials,
    alter_user_scram_credentials,
    credential,
    describe_user_scram_credentials,
)
from replog.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential_from_salted_password, salted_password
from replog.coord_backends import paths

SALT = b"0123456789abcdef"
SHA256, SHA512 = SCRAM_SHA_256.type, SCRAM_SHA_512.type


def upsertion(user: str, mechanism: int = SHA512, iterations: int = 4096, password: bytes = b"secret") -> ScramUpsertion:
    hash_mechanism = SCRAM_SHA_256 if mechanism == SHA256 else SCRAM_SHA_512
    return ScramUpsertion(user, mechanism, iterations, SALT, salted_password(hash_mechanism, password, SALT, iterations))


async def test_a_user_holds_both_mechanisms_in_kafkas_node_format(store):
    assert await alter_user_scram_credentials(store, [], [upsertion("alice", SHA256), upsertion("alice", SHA512, 8192)]) == \
        {"alice": None}
    raw, _ = await store.get("/config/users/alice")
    body = json.loads(raw)
    assert body["version"] == 1 and sorted(body["config"]) == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
    assert body["config"]["SCRAM-SHA-512"].startswith("salt=MDEyMzQ1Njc4OWFiY2RlZg==,stored_key=")
    assert body["config"]["SCRAM-SHA-512"].endswith(",iterations=8192")
    expected = credential_from_salted_password(SCRAM_SHA_512, SALT, salted_password(SCRAM_SHA_512, b"secret", SALT, 8192), 8192)
    assert await credential(store, "alice", "SCRAM-SHA-512") == expected
    assert await credential(store, "alice", "PLAIN") is None
    assert await credential(store, "bob", "SCRAM-SHA-512") is None
    assert await describe_user_scram_credentials(store) == \
        [UserScramCredentials("alice", (("SCRAM-SHA-256", 4096), ("SCRAM-SHA-512", 8192)))]


async def test_other_user_configs_stay_and_the_last_credential_removes_the_node(store):
    await store.create(paths.user_config("carol"), b'{"config":{"producer_byte_rate":"1024"},"version":1}', make_parents=True)
    await alter_user_scram_credentials(store, [], [upsertion("carol")])
    await alter_user_scram_credentials(store, [ScramDeletion("carol", SHA512)], [])
    assert json.loads((await store.get("/config/users/carol"))[0])["config"] == {"producer_byte_rate": "1024"}
    assert await describe_user_scram_credentials(store) == []
    await alter_user_scram_credentials(store, [], [upsertion("dave")])
    await alter_user_scram_credentials(store, [ScramDeletion("dave", SHA512)], [])
    assert await store.exists("/config/users/dave") is None


@pytest.mark.parametrize("deletions, upsertions, code, message", [
    ([], [upsertion("")], ErrorCode.unacceptable_credential, "Username must not be empty"),
    ([ScramDeletion("u", 3)], [], ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    ([], [upsertion("u", 0)], ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    ([], [upsertion("u", iterations=4095)], ErrorCode.unacceptable_credential, "Too few iterations"),
    ([], [upsertion("u", iterations=16385)], ErrorCode.unacceptable_credential, "Too many iterations"),
    ([], [ScramUpsertion("u", SHA512, 4096, SALT, b"short")], ErrorCode.unacceptable_credential,
     "The salt is empty or the salted password is not a SCRAM-SHA-512 hash"),
    ([], [upsertion("u"), upsertion("u", password=b"other")], ErrorCode.duplicate_resource,
     "A user credential cannot be altered twice in the same request"),
    ([ScramDeletion("u", SHA512)], [upsertion("u")], ErrorCode.duplicate_resource,
     "A user credential cannot be altered twice in the same request"),
    ([ScramDeletion("u", SHA256)], [upsertion("u")], ErrorCode.resource_not_found,
     "Attempt to delete a user credential that does not exist"),
], ids=["empty-user", "unknown-deletion", "unknown-upsertion", "too-few", "too-many", "not-a-hash", "twice",
        "deleted-and-upserted", "delete-absent"])
async def test_a_refused_user_changes_nothing_and_others_go_on(store, deletions, upsertions, code, message):
    results = await alter_user_scram_credentials(store, deletions, [*upsertions, upsertion("other")])
    refused = next(iter(results.values()))
    assert (refused.code, refused.message) == (code, message)
    assert results["other"] is None
    assert [described.user for described in await describe_user_scram_credentials(store)] == ["other"]


async def test_iterations_at_kafkas_bounds_are_accepted(store):
    results = await alter_user_scram_credentials(store, [], [upsertion("low", iterations=4096), upsertion("high", iterations=16384)])
    assert results == {"low": None, "high": None}


async def test_describing_named_users_answers_each_once_with_kafkas_errors(store):
    await alter_user_scram_credentials(store, [], [upsertion("alice", SHA256)])
    described = await describe_user_scram_credentials(store, ["bob", "alice", "twice", "", "twice"])
    assert [(entry.user, entry.credentials, entry.error and (entry.error.code, entry.error.message)) for entry in described] == [
        ("bob", (), (ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: bob")),
        ("alice", (("SCRAM-SHA-256", 4096),), None),
        ("twice", (), (ErrorCode.duplicate_resource,
                       "Cannot describe SCRAM credentials for the same user twice in a single request: twice")),
        ("", (), (ErrorCode.resource_not_found, "Username must not be empty")),
    ]


@pytest.mark.parametrize("user, child", [
    ("a b*c", "a%20b%2Ac"), ("x/y", "x%2Fy"), ("~é", "%7E%C3%A9"), ("..", "%2E%2E"), ("ok.name-1_", "ok.name-1_"),
])
async def test_user_names_are_sanitized_as_kafka_does(store, user, child):
    await alter_user_scram_credentials(store, [], [upsertion(user)])
    assert await store.children(paths.USER_CONFIGS) == [child]
    assert [entry.user for entry in await describe_user_scram_credentials(store)] == [user]
    assert await credential(store, user, "SCRAM-SHA-512") is not None


async def test_an_unreadable_credential_is_an_error_for_that_user_only(store):
    await alter_user_scram_credentials(store, [], [upsertion("good")])
    await store.create(paths.user_config("bad"), b'{"config":{"SCRAM-SHA-256":"garbage"},"version":1}', make_parents=True)
    described = {entry.user: entry for entry in await describe_user_scram_credentials(store)}
    assert described["bad"].error.code == ErrorCode.unknown_server_error
    assert described["good"].credentials == (("SCRAM-SHA-512", 4096),)


async def test_many_users_are_listed(store):
    users = [f"user{index:03}" for index in range(150)]  # more than one read of many nodes holds
    await alter_user_scram_credentials(store, [], [upsertion(user) for user in users])
    assert [entry.user for entry in await describe_user_scram_credentials(store)] == users


async def test_the_caller_gets_the_loop_back_before_each_users_write(store):
    users = [f"user{index}" for index in range(5)]
    pauses = []

    async def pause() -> None:
        pauses.append(len(await describe_user_scram_credentials(store)))

    results = await alter_user_scram_credentials(store, [], [upsertion(user) for user in users] + [upsertion("", SHA512)], pause)
    assert pauses == [0, 1, 2, 3, 4], "one pause before each user's write, none for a refused user"
    assert len(results) == 6
