"""KafkaAdmin: the admin commands through a broker (`--bootstrap-server HOST:PORT`), with
Kafka's admin requests, as Kafka's own tools send them. A move's throttle: AlterPartition-
Reassignments carries none, so it is set as Kafka's tool sets it, as the dynamic broker config
leader.replication.throttled.rate (admin/broker_configs.py), which `reassign verify` removes
once nothing moves."""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence

from confluent_kafka import ElectionType as KafkaElectionType
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, ResourceType
from confluent_kafka.admin import NewTopic as KafkaNewTopic
from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialDeletion, UserScramCredentialUpsertion
from confluent_kafka.admin import ScramMechanism as KafkaScramMechanism
from kio.schema.errors import ErrorCode

from replog.admin import AdminError, UnknownTopicOrPartition, cluster
from replog.admin.acls import DeletedBindings
from replog.admin.assignment import BrokerRack
from replog.admin.client_quotas import EntityNames, QuotaFilter
from replog.admin.errors import error_for_code
from replog.admin.planner import Plan
from replog.admin.reassignment import PartitionKey, ReassignmentStatus
from replog.admin.scram_credentials import UserScramCredentials, description_refusal
from replog.security.scram import MECHANISMS_BY_TYPE, ScramMechanism
from replog.admin.topic_configs import AlterOp, ConfigOperation, ConfigSource
from replog.admin.topics import PartitionDescription
from replog.config import DYNAMIC_BROKER_SETTINGS, LEADER_THROTTLE_RATE
from replog.coord_backends.paths import BrokerRegistration
from replog.net.client import BrokerUnavailable
from replog.net.client_properties import ClientProperties
from replog.net.codec import ApiKey
from replog.net.replog_apis import ALL_PARTITIONS
from replog.security.acls import AclBinding, AclBindingFilter
from replog.tools import ToolError
from replog.tools.kafka_client import NotAuthenticated, admin_client, answered_metadata

from . import acl_requests, replica_logs, state_change_reader
from .admin_interface import (
    OPERATION_TIMEOUT_S,
    REQUEST_TIMEOUT_S,
    Admin,
    AdminChoiceError,
    AdminUnreachable,
    NewTopic,
    topic_status,
)
from .group_admin import ConsumerGroups
from .kafka_errors import admin_error, outcome
from .topic_status import TopicStatus

KAFKA_DEFAULT_PORT = 9092  # librdkafka's, for a bootstrap server given without one
RESOURCE_BROKER = 4  # Kafka's config resource type


class KafkaAdmin(Admin):
    """The Admin of `--bootstrap-server HOST:PORT`: Kafka admin requests to the brokers, through
    confluent-kafka's AdminClient and, for what it has no call for, replog's own client."""

    def __init__(self, bootstrap: str, properties: ClientProperties):
        super().__init__(properties)
        self.where = bootstrap
        self._admin = None
        self._errors: list = []

    async def _open(self) -> None:
        self._admin, self._errors = admin_client(self.where, self.properties.librdkafka())
        await self._metadata()  # a broker answers, or the command ends here with one line

    async def _close(self) -> None:
        self._admin = None  # librdkafka closes its connections when the client is collected

    async def group_admin(self) -> ConsumerGroups:
        return ConsumerGroups(self._admin, self.where)

    async def _metadata(self):
        try:
            return await asyncio.to_thread(answered_metadata, self._admin, self._errors, self.where)
        except NotAuthenticated as error:
            raise error_for_code(ErrorCode.sasl_authentication_failed, str(error)) from None
        except ToolError as error:
            raise AdminUnreachable(str(error)) from None

    async def _outcome(self, future, topic: str):
        """The result of one of AdminClient's futures about the topic."""
        def said(error) -> str:
            if error.code() == ErrorCode.unknown_topic_or_partition:
                return f"topic {topic!r} does not exist"  # librdkafka's DeleteTopics drops the broker's words
            if repr(topic) not in error.str():  # librdkafka's text for a code ("Broker: ..."), not the broker's
                return f"topic {topic!r}: {error.str()}"
            return error.str()

        return await outcome(future, said)

    async def list_topics(self) -> list[str]:
        metadata = await self._metadata()
        return sorted(name for name, topic in metadata.topics.items() if topic.error is None or topic.partitions)

    async def _create_topic(self, topic: NewTopic) -> None:
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
            described.append(topic_status(name, partitions, entries))
        return described

    async def _create_partitions(self, name: str, total: int) -> None:
        futures = self._admin.create_partitions([NewPartitions(name, total)], operation_timeout=OPERATION_TIMEOUT_S,
                                                request_timeout=REQUEST_TIMEOUT_S)
        await self._outcome(futures[name], name)

    async def _alter_topic_config(self, name: str, operations: Sequence[ConfigOperation], *, validate_only: bool) -> None:
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
        raise AdminUnreachable(f"cannot reach a broker at {self.where}: {failure}")

    # -- the cluster ----------------------------------------------------------------------------

    async def cluster_status(self) -> cluster.ClusterStatus:
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

    async def elect_partitions(self, election_type: cluster.ElectionType,
                               partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]:
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
            failure = None if error is None else admin_error(error)
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

    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_reader.Queued]:
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.STATE_CHANGE_EVENTS, None, {
            "topic": topic, "partition": ALL_PARTITIONS if partition is None else partition, "max_events": 0,
            "include_queued": True}))
        _raise_for(answer, "StateChangeEvents")
        return state_change_reader.queued_from_answer(answer)

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
        return await outcome(future, lambda error: f"{self.where}: {error.str()}")

    # -- ACLs: replog's own client, whose answers keep Kafka's codes and words ---------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AdminError | None]:
        body = acl_requests.creations(bindings)
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.CREATE_ACLS, None, body))
        return acl_requests.created(answer)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        body = acl_requests.filter_fields(acl_filter)
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.DESCRIBE_ACLS, None, body))
        return acl_requests.described(answer)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[DeletedBindings | AdminError]:
        body = {"filters": [acl_requests.filter_fields(acl_filter) for acl_filter in filters]}
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.DELETE_ACLS, None, body))
        return acl_requests.deleted(answer)

    # -- users' SCRAM credentials: librdkafka salts the password ---------------------------------

    async def _alter_user(self, user: str, alterations: list) -> AdminError | None:
        """One request of the user's alterations: one result for all of them."""
        futures = self._admin.alter_user_scram_credentials(alterations, request_timeout=REQUEST_TIMEOUT_S)
        try:
            await outcome(futures[user], lambda error: error.str())
        except AdminError as error:
            return error
        return None

    async def _upsert_scram_credential(self, user: str, mechanism: ScramMechanism, iterations: int,
                                       password: str) -> AdminError | None:
        info = ScramCredentialInfo(KafkaScramMechanism(mechanism.type), iterations)
        return await self._alter_user(user, [UserScramCredentialUpsertion(user, info, password.encode())])

    async def _delete_scram_credentials(self, user: str, mechanisms: Sequence[ScramMechanism]) -> AdminError | None:
        return await self._alter_user(user, [UserScramCredentialDeletion(user, KafkaScramMechanism(mechanism.type))
                                             for mechanism in mechanisms])

    async def _describe_users(self, names: Sequence[str]) -> list[UserScramCredentials]:
        if not names:
            future = self._admin.describe_user_scram_credentials(request_timeout=REQUEST_TIMEOUT_S)
            described = await outcome(future, lambda error: error.str())
            return [_user_credentials(described[user]) for user in sorted(described)]
        futures = self._admin.describe_user_scram_credentials(list(names), request_timeout=REQUEST_TIMEOUT_S)
        results = []
        for user in names:
            try:
                results.append(_user_credentials(await outcome(futures[user], lambda error: error.str())))
            except AdminError as error:
                if error.code in (ErrorCode.resource_not_found, ErrorCode.duplicate_resource):
                    error = description_refusal(error.code, user)  # librdkafka's copy of the message runs on
                results.append(UserScramCredentials(user, error=error))
        return results

    # -- client quotas: confluent-kafka has no call for them -------------------------------------

    async def _alter_client_quotas(self, entity: EntityNames, ops: tuple[tuple[str, float | None], ...]) -> AdminError | None:
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.ALTER_CLIENT_QUOTAS, None, {
            "validate_only": False, "entries": [{
                "entity": [{"entity_type": entity_type, "entity_name": name} for entity_type, name in entity],
                "ops": [{"key": key, "value": 0.0 if value is None else value, "remove": value is None} for key, value in ops]}]}))
        [result] = answer.entries
        return None if result.error_code == ErrorCode.none else error_for_code(int(result.error_code), result.error_message or "")

    async def describe_client_quotas(self, quota_filter: QuotaFilter) -> list[tuple[EntityNames, dict[str, float]]]:
        answer = await self._ask_any(lambda connection: connection.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, None, {
            "strict": quota_filter.strict, "components": [
                {"entity_type": entity_type, "match_type": match_type, "match": match}
                for entity_type, match_type, match in quota_filter.components]}))
        _raise_for(answer, "DescribeClientQuotas")
        return [(tuple((part.entity_type, part.entity_name) for part in entry.entity),
                 {value.key: value.value for value in entry.values}) for entry in answer.entries]


def _bootstrap_addresses(bootstrap: str) -> list[tuple[str, int]]:
    addresses = []
    for server in filter(None, (entry.strip() for entry in bootstrap.split(","))):
        host, colon, port = server.rpartition(":")
        if not colon:
            host, port = server, str(KAFKA_DEFAULT_PORT)
        if not host or not port.isdigit():
            raise AdminChoiceError(f"--bootstrap-server {bootstrap}: {server!r} is not HOST:PORT")
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


def _user_credentials(description) -> UserScramCredentials:
    infos = sorted((info.mechanism.value, info.iterations) for info in description.scram_credential_infos)
    return UserScramCredentials(description.user, tuple((MECHANISMS_BY_TYPE[mechanism].name, iterations)
                                                        for mechanism, iterations in infos))
