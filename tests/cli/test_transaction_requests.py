"""`replog transactions`' requests (cli/transaction_requests.py) against fake brokers: each
request goes to the broker that owns the answer, and abort --start-offset finds its producer."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from replog.admin import AdminError
from replog.net.client import (
    ClusterMetadata, PartitionMetadata, ProducerState, TopicMetadata, TransactionDescription, TransactionListing,
)
from replog.cli.transaction_requests import AbortSpec, Transactions
from replog.storage.control_batches import ControlType, Marker

ADDRESSES = {0: ("127.0.0.1", 1000), 1: ("127.0.0.1", 1001), 2: ("127.0.0.1", 1002)}
LEADER = 2
COORDINATOR = 1
OPEN = ProducerState(producer_id=7, producer_epoch=3, last_sequence=4, last_timestamp_ms=99, coordinator_epoch=-1,
                     current_txn_start_offset=120)
IDLE = ProducerState(producer_id=8, producer_epoch=0, last_sequence=9, last_timestamp_ms=98, coordinator_epoch=5,
                     current_txn_start_offset=-1)


class FakeBroker:
    def __init__(self, broker_id: int):
        self.broker_id = broker_id
        self.markers: list[tuple] = []

    async def metadata(self, topics):
        partitions = {0: PartitionMetadata(ErrorCode.none, LEADER, 4, (2, 0, 1), (2, 0, 1))}
        return ClusterMetadata(0, {}, {"t": TopicMetadata(ErrorCode.none, partitions)})

    async def find_transaction_coordinator(self, transactional_id):
        return ErrorCode.none, COORDINATOR

    async def describe_producers(self, topic, partition):
        assert self.broker_id == LEADER, "asked a broker that does not lead the partition"
        return ErrorCode.none, [OPEN, IDLE]

    async def describe_transactions(self, ids):
        assert self.broker_id == COORDINATOR, "asked a broker that does not coordinate the id"
        return [TransactionDescription(ErrorCode.none, ids[0], "Ongoing", 60000, 5, 7, 3, (("t", 0),))]

    async def list_transactions(self, states, producer_ids, duration_ms):
        return ErrorCode.none, [TransactionListing(f"id-{self.broker_id}", self.broker_id, "Ongoing")]

    async def write_txn_markers(self, writes):
        assert self.broker_id == LEADER, "a marker written by a broker that does not lead the partition"
        self.markers += [(write.marker, tuple(write.partitions)) for write in writes]
        return {(write.marker.producer_id, *partition): ErrorCode.none for write in writes for partition in write.partitions}


def transactions() -> tuple[Transactions, dict[int, FakeBroker]]:
    brokers = {broker_id: FakeBroker(broker_id) for broker_id in ADDRESSES}
    by_address = {address: brokers[broker_id] for broker_id, address in ADDRESSES.items()}

    async def connect(address):
        return by_address[address]

    return Transactions(ADDRESSES, connect), brokers


def test_abort_by_start_offset_has_the_leader_write_the_open_producer_s_abort_marker():
    found, brokers = transactions()

    async def abort():
        spec = await found.abort_spec("t", 0, 120)
        return spec, await found.abort("t", 0, spec)

    spec, writer = asyncio.run(abort())
    assert spec == AbortSpec(7, 3, 0)  # a producer with no marker yet: coordinator epoch 0, as Kafka's tool sends
    assert writer == LEADER
    assert brokers[LEADER].markers == [(Marker(7, 3, ControlType.ABORT, 0), (("t", 0),))]


def test_abort_by_a_start_offset_no_transaction_starts_at_is_refused():
    found, _ = transactions()
    with pytest.raises(AdminError, match="no open transaction starts at offset 121"):
        asyncio.run(found.abort_spec("t", 0, 121))


def test_describe_asks_the_coordinator_and_list_asks_every_broker():
    found, _ = transactions()
    coordinator, described = asyncio.run(found.describe("payments"))
    assert (coordinator, described.state, described.partitions) == (COORDINATOR, "Ongoing", (("t", 0),))
    listed = asyncio.run(found.list())
    assert [(each.transactional_id, each.coordinator) for each in listed] == [("id-0", 0), ("id-1", 1), ("id-2", 2)]
    leader, producers = asyncio.run(found.describe_producers("t", 0))
    assert (leader, producers) == (LEADER, [OPEN, IDLE])
