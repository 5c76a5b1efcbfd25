"""The cluster as a whole: ElectLeaders, DescribeCluster and UnregisterBroker, answered from the
store through replog.admin, as `replog cluster` answers them with --coord. ElectLeaders and
UnregisterBroker need Alter on the cluster (CLUSTER_AUTHORIZATION_FAILED otherwise); DescribeCluster
needs nothing, as Kafka's, and tells the cluster's authorized operations when asked
(net/authorization.py)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replog import admin
from replog.admin import AdminError, ElectionType
from replog.admin.reassignment import cluster_brokers
from replog.security.acls import AclOperation

from ..authorization import authorized_on_cluster

from ..codec import ApiKey, Request, build_response
from ..loop_slices import LoopSlices, respond
from . import handles, log_refusal, unknown_partition
from .metadata import broker_addresses, cluster_operations


@handles(ApiKey.ELECT_LEADERS)
async def elect_leaders(services, request: Request):
    """Answered once every partition has its new leader, or the request's timeout ran out
    (REQUEST_TIMED_OUT for the ones still electing). v0 knows only preferred elections. An
    unclean election that succeeded says so in the message beside its error code 0: records
    may be lost. Partitions this broker's metadata does not know are answered here
    (handlers.unknown_partition)."""
    body = request.body
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        error = ErrorCode.cluster_authorization_failed
        return await respond(request, {"throttle_time": 0, "error_code": error, "replica_election_results": [
            {"topic": topic.topic, "partition_result": [{"partition_id": partition, "error_code": error, "error_message": None}
                                                        for partition in topic.partitions]}
            for topic in body.topic_partitions or ()]})
    election_type_value = getattr(body, "election_type", ElectionType.PREFERRED)
    if election_type_value not in ElectionType.__members__.values():
        # Kafka's ElectionType.valueOf refuses it; the request as a whole is answered, not closed.
        log_refusal(request, "election of an unknown type", str(election_type_value), ErrorCode.invalid_request)
        return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.invalid_request,
                                        "replica_election_results": []})
    election_type = ElectionType(election_type_value)
    slices = LoopSlices()
    by_topic: dict[str, list[dict]] = {}
    asked = None
    if body.topic_partitions is not None:
        asked = set()
        for topic in body.topic_partitions:
            await slices.pause()
            known = services.metadata.topics.get(topic.topic, {})
            asked |= {(topic.topic, partition) for partition in topic.partitions if partition in known}
            unknown = [{"partition_id": partition} | unknown_partition(topic.topic, partition)
                       for partition in topic.partitions if partition not in known]
            if unknown:
                log_refusal(request, "election of unknown partitions", topic.topic, ErrorCode.unknown_topic_or_partition)
                by_topic.setdefault(topic.topic, []).extend(unknown)
    results = await admin.elect_leaders(services.store, election_type, asked, max(0.0, body.timeout.total_seconds()))
    for result in results:
        await slices.pause()
        if result.error is not None and result.error.code != ErrorCode.election_not_needed:
            log_refusal(request, f"{election_type.name.lower()} election", f"{result.topic}-{result.partition}",
                        result.error.code)
        by_topic.setdefault(result.topic, []).append({
            "partition_id": result.partition,
            "error_code": ErrorCode.none if result.error is None else result.error.code,
            "error_message": result.detail if result.error is not None or result.unclean_after_isr is not None else None,
        })
    return await respond(request, {
        "throttle_time": 0, "error_code": ErrorCode.none,
        "replica_election_results": [{"topic": topic, "partition_result": partitions}
                                     for topic, partitions in by_topic.items()],
    }, slices)


@handles(ApiKey.DESCRIBE_CLUSTER)
async def describe_cluster(services, request: Request):
    """The registered brokers, and from v2, when asked (include_fenced_brokers), the brokers the
    cluster knows that are not registered, as fenced, with no address: down, or stopped without
    being removed. Addresses are those of the listener the client came in on, as Metadata's. Any broker takes admin requests, so the controller is the broker asked."""
    brokers = [{"broker_id": broker_id, "host": host, "port": port, "rack": rack, "is_fenced": False}
               for broker_id, host, port, rack in broker_addresses(services, request.listener)]
    if getattr(request.body, "include_fenced_brokers", False):
        down = await cluster_brokers(services.store) - set(services.metadata.brokers)
        brokers += [{"broker_id": broker_id, "host": "", "port": -1, "rack": None, "is_fenced": True}
                    for broker_id in sorted(down)]
    return build_response(request, {
        "throttle_time": 0, "error_code": ErrorCode.none, "error_message": None,
        "cluster_id": services.cluster_id or "", "controller_id": services.broker_id, "brokers": brokers,
        "cluster_authorized_operations": cluster_operations(services, request),
    })


@handles(ApiKey.UNREGISTER_BROKER)
async def unregister_broker(services, request: Request):
    """The end of a removal (admin.finish_removal): the broker's state-change path goes, once no
    replica is assigned to it; a running one first gets this broker's state-change timeout to
    consume its queue (v0 carries no timeout). BROKER_ID_NOT_REGISTERED for a broker without
    that path: not in the cluster, or removed already."""
    broker_id = request.body.broker_id
    if not authorized_on_cluster(services, request, AclOperation.ALTER):
        return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                        "error_message": None})
    try:
        removal = await admin.finish_removal(services.store, [broker_id], services.state_change_limits(0))
        if not removal.queues_deleted:
            raise AdminError(ErrorCode.broker_id_not_registered,
                             f"broker {broker_id} has no state-change path: it is not in the cluster, or was removed already "
                             "(`replog cluster status` lists the brokers)")
    except AdminError as error:
        log_refusal(request, "unregister broker", str(broker_id), error.code)
        return build_response(request, {"throttle_time": 0, "error_code": error.code, "error_message": error.message})
    return build_response(request, {"throttle_time": 0, "error_code": ErrorCode.none, "error_message": None})
