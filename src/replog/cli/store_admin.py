"""StoreAdmin: the admin commands through the coordination store (`--coord URL`), as
`kafka-topics --zookeeper` did; works while every broker is down. A move's throttle goes into
the move's node in the store."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from replog.admin import (AdminError, UnknownTopicOrPartition, acls, broker_configs, client_quotas, cluster, reassignment,
                          topic_configs, topics)
from replog.admin.client_quotas import EntityNames, QuotaAlteration, QuotaFilter
from replog.admin.assignment import BrokerRack
from replog.admin.planner import Plan
from replog.admin.reassignment import PartitionKey, ReassignmentStatus, cluster_brokers
from replog.admin.scram_credentials import (
    ScramDeletion,
    ScramUpsertion,
    UserScramCredentials,
    alter_user_scram_credentials,
    describe_user_scram_credentials,
)
from replog.security.scram import ScramMechanism, new_salt, salted_password
from replog.admin.state_change_events import queued_state_changes
from replog.admin.topic_configs import ConfigOperation
from replog.config import load_broker_config
from replog.coord_backends import Store, StoreError
from replog.coord_backends.paths import BrokerRegistration
from replog.net.client_properties import ClientProperties
from replog.security.acls import AclBinding, AclBindingFilter

from . import state_change_reader
from .admin_interface import ELECTION_TIMEOUT_S, Admin, AdminUnreachable, NewTopic, topic_status
from .group_admin import ConsumerGroups
from .kafka_admin import KafkaAdmin
from .topic_status import TopicStatus


class StoreAdmin(Admin):
    """The Admin of `--coord URL`: replog.admin's functions on the coordination store; what
    only the running brokers know (logs, groups, state-change events) is asked of them, found
    by their registrations."""

    def __init__(self, store: Store, url: str, properties: ClientProperties):
        super().__init__(properties)
        self.store = store
        self.where = url
        self._brokers: KafkaAdmin | None = None  # the running brokers, for what only they know

    async def _open(self) -> None:
        try:
            await self.store.start()
        except StoreError as error:
            raise AdminUnreachable(f"{self.where}: {error}") from None

    async def _close(self) -> None:
        try:
            if self._brokers is not None:
                await self._brokers.__aexit__(None, None, None)
        finally:
            await self.store.close()

    async def group_admin(self) -> ConsumerGroups:
        if self._brokers is None:
            addresses = await self._broker_addresses()
            if not addresses:
                raise AdminUnreachable(f"{self.where}: no broker is running, and consumer groups live in the brokers")
            bootstrap = ",".join(f"{host}:{port}" for host, port in sorted(addresses.values()))
            self._brokers = await KafkaAdmin(bootstrap, self.properties).__aenter__()
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
            described.append(topic_status(name, description.partitions, entries))
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
        return {broker: _listener_address(registration, self.properties.protocol)
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

    async def elect_partitions(self, election_type: cluster.ElectionType,
                               partitions: Collection[PartitionKey] | None) -> list[cluster.ElectionResult]:
        return await cluster.elect_leaders(self.store, election_type, partitions, ELECTION_TIMEOUT_S)

    async def plan_membership(self, *, add: Collection[int] = (), remove: Collection[int] = ()) -> Plan:
        return await cluster.plan_membership(self.store, add=add, remove=remove, size_bytes=await self.partition_sizes())

    async def finish_removal(self, brokers: Collection[int]) -> cluster.Removal:
        return await cluster.finish_removal(self.store, brokers)

    async def _cluster_brokers(self) -> set[int]:
        return await cluster_brokers(self.store)

    async def _queued_state_changes(self, topic: str | None, partition: int | None) -> list[state_change_reader.Queued]:
        return await queued_state_changes(self.store, topic, partition)

    # -- ACLs: no principal asks through the store --------------------------------------------------

    async def create_acls(self, bindings: Sequence[AclBinding]) -> list[AdminError | None]:
        return await acls.create_acls(self.store, bindings)

    async def describe_acls(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return await acls.describe_acls(self.store, acl_filter)

    async def delete_acls(self, filters: Sequence[AclBindingFilter]) -> list[acls.DeletedBindings | AdminError]:
        return await acls.delete_acls(self.store, filters)

    # -- users' SCRAM credentials ---------------------------------------------------------------

    async def _upsert_scram_credential(self, user: str, mechanism: ScramMechanism, iterations: int,
                                       password: str) -> AdminError | None:
        salt = new_salt()
        upsertion = ScramUpsertion(user, mechanism.type, iterations, salt, salted_password(mechanism, password.encode(), salt, iterations))
        return (await alter_user_scram_credentials(self.store, [], [upsertion]))[user]

    async def _delete_scram_credentials(self, user: str, mechanisms: Sequence[ScramMechanism]) -> AdminError | None:
        return (await alter_user_scram_credentials(self.store, [ScramDeletion(user, mechanism.type) for mechanism in mechanisms], []))[user]

    async def _describe_users(self, names: Sequence[str]) -> list[UserScramCredentials]:
        return await describe_user_scram_credentials(self.store, names)

    # -- client quotas ----------------------------------------------------------------------------

    async def _alter_client_quotas(self, entity: EntityNames, ops: tuple[tuple[str, float | None], ...]) -> AdminError | None:
        [error] = await client_quotas.alter_client_quotas(self.store, [QuotaAlteration(entity, ops)])
        return error

    async def describe_client_quotas(self, quota_filter: QuotaFilter) -> list[tuple[EntityNames, dict[str, float]]]:
        return await client_quotas.describe_client_quotas(self.store, quota_filter)


def _listener_address(registration: BrokerRegistration, protocol: str) -> tuple[str, int]:
    """(host, port) of the broker's first listener that speaks `protocol`, the one a client of
    that security.protocol can talk to; the inter-broker listener's when none does (or the
    registration predates named listeners)."""
    protocols = registration.listener_security_protocol_map or {}
    for endpoint in registration.endpoints:
        name = endpoint.partition("://")[0]
        if protocols.get(name) == protocol:
            return registration.endpoint(name)
    return registration.host, registration.port
