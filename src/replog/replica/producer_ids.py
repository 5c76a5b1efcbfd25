"""Cluster-unique producer ids for idempotent producers (InitProducerId).

As in Kafka: a broker claims a block of `BLOCK_SIZE` ids at a time by compare-and-set on
`/latest_producer_id_block` and hands them out from memory, so the store sees one write per
block, and two brokers can never hand out the same id. Ids of a block left unused when a
broker restarts are simply skipped.
"""

from __future__ import annotations

from replog.coord_backends import BadVersion, NodeExists, NoNode, Store
from replog.coord_backends import paths
from replog.coord_backends.paths import ProducerIdBlock

BLOCK_SIZE = 1000
CLAIM_ATTEMPTS_MAX = 64


class ProducerIdAllocator:
    def __init__(self, store: Store, broker_id: int):
        self._store = store
        self._broker_id = broker_id
        self._next = 0
        self._end = -1  # inclusive; empty until the first claim

    async def next_id(self) -> int:
        if self._next > self._end:
            block = await self._claim_block()
            self._next, self._end = block.block_start, block.block_end
        producer_id = self._next
        self._next += 1
        return producer_id

    async def _claim_block(self) -> ProducerIdBlock:
        for _ in range(CLAIM_ATTEMPTS_MAX):
            try:
                data, version = await self._store.get(paths.PRODUCER_ID_BLOCK)
            except NoNode:
                block = ProducerIdBlock(self._broker_id, 0, BLOCK_SIZE - 1)
                try:
                    await self._store.create(paths.PRODUCER_ID_BLOCK, block.encode())
                    return block
                except NodeExists:
                    continue
            last = ProducerIdBlock.decode(data)
            block = ProducerIdBlock(self._broker_id, last.block_end + 1, last.block_end + BLOCK_SIZE)
            try:
                await self._store.set(paths.PRODUCER_ID_BLOCK, block.encode(), version)
                return block
            except BadVersion:
                continue
        raise RuntimeError(f"could not claim a producer id block in {CLAIM_ATTEMPTS_MAX} attempts")
