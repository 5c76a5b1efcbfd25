"""SASL on one connection of a SASL_PLAINTEXT or SASL_SSL listener, as Kafka's
SaslServerAuthenticator runs it, as an explicit state machine:

    HANDSHAKE_OR_VERSIONS --ApiVersions--> HANDSHAKE --SaslHandshake--> AUTHENTICATE
    HANDSHAKE_OR_VERSIONS --SaslHandshake--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (more to come)--> AUTHENTICATE
    AUTHENTICATE --SaslAuthenticate (done)--> COMPLETE --SaslHandshake--> AUTHENTICATE (re-authentication)
    any --failure--> FAILED

Before COMPLETE only those requests are read, one at a time (the connection takes no frame
while one is pending), none larger than sasl.server.max.receive.size, and any other request
closes the connection, as Kafka closes it. A
failure (unknown mechanism, bad credentials, a principal or mechanism changed by
re-authentication) is answered with Kafka's error and message, then the connection closes after
connection.failed.authentication.delay.ms (KIP-306).

SaslHandshake v0 (deprecated, still served by Kafka 4, and all that librdkafka before 2.x's
feature checks accept) hands the connection to raw tokens: each frame after it is the
mechanism's bytes, without a request header, answered with the challenge, size-prefixed; a
failure is answered with nothing, and the connection closes after the delay.

A session ends at connections.max.reauth.ms after it began, or when its credential expires if
sooner (KIP-368): the client is told the lifetime in SaslAuthenticate v1+, and must
re-authenticate on the connection before then; a request other than SaslHandshake after the
end closes the connection.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable, Mapping

from kio.schema.errors import ErrorCode

from replog.obs import BrokerMetrics
from replog.obs.logs import LineBudget
from replog.security.sasl import AuthenticationFailed, InvalidCredentials, MechanismServer

from .codec import ANONYMOUS, ApiKey

# Kafka's answer to a SaslAuthenticate on a connection whose authentication is over, or never was.
NOT_AUTHENTICATING = "SaslAuthenticate request received after successful authentication"

logger = logging.getLogger(__name__)
# Each names its listener and user: a client guessing passwords must not flood the log.
_FAILURES_LOGGED = LineBudget(logger, "SASL authentication failed or session expired", lines_max=100)
_NAME_LOGGED_MAX = 64  # characters of a mechanism name a client made up


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


# What each state reads; anything else closes the connection.
_ACCEPTED = {
    State.HANDSHAKE_OR_VERSIONS: frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE}),
    State.HANDSHAKE: frozenset({ApiKey.SASL_HANDSHAKE}),
    State.AUTHENTICATE: frozenset({ApiKey.SASL_AUTHENTICATE}),
    State.FAILED: frozenset(),
}


class SaslSession:
    def __init__(self, listener: str, mechanisms: Mapping[str, Callable[[], MechanismServer]], *, max_reauth_ms: int,
                 failure_delay_ms: int, max_receive_bytes: int, metrics: BrokerMetrics,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)):
        """`mechanisms`: what makes a fresh server of each enabled mechanism, in the listener's
        order; `max_receive_bytes`: the largest frame read until authenticated
        (sasl.server.max.receive.size); `clock_ms`: wall-clock ms, the time credentials'
        expiry is written in."""
        self.listener = listener
        self._mechanisms = mechanisms
        self._max_reauth_ms = max_reauth_ms
        self.failure_delay_s = failure_delay_ms / 1000
        self.max_receive_bytes = max_receive_bytes
        self._metrics = metrics
        self._clock_ms = clock_ms
        self.state = State.HANDSHAKE_OR_VERSIONS
        self.principal = ANONYMOUS
        self.mechanism: str | None = None
        self._server: MechanismServer | None = None
        self._reauthenticating = False
        self._bad_mechanism_message: str | None = None
        self.raw_tokens = False  # after a SaslHandshake v0, until the exchange ends
        self._expires_at_ms: int | None = None  # when the session ends, if it does

    @property
    def serial(self) -> bool:
        """Whether the connection must take one request at a time: until authenticated."""
        return self.state is not State.COMPLETE

    @property
    def failed(self) -> bool:
        return self.state is State.FAILED

    def refusal(self, api_key: int) -> str | None:
        """Why a request of `api_key` arriving now closes the connection; None if it is read."""
        if self.state is State.COMPLETE:
            if api_key != ApiKey.SASL_HANDSHAKE and self._expires_at_ms is not None \
                    and self._clock_ms() >= self._expires_at_ms:
                if _FAILURES_LOGGED.allows():
                    logger.info("SASL session expired, connection closed listener=%s principal=%s", self.listener,
                                self.principal)
                return "its SASL session expired (connections.max.reauth.ms, or its credential's end)"
            return None
        if api_key in _ACCEPTED[self.state]:
            if api_key == ApiKey.API_VERSIONS:
                self.state = State.HANDSHAKE
            return None
        try:
            name = ApiKey(api_key).name
        except ValueError:
            name = str(api_key)
        during = "authentication" if self.state is State.AUTHENTICATE else "handshake"
        message = f"Unexpected Kafka request of type {name} during SASL {during}."
        self._fail(self.mechanism, message)
        return message

    def handshake(self, mechanism: str, version: int) -> tuple[ErrorCode, list[str]]:
        """SaslHandshake: the error code and the enabled mechanisms."""
        enabled = list(self._mechanisms)
        if self.state is State.COMPLETE:
            self._reauthenticating = True
            if mechanism != self.mechanism:
                # Answered NONE, failed at the SaslAuthenticate that follows, as Kafka does.
                self._bad_mechanism_message = (f"SASL mechanism '{mechanism}' requested by client is not supported for "
                                               f"re-authentication of mechanism '{self.mechanism}'")
                self.state = State.AUTHENTICATE
                return ErrorCode.none, enabled
        elif mechanism not in self._mechanisms:
            self._fail(None, f"unsupported SASL mechanism {mechanism[:_NAME_LOGGED_MAX]!r}")  # metric label: bounded
            return ErrorCode.unsupported_sasl_mechanism, enabled
        self.mechanism = mechanism
        self._server = self._mechanisms[mechanism]()
        self.state = State.AUTHENTICATE
        self.raw_tokens = version == 0
        return ErrorCode.none, enabled

    async def authenticate(self, auth_bytes: bytes) -> tuple[ErrorCode, str | None, bytes, int]:
        """SaslAuthenticate: error code, message, the challenge, the session's lifetime in ms."""
        if self.state is not State.AUTHENTICATE:
            return ErrorCode.illegal_sasl_state, NOT_AUTHENTICATING, b"", 0
        try:
            if self._bad_mechanism_message is not None:
                raise AuthenticationFailed(self._bad_mechanism_message)
            step = await self._server.evaluate(auth_bytes)
            if step.authenticated is None:
                return ErrorCode.none, None, step.challenge, 0
            principal = step.authenticated.principal
            if self._reauthenticating and principal != self.principal:
                raise AuthenticationFailed("Cannot change principals during re-authentication from "
                                           f"{self.principal.replace(':', '.', 1)}: {principal.replace(':', '.', 1)}")
        except InvalidCredentials as failure:
            message = str(InvalidCredentials(failure.mechanism, self._during)) if self._reauthenticating else str(failure)
            self._fail(self.mechanism, message)
            return ErrorCode.sasl_authentication_failed, message, b"", 0
        except AuthenticationFailed as failure:
            self._fail(self.mechanism, str(failure))
            return ErrorCode.sasl_authentication_failed, str(failure), b"", 0
        lifetime_ms = self._begin_session(principal, step.authenticated.expires_at_ms)
        return ErrorCode.none, None, step.challenge, lifetime_ms

    async def raw_token(self, token: bytes) -> list[bytes] | None:
        """After SaslHandshake v0: the frame answering a raw token, or None after a failure."""
        error_code, _, challenge, _ = await self.authenticate(token)
        if error_code != ErrorCode.none:
            return None
        if self.state is State.COMPLETE:
            self.raw_tokens = False
        return [len(challenge).to_bytes(4, "big"), challenge]

    @property
    def _during(self) -> str:
        return "re-authentication" if self._reauthenticating else "authentication"

    def _begin_session(self, principal: str, credential_expires_at_ms: int | None) -> int:
        """Kafka's calcCompletionTimesAndReturnSessionLifetimeMs: the lifetime told the client
        (0: none)."""
        now_ms = self._clock_ms()
        lifetimes = [max(0, credential_expires_at_ms - now_ms)] if credential_expires_at_ms is not None else []
        if self._max_reauth_ms > 0:
            lifetimes.append(self._max_reauth_ms)
        lifetime_ms = min(lifetimes, default=0)
        self._expires_at_ms = now_ms + lifetime_ms if lifetimes else None
        self.principal = principal
        self.state = State.COMPLETE
        self._server = None
        self._metrics.sasl_authenticated(self.listener, self.mechanism, self._reauthenticating)
        self._reauthenticating = False
        logger.debug("SASL %s complete listener=%s mechanism=%s principal=%s lifetime_ms=%d", self._during,
                     self.listener, self.mechanism, principal, lifetime_ms)
        return lifetime_ms

    def _fail(self, mechanism: str | None, message: str) -> None:
        self.state = State.FAILED
        self._server = None
        self._metrics.sasl_authentication_failed(self.listener, mechanism or "unknown")
        if _FAILURES_LOGGED.allows():
            logger.info("SASL %s failed listener=%s mechanism=%s reason=%s", self._during, self.listener, mechanism,
                        message)
