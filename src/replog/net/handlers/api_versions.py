"""ApiVersions: what replog speaks, and the answer clients fall back on."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from .. import codec
from ..codec import ApiKey, Request
from . import handles

UNSUPPORTED_VERSION = ErrorCode.unsupported_version


def _body(api_version: int, error_code: ErrorCode):
    schema = codec.response_schema(ApiKey.API_VERSIONS, api_version)
    module = __import__(schema.__module__, fromlist=["ApiVersion"])
    keys = tuple(
        module.ApiVersion(api_key=api_key, min_version=low, max_version=high)
        for api_key, (low, high) in sorted(codec.SUPPORTED_VERSIONS.items())
    )
    fields = {"error_code": error_code, "api_keys": keys}
    if api_version >= 1:
        fields["throttle_time"] = datetime.timedelta(0)
    return schema(**fields)


@handles(ApiKey.API_VERSIONS)
async def api_versions(services, request: Request):
    return _body(request.api_version, ErrorCode.none)


def unsupported_version_answer(unsupported: codec.UnsupportedVersion) -> list[bytes] | None:
    """A v0 body with UNSUPPORTED_VERSION and the list, so a client can retry with a version
    it shares with us; other APIs at unsupported versions get the connection closed."""
    if unsupported.api_key != ApiKey.API_VERSIONS:
        return None
    return codec.encode_response(ApiKey.API_VERSIONS, 0, unsupported.correlation_id, _body(0, UNSUPPORTED_VERSION))
