"""The SCRAM credential maths (security/scram.py) against RFC 7677's test vector and
scramp, and the written form Kafka keeps in a user's config node."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
import scramp

from replog.security.scram import (
    MECHANISMS,
    SCRAM_SHA_256,
    CredentialFormatError,
    credential_from_password,
    format_credential,
    parse_credential,
)

# RFC 7677 section 3: the exchange of user "user", password "pencil".
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_AUTH_MESSAGE = (b"n=user,r=rOprNGfwEbeRWgbNEkqO,"
                    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
                    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
RFC_CLIENT_PROOF = base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
RFC_SERVER_SIGNATURE = base64.b64decode("6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


def test_the_rfc_7677_exchange_verifies_against_the_derived_credential():
    credential = credential_from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    client_signature = hmac.digest(credential.stored_key, RFC_AUTH_MESSAGE, "sha256")
    client_key = bytes(a ^ b for a, b in zip(RFC_CLIENT_PROOF, client_signature))
    assert hashlib.sha256(client_key).digest() == credential.stored_key  # the server accepts the client's proof
    assert hmac.digest(credential.server_key, RFC_AUTH_MESSAGE, "sha256") == RFC_SERVER_SIGNATURE


@pytest.mark.parametrize("mechanism", MECHANISMS, ids=lambda mechanism: mechanism.name)
def test_scramp_derives_the_same_keys(mechanism):
    salt = bytes(range(16))
    ours = credential_from_password(mechanism, "pässword", 8192, salt)
    assert scramp.ScramMechanism(mechanism.name).make_auth_info("pässword", iteration_count=8192, salt=salt) == \
        (salt, ours.stored_key, ours.server_key, 8192)


def test_the_written_form_is_kafkas_and_parses_back():
    credential = credential_from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    written = format_credential(credential)
    assert written.startswith("salt=W22ZaJ0SNY7soEsUEjb6gQ==,stored_key=") and written.endswith(",iterations=4096")
    assert [part.split("=", 1)[0] for part in written.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert parse_credential(written) == credential


def test_a_fresh_salt_each_time():
    assert credential_from_password(SCRAM_SHA_256, "pencil", 4096).salt != credential_from_password(SCRAM_SHA_256, "pencil", 4096).salt


@pytest.mark.parametrize("text", [
    "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5",
    "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=4096,extra=1",
    "salt=c2FsdA==,stored_key=a2V5,server_key=a2V5,iterations=many",
    "salt=!!!,stored_key=a2V5,server_key=a2V5,iterations=4096",
    "salt=c2FsdA==,salt=c2FsdA==,server_key=a2V5,iterations=4096",
    "salt",
], ids=["missing", "extra", "iterations", "base64", "twice", "no-equals"])
def test_a_bad_written_form_is_refused_without_quoting_it(text):
    with pytest.raises(CredentialFormatError) as refused:
        parse_credential(text)
    assert "c2FsdA" not in str(refused.value) and "a2V5" not in str(refused.value)


def test_no_secret_in_a_credentials_repr():
    credential = credential_from_password(SCRAM_SHA_256, "pencil", 4096, RFC_SALT)
    shown = repr(credential)
    assert "4096" in shown
    assert all(repr(secret) not in shown for secret in (credential.salt, credential.stored_key, credential.server_key))
