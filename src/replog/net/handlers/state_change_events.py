"""StateChangeEvents, replog's own API (net/replog_apis.py): this broker's recent state-change
lifecycle events, from its ring (obs/state_change_events.py), and when asked the requests
waiting in every broker's queue in the store, for `replog cluster state-changes`. Needs Describe
on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog.admin.state_change_events import event_json, queued_as_answer, queued_state_changes
from replog.obs.state_change_events import NO_CURSOR
from replog.security.acls import AclOperation

from ..authorization import authorized_on_cluster
from ..codec import ApiKey, Request, build_response
from ..replog_apis import EVENTS_PER_ANSWER_MAX
from . import handles


@handles(ApiKey.STATE_CHANGE_EVENTS)
async def state_change_events(services, request: Request):
    """A cursor of another incarnation of the ring (this broker restarted since) reads from the
    start; the events given are at most the request's max_events and this broker's own bound."""
    body = request.body
    ring = services.state_change_events
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE):
        return build_response(request, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
            "broker_id": services.broker_id, "incarnation": ring.incarnation, "first_cursor": ring.first_cursor,
            "next_cursor": ring.first_cursor, "events": [], "queued": []})
    since = body.since_cursor if body.incarnation == ring.incarnation else NO_CURSOR
    partition = None if body.partition < 0 else body.partition
    events, next_cursor = ring.since(since, min(max(body.max_events, 0), EVENTS_PER_ANSWER_MAX), body.topic, partition)
    queued = []
    if body.include_queued:
        queued = queued_as_answer(await queued_state_changes(services.store, body.topic, partition))
    return build_response(request, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None, "broker_id": services.broker_id,
        "incarnation": ring.incarnation, "first_cursor": ring.first_cursor, "next_cursor": next_cursor,
        "events": [event_json(event) for event in events], "queued": queued,
    })
