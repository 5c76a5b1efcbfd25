"""SASL on the broker's side: what every mechanism's server (PLAIN, SCRAM-SHA-256/512,
OAUTHBEARER) is to the connection that runs the exchange. The connection hands each
SaslAuthenticate's bytes to `evaluate` and answers with the step's challenge; the step that
carries `authenticated` ends the exchange, and AuthenticationFailed ends it with Kafka's
SASL_AUTHENTICATION_FAILED and that message. The client's side of each mechanism is in
security/sasl_client.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NamedTuple, Protocol

from .scram import ScramCredential

# (user, mechanism name) -> the user's SCRAM credential for that mechanism, or None if it has none.
CredentialLookup = Callable[[str, str], Awaitable[ScramCredential | None]]


class SaslSettingsError(Exception):
    """A listener's SASL settings that cannot be served; the message says which and why, and
    never quotes a password."""


class AuthenticationFailed(Exception):
    """The exchange failed; str() is the message the client is sent, as Kafka words it, and
    never holds a password, salt, proof or token."""


class SaslClientError(Exception):
    """On a client's side: the broker's part of the exchange cannot be accepted (a SCRAM server
    that does not prove it holds the credential, a challenge where none is due); the message
    names no secret."""


class InvalidCredentials(AuthenticationFailed):
    """A failure whose message must not say why (unknown user, wrong password, malformed
    message): Kafka's answer to a SaslException names only the mechanism, so that a client
    cannot tell an unknown user from a wrong password."""

    def __init__(self, mechanism: str, during: str = "authentication"):
        super().__init__(f"Authentication failed during {during} due to invalid credentials with SASL mechanism "
                         f"{mechanism}")
        self.mechanism = mechanism


class Authenticated(NamedTuple):
    principal: str  # "User:<name>"
    # When the credential itself stops being valid (a token's exp), in ms since the epoch; the
    # session ends then at the latest, whatever connections.max.reauth.ms allows. None: never.
    expires_at_ms: int | None = None


class Step(NamedTuple):
    challenge: bytes  # the SaslAuthenticate answer's auth_bytes (may be empty)
    authenticated: Authenticated | None = None  # set on the step that completes the exchange


class MechanismServer(Protocol):
    """One exchange on one connection: made fresh for each (re)authentication."""

    async def evaluate(self, response: bytes) -> Step: ...


class ListenerSasl(NamedTuple):
    """What a mechanism's factory (sasl_mechanisms.FACTORIES) builds its servers from."""
    listener: str  # the listener's name, as in `listeners`
    settings: Mapping[str, Any]  # the broker's settings (sasl_settings.settings_of reads a listener's)
    scram_credential: CredentialLookup  # the store's SCRAM credentials
