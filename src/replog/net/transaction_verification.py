"""Whether a transactional batch's partition is in its producer's transaction, asked of the
transaction coordinator before the partition leader appends the batch (KIP-890 part 1,
docs/design.md §16.5).

A producer adds a partition to its transaction (AddPartitionsToTxn) before it writes there. A
producer that skips that, or a batch that arrives after its transaction ended (a produce
retried late, a zombie's), would otherwise open a transaction the coordinator knows nothing
of, which no marker ever ends: the partition's last stable offset stops there for good. So the
first transactional batch a producer sends a partition in a transaction (the one that would
open it there: Partition.needs_verification) is appended only once the coordinator confirmed
that the partition is in the producer's ongoing transaction, at the epoch the batch carries.

The coordinator of a transactional id leads its __transaction_state partition: this broker's
own coordinator is asked directly; another broker's with AddPartitionsToTxn v4+ and
`verify_only`, over the inter-broker connection. Errors as Kafka's AddPartitionsToTxnManager
gives them to the produce path: no coordinator known -> COORDINATOR_NOT_AVAILABLE; no answer ->
NETWORK_EXCEPTION; the request refused as a whole (CLUSTER_AUTHORIZATION_FAILED: the client must
not see that) -> INVALID_TXN_STATE; PRODUCER_FENCED -> INVALID_PRODUCER_EPOCH, which producers
handle here; TRANSACTION_ABORTABLE -> INVALID_TXN_STATE for clients too old to know it. A
coordinator too old to verify (no AddPartitionsToTxn v4) is taken as verifying everything, as
Kafka does during an upgrade.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from replog.replication.metadata_cache import MetadataCache
from replog.transactions import TRANSACTION_STATE_TOPIC, partition_for_transactional_id

from .client import BrokerConnection, NoCommonVersion
from .codec import ApiKey


FIRST_VERIFY_ONLY_VERSION = 4
TopicPartition = tuple[str, int]
# What a remote coordinator's answer as a whole becomes for each partition asked.
_REQUEST_ERRORS = {ErrorCode.cluster_authorization_failed: ErrorCode.invalid_txn_state}


class VerifiesPartitions(Protocol):
    """This broker's transaction coordinator (transactions/coordinator.py), as the verifier asks it."""

    def verify_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]: ...


Call = Callable[[int, Callable[[BrokerConnection], Awaitable[Any]]], Awaitable[Any]]


class TransactionVerifier:
    """Asks the coordinator of a transactional id whether partitions are in its transaction.

    `metadata`: where __transaction_state's partitions are led; `coordinator`: this broker's own;
    `call(broker_id, request)`: a request over the inter-broker connection to a broker
    (LeaderConnections.call, which raises ConnectionError when no answer comes)."""

    def __init__(self, broker_id: int, metadata: MetadataCache, coordinator: VerifiesPartitions, call: Call):
        self._broker_id = broker_id
        self._metadata = metadata
        self._coordinator = coordinator
        self._call = call

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: Collection[TopicPartition], *, abortable_known: bool) -> dict[TopicPartition, ErrorCode]:
        """The partitions of `partitions` not verified, each with its error (none: all verified).
        `abortable_known`: the client handles TRANSACTION_ABORTABLE (Produce v11+)."""
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            errors = dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        elif coordinator == self._broker_id:
            errors = self._coordinator.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)
        else:
            errors = await self._ask(coordinator, transactional_id, producer_id, producer_epoch, partitions)
        unverified = {}
        for partition, error in errors.items():  # bounded by the partitions of one request
            if error == ErrorCode.producer_fenced:
                error = ErrorCode.invalid_producer_epoch
            elif error == ErrorCode.transaction_abortable and not abortable_known:
                error = ErrorCode.invalid_txn_state
            if error != ErrorCode.none:
                unverified[partition] = ErrorCode(error)
        return unverified

    def _coordinator_of(self, transactional_id: str) -> int | None:
        """The live broker leading the transactional id's __transaction_state partition, if any."""
        partitions = self._metadata.topics.get(TRANSACTION_STATE_TOPIC)
        if not partitions:
            return None
        view = partitions.get(partition_for_transactional_id(transactional_id, len(partitions)))
        if view is None or view.leader not in self._metadata.brokers:  # no leader, or not alive
            return None
        return view.leader

    async def _ask(self, broker_id: int, transactional_id: str, producer_id: int, producer_epoch: int,
                   partitions: Collection[TopicPartition]) -> dict[TopicPartition, int]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        values = {"transactions": [{
            "transactional_id": transactional_id, "producer_id": producer_id, "producer_epoch": producer_epoch,
            "verify_only": True,
            "topics": [{"name": topic, "partitions": indexes} for topic, indexes in by_topic.items()],
        }]}

        async def send(connection: BrokerConnection) -> Any:
            try:
                version = connection.version_for(ApiKey.ADD_PARTITIONS_TO_TXN)
            except NoCommonVersion:
                return None
            if version < FIRST_VERIFY_ONLY_VERSION:
                return None
            return await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, values)

        try:
            answer = await self._call(broker_id, send)
        except ConnectionError:
            return dict.fromkeys(partitions, ErrorCode.network_exception)
        if answer is None:
            return {}
        if answer.error_code != ErrorCode.none:
            return dict.fromkeys(partitions, _REQUEST_ERRORS.get(answer.error_code, answer.error_code))
        errors = {}
        for transaction in answer.results_by_transaction:  # one: this request's
            for topic in transaction.topic_results:
                for result in topic.results_by_partition:
                    errors[topic.name, result.partition_index] = result.partition_error_code
        # A partition the answer leaves out was not verified.
        return {partition: errors.get(partition, ErrorCode.invalid_txn_state) for partition in partitions}
