"""Produce of transactional batches (KIP-890 part 1): a batch that would open its producer's
transaction in a partition is appended with the partition's verification guard once the
coordinator verified the partition, and refused as Kafka refuses it otherwise; other batches,
and every batch of a non-transactional request, go straight to the log. The handler is called
directly, with partitions that play the contract's part."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog import admin
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey, Request
from replog.net.handlers.produce import PartitionData, ProduceBody, TopicData, produce
from replog.obs import BrokerMetrics
from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.results import AppendResult
from replog.transactions import TRANSACTION_STATE_TOPIC
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually
from tests.support.transactional_ids import begin_transaction
from tests.support.producer_batches import producer_batch

TXN_ID, PRODUCER, OTHER_PRODUCER = "pipeline-1", (4000, 3), (4001, 0)
BATCH = bytearray(b"a transactional batch")
TRANSACTIONAL = 0x10  # the batch attributes' transactional bit
WAIT_S = 30


class TxnPartition:
    """A leader as the produce path sees it: whether a batch needs verification (`needs`), the
    guards handed out, and the guard each append carried."""

    def __init__(self, needs: tuple[int, int] | None = None):
        self.needs, self.guards, self.appended_with = needs, [], []
        self.append_started = asyncio.Event()

    def needs_verification(self, batches: bytearray) -> tuple[int, int] | None:
        return self.needs

    def verification_guard(self, producer_id: int) -> object:
        guard = object()
        self.guards.append((producer_id, guard))
        return guard

    async def append_as_leader(self, batches, acks, timeout_ms, appended=None, *, verification_guard=None) -> AppendResult:
        self.append_started.set()
        self.appended_with.append(verification_guard)
        return AppendResult(ErrorCode.none, 10, -1, 0, 1)


class Verifier:
    def __init__(self, errors: dict | None = None, released: asyncio.Event | None = None):
        self.errors, self.asked, self.released = errors or {}, [], released

    async def verify(self, transactional_id, producer_id, producer_epoch, partitions, *, abortable_known):
        self.asked.append((transactional_id, producer_id, producer_epoch, sorted(partitions), abortable_known))
        if self.released is not None:
            await self.released.wait()
        return {partition: error for partition, error in self.errors.items() if partition in partitions}


def services_of(partitions: dict, verifier: Verifier | None) -> SimpleNamespace:
    def get_partition(topic, index):
        try:
            return partitions[topic, index]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"{topic}-{index}") from None
    return SimpleNamespace(replicas=SimpleNamespace(get_partition=get_partition), metrics=BrokerMetrics(), authorizer=None,
                           transaction_verifier=verifier,
                           unknown_partition_error=lambda topic, index: ErrorCode.unknown_topic_or_partition)


def request_of(partitions, transactional_id: str | None = TXN_ID, version: int = 11,
               appends_in_order: asyncio.Lock | None = None) -> Request:
    by_topic: dict[str, list[PartitionData]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(PartitionData(index, bytearray(BATCH)))
    body = ProduceBody(transactional_id, -1, 1000, [TopicData(topic, data) for topic, data in by_topic.items()])
    return Request(ApiKey.PRODUCE, version, 1, "producer", body, appends_in_order=appends_in_order)


async def answers(services, request: Request) -> dict:
    response = await produce(services, request)
    return {(topic.name, answer.index): answer for topic in response.responses for answer in topic.partition_responses}


async def test_a_batch_opening_a_transaction_is_appended_with_its_guard_once_verified():
    opening, continuing = TxnPartition(needs=PRODUCER), TxnPartition()
    verifier = Verifier()
    services = services_of({("orders", 0): opening, ("orders", 1): continuing}, verifier)
    answered = await answers(services, request_of([("orders", 0), ("orders", 1)]))
    assert [answer.error_code for answer in answered.values()] == [ErrorCode.none, ErrorCode.none]
    assert verifier.asked == [(TXN_ID, *PRODUCER, [("orders", 0)], True)], "only the partition whose transaction opens"
    assert opening.appended_with == [opening.guards[0][1]] and opening.guards[0][0] == PRODUCER[0]
    assert continuing.appended_with == [None]


async def test_a_partition_not_in_the_transaction_is_refused_without_an_append():
    refused = TxnPartition(needs=PRODUCER)
    services = services_of({("orders", 0): refused}, Verifier({("orders", 0): ErrorCode.invalid_txn_state}))
    answer = (await answers(services, request_of([("orders", 0)])))["orders", 0]
    assert (answer.error_code, answer.error_message, answer.base_offset) == (
        ErrorCode.invalid_txn_state, "Partition was not added to the transaction", -1)
    assert refused.appended_with == []


async def test_the_coordinators_retriable_errors_become_not_enough_replicas():
    for error in (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator, ErrorCode.concurrent_transactions,
                  ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress):
        services = services_of({("orders", 0): TxnPartition(needs=PRODUCER)}, Verifier({("orders", 0): error}))
        answer = (await answers(services, request_of([("orders", 0)])))["orders", 0]
        assert answer.error_code == ErrorCode.not_enough_replicas
        assert answer.error_message == ("Unable to verify the partition has been added to the transaction. "
                                        f"Underlying error: {error.name.upper()}")
    services = services_of({("orders", 0): TxnPartition(needs=PRODUCER)},
                           Verifier({("orders", 0): ErrorCode.invalid_producer_epoch}))
    assert (await answers(services, request_of([("orders", 0)])))["orders", 0].error_code == ErrorCode.invalid_producer_epoch


async def test_clients_before_produce_v11_are_told_the_abortable_error_is_not_known():
    verifier = Verifier()
    services = services_of({("orders", 0): TxnPartition(needs=PRODUCER)}, verifier)
    await answers(services, request_of([("orders", 0)], version=10))
    await answers(services, request_of([("orders", 0)], version=11))
    assert [asked[-1] for asked in verifier.asked] == [False, True]


async def test_nothing_is_verified_for_a_request_without_a_transactional_id_or_with_verification_off():
    partition = TxnPartition(needs=PRODUCER)
    verifier = Verifier({("orders", 0): ErrorCode.invalid_txn_state})
    await answers(services_of({("orders", 0): partition}, verifier), request_of([("orders", 0)], transactional_id=None))
    await answers(services_of({("orders", 0): partition}, None), request_of([("orders", 0)]))
    assert verifier.asked == [] and partition.appended_with == [None, None]


async def test_a_transactional_batch_without_a_transactional_id_is_refused():
    """Kafka's rule: it would open a transaction no coordinator knows of, which no marker ends."""
    partitions = {("orders", 0): TxnPartition(), ("orders", 1): TxnPartition()}
    transactional = producer_batch(1, 4000, 0, 0, attributes=TRANSACTIONAL)
    plain = producer_batch(1)
    body = ProduceBody(None, -1, 1000, [TopicData("orders", [PartitionData(0, plain), PartitionData(1, transactional)])])
    answered = await answers(services_of(partitions, Verifier()), Request(ApiKey.PRODUCE, 11, 1, "producer", body))
    assert {answer.error_code for answer in answered.values()} == {ErrorCode.transactional_id_authorization_failed}
    assert [partition.appended_with for partition in partitions.values()] == [[], []]

    body = ProduceBody(None, -1, 1000, [TopicData("orders", [PartitionData(0, plain)])])
    answered = await answers(services_of(partitions, Verifier()), Request(ApiKey.PRODUCE, 11, 1, "producer", body))
    assert answered["orders", 0].error_code == ErrorCode.none


async def test_batches_of_two_producers_in_one_request_are_refused():
    services = services_of({("orders", 0): TxnPartition(needs=PRODUCER), ("orders", 1): TxnPartition(needs=OTHER_PRODUCER)},
                           Verifier())
    answered = await answers(services, request_of([("orders", 0), ("orders", 1)]))
    assert {answer.error_code for answer in answered.values()} == {ErrorCode.invalid_producer_id_mapping}
    assert services.transaction_verifier.asked == []


async def test_clients_may_not_write_the_transaction_state_topic():
    services = services_of({(TRANSACTION_STATE_TOPIC, 0): TxnPartition()}, Verifier())
    answer = (await answers(services, request_of([(TRANSACTION_STATE_TOPIC, 0)])))[TRANSACTION_STATE_TOPIC, 0]
    assert answer.error_code == ErrorCode.invalid_topic_exception


async def test_the_connections_next_appends_wait_for_a_verification():
    """A producer's next batches to a partition must not overtake the one being verified."""
    in_order, released = asyncio.Lock(), asyncio.Event()
    first, second = TxnPartition(needs=PRODUCER), TxnPartition()
    services = services_of({("orders", 0): first, ("orders", 1): second}, Verifier(released=released))
    verified = asyncio.create_task(answers(services, request_of([("orders", 0)], appends_in_order=in_order)))
    following = asyncio.create_task(answers(services, request_of([("orders", 1)], appends_in_order=in_order)))
    await eventually(lambda: services.transaction_verifier.asked, 10, "the first request's verification")
    for _ in range(10):  # the following request has every chance to run
        await asyncio.sleep(0)
    assert not second.append_started.is_set()
    released.set()
    await asyncio.gather(verified, following)
    assert first.appended_with != [None] and second.appended_with == [None]


async def test_a_broker_verifies_with_its_own_coordinator(tmp_path):
    """The whole chain on one broker: its coordinator knows the partition the producer added,
    so that batch is appended; the batch for a partition it never added is refused."""
    async with in_process_broker(tmp_path, **{"transaction.state.log.num.partitions": "1"}) as broker:
        await admin.create_topic(broker.store, "orders", 2, 1)
        await eventually(lambda: broker.serving("orders", 1), WAIT_S, "the topic led here")
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            producer = await begin_transaction(broker, connection, TXN_ID, "orders", [0])
            batch = bytes(producer_batch(2, producer.producer_id, producer.producer_epoch, 0, attributes=TRANSACTIONAL))
            answer = await connection.request(ApiKey.PRODUCE, 9, {
                "transactional_id": TXN_ID, "acks": -1, "timeout": 5000, "topic_data": [
                    {"name": "orders", "partition_data": [{"index": 0, "records": batch}, {"index": 1, "records": batch}]}]})
            answers = {each.index: each for each in answer.responses[0].partition_responses}
            assert (answers[0].error_code, answers[0].base_offset) == (ErrorCode.none, 0)
            assert (answers[1].error_code, answers[1].error_message) == (
                ErrorCode.invalid_txn_state, "Partition was not added to the transaction")
            assert broker.replicas.get_partition("orders", 1).log_end_offset == 0
