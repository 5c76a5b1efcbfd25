"""Metadata: brokers, topics and partitions, answered from the broker's metadata cache.

Encoding: the response body is written here rather than through kio. Clients ask for the
metadata of every topic they use, again on every error and every few minutes, and through kio a
topic of thousands of partitions held the event loop for a long time per request (a dict, then
an entity, then kio's writer, for each partition), in which no other client was served.
tests/net/test_metadata_encoding.py checks the encoding against kio for every version.

Brokers are named by the addresses of the listener the client came in on; a broker without
that listener is left out, and a partition it leads is answered LISTENER_NOT_FOUND (v6 on;
LEADER_NOT_AVAILABLE before), as Kafka answers.

A request naming many topics is answered in slices (loop_slices.py), and names each topic once,
however often it was asked: a name repeated many times would otherwise make an answer many
times the topic's size, written while the loop waits. Kafka too reads the names asked as a set.

A topic the client may not Describe is left out of an answer listing every topic, and answered
TOPIC_AUTHORIZATION_FAILED when named; one that does not exist is created only for a client
that may Create it (on the cluster or the topic), as Kafka answers (net/authorization.py).
Authorized operations are told when asked (v8+), as Kafka's bit fields.

Each topic is answered with the id it was created with (KIP-516, from version 10), and a topic
may be asked by id alone (version 12 on): a topic deleted and created again under its name has
a new id, which is how clients (librdkafka) learn that its partitions are not the old ones.
"""

from __future__ import annotations

import struct
import uuid
from functools import lru_cache

from kio.schema.errors import ErrorCode

from replog.groups import OFFSETS_TOPIC
from replog.transactions import TRANSACTION_STATE_TOPIC
from replog.security.acls import CLUSTER_NAME, AclOperation, ResourceType

from ..authorization import OPERATIONS_NOT_REQUESTED, authorized, authorized_on_cluster, authorized_operations
from ..codec import ApiKey, EncodedBody, Request, wire_length, wire_string
from ..loop_slices import LoopSlices
from . import NO_TOPIC_ID, handles, log_refusal, topic_id_of

FIRST_FLEXIBLE_VERSION = 9
FIRST_OPERATIONS_VERSION, LAST_CLUSTER_OPERATIONS_VERSION = 8, 10
_NO_ERROR, _LEADER_NOT_AVAILABLE = ErrorCode.none.value, ErrorCode.leader_not_available.value
_LISTENER_NOT_FOUND = ErrorCode.listener_not_found.value
FIRST_LISTENER_NOT_FOUND_VERSION = 6
_I16, _I32 = struct.Struct(">h"), struct.Struct(">i")
_HEAD_V0 = struct.Struct(">hii")  # error_code, partition_index, leader_id
_HEAD_V7 = struct.Struct(">hiii")  # ... and leader_epoch


# Replica lists repeat (a topic's partitions are spread over the same few brokers), so each list
# is written once: a lookup rather than a pack per partition.
@lru_cache(maxsize=4096)
def _int32_array(values: tuple[int, ...], flexible: bool) -> bytes:
    return wire_length(len(values), flexible, _I32) + struct.pack(f">{len(values)}i", *values)


class MetadataBodyEncoder:
    """A Metadata response body, versions 0 to 12, in the order its fields go on the wire."""

    def __init__(self, api_version: int):
        self.version = api_version
        self.flexible = api_version >= FIRST_FLEXIBLE_VERSION
        self.out = bytearray()
        self._tags = b"\0" if self.flexible else b""

    def _string(self, text: str | None) -> None:
        self.out += wire_string(text, self.flexible)

    def begin(self, brokers: list[tuple[int, str, int, str | None]], cluster_id: str | None, controller_id: int,
              topic_count: int) -> None:
        """Everything before the topics; `brokers`: (node_id, host, port, rack)."""
        if self.version >= 3:
            self.out += _I32.pack(0)  # throttle_time_ms
        self.out += wire_length(len(brokers), self.flexible, _I32)
        for node_id, host, port, rack in brokers:
            self.out += _I32.pack(node_id)
            self._string(host)
            self.out += _I32.pack(port)
            if self.version >= 1:
                self._string(rack)
            self.out += self._tags
        if self.version >= 2:
            self._string(cluster_id)
        if self.version >= 1:
            self.out += _I32.pack(controller_id)
        self.out += wire_length(topic_count, self.flexible, _I32)

    def topic(self, error: int, name: str | None, topic_id: uuid.UUID, is_internal: bool,
              partitions: list[tuple[int, int, int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...]]],
              authorized_operations: int = OPERATIONS_NOT_REQUESTED) -> None:
        """`partitions`: (error code, index, leader_id, leader_epoch, replicas, isr, offline replicas)."""
        self.out += _I16.pack(int(error))  # an ErrorCode, or a StoreError's code (services.topic_missing)
        # A topic asked by id alone has no name to give; before version 12 the name may not be null.
        self._string(name if name is not None or self.version >= 12 else "")
        if self.version >= 10:
            self.out += topic_id.bytes
        if self.version >= 1:
            self.out += b"\1" if is_internal else b"\0"
        self.out += wire_length(len(partitions), self.flexible, _I32)
        with_epoch, with_offline, flexible, tags = self.version >= 7, self.version >= 5, self.flexible, self._tags
        parts = []
        for error_code, index, leader_id, leader_epoch, replicas, isr, offline in partitions:  # bounded by the topic's partitions
            head = _HEAD_V7.pack(error_code, index, leader_id, leader_epoch) if with_epoch else _HEAD_V0.pack(error_code, index, leader_id)
            parts.append(head + _int32_array(replicas, flexible) + _int32_array(isr, flexible)
                         + (_int32_array(offline, flexible) if with_offline else b"") + tags)
        self.out += b"".join(parts)
        if self.version >= 8:
            self.out += _I32.pack(authorized_operations)  # topic_authorized_operations
        self.out += self._tags

    def finish(self, cluster_authorized_operations: int = OPERATIONS_NOT_REQUESTED) -> EncodedBody:
        if FIRST_OPERATIONS_VERSION <= self.version <= LAST_CLUSTER_OPERATIONS_VERSION:
            self.out += _I32.pack(cluster_authorized_operations)
        self.out += self._tags
        return EncodedBody([bytes(self.out)], throttle_at=0 if self.version >= 3 else None)


def _requested_topics(request: Request) -> list[str | uuid.UUID] | None:
    """Topics asked for, each once, in the order asked: by name, or by id for a topic asked by
    id alone; or None for every topic (v0 says "all" with an empty list)."""
    topics = request.body.topics
    if topics is None or (request.api_version == 0 and not topics):
        return None
    seen: set[str | uuid.UUID] = set()
    asked = []
    for topic in topics:  # bounded by the request's items
        named = topic.name if topic.name is not None else topic.topic_id or NO_TOPIC_ID
        if named not in seen:
            asked.append(named)
            seen.add(named)
    return asked


def partition_entries(services, topic: str, listener: str = "", unavailable_error: int = _LEADER_NOT_AVAILABLE) -> list[tuple]:
    """Each partition of `topic` as MetadataBodyEncoder.topic takes it, for a client of
    `listener`: a leader without that listener is answered `unavailable_error`."""
    live = services.metadata.brokers
    # A leader presumed gone (it refused its followers) is not named until its successor is:
    # LEADER_NOT_AVAILABLE is retriable, and clients keep asking until then, where a named leader
    # would send them to a dead port until their next periodic refresh.
    named = {broker_id for broker_id in live if not services.leader_connections.presumed_gone(broker_id)}
    reachable = {broker_id for broker_id, registration in live.items() if registration.endpoint(listener) is not None}
    serving = services.serving
    entries = []
    for partition, view in sorted(services.metadata.topics.get(topic, {}).items()):  # bounded by the topic's partitions
        # Nor is this broker named while its replica is still opening (its log recovers in a worker thread).
        available = view.leader in named and serving(topic, partition)
        error = _NO_ERROR if available else _LEADER_NOT_AVAILABLE
        if available and view.leader not in reachable:
            available, error = False, unavailable_error
        replicas = view.replicas
        entries.append((
            error,
            partition,
            view.leader if available else -1,
            view.leader_epoch,
            replicas,
            view.isr,
            () if live.keys() >= set(replicas) else tuple(replica for replica in replicas if replica not in live),
        ))
    return entries


def broker_addresses(services, listener: str) -> list[tuple[int, str, int, str | None]]:
    """(node_id, host, port, rack) of each live broker with listener `listener`, by id."""
    addresses = []
    for broker_id, registration in sorted(services.metadata.brokers.items()):  # bounded by the cluster's brokers
        endpoint = registration.endpoint(listener)
        if endpoint is not None:
            addresses.append((broker_id, *endpoint, registration.rack))
    return addresses


@handles(ApiKey.METADATA)
async def metadata(services, request: Request):
    names = _requested_topics(request)
    allow_auto_create = getattr(request.body, "allow_auto_topic_creation", True)
    slices = LoopSlices()
    topics = []
    for named in sorted(services.metadata.topics) if names is None else names:
        await slices.pause()
        error, name = ErrorCode.none, named
        if isinstance(named, uuid.UUID):  # asked by id alone
            name = services.metadata.topic_of_id(named.hex)
            if name is None or name not in services.metadata.topics:
                topics.append((ErrorCode.unknown_topic_id, None, named))
                continue
            if not _may_describe(services, request, name, True):
                topics.append((ErrorCode.topic_authorization_failed, None, named))  # ids are not secret, names are
                continue
        elif not _may_describe(services, request, name, names is not None):
            if names is not None:
                topics.append((ErrorCode.topic_authorization_failed, name, NO_TOPIC_ID))
            continue
        elif name not in services.metadata.topics:
            if allow_auto_create and not _may_create(services, request, name):
                error = ErrorCode.topic_authorization_failed
            else:
                error = await services.topic_missing(name, allow_auto_create)
            if error == ErrorCode.invalid_topic_exception:
                log_refusal(request, "metadata for an invalid topic name", name, error)
        topics.append((error, name, topic_id_of(services, name) if error == ErrorCode.none else NO_TOPIC_ID))
    body = MetadataBodyEncoder(request.api_version)
    unavailable = _LISTENER_NOT_FOUND if request.api_version >= FIRST_LISTENER_NOT_FOUND_VERSION else _LEADER_NOT_AVAILABLE
    body.begin(broker_addresses(services, request.listener),
               # replog has no controller (docs/design.md §4.1): every broker acts on the store itself, so any
               # broker can take the admin requests clients send to "the controller".
               services.cluster_id, services.broker_id, len(topics))
    with_operations = getattr(request.body, "include_topic_authorized_operations", False)
    for error, name, topic_id in topics:
        await slices.pause()
        operations = OPERATIONS_NOT_REQUESTED
        if with_operations and name is not None and error != ErrorCode.topic_authorization_failed:
            operations = authorized_operations(services, request, ResourceType.TOPIC, name)
        body.topic(error, name, topic_id, name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC),
                   partition_entries(services, name, request.listener, unavailable) if error == ErrorCode.none else [],
                   operations)
    return body.finish(cluster_operations(services, request))


def _may_describe(services, request: Request, name: str, audit: bool) -> bool:
    return authorized(services, request, AclOperation.DESCRIBE, ResourceType.TOPIC, name, audit=audit)


def _may_create(services, request: Request, name: str) -> bool:
    """Whether a client may have a missing topic made by asking for it, as Kafka decides it:
    Create on the cluster, or on the topic."""
    if services.authorizer is None or not services.config["auto.create.topics.enable"]:
        return True
    return (authorized_on_cluster(services, request, AclOperation.CREATE, audit=False)
            or authorized(services, request, AclOperation.CREATE, ResourceType.TOPIC, name))


def cluster_operations(services, request: Request) -> int:
    """The cluster_authorized_operations of a Metadata (v8 to v10) or DescribeCluster answer:
    Kafka's "not requested" unless asked; 0 to a client that may not Describe the cluster."""
    if not getattr(request.body, "include_cluster_authorized_operations", False):
        return OPERATIONS_NOT_REQUESTED
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE):
        return 0
    return authorized_operations(services, request, ResourceType.CLUSTER, CLUSTER_NAME)
