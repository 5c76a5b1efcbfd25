"""CreateTopics and CreatePartitions wait until the new partitions are served: checked at every
change of the metadata view, so a check must not cost every partition each time."""

from __future__ import annotations

import random
from types import SimpleNamespace

from replog.net.handlers.admin import _wait_for_leaders

PARTITIONS = 2_000


class _Metadata:
    """A view whose partitions appear, then get leaders one at a time, mostly in order (as each
    broker loads and elects its partitions in batches, in order) but for some that come late;
    the condition is checked after every change, as MetadataCache.wait_for does."""

    def __init__(self, served: set[int]):
        self.topics: dict[str, dict[int, object]] = {}
        self._served = served
        self.checks_true_after: list[int] = []

    async def wait_for(self, condition, timeout_s: float) -> bool:
        assert not condition()  # the topic is not in the view yet
        self.topics["t"] = dict.fromkeys(range(PARTITIONS // 2))
        assert not condition()  # fewer partitions than created
        self.topics["t"] = dict.fromkeys(range(PARTITIONS))
        late = set(random.Random(7).sample(range(PARTITIONS), 20))
        order = [partition for partition in range(PARTITIONS) if partition not in late] + sorted(late)
        for partition in order:
            assert not condition()
            self._served.add(partition)
        return condition()


async def test_the_wait_ends_once_every_partition_was_served_checking_each_about_once():
    served: set[int] = set()
    calls = 0

    def serving(topic: str, partition: int) -> bool:
        nonlocal calls
        calls += 1
        return partition in served

    metadata = _Metadata(served)
    await _wait_for_leaders(SimpleNamespace(metadata=metadata, serving=serving), "t", PARTITIONS, 30.0)
    assert served == set(range(PARTITIONS))
    # A check stops at the first partition not served, and one seen served is not asked again:
    # each partition is asked about once it is served, plus once per check. Checking every
    # partition each time (up to the first not served) asked 167,000 times here.
    assert calls <= 2 * PARTITIONS + 3
