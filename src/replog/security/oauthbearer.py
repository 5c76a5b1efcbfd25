"""The OAUTHBEARER mechanism's server (RFC 7628), as Kafka's OAuthBearerSaslServer: the client's
first message carries a GS2 header and `auth=Bearer <token>` among \\x01-separated key/values
(the others are SASL extensions, checked for form and otherwise ignored, as Kafka's validator
callback accepts them all). A valid token authenticates `User:<subject>` until the token's exp.
A token refused gets Kafka's JSON error challenge, `{"status":"invalid_token"}`; the client
answers it with a lone \\x01, and that ends the exchange with the same text as the failure's
message. The reason a token was refused goes to the broker's log, never to the client.

Kafka's default OAUTHBEARER validator accepts unsigned tokens, for development; replog has no
such mode: a listener that enables OAUTHBEARER names a JWKS (`server_factory`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any

from replog.config import oauthbearer_settings_of
from replog.security.oauthbearer_jwt import MAX_TOKEN_BYTES, InvalidToken, JwksKeys, TokenValidator
from replog.obs.logs import LineBudget
from replog.security.sasl import Authenticated, AuthenticationFailed, InvalidCredentials, MechanismServer, Step

logger = logging.getLogger(__name__)
# A client can present refused tokens as fast as it can connect.
_REFUSALS_LOGGED = LineBudget(logger, "OAUTHBEARER token refused", lines_max=100)

MECHANISM = "OAUTHBEARER"
INVALID_TOKEN_CHALLENGE = '{"status":"invalid_token"}'
# The GS2 header and key/values around the token: the message's bound beyond the token's.
_MAX_MESSAGE_BYTES = MAX_TOKEN_BYTES + 4096

# Kafka's OAuthBearerClientInitialResponse patterns.
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"  # ASCII but "=" and ",", or their escapes
_KEY = r"[A-Za-z]+"
_VALUE = r"[\x21-\x7E \t\r\n]+"
_FIRST_MESSAGE = re.compile(rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,\x01(?P<pairs>(?:{_KEY}={_VALUE}\x01)*)\x01")
_PAIR = re.compile(rf"({_KEY})=({_VALUE})\x01")
_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_~+/.a-zA-Z0-9]+=*)", re.ASCII)


def token_of(message: bytes) -> tuple[str, str]:
    """(token, authorization id or "") of a client's first message; InvalidCredentials, Kafka's
    answer to its SaslException, for one that is not well formed."""
    if len(message) > _MAX_MESSAGE_BYTES:
        raise InvalidCredentials(MECHANISM)
    try:
        text = message.decode("ascii")  # every part the patterns allow is ASCII
    except UnicodeDecodeError:
        raise InvalidCredentials(MECHANISM) from None
    matched = _FIRST_MESSAGE.fullmatch(text)
    if matched is None:
        raise InvalidCredentials(MECHANISM)
    pairs = dict(_PAIR.findall(matched["pairs"]))  # the last of a repeated key, as Kafka's parseMap
    auth = _AUTH.fullmatch(pairs.get("auth", ""))
    if auth is None or auth["scheme"].lower() != "bearer":
        raise InvalidCredentials(MECHANISM)
    authzid = (matched["authzid"] or "").replace("=2C", ",").replace("=3D", "=")
    return auth["token"], authzid


class OAuthBearerServer:
    """One OAUTHBEARER exchange (a MechanismServer)."""

    def __init__(self, validator: TokenValidator, listener: str) -> None:
        self._validator = validator
        self._listener = listener
        self._refused = False

    async def evaluate(self, response: bytes) -> Step:
        if response == b"\x01" and self._refused:
            raise AuthenticationFailed(INVALID_TOKEN_CHALLENGE)
        self._refused = False
        token, authzid = token_of(response)
        try:
            valid = await self._validator.validate(token)
        except InvalidToken as error:
            if _REFUSALS_LOGGED.allows():
                logger.info("OAUTHBEARER token refused listener=%s reason=%s", self._listener, error)
            self._refused = True
            return Step(INVALID_TOKEN_CHALLENGE.encode())
        if authzid and authzid != valid.principal_name:
            raise AuthenticationFailed(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different from "
                f"the token's principal name ({valid.principal_name})")
        return Step(b"", Authenticated(f"User:{valid.principal_name}", valid.expires_at_ms))


def server_factory(settings: Mapping[str, Any], listener: str) -> Callable[[], MechanismServer]:
    """What makes listener `listener`'s OAUTHBEARER exchanges, from the broker's settings (the
    listener's own `listener.name.<l>.oauthbearer.sasl.oauthbearer.*` where set). One JWKS and its
    keys serve all the listener's connections. ValueError if the listener names no JWKS."""
    values = oauthbearer_settings_of(settings, listener)
    url = values["sasl.oauthbearer.jwks.endpoint.url"]
    if url is None:
        raise ValueError(f"listener {listener} enables OAUTHBEARER: set sasl.oauthbearer.jwks.endpoint.url (or "
                         f"listener.name.{listener.lower()}.oauthbearer.sasl.oauthbearer.jwks.endpoint.url) to the "
                         "JWKS that signs its tokens")
    keys = JwksKeys(url, values["sasl.oauthbearer.jwks.endpoint.refresh.ms"],
                    values["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"],
                    values["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"])
    validator = TokenValidator(
        keys, expected_issuer=values["sasl.oauthbearer.expected.issuer"],
        expected_audience=values["sasl.oauthbearer.expected.audience"],
        sub_claim_name=values["sasl.oauthbearer.sub.claim.name"],
        scope_claim_name=values["sasl.oauthbearer.scope.claim.name"],
        clock_skew_seconds=values["sasl.oauthbearer.clock.skew.seconds"])
    return lambda: OAuthBearerServer(validator, listener)
