"""DescribeLogDirs: the replicas this broker hosts, with the size of each one's log, as
`kafka-log-dirs --describe` shows them. replog has one log directory per broker (its data
directory), and no future logs (AlterReplicaLogDirs moves none). Answered in slices
(loop_slices.py): a broker may host 10,000 partitions, and a request may name 50,000. A client
that may not Describe the cluster is answered CLUSTER_AUTHORIZATION_FAILED and no directory."""

from __future__ import annotations

import asyncio
import shutil

from kio.schema.errors import ErrorCode

from replog.security.acls import AclOperation

from ..authorization import authorized_on_cluster
from ..codec import ApiKey, Request
from ..loop_slices import LoopSlices, respond
from . import handles


@handles(ApiKey.DESCRIBE_LOG_DIRS)
async def describe_log_dirs(services, request: Request):
    """The partitions asked for (every hosted one when `topics` is null) that this broker hosts;
    those it does not host are left out, as Kafka leaves them out."""
    if not authorized_on_cluster(services, request, AclOperation.DESCRIBE):
        return await respond(request, {"throttle_time": 0, "error_code": ErrorCode.cluster_authorization_failed,
                                       "results": []})
    asked = None if request.body.topics is None else {
        (topic.topic, partition) for topic in request.body.topics for partition in topic.partitions}
    slices = LoopSlices()
    by_topic: dict[str, list[dict]] = {}
    for partition in sorted(services.replicas.partitions, key=lambda hosted: (hosted.topic, hosted.partition_id)):
        await slices.pause()
        if asked is not None and (partition.topic, partition.partition_id) not in asked:
            continue
        by_topic.setdefault(partition.topic, []).append({
            "partition_index": partition.partition_id,
            "partition_size": partition.log.size_bytes,
            # Kafka's definition for a current log: how far its end is behind the high
            # watermark, which is 0 on a leader and on a follower (whose HW never passes its end).
            "offset_lag": max(partition.high_watermark - partition.log_end_offset, 0),
            "is_future_key": False,
        })
    log_dir = services.replicas.data_dir.resolve()
    usage = await asyncio.to_thread(shutil.disk_usage, log_dir)  # a statfs: a disk that hangs must not stop the loop
    return await respond(request, {
        "throttle_time": 0, "error_code": ErrorCode.none,
        "results": [{
            "error_code": ErrorCode.none, "log_dir": str(log_dir),
            "topics": [{"name": topic, "partitions": partitions} for topic, partitions in by_topic.items()],
            "total_bytes": usage.total, "usable_bytes": usage.free,
        }],
    }, slices)
