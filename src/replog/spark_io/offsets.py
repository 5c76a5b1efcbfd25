"""Offsets as Spark sees them, and how a range of them becomes Spark partitions.

A source offset is JSON `{topic: {partition: offset}}`, exactly as Spark's Kafka source writes
it. Spark compares offsets by their JSON text (an unchanged latest offset means no new data), so
topics are sorted by name and partitions by number: the same positions always give the same
text. Ends are exclusive: offset N means "everything before N".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

# Kafka's ListOffsets markers, also the JSON option values Spark's Kafka source accepts.
EARLIEST = -2
LATEST = -1


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetRange(NamedTuple):
    """Offsets [start, end) of one partition: what one Spark task reads."""

    topic_partition: TopicPartition
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The JSON-ready offset, keys in the stable order described above."""
    nested: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        nested.setdefault(tp.topic, {})[str(tp.partition)] = offsets[tp]
    return nested


def from_json(nested: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(topic, int(index)): int(offset) for topic, partitions in nested.items() for index, offset in partitions.items()}


def ranges_between(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int],
                   min_partitions: int | None = None) -> list[OffsetRange]:
    """The non-empty ranges from `start` to `end`, one per partition unless `min_partitions`
    asks for more: then each range is cut into pieces in proportion to its share of the total,
    as Spark's KafkaOffsetRangeCalculator does, so large partitions are read in parallel."""
    ranges = [OffsetRange(tp, start[tp], end[tp]) for tp in sorted(end) if tp in start and end[tp] > start[tp]]
    if not min_partitions or len(ranges) >= min_partitions:
        return ranges
    total = sum(piece.size for piece in ranges)
    split = []
    for piece in ranges:
        parts = min(max(round(piece.size / total * min_partitions), 1), piece.size)
        bounds = [piece.start + piece.size * index // parts for index in range(parts + 1)]
        split.extend(OffsetRange(piece.topic_partition, low, high) for low, high in zip(bounds, bounds[1:]))
    return split


def limit_offsets(start: Mapping[TopicPartition, int], available: Mapping[TopicPartition, int],
                  max_offsets: int) -> dict[TopicPartition, int]:
    """End offsets admitting at most `max_offsets` records beyond `start` in total, shared in
    proportion to each partition's backlog. Unlike Spark's rounding up of small shares, the
    bound is exact: shares are rounded down and the remainder goes one by one to the largest
    backlogs left over, so no partition with a backlog starves while max_offsets allows."""
    backlog = {tp: available[tp] - start[tp] for tp in available}
    backlog = {tp: size for tp, size in backlog.items() if size > 0}
    total = sum(backlog.values())
    if total <= max_offsets:
        return dict(available)
    shares = {tp: math.floor(max_offsets * size / total) for tp, size in backlog.items()}
    left = max_offsets - sum(shares.values())
    for tp in sorted(backlog, key=lambda tp: (-(backlog[tp] - shares[tp]), tp))[:left]:
        shares[tp] += 1
    return {tp: start[tp] + shares[tp] if tp in backlog else available[tp] for tp in available}
