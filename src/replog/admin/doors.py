"""The two doors of every admin command, behind one interface (AdminDoor):

- StoreDoor, `--coord URL`: replog.admin's functions acting on the coordination store, as the
  seed's admin commands do (and `kafka-topics --zookeeper` did); works while every broker is
  down.
- KafkaDoor, `--bootstrap-server HOST:PORT`: Kafka admin requests to a broker through
  confluent-kafka's AdminClient; replog's brokers answer them with those same functions. The
  only door to the embedded store, and the one Kafka's own tools use.

The checks that need no cluster (topic names, an explicit assignment's shape) run here, before
either door is used, so both refuse bad input with the same words. Every failure is an
AdminError: a Kafka error code and one line naming the topic; Unreachable when the store or
the brokers do not answer. What a door cannot tell (the Kafka door has no leader epoch and no
reassignment in its Metadata answer) is None in the descriptions. Log sizes and offsets live
in the brokers: both doors ask the running brokers for them (replica_logs.py).

confluent-kafka has no call for AlterPartitionReassignments, ListPartitionReassignments,
DescribeLogDirs, UnregisterBroker or a broker's rack, so the doors send those with replog's own
client (net/client.py).

A move's throttle: the store door writes it into the move's node; AlterPartitionReassignments
carries none, so the Kafka door sets it as Kafka's tool does, as the dynamic broker config
leader.replication.throttled.rate (admin/broker_configs.py), which `reassign verify` removes
once nothing moves.

A door is an async context manager: `async with open_door(coord_url, bootstrap) as door: ...`.
"""

from __future__ import annotations

import abc
import asyncio
import dataclasses
import urllib.parse
from collections.abc import Callable, Collection, Mapping, Sequence

from kio.schema.errors import ErrorCode

from replog.config import DYNAMIC_BROKER_SETTINGS, LEADER_THROTTLE_RATE, load_broker_config
from replog.coord_backends import Store, StoreError, open_store
from replog.net.client import BrokerConnection, BrokerUnavailable
from replog.net.codec import ApiKey
from replog.net.replog_apis import ALL_PARTITIONS
from replog.replication.state_changes import queued_requests

from . import broker_configs, cluster, groups, state_change_paths
from .assignment import BrokerRack
from .errors import AdminError, TopicAlreadyExists, UnknownTopicOrPartition, error_for_code
from .planner import Plan
from .reassignment import PartitionKey, ReassignmentStatus, cluster_brokers
from .replica_logs import ReplicaKey, ReplicaLog
from .topic_status import TopicStatus
from . import reassignment, replica_logs, topic_configs, topics
from .topic_configs import AlterOp, ConfigOperation, ConfigSource
from .topics import (
    PartitionDescription,
    check_given_assignment,
    validate_topic_name,
)

COORD_ENV = "REPLOG_COORD"
BOOTSTRAP_ENV = "REPLOG_BOOTSTRAP_SERVER"
# A broker answering CreateTopics or DeleteTopics first waits, up to the operation timeout, for
# every replica broker to consume its state-change requests; the request outlives that wait.
OPERATION_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 45.0
# A broker answering ElectLeaders waits up to this long for the new leaders.
ELECTION_TIMEOUT_S = 30.0
MOVES_POLL_S = 0.5  # how often a wait for a plan's moves asks again
KAFKA_DEFAULT_PORT = 9092  # librdkafka's, for a bootstrap server given without one
RESOURCE_BROKER = 4  # Kafka's config resource type


class DoorChoiceError(ValueError):
    """Not exactly one door given, or a door that cannot work: a usage error."""


class Unreachable(AdminError):
    def __init__(self, message: str):
        super().__init__(ErrorCode.unknown_server_error, message)  # no server answered at all


@dataclasses.dataclass(frozen=True)
class NewTopic:
    """A topic to create: a partition count and replication factor (None: the brokers' defaults,
    num.partitions and default.replication.factor), or an explicit replica assignment."""

    name: str
    partitions: int | None = None
    replication_factor: int | None = None
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    replica_assignment: Mapping[int, Sequence[int]] | None = None


def open_door(coord_url: str | None, bootstrap: str | None) -> AdminDoor:
    """The door the operator chose; DoorChoiceError (or BadStoreUrl) if the choice is not one
    door that can work."""
    if coord_url and bootstrap:
        raise DoorChoiceError(
            f"both --coord and --bootstrap-server are given (as flags, or by {COORD_ENV} and {BOOTSTRAP_ENV}); give one"
        )
    if not coord_url and not bootstrap:
        raise DoorChoiceError(
            "give --coord URL to act on the coordination store (works while brokers are down) or --bootstrap-server"
            f" HOST:PORT to ask a broker, or set {COORD_ENV} or {BOOTSTRAP_ENV}"
        )
    if bootstrap:
        return KafkaDoor(bootstrap)
    parsed = urllib.parse.urlsplit(coord_url)
    if parsed.scheme == "memory" and not parsed.path.strip("/"):
        raise DoorChoiceError(
            f"--coord {coord_url}: the embedded store lives inside its broker's process; use --bootstrap-server"
            " HOST:PORT of that broker"
        )
    return StoreDoor(open_store(coord_url), coord_url)


class AdminDoor(abc.ABC):
    where: str  # the store URL or the bootstrap servers, as the operator gave them

    def __init__(self) -> None:
        # Replog's own client, for what neither the store nor confluent-kafka's AdminClient answers.
        self._connections: dict[tuple[str, int], BrokerConnection] = {}

    async def __aenter__(self) -> AdminDoor:
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
    async def group_admin(self) -> groups.ConsumerGroups:
        """Consumer groups live in the brokers (their coordinators, __consumer_offsets): the
        group requests, sent to them."""

    async def _connection(self, address: tuple[str, int]) -> BrokerConnection:
        connection = self._connections.get(address)
        if connection is None or connection.closed:
            connection = await BrokerConnection.open(*address, request_timeout_s=REQUEST_TIMEOUT_S)
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
        return await self._elect_leaders(election_type, await self._election_partitions(topic, partition))

    @abc.abstractmethod
    async def _election_partitions(self, topic: str | None, partition: int | None) -> list[PartitionKey] | None:
        """The partitions an election names: one, a topic's, or every one (None)."""

    @abc.abstractmethod
    async def _elect_leaders(self, election_type: cluster.ElectionType,
                             partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]: ...

    # -- adding and removing brokers: plan, execute, wait, lead, finish ---------------------------

    @abc.abstractmethod
    async def plan_membership(self, *, add: Collection[int] = (), remove: Collection[int] = ()) -> Plan:
        """cluster.decide_membership over what this door reads."""

    async def execute_plan(self, plan: Plan) -> None:
        """Start every move of the plan; the first refusal, if any, as an error (the others go on)."""
        cluster.raise_refusals(await self.alter_reassignments(cluster.plan_targets(plan)))

    async def wait_for_moves(self, plan: Plan, on_progress: Callable[[int, int], None]) -> None:
        """Until no move of the plan is in flight; `on_progress(done, total)` after each look. Not
        bounded: moves copy whole partitions, and go on in the cluster if the wait is abandoned."""
        keys = list(cluster.plan_targets(plan))
        while True:  # until every move has completed
            in_flight = len(await self.list_reassignments(keys))
            on_progress(len(keys) - in_flight, len(keys))
            if not in_flight:
                return
            await asyncio.sleep(MOVES_POLL_S)

    async def lead_as_planned(self, plan: Plan) -> list[cluster.ElectionResult]:
        """A preferred election of the moved partitions, once their moves completed: the plan
        balanced the preferred leaders, and leadership follows them now rather than at each
        leader's next leader.imbalance.check.interval (or never, with auto.leader.rebalance.enable
        off)."""
        return await self._elect_leaders(cluster.ElectionType.PREFERRED, list(cluster.plan_targets(plan)))

    @abc.abstractmethod
    async def finish_removal(self, brokers: Collection[int]) -> cluster.Removal:
        """cluster.finish_removal: the brokers' state-change paths go, once nothing is on them."""

    # -- the state-change lifecycle: `replog cluster state-changes` -------------------------------

    async def state_changes(self, cursors: Mapping[int, state_change_paths.RingCursor], topic: str | None = None,
                            partition: int | None = None, *, topic_must_exist: bool = True) -> state_change_paths.Snapshot:
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

        reads, unreachable = await state_change_paths.read_rings(connect, brokers, cursors, topic, partition)
        snapshot = state_change_paths.Snapshot(reads, unreachable, await self._queued_state_changes(topic, partition))
        if (topic_must_exist and topic is not None and not snapshot.events and not snapshot.queued
                and topic not in await self.list_topics()):
            raise UnknownTopicOrPartition(f"topic {topic!r} does not exist, and no broker recorded a state change of it")
        return snapshot

    @abc.abstractmethod
    async def _cluster_brokers(self) -> set[int]:
        """The brokers of the cluster, running or not."""

    @abc.abstractmethod
    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_paths.Queued]:
        """The requests of the topic and partition (None: all) waiting in the brokers' queues."""


class StoreDoor(AdminDoor):
    def __init__(self, store: Store, url: str):
        super().__init__()
        self.store = store
        self.where = url
        self._brokers: KafkaDoor | None = None  # the running brokers, for what only they know

    async def _open(self) -> None:
        try:
            await self.store.start()
        except StoreError as error:
            raise Unreachable(f"{self.where}: {error}") from None

    async def _close(self) -> None:
        try:
            if self._brokers is not None:
                await self._brokers.__aexit__(None, None, None)
        finally:
            await self.store.close()

    async def group_admin(self) -> groups.ConsumerGroups:
        if self._brokers is None:
            addresses = await self._broker_addresses()
            if not addresses:
                raise Unreachable(f"{self.where}: no broker is running, and consumer groups live in the brokers")
            self._brokers = await KafkaDoor(",".join(f"{host}:{port}" for host, port in sorted(addresses.values()))).__aenter__()
        return await self._brokers.group_admin()

    async def list_topics(self) -> list[str]:
        return sorted(await topics.list_topics(self.store))

    async def _create_topic(self, topic: NewTopic) -> None:
        partitions, replication_factor = topic.partitions, topic.replication_factor
        if topic.replica_assignment is None:
            # Away from any broker, its defaults are the registry's, as describe_topic_config's are.
            defaults = load_broker_config()
            partitions = partitions or defaults["num.partitions"]
            replication_factor = replication_factor or defaults["default.replication.factor"]
        await topics.create_topic(self.store, topic.name, partitions, replication_factor, topic.configs,
                           replica_assignment=topic.replica_assignment)

    async def _delete_topic(self, name: str) -> None:
        await topics.delete_topic(self.store, name)

    async def _describe_topics(self, names: Sequence[str]) -> list[TopicStatus]:
        described = []
        for name in names or await self.list_topics():
            try:
                description = await topics.describe_topic(self.store, name)
                entries = {entry.name: entry for entry in await topic_configs.describe_topic_config(self.store, name)}
            except UnknownTopicOrPartition:
                if names:
                    raise
                continue  # deleted since the listing
            described.append(_topic_status(name, description.partitions, entries))
        return described

    async def _create_partitions(self, name: str, total: int) -> None:
        await topics.create_partitions(self.store, name, total)

    async def registered_brokers(self) -> list[BrokerRack]:
        return await topics.live_brokers(self.store)

    async def alter_reassignments(self, targets: Mapping[PartitionKey, Sequence[int] | None], *,
                                  throttle_bytes_per_s: int | None = None) -> dict[PartitionKey, AdminError | None]:
        return await reassignment.alter_partition_reassignments(self.store, targets, throttle_bytes_per_s=throttle_bytes_per_s)

    async def list_reassignments(self, partitions: Collection[PartitionKey] | None = None) -> list[ReassignmentStatus]:
        return await reassignment.list_partition_reassignments(self.store, partitions)

    async def _broker_addresses(self) -> dict[int, tuple[str, int]]:
        return {broker: (registration.host, registration.port)
                for broker, registration in (await topics.registered_brokers(self.store)).items()}

    async def remove_throttle_rates(self) -> bool:
        return bool(await broker_configs.remove_throttle_rates(self.store))

    async def _alter_topic_config(self, name: str, operations: Sequence[ConfigOperation], *, validate_only: bool) -> None:
        await topic_configs.alter_topic_config(self.store, name, operations, validate_only=validate_only)

    # -- the cluster ----------------------------------------------------------------------------

    async def cluster_status(self) -> cluster.ClusterStatus:
        return await cluster.cluster_status(self.store)

    async def _election_partitions(self, topic: str | None, partition: int | None) -> list[PartitionKey] | None:
        return await cluster.election_partitions(self.store, topic, partition)

    async def _elect_leaders(self, election_type: cluster.ElectionType,
                             partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]:
        return await cluster.elect_leaders(self.store, election_type, partitions, ELECTION_TIMEOUT_S)

    async def plan_membership(self, *, add: Collection[int] = (), remove: Collection[int] = ()) -> Plan:
        return await cluster.plan_membership(self.store, add=add, remove=remove, size_bytes=await self.partition_sizes())

    async def finish_removal(self, brokers: Collection[int]) -> cluster.Removal:
        return await cluster.finish_removal(self.store, brokers)

    async def _cluster_brokers(self) -> set[int]:
        return await cluster_brokers(self.store)

    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_paths.Queued]:
        waiting = await queued_requests(self.store, await cluster_brokers(self.store))
        return state_change_paths.matching(waiting, topic, partition)


class KafkaDoor(AdminDoor):
    def __init__(self, bootstrap: str):
        super().__init__()
        self.where = bootstrap
        self._admin = None
        self._errors: list = []

    async def _open(self) -> None:
        from replog.tools.kafka_client import admin_client

        self._admin, self._errors = admin_client(self.where)
        await self._metadata()  # a broker answers, or the command ends here with one line

    async def _close(self) -> None:
        self._admin = None  # librdkafka closes its connections when the client is collected

    async def group_admin(self) -> groups.ConsumerGroups:
        return groups.ConsumerGroups(self._admin, self.where)

    async def _metadata(self):
        from replog.tools import ToolError
        from replog.tools.kafka_client import answered_metadata

        try:
            return await asyncio.to_thread(answered_metadata, self._admin, self._errors, self.where)
        except ToolError as error:
            raise Unreachable(str(error)) from None

    async def _outcome(self, future, topic: str):
        """The result of one of AdminClient's futures; a Kafka error as the AdminError it stands for."""
        from confluent_kafka import KafkaException

        try:
            return await asyncio.wrap_future(future)
        except KafkaException as exception:
            error = exception.args[0]
            message = error.str()
            if error.code() == UnknownTopicOrPartition.code:
                message = f"topic {topic!r} does not exist"  # librdkafka's DeleteTopics drops the broker's words
            elif repr(topic) not in message:  # librdkafka's text for a code ("Broker: ..."), not the broker's
                message = f"topic {topic!r}: {message}"
            raise error_for_code(error.code(), message) from None

    async def list_topics(self) -> list[str]:
        metadata = await self._metadata()
        return sorted(name for name, topic in metadata.topics.items() if topic.error is None or topic.partitions)

    async def _create_topic(self, topic: NewTopic) -> None:
        from confluent_kafka.admin import NewTopic as KafkaNewTopic

        if topic.replica_assignment is not None:
            assignment = topic.replica_assignment
            request = KafkaNewTopic(topic.name, len(assignment), config=dict(topic.configs),
                                    replica_assignment=[list(assignment[partition]) for partition in sorted(assignment)])
        else:
            request = KafkaNewTopic(topic.name, topic.partitions or -1, topic.replication_factor or -1,
                                    config=dict(topic.configs))
        futures = self._admin.create_topics([request], operation_timeout=OPERATION_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)
        await self._outcome(futures[topic.name], topic.name)

    async def _delete_topic(self, name: str) -> None:
        futures = self._admin.delete_topics([name], operation_timeout=OPERATION_TIMEOUT_S, request_timeout=REQUEST_TIMEOUT_S)
        await self._outcome(futures[name], name)

    async def _describe_topics(self, names: Sequence[str]) -> list[TopicStatus]:
        from confluent_kafka.admin import ConfigResource, ResourceType

        metadata = await self._metadata()
        listed = [name for name, topic in metadata.topics.items() if topic.error is None or topic.partitions]
        for name in names:
            if name not in listed:
                raise UnknownTopicOrPartition(f"topic {name!r} does not exist")
        live = set(metadata.brokers)
        resources = {name: ConfigResource(ResourceType.TOPIC, name) for name in names or listed}
        futures = self._admin.describe_configs(list(resources.values()), request_timeout=REQUEST_TIMEOUT_S) if resources else {}
        described = []
        for name, resource in resources.items():
            entries = await self._outcome(futures[resource], name)
            partitions = tuple(
                _described_partition(partition, live)
                for _, partition in sorted(metadata.topics[name].partitions.items())
            )
            described.append(_topic_status(name, partitions, entries))
        return described

    async def _create_partitions(self, name: str, total: int) -> None:
        from confluent_kafka.admin import NewPartitions

        futures = self._admin.create_partitions([NewPartitions(name, total)], operation_timeout=OPERATION_TIMEOUT_S,
                                                request_timeout=REQUEST_TIMEOUT_S)
        await self._outcome(futures[name], name)

    async def _alter_topic_config(self, name: str, operations: Sequence[ConfigOperation], *, validate_only: bool) -> None:
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        kinds = {AlterOp.SET: AlterConfigOpType.SET, AlterOp.DELETE: AlterConfigOpType.DELETE,
                 AlterOp.APPEND: AlterConfigOpType.APPEND, AlterOp.SUBTRACT: AlterConfigOpType.SUBTRACT}
        entries = [ConfigEntry(operation.name, operation.value, incremental_operation=kinds[operation.op])
                   for operation in operations]
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        futures = self._admin.incremental_alter_configs([resource], validate_only=validate_only, request_timeout=REQUEST_TIMEOUT_S)
        await self._outcome(futures[resource], name)

    async def registered_brokers(self) -> list[BrokerRack]:
        metadata = await self._ask_any(lambda connection: connection.metadata([]))
        return sorted((broker, address.rack) for broker, address in metadata.brokers.items())

    async def alter_reassignments(self, targets: Mapping[PartitionKey, Sequence[int] | None], *,
                                  throttle_bytes_per_s: int | None = None) -> dict[PartitionKey, AdminError | None]:
        if throttle_bytes_per_s is not None:
            # The cluster's default rather than the moving partitions' leaders, as Kafka's tool
            # does: a leader that changes during the move (a failover, or the leader moved off)
            # would lead it unthrottled. Set first, so that no move starts at full speed.
            await self._alter_broker_configs({"": {LEADER_THROTTLE_RATE: (AlterOp.SET, str(throttle_bytes_per_s))}})
        outcomes = {}
        for run in replica_logs.in_requests(targets):
            body = {"timeout": int(OPERATION_TIMEOUT_S * 1000), "topics": [
                {"name": topic, "partitions": [{"partition_index": index, "replicas": None if targets[topic, index] is None
                                                else list(targets[topic, index])} for index in indexes]}
                for topic, indexes in replica_logs.indexes_by_topic(run).items()]}
            answer = await self._ask_any(lambda connection: connection.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, None, body))
            _raise_for(answer, "AlterPartitionReassignments")
            outcomes.update({(topic.name, partition.partition_index): _partition_error(topic.name, partition)
                             for topic in answer.responses for partition in topic.partitions})
        return outcomes

    async def list_reassignments(self, partitions: Collection[PartitionKey] | None = None) -> list[ReassignmentStatus]:
        statuses = []
        for asked in [None] if partitions is None else [
                [{"name": topic, "partition_indexes": indexes} for topic, indexes in replica_logs.indexes_by_topic(run).items()]
                for run in replica_logs.in_requests(partitions)]:
            body = {"timeout": int(OPERATION_TIMEOUT_S * 1000), "topics": asked}
            answer = await self._ask_any(lambda connection: connection.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, None, body))
            _raise_for(answer, "ListPartitionReassignments")
            statuses += [ReassignmentStatus(topic.name, partition.partition_index, tuple(partition.replicas),
                                            tuple(partition.adding_replicas), tuple(partition.removing_replicas))
                         for topic in answer.topics for partition in topic.partitions]
        return sorted(statuses, key=lambda status: (status.topic, status.partition))

    async def _broker_addresses(self) -> dict[int, tuple[str, int]]:
        metadata = await self._ask_any(lambda connection: connection.metadata([]))
        return {broker: (address.host, address.port) for broker, address in metadata.brokers.items()}

    async def remove_throttle_rates(self) -> bool:
        # Every broker registered and the default; a rate left on a broker that is down goes
        # through --coord (its node in the store).
        names = ["", *(str(broker) for broker, _ in await self.registered_brokers())]
        body = {"resources": [{"resource_type": RESOURCE_BROKER, "resource_name": name,
                               "configuration_keys": list(DYNAMIC_BROKER_SETTINGS)} for name in names],
                "include_synonyms": False, "include_documentation": False}
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.DESCRIBE_CONFIGS, None, body))
        own_level = {"": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG}
        deletes = {}
        for result in answer.results:
            _raise_for_resource(result)
            level = own_level.get(result.resource_name, ConfigSource.DYNAMIC_BROKER_CONFIG)
            found = {entry.name: (AlterOp.DELETE, None) for entry in result.configs if entry.config_source == level}
            if found:
                deletes[result.resource_name] = found
        if deletes:
            await self._alter_broker_configs(deletes)
        return bool(deletes)

    async def _alter_broker_configs(self, changes: Mapping[str, Mapping[str, tuple[AlterOp, str | None]]]) -> None:
        """IncrementalAlterConfigs of BROKER resources: by resource name, (operation, value) by config."""
        body = {"validate_only": False, "resources": [
            {"resource_type": RESOURCE_BROKER, "resource_name": name, "configs": [
                {"name": config, "config_operation": op, "value": value} for config, (op, value) in configs.items()]}
            for name, configs in changes.items()]}
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, None, body))
        for response in answer.responses:
            _raise_for_resource(response)

    async def _ask_any(self, ask):
        """`await ask(connection)` on the first bootstrap server that answers it."""
        failure = None
        for address in _bootstrap_addresses(self.where):
            try:
                return await ask(await self._connection(address))
            except BrokerUnavailable as error:
                failure = error
        raise Unreachable(f"cannot reach a broker at {self.where}: {failure}")

    # -- the cluster ----------------------------------------------------------------------------

    async def cluster_status(self) -> cluster.ClusterStatus:
        from replog.coord_backends.paths import BrokerRegistration

        described = await self._cluster_outcome(self._admin.describe_cluster(request_timeout=REQUEST_TIMEOUT_S))
        metadata = await self._metadata()
        registered = {node.id: BrokerRegistration(node.host, node.port, node.rack) for node in described.nodes}
        partitions = [_described_partition(partition, set(registered))
                      for name, topic in sorted(metadata.topics.items()) if topic.error is None or topic.partitions
                      for _, partition in sorted(topic.partitions.items())]
        # Neither the state-change queues nor the moves in flight are in these answers.
        return cluster.summarize(described.cluster_id, registered, (), partitions, None, None)

    async def _election_partitions(self, topic: str | None, partition: int | None) -> list[PartitionKey] | None:
        if topic is None:
            return None
        metadata = await self._metadata()
        if topic not in metadata.topics or metadata.topics[topic].error is not None:
            raise UnknownTopicOrPartition(f"topic {topic!r} does not exist")
        return [(topic, index) for index in (sorted(metadata.topics[topic].partitions) if partition is None else [partition])]

    async def _elect_leaders(self, election_type: cluster.ElectionType,
                             partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]:
        from confluent_kafka import ElectionType as KafkaElectionType, TopicPartition

        asked = None if partitions is None else [TopicPartition(topic, index) for topic, index in sorted(partitions)]
        kind = KafkaElectionType.PREFERRED if election_type is cluster.ElectionType.PREFERRED else KafkaElectionType.UNCLEAN
        # No timeouts given: confluent-kafka 2.16's elect_leaders fails on any keyword argument
        # (a SystemError from its argument parsing); librdkafka's defaults, socket.timeout.ms,
        # bound the request and the broker's wait.
        outcomes = await self._cluster_outcome(self._admin.elect_leaders(kind, asked))
        leaders = {(name, index): (meta.leader if meta.leader >= 0 else None)
                   for name, described in (await self._metadata()).topics.items()
                   for index, meta in described.partitions.items()}
        results = []
        for key, error in sorted(outcomes.items(), key=lambda item: (item[0].topic, item[0].partition)):
            failure = None if error is None else error_for_code(error.code(), error.str())
            unclean = () if failure is None and election_type is cluster.ElectionType.UNCLEAN else None
            results.append(cluster.ElectionResult(key.topic, key.partition, failure, leaders.get((key.topic, key.partition)),
                                                  unclean))
        return results

    async def plan_membership(self, *, add: Collection[int] = (), remove: Collection[int] = ()) -> Plan:
        metadata = await self._ask_any(lambda connection: connection.metadata(None))
        current = {(name, index): found.replicas for name, topic in metadata.topics.items()
                   if topic.error_code == ErrorCode.none for index, found in topic.partitions.items()}
        return cluster.decide_membership(
            {broker: address.rack for broker, address in metadata.brokers.items()},
            await self._cluster_brokers(), current, len(await self.list_reassignments()),
            add=add, remove=remove, size_bytes=await self.partition_sizes())

    async def _cluster_brokers(self) -> set[int]:
        # Metadata names the registered brokers only; DescribeCluster v2 adds the fenced ones:
        # replog's brokers answer with the brokers the cluster knows that are down.
        described = await self._ask_any(lambda connection: connection.request(
            ApiKey.DESCRIBE_CLUSTER, None, {"include_cluster_authorized_operations": False, "include_fenced_brokers": True}))
        _raise_for(described, "DescribeCluster")
        return {broker.broker_id for broker in described.brokers}

    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_paths.Queued]:
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.STATE_CHANGE_EVENTS, None, {
            "topic": topic, "partition": ALL_PARTITIONS if partition is None else partition, "max_events": 0,
            "include_queued": True}))
        _raise_for(answer, "StateChangeEvents")
        return state_change_paths.queued_from_answer(answer)

    async def finish_removal(self, brokers: Collection[int]) -> cluster.Removal:
        # What the answer cannot say is left unknown rather than asked for another way: which
        # topic deletions completed (None in the Removal), since they complete in any case.
        deleted = []
        for broker in sorted(brokers):
            # The broker first waits its own state-change timeout (StateChangeLimits' default,
            # OPERATION_TIMEOUT_S) for a running removed broker to consume its queue: the
            # connection's REQUEST_TIMEOUT_S outlasts that wait.
            answer = await self._ask_any(lambda connection: connection.request(
                ApiKey.UNREGISTER_BROKER, None, {"broker_id": broker}))
            if answer.error_code == ErrorCode.broker_id_not_registered:
                continue  # no state-change path: removed already
            _raise_for(answer, "UnregisterBroker")
            deleted.append(broker)
        return cluster.Removal(tuple(sorted(brokers)), tuple(deleted), None)

    async def _cluster_outcome(self, future):
        from confluent_kafka import KafkaException

        try:
            return await asyncio.wrap_future(future)
        except KafkaException as exception:
            error = exception.args[0]
            raise error_for_code(error.code(), f"{self.where}: {error.str()}") from None


def _bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for server in filter(None, (entry.strip() for entry in bootstrap.split(","))):
        host, colon, port = server.rpartition(":")
        if not colon:
            host, port = server, str(KAFKA_DEFAULT_PORT)
        if not host or not port.isdigit():
            raise DoorChoiceError(f"--bootstrap-server {bootstrap}: {server!r} is not HOST:PORT")
        addresses.append((host, int(port)))
    return addresses


def _raise_for(answer, api: str) -> None:
    """The error a whole admin answer carries, as its AdminError."""
    if answer.error_code != ErrorCode.none:
        raise error_for_code(int(answer.error_code), answer.error_message or f"{api}: {answer.error_code.name}")


def _raise_for_resource(result) -> None:
    """The error of one broker resource in a config answer, as its AdminError."""
    if result.error_code != ErrorCode.none:
        raise error_for_code(int(result.error_code), result.error_message or
                             f"broker config {result.resource_name!r}: {result.error_code.name}")


def _partition_error(topic: str, partition) -> AdminError | None:
    if partition.error_code == ErrorCode.none:
        return None
    subject = f"{topic}-{partition.partition_index}"
    return error_for_code(int(partition.error_code), partition.error_message or f"{subject}: {partition.error_code.name}")


def _described_partition(partition, live: set[int]) -> PartitionDescription:
    """A Metadata answer's partition (confluent-kafka's PartitionMetadata): it names no leader
    epoch and no reassignment."""
    replicas = tuple(partition.replicas)
    return PartitionDescription(
        partition=partition.id,
        replicas=replicas,
        leader=partition.leader if partition.leader >= 0 else None,
        leader_epoch=None,
        isr=tuple(partition.isrs),
        offline_replicas=tuple(replica for replica in replicas if replica not in live),
        adding_replicas=None,
        removing_replicas=None,
    )


def _topic_status(name: str, partitions: tuple[PartitionDescription, ...], entries: Mapping) -> TopicStatus:
    """From the topic's config entries by name (replog's ConfigEntry or confluent-kafka's: both
    have name, value and a Kafka config source)."""
    overrides = {entry.name: entry.value for entry in entries.values() if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG}
    return TopicStatus.of(name, partitions, overrides, int(entries["min.insync.replicas"].value))
