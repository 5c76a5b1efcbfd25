"""ApiVersions: what replog speaks, and the answer clients fall back on."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from replog.net.leader_connections import follower_of

from .. import codec
from ..codec import ApiKey, Request
from . import handles

UNSUPPORTED_VERSION = ErrorCode.unsupported_version
# Fetch v13 names topics by id (KIP-516), which replog's Metadata answers do not give clients:
# offered to replog's followers only, which fetch by the id their logs are tagged with.
CLIENTS_MAX_VERSIONS = {ApiKey.FETCH: 12}


def _body(api_version: int, error_code: ErrorCode, *, follower: bool = False):
    schema = codec.response_schema(ApiKey.API_VERSIONS, api_version)
    module = __import__(schema.__module__, fromlist=["ApiVersion"])
    keys = tuple(
        module.ApiVersion(api_key=api_key, min_version=low,
                          max_version=high if follower else min(high, CLIENTS_MAX_VERSIONS.get(api_key, high)))
        for api_key, (low, high) in sorted(codec.SUPPORTED_VERSIONS.items())
    )
    fields = {"error_code": error_code, "api_keys": keys}
    if api_version >= 1:
        fields["throttle_time"] = datetime.timedelta(0)
    return schema(**fields)


@handles(ApiKey.API_VERSIONS)
async def api_versions(services, request: Request):
    return _body(request.api_version, ErrorCode.none, follower=follower_of(request.client_id) is not None)


def unsupported_version_answer(unsupported: codec.UnsupportedVersion) -> list[bytes] | None:
    """A v0 body with UNSUPPORTED_VERSION and the list, so a client can retry with a version
    it shares with us; other APIs at unsupported versions get the connection closed."""
    if unsupported.api_key != ApiKey.API_VERSIONS:
        return None
    return codec.encode_response(ApiKey.API_VERSIONS, 0, unsupported.correlation_id, _body(0, UNSUPPORTED_VERSION))
