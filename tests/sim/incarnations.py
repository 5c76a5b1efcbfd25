"""Incarnations of the simulated topic: every delete and create again of the topic begins one.

A new topic of the same name starts its leader epochs again, and what the deleted one
acknowledged is gone on purpose, so the checker keys what it remembers by incarnation. A
replica belongs to the incarnation that was current when it was opened: the simulation begins
the next incarnation in the step where the create committed the new topic (before that, no
replica of it can be opened: its partitions are not in the store), and every replica open then
belongs to an earlier one, whatever it does later.

Records are numbered in the order they are produced, so an incarnation also knows the first
number that may be in its replicas: an older record in one of them is a deleted topic's record
served as the new topic's.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

from replog.replica.partition import Partition


class Incarnations:
    def __init__(self) -> None:
        self.current = 0
        self._first_records = [0]  # by incarnation
        # Weak: a replica object is looked up while open; a closed one may go (no iteration, so
        # collection order changes nothing).
        self._of: weakref.WeakKeyDictionary[Partition, int] = weakref.WeakKeyDictionary()

    def of(self, replica: Partition) -> int:
        return self._of.setdefault(replica, self.current)

    def first_record(self, incarnation: int) -> int:
        return self._first_records[incarnation]

    def begin_next(self, open_replicas: Iterable[Partition], first_record: int) -> None:
        """The topic was created again: `open_replicas` (every broker's, crashed ones' too)
        belong to the incarnation that ends here; records from `first_record` on may be in the next."""
        for replica in open_replicas:
            self.of(replica)
        self.current += 1
        self._first_records.append(first_record)
