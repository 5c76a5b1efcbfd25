"""SCRAM credentials (RFC 5802, RFC 7677) as Kafka derives, writes and reads them
(ScramFormatter, ScramCredentialUtils): no I/O, so that the admin commands, the request
handlers and a SASL server share one derivation.

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC-H(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC-H(SaltedPassword, "Server Key")

The server keeps salt, StoredKey, ServerKey and the iterations, never the password nor the
salted password. Written form (one mechanism's value in a user's config node):
`salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>`.

Neither a credential nor an upsertion shows its secrets in a repr or an error message: they end
up in logs.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import secrets

# Kafka's minimum for both mechanisms (ScramMechanism.minIterations) and its maximum
# (ScramControlManager.MAX_ITERATIONS): fewer make a stolen credential cheap to brute-force,
# more make every authentication cost the broker's CPU.
ITERATIONS_MIN = 4096
ITERATIONS_MAX = 16384
# What `kafka-configs --add-config 'SCRAM-SHA-512=[password=...]'` uses when none is given.
ITERATIONS_DEFAULT = 4096
SALT_BYTES = 32


@dataclasses.dataclass(frozen=True)
class ScramMechanism:
    name: str  # the SASL mechanism name, also the key in a user's config node
    type: int  # the wire's int8 (Kafka's org.apache.kafka.clients.admin.ScramMechanism)
    hash_name: str


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", 1, "sha256")
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", 2, "sha512")
MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
MECHANISMS_BY_NAME = {mechanism.name: mechanism for mechanism in MECHANISMS}
MECHANISMS_BY_TYPE = {mechanism.type: mechanism for mechanism in MECHANISMS}


class CredentialFormatError(ValueError):
    """A stored credential that does not parse; the message never quotes it."""


@dataclasses.dataclass(frozen=True)
class ScramCredential:
    salt: bytes = dataclasses.field(repr=False)
    stored_key: bytes = dataclasses.field(repr=False)
    server_key: bytes = dataclasses.field(repr=False)
    iterations: int


def salted_password(mechanism: ScramMechanism, password: bytes, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's Hi(): what a client sends in AlterUserScramCredentials instead of the password."""
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password, salt, iterations)


def credential_from_salted_password(mechanism: ScramMechanism, salt: bytes, salted: bytes, iterations: int) -> ScramCredential:
    """The stored credential of a salted password (Kafka's ScramFormatter.generateCredential)."""
    client_key = hmac.digest(salted, b"Client Key", mechanism.hash_name)
    return ScramCredential(salt=salt, stored_key=hashlib.new(mechanism.hash_name, client_key).digest(),
                           server_key=hmac.digest(salted, b"Server Key", mechanism.hash_name), iterations=iterations)


def new_salt() -> bytes:
    return secrets.token_bytes(SALT_BYTES)


def credential_from_password(mechanism: ScramMechanism, password: str, iterations: int,
                             salt: bytes | None = None) -> ScramCredential:
    """A password's credential with a fresh random salt (or the one given). The password is
    taken as UTF-8 without SASLprep, as Kafka's ScramFormatter takes it."""
    salt = new_salt() if salt is None else salt
    return credential_from_salted_password(mechanism, salt, salted_password(mechanism, password.encode(), salt, iterations),
                                           iterations)


_FIELDS = ("salt", "stored_key", "server_key", "iterations")


def format_credential(credential: ScramCredential) -> str:
    """Kafka's ScramCredentialUtils.credentialToString."""
    encode = lambda raw: base64.b64encode(raw).decode()  # noqa: E731
    return (f"salt={encode(credential.salt)},stored_key={encode(credential.stored_key)},"
            f"server_key={encode(credential.server_key)},iterations={credential.iterations}")


def parse_credential(text: str) -> ScramCredential:
    """Kafka's ScramCredentialUtils.credentialFromString: exactly the four fields."""
    fields = {}
    for part in text.split(","):
        name, equals, value = part.partition("=")
        if not equals or name in fields:
            raise CredentialFormatError("a stored SCRAM credential is not name=value pairs, each once")
        fields[name] = value
    if set(fields) != set(_FIELDS):
        raise CredentialFormatError(f"a stored SCRAM credential has fields {sorted(fields)}, not {sorted(_FIELDS)}")
    try:
        salt, stored_key, server_key = (base64.b64decode(fields[name], validate=True) for name in _FIELDS[:3])
        iterations = int(fields["iterations"])
    except ValueError:  # binascii.Error is one
        raise CredentialFormatError("a stored SCRAM credential's salt, keys or iterations do not decode") from None
    return ScramCredential(salt=salt, stored_key=stored_key, server_key=server_key, iterations=iterations)
