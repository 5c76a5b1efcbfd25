"""Request handlers, one module per API family, registered by API key.

Each module declares the versions it implements with `codec.supports`, which is what
ApiVersions advertises, and adds its handlers to HANDLERS.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Awaitable, Callable

from kio.schema.errors import ErrorCode

from replog.net.leader_connections import client_id_for_logs
from replog.obs import BrokerMetrics
from replog.obs.logs import OncePerInterval

from ..codec import ApiKey, Request

Handler = Callable[[Any, Request], Awaitable[Any]]
HANDLERS: dict[int, Handler] = {}

logger = logging.getLogger(__name__)

# Clients retry refused requests in tight loops; one line per kind of refusal, per subject, per
# interval is what an operator can read. Remembered subjects are bounded, and so are the lines of
# an interval across subjects: one request may name 50,000 subjects, each refused.
REFUSAL_LOG_INTERVAL_S = 10.0
REFUSAL_SUBJECTS_MAX = 4096
REFUSAL_LINES_PER_INTERVAL_MAX = 100


class RefusalLog:
    """The lines log_refusal writes, within the bounds above."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self._lines = OncePerInterval(logger, "refusal", REFUSAL_SUBJECTS_MAX, REFUSAL_LINES_PER_INTERVAL_MAX,
                                      REFUSAL_LOG_INTERVAL_S, clock)

    def log(self, request: Request, what: str, subject: str, error_code: int) -> None:
        if self._lines.allows((request.api_key, what, subject)):
            logger.warning("refused %s subject=%s error=%d client=%s principal=%s api=%d v%d", what, subject, error_code,
                           client_id_for_logs(request.client_id), request.principal, request.api_key, request.api_version)


_refusals = RefusalLog()


def log_refusal(request: Request, what: str, subject: str, error_code: int) -> None:
    """One warning line for a request refused with a Kafka error (bad input from a client)."""
    _refusals.log(request, what, subject, error_code)


# Metric labels by API key and error code, named once rather than on every request.
API_NAMES = {int(api_key): api_key.name.lower() for api_key in ApiKey}
_ERROR_NAMES = {int(code): code.name for code in ErrorCode}


def count_error(metrics: BrokerMetrics, request: Request, error_code: int) -> None:
    """Count an error code a request answers with, as a whole or for one of its partitions."""
    if error_code:
        metrics.request_error(API_NAMES[request.api_key], _ERROR_NAMES.get(int(error_code), str(int(error_code))))


def unknown_partition(topic: str, partition: int) -> dict:
    """The error fields of a partition this broker's metadata does not know, for the admin
    requests that answer those without reading the store, which they then read for the
    cluster's partitions at most, however many a request names. UNKNOWN_TOPIC_OR_PARTITION is
    retriable, should the metadata lag the store."""
    return {"error_code": ErrorCode.unknown_topic_or_partition, "error_message": f"partition {topic}-{partition} does not exist"}


NO_TOPIC_ID = uuid.UUID(int=0)


def topic_id_of(services, name: str) -> uuid.UUID:
    """The id `name` was created with, as this broker's metadata last saw it (KIP-516); the
    null id while unseen, or for a topic made before topics had ids. Clients tell a topic
    deleted and created again by the change of id: librdkafka learns its new partition count
    only so."""
    topic_id = services.metadata.topic_id(name)
    return NO_TOPIC_ID if topic_id is None else uuid.UUID(hex=topic_id)


def handles(api_key: int) -> Callable[[Handler], Handler]:
    from ..codec import SUPPORTED_VERSIONS

    if int(api_key) not in SUPPORTED_VERSIONS:
        raise AssertionError(f"API {api_key} has a handler but no versions in codec.SUPPORTED_VERSIONS")

    def register(handler: Handler) -> Handler:
        HANDLERS[int(api_key)] = handler
        return handler

    return register


# Importing the modules registers their handlers.
from . import (  # noqa: E402,F401
    acls, admin, api_versions, client_quotas, cluster, committed_offsets, fetch, groups, log_dirs, metadata, offsets, produce,
    producers, sasl, state_change_events, transactions, txn_markers, txn_offsets, user_scram_credentials,
)
