"""The SASL session's state machine on its own (net/sasl_session.py), with a mechanism that
says what the test wants and a clock the test moves: a session's lifetime from
connections.max.reauth.ms and the credential's expiry, and its end."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey
from replog.net.sasl_session import SaslSession, State
from replog.obs import BrokerMetrics
from replog.security.sasl import Authenticated, Step

NOW_MS = 1_800_000_000_000


class OneStep:
    """A mechanism that authenticates "User:token-holder" at once, its credential ending at `expires_at_ms`."""

    def __init__(self, expires_at_ms: int | None):
        self._expires_at_ms = expires_at_ms

    async def evaluate(self, response: bytes) -> Step:
        return Step(b"", Authenticated("User:token-holder", self._expires_at_ms))


def authenticated(max_reauth_ms: int, expires_at_ms: int | None, clock: list[int]) -> tuple[SaslSession, int]:
    session = SaslSession("SASL_SSL", {"OAUTHBEARER": lambda: OneStep(expires_at_ms)}, max_reauth_ms=max_reauth_ms,
                          failure_delay_ms=100, max_receive_bytes=524_288, metrics=BrokerMetrics(),
                          clock_ms=lambda: clock[0])
    assert session.refusal(ApiKey.SASL_HANDSHAKE) is None
    assert session.handshake("OAUTHBEARER", 1) == (ErrorCode.none, ["OAUTHBEARER"])
    error_code, _, _, lifetime_ms = asyncio.run(session.authenticate(b"token"))
    assert error_code == ErrorCode.none and session.state is State.COMPLETE
    assert session.principal == "User:token-holder"
    return session, lifetime_ms


@pytest.mark.parametrize("max_reauth_ms, expires_in_ms, lifetime_ms", [
    (0, None, 0),  # no end: 0 told, never expires
    (60_000, None, 60_000),
    (0, 5_000, 5_000),  # the credential's end alone
    (60_000, 5_000, 5_000),  # the sooner of the two
    (3_000, 5_000, 3_000),
    (60_000, -1_000, 0),  # a credential already past its end: a session of no length
])
def test_a_sessions_lifetime_is_the_sooner_of_max_reauth_and_the_credentials_end(max_reauth_ms, expires_in_ms,
                                                                               lifetime_ms):
    clock = [NOW_MS]
    session, told_ms = authenticated(max_reauth_ms, None if expires_in_ms is None else NOW_MS + expires_in_ms, clock)
    assert told_ms == lifetime_ms
    clock[0] = NOW_MS + 10**9
    ended = session.refusal(ApiKey.METADATA) is not None
    assert ended == (max_reauth_ms > 0 or expires_in_ms is not None)


def test_an_ended_session_still_takes_a_reauthentication_handshake():
    clock = [NOW_MS]
    session, _ = authenticated(1_000, None, clock)
    clock[0] = NOW_MS + 999
    assert session.refusal(ApiKey.METADATA) is None
    clock[0] = NOW_MS + 1_000
    assert session.refusal(ApiKey.METADATA) is not None
    assert session.refusal(ApiKey.SASL_HANDSHAKE) is None
    assert session.handshake("OAUTHBEARER", 1)[0] == ErrorCode.none
    assert session.serial  # one request at a time until re-authenticated
    assert asyncio.run(session.authenticate(b"token"))[3] == 1_000
    assert session.refusal(ApiKey.METADATA) is None
