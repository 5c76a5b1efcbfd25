"""Driver-side lookups: which partitions a query reads, and which offsets its options name.

Spark's Kafka source semantics throughout: offsets given per partition (startingOffsets JSON,
startingOffsetsByTimestamp) must name every subscribed partition; -2 is the earliest offset,
-1 the latest, which is the high watermark (committed data only); a timestamp selects the first
record at or after it, and where no record is that late, a starting position fails the query
(startingOffsetsByTimestampStrategy=error) or takes the latest offset (=latest), while an
ending position always takes the latest.
"""

from __future__ import annotations

from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from .cluster import Cluster, ClusterError
from .offsets import EARLIEST, LATEST, TopicPartition
from .options import OffsetSpec, OptionError, Subscription

NO_OFFSET = -1  # ListOffsets' answer where no record is at or after the timestamp


class DataLoss(Exception):
    """Records the query should read are gone (retention, a deleted topic); the message says
    which and how to go on (failOnDataLoss=false)."""


def discover(cluster: Cluster, subscription: Subscription) -> list[TopicPartition]:
    """The subscribed partitions that exist now, sorted."""
    return subscription.select(cluster.partition_counts(subscription.topics_to_describe()))


def offsets_at(cluster: Cluster, partitions: list[TopicPartition], marker: int) -> dict[TopicPartition, int]:
    """Earliest (EARLIEST) or latest (LATEST, the high watermark) offset of each partition that
    still exists: a partition deleted since it was discovered is left out, for the caller to
    judge (metadata from one broker may still show a topic that its leader has deleted)."""
    listed = cluster.list_offsets({tp: marker for tp in partitions})
    failed = {str(tp): answer.error_code.name for tp, answer in listed.items()
              if answer.error_code not in (ErrorCode.none, ErrorCode.unknown_topic_or_partition)}
    if failed:
        raise ClusterError(f"cannot list offsets of {failed}")
    return {tp: answer.offset for tp, answer in listed.items() if answer.error_code == ErrorCode.none}


def resolve(cluster: Cluster, spec: OffsetSpec, partitions: list[TopicPartition], *, option: str,
            not_found_latest: bool) -> dict[TopicPartition, int]:
    """The offsets `spec` names for `partitions`."""
    if spec.timestamp is not None:
        return _by_timestamp(cluster, {tp: spec.timestamp for tp in partitions}, option, not_found_latest)
    if spec.timestamps is not None:
        return _by_timestamp(cluster, _every_partition(spec.timestamps, partitions, option), option, not_found_latest)
    if spec.offsets is None:
        return offsets_at(cluster, partitions, spec.default)
    named = _every_partition(spec.offsets, partitions, option)
    resolved = dict(named)
    for marker in (EARLIEST, LATEST):
        marked = [tp for tp, offset in named.items() if offset == marker]
        if marked:
            resolved |= offsets_at(cluster, marked, marker)
    return resolved


def _every_partition(named: Mapping[TopicPartition, int], partitions: list[TopicPartition], option: str) -> dict[TopicPartition, int]:
    if set(named) != set(partitions):
        raise OptionError(f"option '{option}' must name every subscribed partition (-1 for latest, -2 for earliest); "
                          f"named: {sorted(map(str, named))}, subscribed: {sorted(map(str, partitions))}")
    return dict(named)


def _by_timestamp(cluster: Cluster, timestamps: dict[TopicPartition, int], option: str, not_found_latest: bool) -> dict[TopicPartition, int]:
    listed = cluster.list_offsets(timestamps)
    resolved = {tp: answer.offset for tp, answer in listed.items() if answer.offset != NO_OFFSET}
    missing = [tp for tp in timestamps if tp not in resolved]
    if missing and not not_found_latest:
        raise OptionError(f"option '{option}': no record at or after the given timestamp in {', '.join(map(str, missing))} "
                          "(set startingOffsetsByTimestampStrategy=latest to start at the latest offset there)")
    return resolved | (offsets_at(cluster, missing, LATEST) if missing else {})
