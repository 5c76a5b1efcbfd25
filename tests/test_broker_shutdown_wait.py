"""A controlled shutdown serves fetches until every leader it follows has shrunk it out of the
ISR: a wait checked at every change of the metadata view, so a check must not cost every
partition each time."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from replog.broker import Broker
from replog.replication.metadata_cache import PartitionView

PARTITIONS = 2_000
STOPPING, LEADER = 2, 0


@dataclasses.dataclass(frozen=True)
class _CountedView(PartitionView):
    """A partition's view that counts how often its ISR is read."""

    def __getattribute__(self, name):
        if name == "isr":
            _CountedView.isr_reads += 1
        return super().__getattribute__(name)


_CountedView.isr_reads = 0


class _Metadata:
    """Leaders shrink the stopping broker out one partition at a time, in order but for some
    partitions it leads itself; the condition is checked after every change."""

    def __init__(self):
        views = {partition: _CountedView((LEADER, STOPPING), LEADER if partition % 3 else STOPPING, 0, (LEADER, STOPPING))
                 for partition in range(PARTITIONS)}
        self.topics = {"t": views}
        self.registered = frozenset({LEADER})
        self.met_after: int | None = None

    async def wait_for(self, condition, timeout_s: float) -> bool:
        views = self.topics["t"]
        for partition in range(PARTITIONS):
            assert not condition()
            views[partition] = dataclasses.replace(views[partition], isr=(LEADER,))
        self.met_after = PARTITIONS
        return condition()


async def test_the_wait_ends_once_out_of_every_followed_isr_checking_each_partition_about_once():
    broker = Broker.__new__(Broker)
    broker.broker_id = STOPPING
    broker.metadata = _Metadata()
    _CountedView.isr_reads = 0
    await broker._wait_until_out_of_followed_isrs(9.0)
    assert broker.metadata.met_after == PARTITIONS
    # Once each to find the partitions followed, then once each as it leaves, plus one per
    # check. Checking every partition each time (up to the first still followed) read over a
    # million ISRs.
    assert _CountedView.isr_reads <= 3 * PARTITIONS + 2
