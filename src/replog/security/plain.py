"""SASL/PLAIN on the broker's side (RFC 4616), as Kafka's PlainSaslServer answers it: one
message, `authzid NUL authcid NUL passwd`, checked against the listener's users.

The users come from Kafka's JAAS form, `listener.name.<l>.plain.sasl.jaas.config=
org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="...";`, and from
the file `sasl.plain.users.file` names (one `user=password` a line, blanks around either taken
away; blank lines and lines starting with # are skipped), so that passwords need not sit in the
broker's configuration, read when the broker starts. The file's users win over the JAAS ones of
the same name. Passwords are compared in constant time, an unknown user's against a stand-in,
so that the time taken does not tell who exists.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from replog.tls_settings import Secret

from .jaas import LoginModule
from .sasl import AuthenticationFailed, Authenticated, InvalidCredentials, Step

PLAIN = "PLAIN"
_USER_PREFIX = "user_"
_STAND_IN = b"\0" * 32


def users_of(login_module: LoginModule | None, users_file_text: str | None) -> dict[str, Secret]:
    """The users and passwords a listener's PLAIN server accepts."""
    users = {}
    if login_module is not None:
        users.update({key[len(_USER_PREFIX):]: value if isinstance(value, Secret) else Secret(value)
                      for key, value in login_module.options.items() if key.startswith(_USER_PREFIX)})
    for number, line in enumerate((users_file_text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, equals, password = line.partition("=")
        if not equals or not user.strip():
            raise ValueError(f"line {number} is not user=password")  # never quotes the line: it may hold a password
        users[user.strip()] = Secret(password.strip())
    return users


class PlainServer:
    def __init__(self, users: Mapping[str, Secret]):
        self._users = users

    async def evaluate(self, response: bytes) -> Step:
        tokens = response.split(b"\0")
        if len(tokens) != 3:
            raise InvalidCredentials(PLAIN)  # Kafka: "Invalid SASL/PLAIN response: expected 3 tokens", a SaslException
        try:
            authzid, username, password = (token.decode() for token in tokens)
        except UnicodeDecodeError:
            raise InvalidCredentials(PLAIN) from None
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        matches = hmac.compare_digest(expected.text.encode() if expected is not None else _STAND_IN, password.encode())
        if expected is None or not matches:
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an authorization id that is different "
                                       "from username")
        return Step(b"", Authenticated(f"User:{username}"))
