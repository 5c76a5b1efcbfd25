"""What every admin command asks of the cluster, behind one interface (Admin), with two
implementations:

- StoreAdmin (store_admin.py), `--coord URL`: replog.admin's functions acting on the
  coordination store, as `kafka-topics --zookeeper` did; works while every broker is down.
- KafkaAdmin (kafka_admin.py), `--bootstrap-server HOST:PORT`: Kafka admin requests to a
  broker through confluent-kafka's AdminClient; replog's brokers answer them with those same
  functions. The only way to the embedded store, and the one Kafka's own tools use.

The checks that need no cluster (topic names, an explicit assignment's shape) run here, before
either is used, so both refuse bad input with the same words. Every failure is an AdminError: a
Kafka error code and one line naming the topic; AdminUnreachable when the store or the brokers
do not answer. What an Admin cannot tell (KafkaAdmin has no leader epoch and no reassignment in
its Metadata answer) is None in the descriptions. Log sizes and offsets live in the brokers:
both ask the running brokers for them (replica_logs.py).

confluent-kafka has no call for AlterPartitionReassignments, ListPartitionReassignments,
DescribeLogDirs, UnregisterBroker or a broker's rack, so both send those with replog's own
client (net/client.py).

An Admin is an async context manager: `async with open_admin(coord_url, bootstrap, coord_config,
properties) as admin: ...` (admin_client.py). `properties` (`--command-config FILE`) say how every
connection to a broker is made, whichever door the command came through.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from replog.admin import AdminError, TopicAlreadyExists, UnknownTopicOrPartition
from replog.admin import cluster
from replog.admin.acls import DeletedBindings
from replog.admin.assignment import BrokerRack
from replog.admin.planner import Plan
from replog.admin.errors import error_for_code
from replog.admin.reassignment import PartitionKey, ReassignmentStatus
from replog.admin.client_quotas import EntityNames, QuotaFilter
from replog.admin.scram_credentials import (
    UserScramCredentials,
    description_refusal,
    iterations_refusal,
    user_and_mechanism_refusal,
)
from replog.security.scram import MECHANISMS_BY_NAME, ScramMechanism
from replog.admin.topic_configs import ConfigOperation, ConfigSource
from replog.admin.topics import PartitionDescription, check_given_assignment, validate_topic_name
from replog.net.client import BrokerConnection
from replog.net.client_properties import ClientProperties
from replog.security.acls import AclBinding, AclBindingFilter

from . import replica_logs, state_change_reader, transaction_requests
from .group_admin import ConsumerGroups
from .replica_logs import ReplicaKey, ReplicaLog
from .topic_status import TopicStatus

# A broker answering CreateTopics or DeleteTopics first waits, up to the operation timeout, for
# every replica broker to consume its state-change requests; the request outlives that wait.
OPERATION_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 45.0
# A broker answering ElectLeaders waits up to this long for the new leaders.
ELECTION_TIMEOUT_S = 30.0


class AdminChoiceError(ValueError):
    """Not exactly one of --coord and --bootstrap-server given, or one that cannot work: a
    usage error."""


class AdminUnreachable(AdminError):
    """Neither the store nor a broker answered: Kafka's UNKNOWN_SERVER_ERROR, since no server
    said anything."""

    def __init__(self, message: str):
        super().__init__(ErrorCode.unknown_server_error, message)


@dataclasses.dataclass(frozen=True)
class NewTopic:
    """A topic to create: a partition count and replication factor (None: the brokers' defaults,
    num.partitions and default.replication.factor), or an explicit replica assignment."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


class Admin(abc.ABC):
    where: str  # the store URL or the bootstrap servers, as the operator gave them

    def __init__(self, properties: ClientProperties) -> None:
        # How every connection to a broker is made (--command-config); its TLS files read once.
        self.properties = properties
        self._security = properties.client_security()
        # Replog's own client, for what neither the store nor confluent-kafka's AdminClient answers.
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    async def __aenter__(self) -> Admin:
        await self._open()
        return self

    async def __aexit__(self, *exc_info) -> None:
        try:
            await self._close()
        finally:
            for connection in self._connections.values():
                connection.close()

    async def create_topic(self, topic: NewTopic, *, if_not_exists: bool = False) -> bool:
        """Create the topic; False if it existed and `if_not_exists` allows that."""
        validate_topic_name(topic.name)
        if topic.replica_assignment is not None:
            topic = dataclasses.replace(topic, replica_assignment=check_given_assignment(
                topic.name, topic.replica_assignment, topic.partitions, topic.replication_factor))
        try:
            await self._create_topic(topic)
        except TopicAlreadyExists as error:
            # A topic marked for deletion refuses its name too, but is gone; replog and Kafka say
            # so in the message. Not a listing: a broker's metadata may not show a new topic yet.
            if if_not_exists and "marked for deletion" not in error.message:
                return False
            raise
        return True

    async def delete_topic(self, name: str, *, if_exists: bool = False) -> bool:
        """Delete the topic; False if there was none and `if_exists` allows that."""
        validate_topic_name(name)
        try:
            await self._delete_topic(name)
        except UnknownTopicOrPartition:
            if if_exists:
                return False
            raise
        return True

    async def describe_topics(self, names: Sequence[str] = ()) -> list[TopicStatus]:
        """The named topics, by name; every topic when none is named."""
        for name in names:
            validate_topic_name(name)
        return sorted(await self._describe_topics(names), key=lambda status: status.name)

    async def alter_topic(self, name: str, *, partitions: int | None = None,
                          operations: Sequence[ConfigOperation] = ()) -> None:
        """Grow the topic to `partitions` and apply the config operations. The operations are
        validated first, so that bad ones leave the partitions as they were too."""
        validate_topic_name(name)
        if operations:
            await self._alter_topic_config(name, operations, validate_only=True)
        if partitions is not None:
            await self._create_partitions(name, partitions)
        if operations:
            await self._alter_topic_config(name, operations, validate_only=False)

    @abc.abstractmethod
    async def list_topics(self) -> list[str]:
        """Every topic but those marked for deletion, by name."""

    @abc.abstractmethod
    async def registered_brokers(self) -> list[BrokerRack]:
        """(id, rack) of each running broker, by id."""

    @abc.abstractmethod
    async def alter_reassignments(self, targets: Mapping[PartitionKey, Sequence[int] | None], *,
                                  throttle_bytes_per_s: int | None = None) -> dict[PartitionKey, AdminError | None]:
        """Start, change or cancel (None) each partition's move, the moves' replication
        throttled if asked; per partition, the refusal or None."""

    @abc.abstractmethod
    async def list_reassignments(self, partitions: Collection[PartitionKey] | None = None) -> list[ReassignmentStatus]:
        """The moves in flight, of the given partitions or of all."""

    async def replica_logs(self, wanted: Mapping[int, Collection[PartitionKey] | None], *,
                           with_end_offsets: bool = True) -> dict[ReplicaKey, ReplicaLog]:
        """The logs of the replicas each broker of `wanted` hosts among its partitions (None: all),
        asked of the brokers themselves (replica_logs.py); those of brokers down are left out."""
        addresses = await self._broker_addresses()

        async def connect(broker: int) -> BrokerConnection | None:
            address = addresses.get(broker)
            return None if address is None else await self._connection(address)

        return await replica_logs.replica_logs(connect, wanted, with_end_offsets=with_end_offsets)

    async def partition_sizes(self) -> dict[PartitionKey, int]:
        """Each partition's size on disk, as its running brokers tell: what a plan weighs."""
        hosting = dict.fromkeys(await self._broker_addresses())
        return replica_logs.partition_sizes(await self.replica_logs(hosting, with_end_offsets=False))

    @abc.abstractmethod
    async def remove_throttle_rates(self) -> bool:
        """Delete the brokers' configured throttle rates (broker_configs.remove_throttle_rates);
        whether there was one."""

    @abc.abstractmethod
    async def _broker_addresses(self) -> dict[int, tuple[str, int]]:
        """(host, port) of each running broker, by id."""

    @abc.abstractmethod
    async def group_admin(self) -> ConsumerGroups:
        """Consumer groups live in the brokers (their coordinators, __consumer_offsets): the
        group requests, sent to them."""

    async def transactions(self) -> transaction_requests.Transactions:
        """Transactions live in the brokers (their coordinators, the partitions' leaders): the
        transaction requests, sent to them."""
        return transaction_requests.Transactions(await self._broker_addresses(), self._connection)

    async def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            connection = await BrokerConnection.open(*address, request_timeout_s=REQUEST_TIMEOUT_S, security=self._security)
            self._connections[address] = connection
        return connection

    @abc.abstractmethod
    async def _open(self) -> None: ...

    @abc.abstractmethod
    async def _close(self) -> None: ...

    @abc.abstractmethod
    async def _create_topic(self, topic: NewTopic) -> None: ...

    @abc.abstractmethod
    async def _delete_topic(self, name: str) -> None: ...

    @abc.abstractmethod
    async def _describe_topics(self, names: Sequence[str]) -> list[TopicStatus]: ...

    @abc.abstractmethod
    async def _create_partitions(self, name: str, total: int) -> None: ...

    @abc.abstractmethod
    async def _alter_topic_config(self, name: str, operations: Sequence[ConfigOperation], *, validate_only: bool) -> None: ...

    # -- the cluster: `replog cluster` ------------------------------------------------------------

    @abc.abstractmethod
    async def cluster_status(self) -> cluster.ClusterStatus: ...

    async def elect_leaders(self, election_type: cluster.ElectionType, topic: str | None = None,
                            partition: int | None = None) -> list[cluster.ElectionResult]:
        """Elect the leaders of the partition, of the topic's partitions, or of every partition."""
        if topic is not None:
            validate_topic_name(topic)
        return await self.elect_partitions(election_type, await self._election_partitions(topic, partition))

    @abc.abstractmethod
    async def _election_partitions(self, topic: str | None, partition: int | None) -> list[PartitionKey] | None:
        """The partitions an election names: one, a topic's, or every one (None)."""

    @abc.abstractmethod
    async def elect_partitions(self, election_type: cluster.ElectionType,
                               partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]:
        """Elect the leaders of the partitions (None: of every partition)."""

    # -- adding and removing brokers (membership.py runs the steps) -------------------------------

    @abc.abstractmethod
    async def plan_membership(self, *, add: Collection[int] = (), remove: Collection[int] = ()) -> Plan:
        """cluster.decide_membership over what this Admin reads."""

    @abc.abstractmethod
    async def finish_removal(self, brokers: Collection[int]) -> cluster.Removal:
        """cluster.finish_removal: the brokers' state-change paths go, once nothing is on them."""

    # -- the state-change lifecycle: `replog cluster state-changes` -------------------------------

    async def state_changes(self, cursors: Mapping[int, state_change_reader.RingCursor], topic: str | None = None,
                            partition: int | None = None, *, topic_must_exist: bool = True) -> state_change_reader.Snapshot:
        """The events of every broker's ring after its cursor (none given: all it holds) and the
        requests waiting in the queues, of the topic and partition (None: all). With
        `topic_must_exist`, a topic named must exist or have some state change to show (a
        follower of the events may wait for a topic to be created)."""
        if topic is not None:
            validate_topic_name(topic)
        addresses = await self._broker_addresses()
        brokers = {broker: broker in addresses for broker in await self._cluster_brokers() | set(addresses)}

        async def connect(broker: int) -> BrokerConnection:
            return await self._connection(addresses[broker])

        reads, unreachable = await state_change_reader.read_rings(connect, brokers, cursors, topic, partition)
        snapshot = state_change_reader.Snapshot(reads, unreachable, await self._queued_state_changes(topic, partition))
        if (topic_must_exist and topic is not None and not snapshot.events and not snapshot.queued
                and topic not in await self.list_topics()):
            raise UnknownTopicOrPartition(f"topic {topic!r} does not exist, and no broker recorded a state change of it")
        return snapshot

    @abc.abstractmethod
    async def _cluster_brokers(self) -> set[int]:
        """The brokers of the cluster, running or not."""

    @abc.abstractmethod
    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_reader.Queued]:
        """The requests of the topic and partition (None: all) waiting in the brokers' queues."""

    # -- ACLs: `replog acls` (admin/acls.py's results, through either door) -----------------------

    @abc.abstractmethod
    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AdminError | None]:
        """Add the bindings; per binding, its refusal or None."""

    @abc.abstractmethod
    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """The bindings the filter selects, sorted."""

    @abc.abstractmethod
    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[DeletedBindings | AdminError]:
        """Remove what the filters select; per filter, its refusal or the bindings it removed."""

    # -- users' SCRAM credentials: `replog users` ------------------------------------------------

    async def create_user(self, user: str, mechanism: str, iterations: int, password: str) -> None:
        """Set the user's credential of the mechanism (a name), replacing one it had. Only the
        salted password leaves this process, as Kafka's protocol has it."""
        scram = MECHANISMS_BY_NAME[mechanism]
        _raise_for(user, user_and_mechanism_refusal(user, scram.type) or iterations_refusal(iterations))
        _raise_for(user, await self._upsert_scram_credential(user, scram, iterations, password))

    async def delete_user(self, user: str, mechanisms: Sequence[str] = ()) -> list[str]:
        """Delete the user's credentials of the mechanisms (none named: every one it has); the
        mechanisms deleted."""
        if not mechanisms:
            [described] = await self.describe_users([user])
            mechanisms = [name for name, _ in described.credentials]
        for mechanism in mechanisms:
            _raise_for(user, user_and_mechanism_refusal(user, MECHANISMS_BY_NAME[mechanism].type))
        _raise_for(user, await self._delete_scram_credentials(user, [MECHANISMS_BY_NAME[mechanism] for mechanism in mechanisms]))
        return list(mechanisms)

    async def describe_users(self, names: Sequence[str] = ()) -> list[UserScramCredentials]:
        """The named users' credentials (each once), or every user's that has one, by name; a
        named user without any is RESOURCE_NOT_FOUND."""
        names = list(dict.fromkeys(names))
        if "" in names:
            raise description_refusal(ErrorCode.resource_not_found, "")
        described = await self._describe_users(names)
        failed = next((entry.error for entry in described if entry.error is not None), None)
        if failed is not None:
            raise error_for_code(failed.code, failed.message)
        return described

    @abc.abstractmethod
    async def _upsert_scram_credential(self, user: str, mechanism: ScramMechanism, iterations: int,
                                       password: str) -> AdminError | None:
        """The change made, or the refusal in Kafka's words."""

    @abc.abstractmethod
    async def _delete_scram_credentials(self, user: str, mechanisms: Sequence[ScramMechanism]) -> AdminError | None:
        """The credentials deleted, or the refusal in Kafka's words."""

    @abc.abstractmethod
    async def _describe_users(self, names: Sequence[str]) -> list[UserScramCredentials]:
        """Each named user's credentials or refusal, in order (none named: every user's, by name)."""


    # -- client quotas: `replog quotas` --------------------------------------------------------

    async def alter_client_quotas(self, entity: EntityNames, ops: Sequence[tuple[str, float | None]]) -> None:
        """Set (a value) or remove (None) the entity's quotas, all or none of them."""
        error = await self._alter_client_quotas(entity, tuple(ops))
        if error is not None:
            raise error_for_code(error.code, error.message)

    @abc.abstractmethod
    async def _alter_client_quotas(self, entity: EntityNames, ops: tuple[tuple[str, float | None], ...]) -> AdminError | None:
        """The change made, or the refusal in Kafka's words."""

    @abc.abstractmethod
    async def describe_client_quotas(self, quota_filter: QuotaFilter) -> list[tuple[EntityNames, dict[str, float]]]:
        """Each entity with quotas that the filter selects, with its quotas."""


def _raise_for(user: str, error: AdminError | None) -> None:
    """A refusal of a change to the user's credentials, the user named: Kafka's words do not."""
    if error is not None:
        raise error_for_code(error.code, f"user {user!r}: {error.message}")


def topic_status(name: str, partitions: tuple[PartitionDescription, ...], entries: Mapping) -> TopicStatus:
    """From the topic's config entries by name (replog's ConfigEntry or confluent-kafka's: both
    have name, value and a Kafka config source)."""
    overrides = {entry.name: entry.value for entry in entries.values() if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
    return TopicStatus.of(name, partitions, overrides, int(entries["min.insync.replicas"].value))
