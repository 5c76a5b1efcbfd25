"""`replog transactions list|describe|describe-producers|abort`, as kafka-transactions.sh does
them (docs/design.md §16.7).

Transactions live in the brokers, not in the store: each transactional id's state with its
coordinator (the leader of its __transaction_state partition), each partition's producers and
open transactions with the partition's leader. Every request goes to the broker that owns the
answer, through replog's own client (net/client.py), whichever door (--coord, --bootstrap-server)
found the brokers.

    list                every transaction each running broker coordinates, merged
    describe            one transactional id's state, asked of its coordinator
    describe_producers  a partition's active producers, asked of its leader
    abort               a hanging transaction of a partition ended by an abort marker written
                        by the partition's leader (WriteTxnMarkers), as Kafka's Admin
                        abortTransaction does; given its producer id, epoch and coordinator
                        epoch, or its first offset, whose producer DescribeProducers names
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Collection, Mapping

from kio.schema.errors import ErrorCode

from replog.admin import AdminError
from replog.admin.errors import UnknownTopicOrPartition, error_for_code
from replog.net.client import BrokerConnection, BrokerUnavailable, MarkerWrite, ProducerState, TransactionDescription
from replog.storage.control_batches import ControlType, Marker

Connect = Callable[[tuple[str, int]], Awaitable[BrokerConnection]]


@dataclasses.dataclass(frozen=True)
class Listed:
    transactional_id: str
    coordinator: int
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True)
class AbortSpec:
    """The transaction to abort: its producer's id and epoch and the epoch of the coordinator
    that wrote its last marker, as DescribeProducers tells them."""
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int


class Transactions:
    def __init__(self, addresses: Mapping[int, tuple[str, int]], connect: Connect):
        """`addresses`: the running brokers'; `connect`: a connection to one of them (kept by the Admin)."""
        self._addresses = dict(addresses)
        self._connect = connect

    async def list(self, states: Collection[str] = (), producer_ids: Collection[int] = (),
                   duration_ms: int = -1) -> list[Listed]:
        """Every transaction each running broker coordinates, filtered as ListTransactions does,
        by transactional id."""
        listed = []
        for broker, address in sorted(self._addresses.items()):
            error, transactions = await (await self._connect(address)).list_transactions(states, producer_ids, duration_ms)
            if error != ErrorCode.none:
                raise error_for_code(error, f"broker {broker} refused ListTransactions: {error.name}")
            listed += [Listed(found.transactional_id, broker, found.producer_id, found.state) for found in transactions]
        return sorted(listed, key=lambda found: found.transactional_id)

    async def describe(self, transactional_id: str) -> tuple[int, TransactionDescription]:
        """(coordinator, description) of `transactional_id`."""
        coordinator = await self._coordinator(transactional_id)
        [described] = await (await self._connect(self._address(coordinator))).describe_transactions([transactional_id])
        if described.error_code != ErrorCode.none:
            raise error_for_code(described.error_code, f"transactional id {transactional_id!r}: {described.error_code.name}")
        return coordinator, described

    async def describe_producers(self, topic: str, partition: int) -> tuple[int, list[ProducerState]]:
        """(leader, its active producers) of the partition."""
        leader = await self._leader(topic, partition)
        error, producers = await (await self._connect(self._address(leader))).describe_producers(topic, partition)
        if error != ErrorCode.none:
            raise error_for_code(error, f"{topic}-{partition} on broker {leader}: DescribeProducers answered {error.name}")
        return leader, producers

    async def abort_spec(self, topic: str, partition: int, start_offset: int) -> AbortSpec:
        """The producer whose open transaction in the partition starts at `start_offset`."""
        _leader, producers = await self.describe_producers(topic, partition)
        found = [producer for producer in producers if producer.current_txn_start_offset == start_offset]
        if not found:
            open_at = sorted(producer.current_txn_start_offset for producer in producers if producer.current_txn_start_offset >= 0)
            raise AdminError(ErrorCode.invalid_request, f"{topic}-{partition}: no open transaction starts at offset "
                                                        f"{start_offset} (open ones start at {open_at or 'none'})")
        # A producer that never had a marker answers -1, which a marker cannot carry (Kafka's tool does the same).
        return AbortSpec(found[0].producer_id, found[0].producer_epoch, max(found[0].coordinator_epoch, 0))

    async def abort(self, topic: str, partition: int, spec: AbortSpec) -> int:
        """The abort marker written by the partition's leader; which broker wrote it."""
        leader = await self._leader(topic, partition)
        marker = Marker(spec.producer_id, spec.producer_epoch, ControlType.ABORT, spec.coordinator_epoch)
        written = await (await self._connect(self._address(leader))).write_txn_markers([MarkerWrite(marker, [(topic, partition)])])
        error = written[(spec.producer_id, topic, partition)]
        if error != ErrorCode.none:
            raise error_for_code(error, f"{topic}-{partition} on broker {leader}: the abort marker was refused: {error.name}")
        return leader

    async def _coordinator(self, transactional_id: str) -> int:
        error, coordinator = await (await self._any()).find_transaction_coordinator(transactional_id)
        if error != ErrorCode.none:
            raise error_for_code(error, f"no coordinator for transactional id {transactional_id!r}: {error.name}")
        return coordinator

    async def _leader(self, topic: str, partition: int) -> int:
        described = (await (await self._any()).metadata([topic])).topics.get(topic)
        if described is None or described.error_code != ErrorCode.none or partition not in described.partitions:
            raise UnknownTopicOrPartition(f"no partition {topic}-{partition}")
        leader = described.partitions[partition].leader_id
        if leader < 0:
            raise error_for_code(ErrorCode.leader_not_available, f"{topic}-{partition} has no leader")
        return leader

    async def _any(self) -> BrokerConnection:
        for address in self._addresses.values():
            try:
                return await self._connect(address)
            except BrokerUnavailable:
                continue
        raise error_for_code(ErrorCode.broker_not_available, "no running broker answers")

    def _address(self, broker: int) -> tuple[str, int]:
        address = self._addresses.get(broker)
        if address is None:
            raise error_for_code(ErrorCode.broker_not_available, f"broker {broker} is not running")
        return address
