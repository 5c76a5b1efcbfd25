"""Every coordination path replog uses, and the typed values stored at them.

The layout is the classic replication design's (docs/design.md §2.2), kept so an operator can read it with
`zkCli` or `etcdctl`; the store's chroot (ZooKeeper) or key prefix (etcd) puts it under one
configurable root:

    /brokers/ids/[broker_id]                            BrokerRegistration   (ephemeral)
    /brokers/topics/[topic]                             TopicId              (empty if made before ids)
    /brokers/topics/[topic]/[partition]/replicas        ReplicaAssignment    (first = preferred)
    /brokers/topics/[topic]/[partition]/leader          LeaderRecord         (ephemeral)
    /brokers/topics/[topic]/[partition]/ISR             IsrRecord
    /brokers/topics/[topic]/[partition]/leader_epoch    EpochCounter         (only grows)
    /brokers/partitions_reassigned/[topic]/[partition]  PartitionReassignment (removed when done)
    /brokers/state/[broker_id]/[seq]                    StateChangeRequest   (persistent queue)
    /config/topics/[topic]                              TopicConfig
    /config/brokers/[broker_id or <default>]            DynamicBrokerConfig
    /config/users/[user, URL-encoded]                   UserConfig           (SCRAM credentials, quotas)
    /config/users/[user]/clients/[client id, encoded]   ClientConfig         (a user's client's quotas)
    /config/clients/[client id, URL-encoded]            ClientConfig         (quotas)
    /config/changes/config_change_[seq]                 ConfigChange         (an entity's configs changed)
    /kafka-acl/[resource type]/[name, URL-encoded]      AclEntries           (LITERAL bindings)
    /kafka-acl-extended/prefixed/[type]/[name, encoded] AclEntries           (PREFIXED bindings)
    /kafka-acl-extended-changes/acl_changes_[seq]       AclChange            (a resource's ACLs changed)
    /admin/topic_changes/[topic]                        TopicChangeInProgress (ephemeral)
    /admin/delete_topics/[topic]                        TopicDeletion        (removed with the topic)
    /cluster/id                                         ClusterId
    /latest_producer_id_block                           ProducerIdBlock      (Kafka's own path)

Encoding: every value is one JSON object, UTF-8, compact, keys sorted, with an integer
"version" field naming its format (currently 1 for all). Field names are the dataclass field
names below; tuples are JSON arrays. A reader rejects a format version it does not know with
InvalidNodeValue, naming the type and the version, rather than guessing.

Nothing outside this module spells a path.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
import urllib.parse
import uuid
from typing import ClassVar, Self

from .base import StoreError


class InvalidNodeValue(StoreError):
    """A node's bytes are not a value this version of replog can read."""


@dataclasses.dataclass(frozen=True)
class NodeValue:
    FORMAT_VERSION: ClassVar[int] = 1

    def encode(self) -> bytes:
        body = {"version": self.FORMAT_VERSION, **dataclasses.asdict(self)}
        return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        name = cls.__name__
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise InvalidNodeValue(f"{name}: not JSON ({error})") from None
        if not isinstance(body, dict):
            raise InvalidNodeValue(f"{name}: expected a JSON object, got {type(body).__name__}")
        version = body.pop("version", None)
        if version != cls.FORMAT_VERSION:
            raise InvalidNodeValue(f"{name}: format version {version!r} is not {cls.FORMAT_VERSION}")
        tuple_fields = _tuple_fields(cls)
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in body:
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    raise InvalidNodeValue(f"{name}: missing field {field.name!r}")
                continue
            value = body[field.name]
            values[field.name] = tuple(value) if field.name in tuple_fields and isinstance(value, list) else value
        try:
            return cls(**values)
        except (TypeError, ValueError) as error:
            raise InvalidNodeValue(f"{name}: {error}") from None


@functools.cache
def _tuple_fields(cls: type) -> frozenset[str]:
    """The fields of `cls` typed as tuples (JSON gives lists). Cached: resolving type hints
    costs more than decoding a node, and every leader, ISR and broker node is decoded often."""
    hints = typing.get_type_hints(cls)
    return frozenset(field.name for field in dataclasses.fields(cls) if _is_tuple_type(hints[field.name]))


def _is_tuple_type(hint: object) -> bool:
    return typing.get_origin(hint) is tuple or hint is tuple or (
        isinstance(hint, types.UnionType) and any(_is_tuple_type(arg) for arg in typing.get_args(hint))
    )


@dataclasses.dataclass(frozen=True)
class BrokerRegistration(NodeValue):
    """`host`/`port`: the inter-broker listener's advertised address, what brokers connect to.
    `endpoints`: every advertised listener, NAME://host:port, and
    `listener_security_protocol_map` each name's protocol, as Kafka's ZooKeeper registration
    has them: a client is answered with the addresses of the listener it came in on. Written by a
    replog before named listeners, a registration has no endpoints: its host/port is the
    PLAINTEXT listener. `listeners`: every listener as bound, NAME://address:port, one for each
    address it bound (a wildcard, 0.0.0.0, as such): where clients beyond this host can reach it,
    which advertised addresses do not say (not in Kafka's registration; older ones have none)."""

    host: str
    port: int
    rack: str | None = None
    # Random, new each time the broker process starts: a leader tells a follower's fetches from
    # this life from those of an earlier one still in flight (net/leader_connections.fetch_from).
    life_id: str | None = None
    endpoints: tuple[str, ...] = ()
    listener_security_protocol_map: dict[str, str] | None = dataclasses.field(default=None, hash=False)
    listeners: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _endpoints(self.endpoints)  # ValueError for one that is not NAME://host:port

    def endpoint(self, listener: str) -> tuple[str, int] | None:
        """(host, port) of listener `listener` (its name, upper-case); None when this broker has
        none of that name. "" (a request that came in on no listener: a handler called
        directly): host/port."""
        if not listener or not self.endpoints:
            return (self.host, self.port) if listener in ("", "PLAINTEXT") else None
        return _endpoints(self.endpoints).get(listener)


@functools.lru_cache(maxsize=1024)
def _endpoints(endpoints: tuple[str, ...]) -> dict[str, tuple[str, int]]:
    """NAME://host:port entries by name. Cached: Metadata reads every broker's for every answer."""
    parsed = {}
    for endpoint in endpoints:  # bounded by the broker's listeners
        name, separator, address = endpoint.partition("://")
        host, colon, port = address.rpartition(":")
        if not (separator and colon and port.isdigit()):
            raise ValueError(f"endpoint {endpoint!r} is not NAME://host:port")
        parsed[name] = (host.removeprefix("[").removesuffix("]"), int(port))
    return parsed


@dataclasses.dataclass(frozen=True)
class ReplicaAssignment(NodeValue):
    replicas: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class PartitionReassignment(NodeValue):
    """What /brokers/partitions_reassigned holds: `replicas`, the target (RAR), for a partition
    being added (staged by the admin, replog/admin/topics.py) or moved (its leader carries the
    move out, replication/reassignment.py). A move also keeps the `original` replicas, which a
    cancellation moves back to, and, once its leader switched the assignment, the replicas it
    is `closing`; `throttle_bytes_per_s` bounds what its leader sends the replicas it adds
    (replica/throttle.py). Readable as a ReplicaAssignment: the extra fields are ignored there."""

    replicas: tuple[int, ...]
    original: tuple[int, ...] | None = None
    closing: tuple[int, ...] | None = None
    throttle_bytes_per_s: int | None = None


@dataclasses.dataclass(frozen=True)
class LeaderRecord(NodeValue):
    leader: int
    leader_epoch: int


@dataclasses.dataclass(frozen=True)
class IsrRecord(NodeValue):
    isr: tuple[int, ...]
    leader_epoch: int


@dataclasses.dataclass(frozen=True)
class EpochCounter(NodeValue):
    epoch: int


@dataclasses.dataclass(frozen=True)
class StateChangeRequest(NodeValue):
    """One request in a broker's state-change queue, for one or more partitions of a topic (an
    admin's, for every partition it creates or deletes there, as Kafka's LeaderAndIsr and
    StopReplica requests carry many). `from_broker` is the sending leader, or -1 for an admin
    command; `leader_epoch` is the sender's epoch, or -1 from an admin command. Written by an
    earlier replog, a request names one `partition`, read as a list of it."""

    KINDS: ClassVar[frozenset[str]] = frozenset({"start-replica", "close-replica"})

    kind: str
    topic: str
    partitions: tuple[int, ...]
    from_broker: int
    leader_epoch: int

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown state change {self.kind!r}")
        if not self.partitions:
            raise ValueError("a state change names no partition")

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError):
            return super().decode(raw)  # which names the problem
        if isinstance(body, dict) and "partition" in body and "partitions" not in body:
            body["partitions"] = [body.pop("partition")]
            raw = json.dumps(body).encode()
        return super().decode(raw)

    def of(self, partition: int) -> StateChangeRequest:
        """This request for one of its partitions."""
        return dataclasses.replace(self, partitions=(partition,))

    @property
    def partition(self) -> int:
        """The partition of a request for one (as `of` makes them); ValueError for several."""
        (partition,) = self.partitions
        return partition


@dataclasses.dataclass(frozen=True)
class TopicChangeInProgress(NodeValue):
    """Held (ephemeral) by the admin session creating a topic or adding partitions to it, while
    it waits for brokers to consume its start-replica requests: a second admin waits for it
    rather than mistaking the staged partitions for a failed attempt."""

    operation: str


@dataclasses.dataclass(frozen=True)
class TopicDeletion(NodeValue):
    """A topic marked for deletion (Kafka's /admin/delete_topics): the close-replica requests
    sent for it, by broker id (as text: a JSON key) to the request names in that broker's queue;
    None while they are being sent (the mark comes first, so that a broker consuming one finds
    the topic marked). The topic's nodes go once every one of them is consumed."""

    close_replicas: dict[str, list[str]] | None = None


@dataclasses.dataclass(frozen=True)
class TopicId(NodeValue):
    """Drawn when the topic is created, as Kafka's topic ids (KIP-516): a broker that finds a log
    of the name tagged with another id holds a log of an earlier topic of that name, deleted
    while the broker was not assigned it (and was away), never one of this topic."""

    topic_id: str
    # The topic's partitions are those numbered below this: the commit point of a creation or a
    # growth too big for one transaction (admin/topics.py). None on a topic written before it
    # existed: every partition node counts.
    partitions: int | None = None

    @classmethod
    def new(cls) -> Self:
        return cls(uuid.uuid4().hex, 0)

    def counts(self, partition: int) -> bool:
        return self.partitions is None or partition < self.partitions


@dataclasses.dataclass(frozen=True)
class TopicConfig(NodeValue):
    configs: dict[str, str]


@dataclasses.dataclass(frozen=True)
class DynamicBrokerConfig(NodeValue):
    """A broker's dynamic configs (IncrementalAlterConfigs on a BROKER resource), or with the
    name <default> the whole cluster's default, which a broker's own node overrides."""

    configs: dict[str, str]


@dataclasses.dataclass(frozen=True)
class UserConfig(NodeValue):
    """A user's configs, as Kafka keeps them in ZooKeeper: `config` maps a SCRAM mechanism's name
    to its credential (security/scram.py's written form), beside any other user config."""

    config: dict[str, str]

    def __repr__(self) -> str:  # salts and keys stay out of logs
        return f"UserConfig(config=<{len(self.config)} entries>)"


@dataclasses.dataclass(frozen=True)
class ClientConfig(NodeValue):
    """A client id's configs (its quotas), or a user's client's, as Kafka keeps them."""

    config: dict[str, str]


@dataclasses.dataclass(frozen=True)
class ConfigChange(NodeValue):
    """Tells every broker that one entity's configs changed: Kafka's notification, naming the
    entity's node below /config (users/alice, clients/app, users/alice/clients/<default>)."""

    FORMAT_VERSION: ClassVar[int] = 2  # Kafka's: version 2 carries entity_path

    entity_path: str


@dataclasses.dataclass(frozen=True)
class AclEntries(NodeValue):
    """The ACL entries of one resource pattern, as Kafka keeps them in ZooKeeper: each a dict of
    "principal" (User:alice), "host" (* for any), "operation" and "permissionType", by their
    names (security/acls.py: Read, ClusterAction, Allow, Deny)."""

    acls: tuple[dict[str, str], ...]


@dataclasses.dataclass(frozen=True)
class AclChange(NodeValue):
    """Tells every broker that one resource pattern's ACLs changed: its type and pattern type by
    name (Topic, PREFIXED) and its name, whose node a broker reads again."""

    resource_type: str
    pattern_type: str
    name: str


@dataclasses.dataclass(frozen=True)
class ClusterId(NodeValue):
    cluster_id: str


@dataclasses.dataclass(frozen=True)
class ProducerIdBlock(NodeValue):
    """The last block of producer ids handed out: [block_start, block_end], to `broker`."""

    broker: int
    block_start: int
    block_end: int


# paths
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
PARTITIONS_REASSIGNED = "/brokers/partitions_reassigned"
STATE_QUEUES = "/brokers/state"
TOPIC_CONFIGS = "/config/topics"
BROKER_CONFIGS = "/config/brokers"
DEFAULT_BROKER_CONFIG = "<default>"  # Kafka's name of the cluster-wide default's node
USER_CONFIGS = "/config/users"
CLIENT_CONFIGS = "/config/clients"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = f"{CONFIG_CHANGES}/config_change_"
DEFAULT_ENTITY = "<default>"  # Kafka's name of the default user's or client id's node, never encoded
TOPIC_CHANGES = "/admin/topic_changes"
LITERAL_ACLS = "/kafka-acl"
PREFIXED_ACLS = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = f"{ACL_CHANGES}/acl_changes_"
TOPIC_DELETIONS = "/admin/delete_topics"
CLUSTER_ID = "/cluster/id"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"


def broker(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic(name: str) -> str:
    return f"{TOPICS}/{name}"


def partition(topic_name: str, partition_id: int) -> str:
    return f"{TOPICS}/{topic_name}/{int(partition_id)}"


def replicas(topic_name: str, partition_id: int) -> str:
    return f"{partition(topic_name, partition_id)}/replicas"


def leader(topic_name: str, partition_id: int) -> str:
    return f"{partition(topic_name, partition_id)}/leader"


def isr(topic_name: str, partition_id: int) -> str:
    return f"{partition(topic_name, partition_id)}/ISR"


def leader_epoch(topic_name: str, partition_id: int) -> str:
    return f"{partition(topic_name, partition_id)}/leader_epoch"


def reassigned_topic(topic_name: str) -> str:
    return f"{PARTITIONS_REASSIGNED}/{topic_name}"


def reassigned_partition(topic_name: str, partition_id: int) -> str:
    return f"{PARTITIONS_REASSIGNED}/{topic_name}/{int(partition_id)}"


def state_queue(broker_id: int) -> str:
    return f"{STATE_QUEUES}/{int(broker_id)}"


def state_change_prefix(broker_id: int) -> str:
    """Pass to a sequential create: requests are named by their sequence number alone."""
    return f"{state_queue(broker_id)}/"


def topic_config(name: str) -> str:
    return f"{TOPIC_CONFIGS}/{name}"


def broker_config(broker_id: int | None) -> str:
    """A broker's dynamic configs; None: the cluster-wide default."""
    return f"{BROKER_CONFIGS}/{DEFAULT_BROKER_CONFIG if broker_id is None else int(broker_id)}"


def user_config(user: str) -> str:
    """A user's config node, named as Kafka's Sanitizer names it: URL-encoded (a space as %20,
    `*` as %2A) so that any user name is one path segment; "." and ".." fully encoded, which
    no store takes as a name."""
    return f"{USER_CONFIGS}/{sanitized(user)}"


def quota_entity_path(user: str | None, client_id: str | None) -> str:
    """A quota entity's node below /config, as a ConfigChange names it: users/<user>,
    clients/<client id> or users/<user>/clients/<client id> (None: the entity has no such part;
    DEFAULT_ENTITY: the default's node)."""
    parts = ([] if user is None else ["users", _entity_segment(user)]) + (
        [] if client_id is None else ["clients", _entity_segment(client_id)])
    return "/".join(parts)


def quota_entity_config(user: str | None, client_id: str | None) -> str:
    return f"/config/{quota_entity_path(user, client_id)}"


def user_clients(user: str) -> str:
    """The parent of a user's client ids' nodes."""
    return f"/config/users/{_entity_segment(user)}/clients"


def quota_entity_of(entity_path: str) -> tuple[str | None, str | None]:
    """(user, client id) of a quota_entity_path; ValueError for anything else."""
    parts = entity_path.split("/")
    if len(parts) == 2 and parts[0] in ("users", "clients") and parts[1]:
        name = unsanitized(parts[1])
        return (name, None) if parts[0] == "users" else (None, name)
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients" and parts[1] and parts[3]:
        return unsanitized(parts[1]), unsanitized(parts[3])
    raise ValueError(f"not a quota entity: {entity_path!r}")


def _entity_segment(name: str) -> str:
    return name if name == DEFAULT_ENTITY else sanitized(name)


def sanitized(name: str) -> str:
    """A user, client id or resource name as one path segment (see user_config)."""
    encoded = urllib.parse.quote(name, safe="").replace("~", "%7E")
    return encoded.replace(".", "%2E") if encoded in (".", "..") else encoded


def unsanitized(child: str) -> str:
    """The name a `sanitized` path segment stands for."""
    return urllib.parse.unquote(child)


def acl_resources(resource_type: str, prefixed: bool) -> str:
    """The parent of one resource type's ACL nodes (by Kafka's name: Topic, Group, Cluster,
    TransactionalId), literal or prefixed."""
    return f"{PREFIXED_ACLS if prefixed else LITERAL_ACLS}/{resource_type}"


def acl_resource(resource_type: str, prefixed: bool, name: str) -> str:
    """One resource pattern's ACL node; its name encoded as a user's (any name is one segment)."""
    return f"{acl_resources(resource_type, prefixed)}/{sanitized(name)}"


def topic_change(name: str) -> str:
    return f"{TOPIC_CHANGES}/{name}"


def topic_deletion(name: str) -> str:
    return f"{TOPIC_DELETIONS}/{name}"
