"""The client's side of each SASL mechanism (security/sasl_client.py, scram_client.py), against
scramp's SCRAM server: another implementation of RFC 5802 checks ours, each way."""

from __future__ import annotations

import base64

import pytest
import scramp

from replog.security.sasl import SaslClientError
from replog.security.sasl_client import mechanism_client
from replog.security.scram_client import ScramClient, sasl_name
from replog.security import scram
from replog.tls_settings import Secret

PASSWORD = "pencil, = and ü"


def scramp_server(mechanism: str, password: str, iterations: int = 4096):
    server_side = scramp.ScramMechanism(mechanism)
    auth_info = server_side.make_auth_info(password, iteration_count=iterations)
    return server_side.make_server(lambda username: auth_info)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_against_scramp_completes_and_checks_the_server_signature(mechanism):
    server = scramp_server(mechanism, PASSWORD)
    client = mechanism_client(mechanism, "user", Secret(PASSWORD), None)
    server.set_client_first(client.first().decode())
    client_final = client.evaluate(server.get_server_first().encode())
    server.set_client_final(client_final.decode())  # scramp checks our proof
    assert client.evaluate(server.get_server_final().encode()) is None


def test_scram_refuses_a_server_that_does_not_hold_the_credential():
    server = scramp_server("SCRAM-SHA-512", "another password")
    client = mechanism_client("SCRAM-SHA-512", "user", Secret(PASSWORD), None)
    server.set_client_first(client.first().decode())
    client.evaluate(server.get_server_first().encode())
    forged = base64.b64encode(b"\0" * 64)
    with pytest.raises(SaslClientError, match="invalid server signature") as refused:
        client.evaluate(b"v=" + forged)
    assert PASSWORD not in str(refused.value)


def test_scram_refuses_fewer_iterations_than_kafka_allows_and_a_nonce_it_did_not_extend():
    client = ScramClient(scram.SCRAM_SHA_256, "user", PASSWORD, nonce="abc")
    with pytest.raises(SaslClientError, match="iterations 4095 is less than the minimum 4096"):
        client.evaluate(b"r=abcdef,s=c2FsdA==,i=4095")
    for nonce in (b"abc", b"xyzdef"):
        with pytest.raises(SaslClientError, match="nonce"):
            ScramClient(scram.SCRAM_SHA_256, "user", PASSWORD, nonce="abc").evaluate(b"r=" + nonce + b",s=c2FsdA==,i=4096")


def test_scram_reports_the_servers_error():
    server = scramp_server("SCRAM-SHA-256", PASSWORD)
    client = mechanism_client("SCRAM-SHA-256", "user", Secret(PASSWORD), None)
    server.set_client_first(client.first().decode())
    client.evaluate(server.get_server_first().encode())
    with pytest.raises(SaslClientError, match="other-error"):
        client.evaluate(b"e=other-error")


def test_scram_user_names_are_escaped_as_rfc_5802_says():
    assert sasl_name("a=b,c") == "a=3Db=2Cc"
    assert ScramClient(scram.SCRAM_SHA_256, "a=b,c", PASSWORD, nonce="n").first() == b"n,,n=a=3Db=2Cc,r=n"


def test_plain_sends_the_user_and_password_once():
    client = mechanism_client("PLAIN", "alice", Secret("secret"), None)
    assert client.first() == b"\0alice\0secret"
    assert client.evaluate(b"") is None


def test_oauthbearer_sends_the_token_and_acknowledges_an_error_challenge():
    client = mechanism_client("OAUTHBEARER", None, None, lambda: Secret("a.b.c"))
    assert client.first() == b"n,,\x01auth=Bearer a.b.c\x01\x01"
    assert client.evaluate(b"") is None
    refused = mechanism_client("OAUTHBEARER", None, None, lambda: Secret("a.b.c"))
    refused.first()
    assert refused.evaluate(b'{"status":"invalid_token"}') == b"\x01"


def test_a_mechanism_without_its_credentials_or_unknown_is_a_value_error():
    for mechanism, username, password, token in (("PLAIN", None, None, None), ("OAUTHBEARER", "u", Secret("p"), None),
                                                  ("GSSAPI", "u", Secret("p"), None)):
        with pytest.raises(ValueError):
            mechanism_client(mechanism, username, password, token)
