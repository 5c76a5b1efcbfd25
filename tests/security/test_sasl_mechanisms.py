"""The PLAIN and SCRAM servers (security/plain.py, security/scram_exchange.py) against scramp's
client and hand-made PLAIN messages: what they accept, what they refuse, and in Kafka's words."""

from __future__ import annotations

import asyncio
import base64

import pytest
import scramp

from replog.security.jaas import login_module
from replog.security.plain import PlainServer, users_of
from replog.security.sasl import AuthenticationFailed, InvalidCredentials
from replog.security.scram import MECHANISMS, SCRAM_SHA_512, credential_from_password
from replog.security.scram_exchange import ScramServer

PASSWORD = "pencil-7f3a"


def lookup_of(credentials: dict):
    async def lookup(user: str, mechanism: str):
        return credentials.get((user, mechanism))
    return lookup


def scram_exchange(mechanism, user: str, password: str, credentials: dict) -> tuple[str, object]:
    """(the server-first message, the outcome: the final Step, or the failure raised)."""
    server = ScramServer(mechanism, lookup_of(credentials))
    client = scramp.ScramClient([mechanism.name], user, password)

    async def run():
        first = (await server.evaluate(client.get_client_first().encode())).challenge.decode()
        try:
            client.set_server_first(first)
            step = await server.evaluate(client.get_client_final().encode())
        except AuthenticationFailed as failure:
            return first, failure
        client.set_server_final(step.challenge.decode())  # raises unless the server proved itself
        return first, step

    return asyncio.run(run())


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda mechanism: mechanism.name)
def test_scram_authenticates_a_user_with_the_right_password(mechanism):
    credentials = {("alice", mechanism.name): credential_from_password(mechanism, PASSWORD, 4096)}
    _, step = scram_exchange(mechanism, "alice", PASSWORD, credentials)
    assert step.authenticated.principal == "User:alice"
    assert step.authenticated.expires_at_ms is None


def test_scram_names_with_comma_and_equals_are_unescaped():
    credentials = {("a,b=c", SCRAM_SHA_512.name): credential_from_password(SCRAM_SHA_512, PASSWORD, 4096)}
    assert scram_exchange(SCRAM_SHA_512, "a,b=c", PASSWORD, credentials)[1].authenticated.principal == "User:a,b=c"


def test_a_wrong_password_and_an_unknown_user_fail_alike():
    credentials = {("alice", SCRAM_SHA_512.name): credential_from_password(SCRAM_SHA_512, PASSWORD, 4096)}
    wrong_first, wrong = scram_exchange(SCRAM_SHA_512, "alice", "not-it", credentials)
    unknown_first, unknown = scram_exchange(SCRAM_SHA_512, "mallory", PASSWORD, credentials)
    again_first, _ = scram_exchange(SCRAM_SHA_512, "mallory", PASSWORD, credentials)
    message = "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    assert isinstance(wrong, InvalidCredentials) and str(wrong) == message
    assert isinstance(unknown, InvalidCredentials) and str(unknown) == message

    def salt_and_iterations(first: str) -> tuple[int, str]:
        fields = dict(part.split("=", 1) for part in first.split(","))
        return len(base64.b64decode(fields["s"])), fields["i"]

    # An unknown user's stand-in looks like a credential, and the same one each time.
    assert salt_and_iterations(unknown_first) == salt_and_iterations(wrong_first)
    assert unknown_first.split(",s=")[1] == again_first.split(",s=")[1]


def test_a_user_without_a_credential_for_this_mechanism_fails():
    credentials = {("alice", "SCRAM-SHA-256"): credential_from_password(MECHANISMS[0], PASSWORD, 4096)}
    assert isinstance(scram_exchange(SCRAM_SHA_512, "alice", PASSWORD, credentials)[1], InvalidCredentials)


@pytest.mark.parametrize("client_first", [
    b"", b"\xff\xfe", b"y,,n=alice,r=abc", b"p=tls-unique,,n=alice,r=abc", b"n,,n=,r=abc", b"n,,n=alice",
    b"n,,n=al=ice,r=abc", b"n,,r=abc,n=alice", b"n,,m=ext,n=alice,r=abc", b"n,,n=alice,r=abc,tokenauth=true",
])
def test_malformed_client_first_messages_fail_without_saying_why(client_first):
    server = ScramServer(SCRAM_SHA_512, lookup_of({}))
    with pytest.raises(InvalidCredentials):
        asyncio.run(server.evaluate(client_first))


def test_a_differing_authorization_id_is_refused_in_kafkas_words():
    credentials = {("alice", SCRAM_SHA_512.name): credential_from_password(SCRAM_SHA_512, PASSWORD, 4096)}
    server = ScramServer(SCRAM_SHA_512, lookup_of(credentials))
    with pytest.raises(AuthenticationFailed, match="^Authentication failed: Client requested an authorization id that "
                                                   "is different from username$"):
        asyncio.run(server.evaluate(b"n,a=bob,n=alice,r=abcdef"))


@pytest.mark.parametrize("tamper", ["nonce", "channel", "proof"])
def test_a_client_final_message_that_does_not_match_the_exchange_fails(tamper):
    credentials = {("alice", SCRAM_SHA_512.name): credential_from_password(SCRAM_SHA_512, PASSWORD, 4096)}
    server = ScramServer(SCRAM_SHA_512, lookup_of(credentials))
    client = scramp.ScramClient([SCRAM_SHA_512.name], "alice", PASSWORD)

    async def run():
        client.set_server_first((await server.evaluate(client.get_client_first().encode())).challenge.decode())
        final = client.get_client_final()
        channel, nonce, proof = final.split(",")
        final = {"nonce": f"{channel},{nonce[:-1]}x,{proof}", "channel": f"c=eSws,{nonce},{proof}",
                 "proof": f"{channel},{nonce},p={base64.b64encode(bytes(64)).decode()}"}[tamper]
        await server.evaluate(final.encode())

    with pytest.raises(InvalidCredentials):
        asyncio.run(run())


def test_a_lookup_that_fails_fails_the_exchange_only():
    async def broken(user: str, mechanism: str):
        raise OSError("the store is away")

    with pytest.raises(InvalidCredentials):
        asyncio.run(ScramServer(SCRAM_SHA_512, broken).evaluate(b"n,,n=alice,r=abcdef"))


PLAIN_USERS = {"alice": "alice-pw", "bob": "bob-pw"}


def plain(message: bytes):
    return asyncio.run(PlainServer(users_of(None, "\n".join(f"{u}={p}" for u, p in PLAIN_USERS.items()))).evaluate(message))


def test_plain_authenticates_a_user_and_its_own_authorization_id():
    assert plain(b"\0alice\0alice-pw").authenticated.principal == "User:alice"
    assert plain(b"bob\0bob\0bob-pw").authenticated.principal == "User:bob"


@pytest.mark.parametrize("message, error", [
    (b"\0alice\0bob-pw", "Authentication failed: Invalid username or password"),
    (b"\0nobody\0alice-pw", "Authentication failed: Invalid username or password"),
    (b"\0\0alice-pw", "Authentication failed: username not specified"),
    (b"\0alice\0", "Authentication failed: password not specified"),
    (b"bob\0alice\0alice-pw", "Authentication failed: Client requested an authorization id that is different from "
                              "username"),
    (b"alice-pw", "Authentication failed during authentication due to invalid credentials with SASL mechanism PLAIN"),
    (b"\0alice\0alice-pw\0", "Authentication failed during authentication due to invalid credentials with SASL "
                             "mechanism PLAIN"),
])
def test_plain_refusals_in_kafkas_words(message, error):
    with pytest.raises(AuthenticationFailed) as raised:
        plain(message)
    assert str(raised.value) == error


def test_plain_users_from_jaas_and_a_file_which_wins():
    module = login_module('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
                          'password="admin-pw" user_admin="admin-pw" user_alice="old-pw";')
    users = users_of(module, "# users\n\nalice = new-pw\n")
    assert {user: password.text for user, password in users.items()} == {"admin": "admin-pw", "alice": "new-pw"}
    assert "pw" not in repr(users)


def test_a_users_file_line_without_equals_is_refused_without_quoting_it():
    with pytest.raises(ValueError) as raised:
        users_of(None, "alice=a\nsecret-without-user\n")
    assert str(raised.value) == "line 2 is not user=password" and "secret" not in str(raised.value)
