"""SASL on the client's side: what replog's own client (net/client.py) presents to a broker for
each mechanism. The connection sends `first()` in its first SaslAuthenticate, hands each answer's
auth_bytes to `evaluate` and sends what it returns, until it returns None: the exchange is
complete, and for SCRAM the broker proved it holds the credential (security/scram_client.py).

    PLAIN         RFC 4616: one message, \\0<user>\\0<password>; the broker answers empty.
    OAUTHBEARER   RFC 7628: one message, n,,\\x01auth=Bearer <token>\\x01\\x01; the broker answers
                  empty, or with an error challenge (JSON) that the client acknowledges with
                  \\x01, after which the broker fails the exchange with its message.

No message of these mechanisms quotes a password or a token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from . import scram
from .sasl import SaslClientError
from .scram_client import ScramClient

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
# RFC 7628's separator, and the whole answer a client gives to an error challenge.
_KVSEP = b"\x01"


class MechanismClient(Protocol):
    def first(self) -> bytes: ...

    def evaluate(self, challenge: bytes) -> bytes | None: ...


class _OneMessage:
    """A mechanism whose first message is its only one: the broker's empty answer completes it."""

    def __init__(self, mechanism: str, message: Callable[[], bytes]):
        self._mechanism = mechanism
        self._message = message

    def first(self) -> bytes:
        return self._message()

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge:
            raise SaslClientError(f"{self._mechanism}: the server answered with a challenge where none is due")
        return None


class _OAuthBearer(_OneMessage):
    def __init__(self, token: Callable[[], str]):
        super().__init__(OAUTHBEARER, lambda: b"n,," + _KVSEP + b"auth=Bearer " + _text(token()).encode() + _KVSEP + _KVSEP)
        self._error_acknowledged = False

    def evaluate(self, challenge: bytes) -> bytes | None:
        if challenge and not self._error_acknowledged:
            # The broker's error (RFC 7628 §3.2.2): acknowledged, so that it fails the exchange
            # with its message.
            self._error_acknowledged = True
            return _KVSEP
        return super().evaluate(challenge)


def _text(value: str) -> str:
    """A Secret's text, or the string itself."""
    return getattr(value, "text", value)


def mechanism_client(mechanism: str, username: str | None, password: str | None,
                     token: Callable[[], str] | None) -> MechanismClient:
    """The client of `mechanism` with these credentials; ValueError if it lacks what it needs."""
    if mechanism == OAUTHBEARER:
        if token is None:
            raise ValueError("OAUTHBEARER needs a token")
        return _OAuthBearer(token)
    if username is None or password is None:
        raise ValueError(f"{mechanism} needs a username and a password")
    if mechanism == PLAIN:
        return _OneMessage(PLAIN, lambda: b"\0" + username.encode() + b"\0" + _text(password).encode())
    if mechanism in scram.MECHANISMS_BY_NAME:
        return ScramClient(scram.MECHANISMS_BY_NAME[mechanism], username, _text(password))
    raise ValueError(f"SASL mechanism {mechanism} is not one replog's client speaks: "
                     f"{', '.join((PLAIN, *scram.MECHANISMS_BY_NAME, OAUTHBEARER))}")
