"""SaslHandshake and SaslAuthenticate: the steps of a connection's SASL exchange, which its
session (net/sasl_session.py) runs. On a listener without SASL they are answered
ILLEGAL_SASL_STATE, as Kafka answers them there."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from ..codec import ApiKey, Request, build_response
from ..sasl_session import NOT_AUTHENTICATING
from . import handles


@handles(ApiKey.SASL_HANDSHAKE)
async def sasl_handshake(services, request: Request):
    if request.sasl is None:
        return build_response(request, {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []})
    error_code, mechanisms = request.sasl.handshake(request.body.mechanism, request.api_version)
    return build_response(request, {"error_code": error_code, "mechanisms": mechanisms})


@handles(ApiKey.SASL_AUTHENTICATE)
async def sasl_authenticate(services, request: Request):
    if request.sasl is None:
        return build_response(request, {"error_code": ErrorCode.illegal_sasl_state, "error_message": NOT_AUTHENTICATING,
                                        "auth_bytes": b"", "session_lifetime": datetime.timedelta(0)})
    error_code, message, challenge, lifetime_ms = await request.sasl.authenticate(request.body.auth_bytes)
    return build_response(request, {"error_code": error_code, "error_message": message, "auth_bytes": challenge,
                                    "session_lifetime": datetime.timedelta(milliseconds=lifetime_ms)})  # v1+
