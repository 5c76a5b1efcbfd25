"""The broker's side of StateChangeEvents (net/replog_apis.py), replog's own API behind
`replog cluster state-changes`: the requests waiting in the brokers' queues in the store
(/brokers/state/[broker_id]/[seq]) that match the question, and the fields the answer carries
for them and for the events of the broker's ring (obs/state_change_events.py). The command's
side, which reads these answers, is replog.cli.state_change_reader."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from replog.coord_backends import Store
from replog.coord_backends.paths import StateChangeRequest
from replog.obs.state_change_events import NO_CURSOR, StateChangeEvent
from replog.replication.state_changes import queued_requests

from .reassignment import cluster_brokers

# A queued request in a StateChangeEvents answer: an entry no broker recorded.
QUEUED, UNRECORDED_MS = "queued", -1

# (target broker, queue sequence, request): a request waiting in a queue.
Queued = tuple[int, str, StateChangeRequest]


async def queued_state_changes(store: Store, topic: str | None, partition: int | None) -> list[Queued]:
    """The requests of the topic and partition (None: all) waiting in the queues of the
    cluster's brokers, running or not."""
    waiting = await queued_requests(store, await cluster_brokers(store))
    return [(broker, name, request) for broker, name, request in waiting
            if (topic is None or request.topic == topic) and (partition is None or request.partition == partition)]


def queued_as_answer(queued: Iterable[Queued]) -> list[dict]:
    """The `queued` field of a StateChangeEvents answer (state_change_reader.queued_from_answer
    reads it back)."""
    return [{"cursor": NO_CURSOR, "kind": QUEUED, "request_type": request.kind, "topic": request.topic,
             "partition": request.partition, "from_broker": request.from_broker, "to_broker": broker,
             "epoch": request.leader_epoch, "queue_sequence": name, "timestamp_ms": UNRECORDED_MS}
            for broker, name, request in queued]


def event_json(event: StateChangeEvent) -> dict:
    """One event as the answer carries it, and as --follow --output json prints it, a line each."""
    fields = dataclasses.asdict(event)
    fields["kind"] = event.kind.value
    return fields
