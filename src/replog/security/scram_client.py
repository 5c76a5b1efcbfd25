"""SCRAM-SHA-256/512 on the client's side (RFC 5802, RFC 7677), as Kafka's ScramSaslClient
runs it: what replog's own client presents to a broker, and how it checks that the broker
holds the user's credential too.

    client-first   n,,n=<user>,r=<client nonce>
    server-first   r=<client nonce + server nonce>,s=<salt>,i=<iterations>
    client-final   c=biws,r=<nonce>,p=<ClientKey XOR HMAC(StoredKey, AuthMessage)>
    server-final   v=<HMAC(ServerKey, AuthMessage)>  (or e=<error>)

The derivation is security/scram.py's, shared with the server. A server that asks for fewer
than scram.ITERATIONS_MIN iterations, whose nonce does not extend the client's, or whose
signature is not the credential's is refused: it does not know the password, or wants it cheap
to brute-force. No message of this module quotes the password, a proof or a key.
"""

from __future__ import annotations

import base64
import hmac
import re
import secrets

from . import scram
from .sasl import SaslClientError

# Kafka's ScramFormatter.secureRandomString: enough for a nonce that is never reused.
CLIENT_NONCE_BYTES = 24
# The GS2 header of a client without channel binding, base64: c=biws.
_GS2_HEADER = b"n,,"
# Kafka's ServerFirstMessage pattern; extensions after the iterations are allowed and ignored.
_SERVER_FIRST = re.compile(rb"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+),s=(?P<salt>[A-Za-z0-9+/=]+),i=(?P<iterations>[0-9]{1,10})(,.*)?",
                           re.DOTALL)
_SERVER_FINAL = re.compile(rb"(?:e=(?P<error>[^,]*)|v=(?P<signature>[A-Za-z0-9+/=]+))(,.*)?", re.DOTALL)


def _base64(text: bytes) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error is one
        raise SaslClientError("the server's SCRAM message holds a salt or signature that is not base64") from None


def sasl_name(username: str) -> str:
    """RFC 5802's saslname: ',' and '=' escaped, as Kafka's ScramFormatter.saslName."""
    return username.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """One SCRAM exchange: first(), then evaluate() with the server-first message (the answer is
    the client-final message), then with the server-final one (None: verified)."""

    def __init__(self, mechanism: scram.ScramMechanism, username: str, password: str, nonce: str | None = None):
        self._mechanism = mechanism
        self._password = password.encode()
        self._client_first_bare = f"n={sasl_name(username)},r={nonce or secrets.token_urlsafe(CLIENT_NONCE_BYTES)}".encode()
        self._server_key: bytes | None = None
        self._auth_message: bytes | None = None
        self._complete = False

    def first(self) -> bytes:
        return _GS2_HEADER + self._client_first_bare

    def evaluate(self, challenge: bytes) -> bytes | None:
        if self._complete:
            raise SaslClientError(f"{self._mechanism.name}: the server sent more after its final message")
        if self._auth_message is None:
            return self._client_final(challenge)
        self._verify(challenge)
        self._complete = True
        return None

    def _client_final(self, server_first: bytes) -> bytes:
        found = _SERVER_FIRST.fullmatch(server_first)
        if found is None:
            raise SaslClientError(f"{self._mechanism.name}: the server's first message is not SCRAM's r=,s=,i=")
        client_nonce = self._client_first_bare.partition(b",r=")[2]
        if not found["nonce"].startswith(client_nonce) or found["nonce"] == client_nonce:
            raise SaslClientError(f"{self._mechanism.name}: invalid server nonce: it does not extend the client's")
        iterations = int(found["iterations"])
        if iterations < scram.ITERATIONS_MIN:
            raise SaslClientError(f"{self._mechanism.name}: requested iterations {iterations} is less than the minimum "
                                  f"{scram.ITERATIONS_MIN}")
        salt = _base64(found["salt"])
        salted = scram.salted_password(self._mechanism, self._password, salt, iterations)
        credential = scram.credential_from_salted_password(self._mechanism, salt, salted, iterations)
        without_proof = b"c=" + base64.b64encode(_GS2_HEADER) + b",r=" + found["nonce"]
        self._auth_message = b",".join((self._client_first_bare, server_first, without_proof))
        self._server_key = credential.server_key
        client_key = hmac.digest(salted, b"Client Key", self._mechanism.hash_name)
        client_signature = hmac.digest(credential.stored_key, self._auth_message, self._mechanism.hash_name)
        proof = bytes(key ^ signature for key, signature in zip(client_key, client_signature))
        return without_proof + b",p=" + base64.b64encode(proof)

    def _verify(self, server_final: bytes) -> None:
        found = _SERVER_FINAL.fullmatch(server_final)
        if found is None:
            raise SaslClientError(f"{self._mechanism.name}: the server's final message is not SCRAM's v= or e=")
        if found["error"] is not None:
            raise SaslClientError(f"{self._mechanism.name}: the server ended the exchange: "
                                  f"{found['error'].decode(errors='replace')}")
        expected = hmac.digest(self._server_key, self._auth_message, self._mechanism.hash_name)
        if not hmac.compare_digest(_base64(found["signature"]), expected):
            raise SaslClientError(f"{self._mechanism.name}: invalid server signature: the server does not hold this "
                                  "user's credential")

