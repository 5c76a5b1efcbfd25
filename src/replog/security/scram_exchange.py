"""SCRAM-SHA-256 and SCRAM-SHA-512 on the broker's side (RFC 5802, RFC 7677), as Kafka's
ScramSaslServer runs the exchange:

    client-first   n,[a=<authzid>],n=<user>,r=<client nonce>[,<extensions>]
    server-first   r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final   c=<base64 gs2 header>,r=<nonce>,p=<base64 proof>
    server-final   v=<base64 server signature>

The credential (salt, StoredKey, ServerKey, iterations; scram.py) is looked up by a callable the
broker injects (the store's /config/users/<user>). An unknown user is not told apart: it is
sent a stand-in salt, the same for the same name within this process, and fails at the proof,
after the same work a wrong password costs. Every failure but a differing authorization id is
InvalidCredentials, whose message names only the mechanism; nothing the client sent, nor any
key, reaches a message or a log line.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import secrets

from .sasl import AuthenticationFailed, Authenticated, CredentialLookup, InvalidCredentials, Step
from .scram import ITERATIONS_DEFAULT, ITERATIONS_MIN, SALT_BYTES, ScramCredential, ScramMechanism

logger = logging.getLogger(__name__)

_NONCE_BYTES = 24
# Keys the stand-in salts of unknown users: stable for a name, unguessable, this process's own.
_STAND_IN_KEY = secrets.token_bytes(32)


def _username(sasl_name: str) -> str | None:
    """RFC 5802's saslname: "=2C" is ",", "=3D" is "=", and no other "=" may appear."""
    if sasl_name.replace("=2C", "").replace("=3D", "").count("="):
        return None
    return sasl_name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    def __init__(self, mechanism: ScramMechanism, lookup: CredentialLookup):
        self._mechanism = mechanism
        self._lookup = lookup
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._gs2_header = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._known = False  # the user has a credential (else it is a stand-in's exchange)

    async def evaluate(self, response: bytes) -> Step:
        if self._user is None:
            return await self._client_first(response)
        return self._client_final(response)

    def _failed(self) -> InvalidCredentials:
        self._credential = None
        return InvalidCredentials(self._mechanism.name)

    async def _client_first(self, response: bytes) -> Step:
        try:
            message = response.decode()
        except UnicodeDecodeError:
            raise self._failed() from None
        parts = message.split(",")
        # n: no channel binding, which Kafka's clients never ask for over its own TLS.
        if len(parts) < 4 or parts[0] != "n" or (parts[1] and not parts[1].startswith("a=")) \
                or not parts[2].startswith("n=") or not parts[3].startswith("r=") or len(parts[3]) < 3:
            raise self._failed()
        user = _username(parts[2][2:])
        authzid = _username(parts[1][2:]) if parts[1] else ""
        # tokenauth=true asks for a delegation token's exchange, which replog does not serve: the
        # name would be a token's id, never a user's.
        if not user or authzid is None or "tokenauth=true" in parts[4:]:
            raise self._failed()
        self._gs2_header = f"{parts[0]},{parts[1]},"
        self._client_first_bare = message[len(self._gs2_header):]
        try:
            credential = await self._lookup(user, self._mechanism.name)
        except Exception as error:  # a store that cannot answer fails this exchange only
            logger.warning("SCRAM credential lookup failed mechanism=%s error=%s", self._mechanism.name,
                           type(error).__name__)
            raise self._failed() from None
        if authzid and authzid != user:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is different "
                                       "from username")
        if credential is not None and credential.iterations < ITERATIONS_MIN:
            raise self._failed()
        self._user = user
        self._credential = credential if credential is not None else self._stand_in(user)
        self._nonce = parts[3][2:] + base64.b64encode(secrets.token_bytes(_NONCE_BYTES)).decode()
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        self._known = credential is not None
        return Step(self._server_first.encode())

    def _stand_in(self, user: str) -> ScramCredential:
        salt = hmac.digest(_STAND_IN_KEY, user.encode(), "sha256")[:SALT_BYTES]
        digest_bytes = hashlib.new(self._mechanism.hash_name).digest_size
        return ScramCredential(salt=salt, stored_key=secrets.token_bytes(digest_bytes),
                               server_key=secrets.token_bytes(digest_bytes), iterations=ITERATIONS_DEFAULT)

    def _client_final(self, response: bytes) -> Step:
        credential = self._credential
        if credential is None:  # the exchange ended (failed) already
            raise self._failed()
        try:
            message = response.decode()
        except UnicodeDecodeError:
            raise self._failed() from None
        without_proof, separator, proof_text = message.rpartition(",p=")
        fields = without_proof.split(",")
        # The nonce need only end with the server-first's, as Kafka checks it: librdkafka 2.0
        # sends the client's part twice.
        if not separator or len(fields) < 2 or fields[0] != "c=" + base64.b64encode(self._gs2_header.encode()).decode() \
                or not fields[1].startswith("r=") or not fields[1].endswith(self._nonce):
            raise self._failed()
        try:
            proof = base64.b64decode(proof_text, validate=True)
        except ValueError:
            raise self._failed() from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self._mechanism.hash_name)
        if len(proof) != len(client_signature):
            raise self._failed()
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        verified = hmac.compare_digest(hashlib.new(self._mechanism.hash_name, client_key).digest(), credential.stored_key)
        if not verified or not self._known:
            raise self._failed()
        server_signature = hmac.digest(credential.server_key, auth_message, self._mechanism.hash_name)
        self._credential = None
        return Step(b"v=" + base64.b64encode(server_signature), Authenticated(f"User:{self._user}"))
