"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions, DescribeConfigs,
IncrementalAlterConfigs, AlterConfigs, AlterPartitionReassignments, ListPartitionReassignments.
Brokers' configs are static but for the reassignment throttle's rates, which (Incremental)AlterConfigs
sets per broker or as the cluster's default (admin/broker_configs.py).

Each acts on the coordination store through replog.admin, as an admin command does (docs/design.md §8), so
any broker can take them (Metadata names the answering broker as "controller"). Create, grow
and delete first wait, up to the request's timeout, until every registered replica broker has
consumed its state-change requests, and answer REQUEST_TIMED_OUT naming the others if not.
Create and grow then wait, up to the timeout again, until this broker's metadata shows a leader
for every new partition, so a client can produce straight after; if that wait runs out the
topic still exists and the answer is success, as Kafka's is once the controller has accepted
the change.

Each checks before acting, as Kafka's (net/authorization.py): CreateTopics Create on the
cluster or the topic (and DescribeConfigs on it for the configs in the answer), DeleteTopics
Delete on the topic, CreatePartitions Alter on it, DescribeConfigs and (Incremental)AlterConfigs
DescribeConfigs or AlterConfigs on the topic, or on the cluster for a broker's configs (the
reassignment throttle), and the reassignment APIs Alter or Describe on the cluster:
TOPIC_AUTHORIZATION_FAILED or CLUSTER_AUTHORIZATION_FAILED otherwise.

A request may name 50,000 topics, partitions or resources: each is answered in slices
(loop_slices.py).

The controller mutation quota (KIP-599, security/quota_manager.py): each topic created, grown
or deleted first takes a token per partition it creates or deletes. From CreateTopics v6,
CreatePartitions v3 and DeleteTopics v5 on, the client retries what is refused: a topic asked
while the quota is exhausted is refused with THROTTLING_QUOTA_EXCEEDED and not acted on; older
versions act on every topic, then are throttled. The response's throttle_time_ms is the
quota's (the server mutes the connection for it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from replog import admin
from replog.admin import AdminError, AlterOp, ConfigOperation, ConfigSource
from replog.admin import broker_configs
from replog.admin.errors import store_failure
from replog.config import DEFAULT_SOURCE, BrokerConfig, format_value, is_sensitive
from replog.coord_backends import StoreError
from replog.replication.metadata_cache import each_seen
from replog.security.acls import AclOperation, ResourceType
from replog.security.quota_limits import user_of_principal
from replog.security.quota_manager import MutationQuota, ThrottlingQuotaExceeded

from ..authorization import REFUSAL_MESSAGES, authorized, authorized_on_cluster
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import NO_TOPIC_ID, handles, log_refusal, topic_id_of, unknown_partition

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
DEFAULT_COUNT = -1  # "use the broker's default" in CreateTopics
# The first version of each whose client retries a topic the controller mutation quota refused.
STRICT_MUTATION_QUOTA_FROM = {ApiKey.CREATE_TOPICS: 6, ApiKey.CREATE_PARTITIONS: 3, ApiKey.DELETE_TOPICS: 5}


def _timeout_s(request: Request) -> float:
    return max(0.0, request.body.timeout.total_seconds())


async def _wait_for_leaders(services, topic: str, partition_count: int, timeout_s: float) -> None:
    """Wait until each of the topic's partitions (at least `partition_count`) has been seen
    served, or time runs out."""
    each_served: Callable[[], bool] | None = None

    def all_served() -> bool:
        nonlocal each_served
        if each_served is None:
            partitions = services.metadata.topics.get(topic, {})
            if len(partitions) < partition_count:
                return False
            each_served = each_seen(sorted(partitions), lambda partition: services.serving(topic, partition))
        return each_served()

    await services.metadata.wait_for(all_served, timeout_s)


def _may(services, request: Request, operation: AclOperation, topic: str) -> bool:
    return authorized(services, request, operation, ResourceType.TOPIC, topic)


def _denied_topic(message: str | None = REFUSAL_MESSAGES[ErrorCode.topic_authorization_failed]) -> dict:
    """The error fields of a topic refused, with Kafka's message for the API (some have none)."""
    return {"error_code": ErrorCode.topic_authorization_failed, "error_message": message}


def _mutation_quota(services, request: Request) -> MutationQuota:
    return services.quotas.controller_mutation.quota(user_of_principal(request.principal), request.client_id or "",
                                                     strict=request.api_version >= STRICT_MUTATION_QUOTA_FROM[request.api_key])


def _quota_refusal(request: Request, quota: MutationQuota, subject: str, partitions: int) -> dict | None:
    """Take `partitions` tokens for `subject`; the result fields refusing it if the quota does."""
    try:
        quota.record(partitions)
    except ThrottlingQuotaExceeded:
        log_refusal(request, "ThrottlingQuotaExceeded", subject, ErrorCode.throttling_quota_exceeded)
        return {"error_code": ErrorCode.throttling_quota_exceeded, "error_message": "The throttling quota has been exceeded."}
    return None


def _failure(request: Request, subject: str, error: AdminError | StoreError) -> dict:
    """The result fields of a refused or failed subject: a store failure too gets a Kafka error
    with its message, rather than the connection closing on the client."""
    if isinstance(error, StoreError):
        error = store_failure(subject, error)
    log_refusal(request, type(error).__name__, subject, error.code)
    return {"error_code": error.code, "error_message": str(error)}


@handles(ApiKey.CREATE_TOPICS)
async def create_topics(services, request: Request):
    body = request.body
    validate_only = getattr(body, "validate_only", False)
    may_create_any = authorized_on_cluster(services, request, AclOperation.CREATE, audit=False)
    quota = _mutation_quota(services, request)
    slices = LoopSlices()
    results = []
    for topic in body.topics:
        await slices.pause()
        partitions = None if topic.num_partitions == DEFAULT_COUNT else topic.num_partitions
        replication = None if topic.replication_factor == DEFAULT_COUNT else topic.replication_factor
        assignment = {entry.partition_index: list(entry.broker_ids) for entry in topic.assignments} or None
        if assignment is None:
            partitions = services.config["num.partitions"] if partitions is None else partitions
            replication = services.config["default.replication.factor"] if replication is None else replication
        result = {"name": topic.name, "topic_id": None, "error_code": ErrorCode.none, "error_message": None,
                  "topic_config_error_code": 0, "num_partitions": -1, "replication_factor": -1, "configs": None}
        if not (may_create_any or _may(services, request, AclOperation.CREATE, topic.name)):
            results.append(result | _denied_topic("Authorization failed.") | {"configs": []})
            continue
        overrides = {config.name: config.value for config in topic.configs if config.value is not None}  # null: not set
        refusal = None if validate_only else _quota_refusal(request, quota, topic.name,
                                                             len(assignment) if assignment else partitions)
        if refusal is not None:
            results.append(result | refusal)
            continue
        try:
            planned = await admin.create_topic(
                services.store, topic.name, partitions, replication, overrides,
                replica_assignment=assignment, validate_only=validate_only,
                limits=services.state_change_limits(_timeout_s(request)), broker_config=services.config,
            )
        except (AdminError, StoreError) as error:
            results.append(result | _failure(request, topic.name, error))
            continue
        result |= {"num_partitions": len(planned), "replication_factor": len(next(iter(planned.values())))}
        if _may(services, request, AclOperation.DESCRIBE_CONFIGS, topic.name):
            # Java's admin client reads the topic's configs whenever the partitions are given (v5+).
            result["configs"] = [{"name": entry.name, "value": entry.value, "read_only": False,
                                  "config_source": int(entry.source), "is_sensitive": False}
                                 for entry in admin.topic_config_entries(services.config, overrides)]
        else:
            result["topic_config_error_code"] = ErrorCode.topic_authorization_failed
        if not validate_only:
            await _wait_for_leaders(services, topic.name, len(planned), _timeout_s(request))
            result["topic_id"] = topic_id_of(services, topic.name)
        results.append(result)
    return await respond(request, {"throttle_time": quota.throttle_time_ms, "topics": results}, slices)


@handles(ApiKey.DELETE_TOPICS)
async def delete_topics(services, request: Request):
    body = request.body
    # Version 6 on may name a topic by its id alone (KIP-516).
    asked = [(state.name, state.topic_id) for state in body.topics] if hasattr(body, "topics") else \
        [(name, None) for name in body.topic_names]
    quota = _mutation_quota(services, request)
    slices = LoopSlices()
    results, names = [], []
    for name, topic_id in asked:
        await slices.pause()
        if name is None:
            name = services.metadata.topic_of_id((topic_id or NO_TOPIC_ID).hex)
            if name is None:
                results.append({"name": None, "topic_id": topic_id, "error_code": ErrorCode.unknown_topic_id,
                                "error_message": "This server does not host this topic ID."})
                continue
            if not _may(services, request, AclOperation.DESCRIBE, name):  # the id is no secret, the name is
                results.append({"name": None, "topic_id": topic_id} | _denied_topic())
                continue
        if not _may(services, request, AclOperation.DELETE, name):
            results.append({"name": name, "topic_id": topic_id or NO_TOPIC_ID} | _denied_topic())
            continue
        result = {"name": name, "topic_id": topic_id_of(services, name), "error_code": ErrorCode.none, "error_message": None}
        refusal = _quota_refusal(request, quota, name, len(services.metadata.topics.get(name, ())))
        if refusal is not None:
            results.append(result | refusal)
            continue
        names.append(name)
        try:
            await admin.delete_topic(services.store, name, limits=services.state_change_limits(_timeout_s(request)))
        except (AdminError, StoreError) as error:
            result |= _failure(request, name, error)
        results.append(result)
    for name in names:
        await slices.pause()
        await services.metadata.wait_for(lambda name=name: name not in services.metadata.topics, _timeout_s(request))
    return await respond(request, {"throttle_time": quota.throttle_time_ms, "responses": results}, slices)


@handles(ApiKey.CREATE_PARTITIONS)
async def create_partitions(services, request: Request):
    body = request.body
    quota = _mutation_quota(services, request)
    slices = LoopSlices()
    results = []
    for topic in body.topics:
        await slices.pause()
        assignment = None
        if topic.assignments is not None:
            first_new = topic.count - len(topic.assignments)
            assignment = {first_new + i: list(entry.broker_ids) for i, entry in enumerate(topic.assignments)}
        result = {"name": topic.name, "error_code": ErrorCode.none, "error_message": None}
        if not _may(services, request, AclOperation.ALTER, topic.name):
            results.append(result | _denied_topic(None))
            continue
        added = topic.count - len(services.metadata.topics.get(topic.name, ()))
        refusal = None if body.validate_only else _quota_refusal(request, quota, topic.name, max(0, added))
        if refusal is not None:
            results.append(result | refusal)
            continue
        try:
            if body.validate_only:
                await admin.describe_topic(services.store, topic.name)  # existence only; growth is checked on apply
            else:
                await admin.create_partitions(services.store, topic.name, topic.count, assignment,
                                              limits=services.state_change_limits(_timeout_s(request)))
                await _wait_for_leaders(services, topic.name, topic.count, _timeout_s(request))
        except (AdminError, StoreError) as error:
            result |= _failure(request, topic.name, error)
        results.append(result)
    return await respond(request, {"throttle_time": quota.throttle_time_ms, "results": results}, slices)


@handles(ApiKey.DESCRIBE_CONFIGS)
async def describe_configs(services, request: Request):
    """A resource named twice in one request is answered INVALID_REQUEST the second time (no
    client sends that: librdkafka refuses it, Java's admin client keys resources by name), so
    that one request's answer holds each resource's configs once: 200,000 mentions of one topic
    made a 116 MB answer."""
    slices = LoopSlices()
    seen: set[tuple[int, str]] = set()
    results = []
    for resource in request.body.resources:
        await slices.pause()
        result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name, "configs": ()}
        key = (resource.resource_type, resource.resource_name)
        if key in seen:
            log_refusal(request, "resource named twice", resource.resource_name, ErrorCode.invalid_request)
            results.append(result | {"error_code": ErrorCode.invalid_request,
                                     "error_message": f"resource {resource.resource_name!r} named twice in one request"})
            continue
        seen.add(key)
        denied = _config_refusal(services, request, AclOperation.DESCRIBE_CONFIGS, resource)
        if denied:
            results.append(result | denied)
            continue
        wanted = set(resource.configuration_keys) if resource.configuration_keys is not None else None
        try:
            entries = await _config_entries(services, resource.resource_type, resource.resource_name)
        except (AdminError, StoreError) as error:
            results.append(result | _failure(request, resource.resource_name, error))
            continue
        result["configs"] = [
            {"name": name, "value": None if sensitive else value, "read_only": read_only, "config_source": source,
             "is_default": source == 5, "is_sensitive": sensitive, "synonyms": (), "config_type": 0,
             "documentation": None}
            for name, value, source, read_only, sensitive in entries
            if wanted is None or name in wanted
        ]
        results.append(result)
    return await respond(request, {"throttle_time": 0, "results": results}, slices)


def _config_refusal(services, request: Request, operation: AclOperation, resource) -> dict:
    """The error fields of a topic's or broker's configs the client may not see or change, else
    {}: Kafka's rule, on the topic, or for a broker on the cluster."""
    if resource.resource_type == RESOURCE_TOPIC and not _may(services, request, operation, resource.resource_name):
        return _denied_topic()
    if resource.resource_type == RESOURCE_BROKER and not authorized_on_cluster(services, request, operation):
        error = ErrorCode.cluster_authorization_failed
        return {"error_code": error, "error_message": REFUSAL_MESSAGES[error]}
    return {}


def _static_source(config: BrokerConfig, setting: str) -> int:
    return int(ConfigSource.DEFAULT_CONFIG if config.sources[setting] == DEFAULT_SOURCE else ConfigSource.STATIC_BROKER_CONFIG)


async def _config_entries(services, resource_type: int, name: str) -> list[tuple[str, str | None, int, bool, bool]]:
    """(name, value, Kafka config_source, read_only, is_sensitive) for a topic's or this broker's
    settings; a sensitive one's value is never told (null), as Kafka's brokers answer."""
    if resource_type == RESOURCE_TOPIC:
        entries = await admin.describe_topic_config(services.store, name, services.config)
        return [(entry.name, entry.value, int(entry.source), False, False) for entry in entries]
    if resource_type == RESOURCE_BROKER:
        broker = broker_configs.broker_resource(name)
        dynamic = await broker_configs.dynamic_broker_config(services.store, broker)
        # Static settings (set at start-up, read-only here) only of this broker, as Kafka's
        # brokers describe only their own; one left at its default is a DEFAULT_CONFIG there.
        static = services.config.items() if broker in (None, services.broker_id) else ()
        return ([(setting, format_value(value), _static_source(services.config, setting), True, is_sensitive(setting))
                 for setting, value in sorted(static)]
                + [(setting, value, int(source), False, is_sensitive(setting)) for setting, (value, source) in sorted(dynamic.items())])
    raise AdminError(ErrorCode.invalid_request, f"cannot describe resource type {resource_type} named {name!r}")


@handles(ApiKey.INCREMENTAL_ALTER_CONFIGS)
async def incremental_alter_configs(services, request: Request):
    async def alter(resource) -> None:
        operations = []
        for config in resource.configs:
            try:
                operations.append(ConfigOperation(config.name, AlterOp(config.config_operation), config.value))
            except ValueError:
                raise AdminError(ErrorCode.invalid_request, f"unknown config operation {config.config_operation}") from None
        if resource.resource_type == RESOURCE_BROKER:
            await broker_configs.alter_broker_config(services.store, broker_configs.broker_resource(resource.resource_name),
                                                     operations, validate_only=request.body.validate_only)
        else:
            await admin.alter_topic_config(services.store, resource.resource_name, operations,
                                           broker_config=services.config, validate_only=request.body.validate_only)

    return await _alter_each_resource(services, request, alter)


@handles(ApiKey.ALTER_CONFIGS)
async def alter_configs(services, request: Request):
    """Kafka's legacy, non-incremental form: a resource's configs in the request become its
    whole set of dynamic configs, those not named going back to their defaults."""
    async def alter(resource) -> None:
        configs = _configs_to_replace(resource.configs)
        if resource.resource_type == RESOURCE_BROKER:
            await broker_configs.replace_broker_config(services.store, broker_configs.broker_resource(resource.resource_name),
                                                       configs, validate_only=request.body.validate_only)
        else:
            await admin.replace_topic_config(services.store, resource.resource_name, configs,
                                             broker_config=services.config, validate_only=request.body.validate_only)

    return await _alter_each_resource(services, request, alter)


def _configs_to_replace(entries) -> dict[str, str]:
    """An AlterConfigs resource's configs by name; INVALID_REQUEST, with Kafka's message, for a
    null value or a name given twice."""
    configs = {}
    for entry in entries:
        if entry.value is None:
            raise AdminError(ErrorCode.invalid_request, f"Null value not supported for : {entry.name}")
        if entry.name in configs:
            raise AdminError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        configs[entry.name] = entry.value
    return configs


async def _alter_each_resource(services, request: Request, alter: Callable[[Any], Awaitable[None]]):
    """Answer each resource of an (Incremental)AlterConfigs request on its own: one refused
    changes nothing and leaves the others' answers as they are."""
    slices = LoopSlices()
    results = []
    for resource in request.body.resources:
        await slices.pause()
        result = {"error_code": ErrorCode.none, "error_message": None, "resource_type": resource.resource_type,
                  "resource_name": resource.resource_name}
        try:
            if resource.resource_type not in (RESOURCE_TOPIC, RESOURCE_BROKER):
                raise AdminError(ErrorCode.invalid_request, f"cannot alter resource type {resource.resource_type}: only "
                                                            "topics' and brokers' configs")
            denied = _config_refusal(services, request, AclOperation.ALTER_CONFIGS, resource)
            if denied:
                results.append(result | denied)
                continue
            await alter(resource)
        except (AdminError, StoreError) as error:
            result |= _failure(request, resource.resource_name, error)
        results.append(result)
    return await respond(request, {"throttle_time": 0, "responses": results}, slices)


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
async def alter_partition_reassignments(services, request: Request):
    """Accepted once written to the store: the partitions' leaders carry the moves out
    (replication/reassignment.py), and ListPartitionReassignments follows them. Partitions this
    broker's metadata does not know are answered here (handlers.unknown_partition)."""
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        return await respond(request, {
            "throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed, "error_message": None,
            "responses": [{"name": topic.name, "partitions": [
                {"partition_index": partition.partition_index, "error_code": ErrorCode.cluster_authorization_failed,
                 "error_message": None} for partition in topic.partitions]} for topic in request.body.topics]})
    slices = LoopSlices()
    targets = {}
    for topic in request.body.topics:
        await slices.pause()
        known = services.metadata.topics.get(topic.name, {})
        targets |= {(topic.name, partition.partition_index): partition.replicas
                    for partition in topic.partitions if partition.partition_index in known}
        if any(partition.partition_index not in known for partition in topic.partitions):
            log_refusal(request, "reassignment of unknown partitions", topic.name, ErrorCode.unknown_topic_or_partition)
    outcomes = await admin.alter_partition_reassignments(services.store, targets,
                                                          limits=services.state_change_limits(_timeout_s(request)))
    responses = []
    for topic in request.body.topics:
        partitions = []
        for partition in topic.partitions:
            await slices.pause()
            key = (topic.name, partition.partition_index)
            answer = {"partition_index": partition.partition_index, "error_code": ErrorCode.none, "error_message": None}
            if key not in targets:
                answer |= unknown_partition(*key)
            elif outcomes[key] is not None:
                answer |= _failure(request, f"{topic.name}-{partition.partition_index}", outcomes[key])
            partitions.append(answer)
        responses.append({"name": topic.name, "partitions": partitions})
    return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                   "responses": responses}, slices)


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS)
async def list_partition_reassignments(services, request: Request):
    """The moves in flight of the partitions asked (all when `topics` is null), among those this
    broker's metadata knows: the store is read for the cluster's partitions at most."""
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE):
        return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                       "error_message": None, "topics": []})
    slices = LoopSlices()
    asked = None
    if request.body.topics is not None:
        asked = set()
        for topic in request.body.topics:
            await slices.pause()
            known = services.metadata.topics.get(topic.name, {})
            asked |= {(topic.name, index) for index in topic.partition_indexes if index in known}
    by_topic: dict[str, list[dict]] = {}
    for status in await admin.list_partition_reassignments(services.store, asked):
        await slices.pause()
        by_topic.setdefault(status.topic, []).append({
            "partition_index": status.partition, "replicas": status.replicas,
            "adding_replicas": status.adding, "removing_replicas": status.removing})
    return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
                                   "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]},
                         slices)
