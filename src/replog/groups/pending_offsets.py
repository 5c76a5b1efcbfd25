"""Offsets committed in transactions that have not ended (docs/design.md §16.6): held per
producer, apart from the committed offsets, until the transaction's marker reaches the group's
partition of __consumer_offsets; then applied if it committed, dropped if it aborted, as Kafka's
pendingTransactionalOffsets.

Both the coordinator's memory and a load from the log (offsets_log.py) keep them here, so that
a coordinator that takes a partition over holds the same pending offsets as the one before.
Memory is bounded by the producers with an open transaction, each holding at most one value per
group and partition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from .records import OffsetValue

Key = tuple[str, int]  # (topic, partition)
Committed = dict[str, dict[Key, OffsetValue]]  # group id -> committed offset per partition


class PendingOffsets:
    def __init__(self) -> None:
        self._by_producer: dict[int, Committed] = {}
        self._producers_by_group: dict[str, set[int]] = {}

    def add(self, producer_id: int, group_id: str, values: Mapping[Key, OffsetValue]) -> None:
        """Offsets the producer committed for the group in its open transaction; a later value
        of a partition replaces an earlier one, as the log reads."""
        self._by_producer.setdefault(producer_id, {}).setdefault(group_id, {}).update(values)
        self._producers_by_group.setdefault(group_id, set()).add(producer_id)

    def groups(self) -> Iterator[str]:
        return iter(self._producers_by_group)

    def pending(self, group_id: str) -> set[Key]:
        """The group's partitions with an offset waiting for its transaction's end."""
        return {key for producer_id in self._producers_by_group.get(group_id, ())  # bounded by open transactions
                for key in self._by_producer[producer_id][group_id]}

    def discard(self, group_id: str, keys: Iterable[Key] | None = None) -> None:
        """Forget the group's pending offsets of `keys` (a tombstone outdates them, as in Kafka),
        or all of them (None: the group left this coordinator, or was deleted)."""
        producers = self._producers_by_group.get(group_id)
        if producers is None:
            return
        keys = None if keys is None else list(keys)
        for producer_id in list(producers):  # bounded by open transactions
            by_group = self._by_producer[producer_id]
            if keys is not None:
                for key in keys:  # bounded by the request's partitions
                    by_group[group_id].pop(key, None)
                if by_group[group_id]:
                    continue
            del by_group[group_id]
            producers.discard(producer_id)
            if not by_group:
                del self._by_producer[producer_id]
        if not producers:
            del self._producers_by_group[group_id]

    def end(self, producer_id: int, committed: bool, offsets: Committed,
            in_partition: Callable[[str], bool] = lambda group_id: True) -> list[str]:
        """End the producer's transaction for the groups `in_partition` picks (those of the
        partition whose marker this is); the groups it held offsets of. If it committed, each
        offset goes to `offsets` unless the one there was written later in the log (Kafka's rule:
        a plain commit after the transactional one wins)."""
        by_group = self._by_producer.get(producer_id)
        if by_group is None:
            return []
        ended = [group_id for group_id in by_group if in_partition(group_id)]
        for group_id in ended:  # bounded by the groups of one transaction
            values = by_group.pop(group_id)
            producers = self._producers_by_group[group_id]
            producers.discard(producer_id)
            if not producers:
                del self._producers_by_group[group_id]
            if committed:
                current = offsets.setdefault(group_id, {})
                for key, value in values.items():  # bounded by the group's partitions
                    before = current.get(key)
                    if before is None or value.record_offset > before.record_offset:
                        current[key] = value
        if not by_group:
            del self._by_producer[producer_id]
        return ended

    def merge(self, loaded: PendingOffsets) -> None:
        """A loaded partition's pending offsets join these (its groups are not here yet)."""
        for producer_id, by_group in loaded._by_producer.items():  # bounded by open transactions
            for group_id, values in by_group.items():  # bounded by the groups of one transaction
                self.add(producer_id, group_id, values)
