"""KIP-890's verification, the leader's side: the transaction coordinator of a transactional id
is found from __transaction_state's metadata, asked directly when it is this broker's, else with
AddPartitionsToTxn verify_only (built and answered through kio here), and its answers mapped to
the errors the produce path gives, as Kafka's AddPartitionsToTxnManager maps them."""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog import admin
from replog.coord_backends.paths import BrokerRegistration
from replog.net import codec
from replog.net.client import BrokerConnection, NoCommonVersion
from replog.net.codec import ApiKey
from replog.net.transaction_verification import TransactionVerifier
from replog.replication.metadata_cache import MetadataCache, PartitionView
from replog.transactions import TRANSACTION_STATE_TOPIC, partition_for_transactional_id
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually
from tests.support.transactional_ids import begin_transaction

THIS_BROKER, OTHER_BROKER = 0, 1
STATE_PARTITIONS = 4
TXN_ID, PRODUCER_ID, EPOCH = "pipeline-1", 4000, 3
ORDERS_0, ORDERS_1, OUT_0 = ("orders", 0), ("orders", 1), ("out", 0)
WAIT_S = 30


def metadata_led_by(leader: int | None) -> MetadataCache:
    metadata = MetadataCache(store=None)
    metadata.brokers = {broker: BrokerRegistration("127.0.0.1", 9090 + broker) for broker in (THIS_BROKER, OTHER_BROKER)}
    if leader is not None:
        metadata.topics = {TRANSACTION_STATE_TOPIC: {
            index: PartitionView(replicas=(0, 1), leader=leader, leader_epoch=1, isr=(0, 1)) for index in range(STATE_PARTITIONS)}}
    return metadata


class LocalCoordinator:
    def __init__(self, errors: dict):
        self.errors, self.asked = errors, []

    def verify_partitions(self, transactional_id, producer_id, producer_epoch, partitions):
        self.asked.append((transactional_id, producer_id, producer_epoch, sorted(partitions)))
        return {partition: self.errors.get(partition, ErrorCode.none) for partition in partitions}


class RemoteCoordinator:
    """The other broker: AddPartitionsToTxn built from the verifier's values and answered with
    `answer(request)`'s values, both through kio's schemas."""

    def __init__(self, answer, version: int = 5):
        self.answer, self.version, self.requests = answer, version, []

    def version_for(self, api_key: int) -> int:
        assert api_key == ApiKey.ADD_PARTITIONS_TO_TXN
        if self.version is None:
            raise NoCommonVersion("no AddPartitionsToTxn")
        return self.version

    async def request(self, api_key: int, api_version: int, values: dict):
        request = codec.build(codec.request_schema(api_key, api_version), values)
        self.requests.append((api_version, request))
        return codec.build(codec.response_schema(api_key, api_version), self.answer(request))

    async def call(self, broker_id: int, send):
        assert broker_id == OTHER_BROKER
        return await send(self)


def answering(partition_errors: dict, error_code: ErrorCode = ErrorCode.none):
    def answer(request) -> dict:
        [transaction] = request.transactions
        return {"throttle_time": 0, "error_code": error_code, "results_by_transaction": [{
            "transactional_id": transaction.transactional_id,
            "topic_results": [{"name": topic.name, "results_by_partition": [
                {"partition_index": index, "partition_error_code": partition_errors.get((topic.name, index), ErrorCode.none)}
                for index in topic.partitions]} for topic in transaction.topics]}]}
    return answer


def verifier(leader: int | None, coordinator=None, remote: RemoteCoordinator | None = None) -> TransactionVerifier:
    async def unreachable(broker_id, send):
        raise AssertionError("no remote call expected")
    return TransactionVerifier(THIS_BROKER, metadata_led_by(leader), coordinator or LocalCoordinator({}),
                               remote.call if remote else unreachable)


async def verify(checker: TransactionVerifier, partitions, abortable_known: bool = True) -> dict:
    return await checker.verify(TXN_ID, PRODUCER_ID, EPOCH, partitions, abortable_known=abortable_known)


async def test_this_brokers_coordinator_is_asked_directly():
    local = LocalCoordinator({ORDERS_1: ErrorCode.invalid_txn_state})
    assert await verify(verifier(THIS_BROKER, local), [ORDERS_0, ORDERS_1]) == {ORDERS_1: ErrorCode.invalid_txn_state}
    assert local.asked == [(TXN_ID, PRODUCER_ID, EPOCH, [ORDERS_0, ORDERS_1])]


async def test_a_remote_coordinator_gets_a_verify_only_add_partitions_request():
    remote = RemoteCoordinator(answering({OUT_0: ErrorCode.invalid_txn_state}))
    assert await verify(verifier(OTHER_BROKER, remote=remote), [ORDERS_0, ORDERS_1, OUT_0]) == {
        OUT_0: ErrorCode.invalid_txn_state}
    [(version, request)] = remote.requests
    [transaction] = request.transactions
    assert version == 5
    assert (transaction.transactional_id, transaction.producer_id, transaction.producer_epoch, transaction.verify_only) == (
        TXN_ID, PRODUCER_ID, EPOCH, True)
    assert sorted((topic.name, sorted(topic.partitions)) for topic in transaction.topics) == [("orders", [0, 1]), ("out", [0])]


async def test_the_coordinator_is_the_leader_of_the_ids_state_partition():
    metadata = metadata_led_by(THIS_BROKER)
    owner = partition_for_transactional_id(TXN_ID, STATE_PARTITIONS)
    metadata.topics[TRANSACTION_STATE_TOPIC][owner] = PartitionView(replicas=(0, 1), leader=OTHER_BROKER, isr=(0, 1))
    remote = RemoteCoordinator(answering({}))
    checker = TransactionVerifier(THIS_BROKER, metadata, LocalCoordinator({}), remote.call)
    assert await verify(checker, [ORDERS_0]) == {}
    assert len(remote.requests) == 1


async def test_without_a_live_coordinator_nothing_is_verified():
    assert await verify(verifier(None), [ORDERS_0]) == {ORDERS_0: ErrorCode.coordinator_not_available}
    leaderless = verifier(-1)
    assert await verify(leaderless, [ORDERS_0]) == {ORDERS_0: ErrorCode.coordinator_not_available}
    gone = verifier(OTHER_BROKER)
    del gone._metadata.brokers[OTHER_BROKER]
    assert await verify(gone, [ORDERS_0]) == {ORDERS_0: ErrorCode.coordinator_not_available}


async def test_no_answer_is_a_network_exception():
    async def lost(broker_id, send):
        raise ConnectionError("connection to broker 1 lost")
    checker = TransactionVerifier(THIS_BROKER, metadata_led_by(OTHER_BROKER), LocalCoordinator({}), lost)
    assert await verify(checker, [ORDERS_0, OUT_0]) == {ORDERS_0: ErrorCode.network_exception,
                                                        OUT_0: ErrorCode.network_exception}


async def test_errors_are_mapped_as_kafkas_manager_maps_them():
    remote = RemoteCoordinator(answering({ORDERS_0: ErrorCode.producer_fenced, ORDERS_1: ErrorCode.transaction_abortable,
                                          OUT_0: ErrorCode.concurrent_transactions}))
    checker = verifier(OTHER_BROKER, remote=remote)
    assert await verify(checker, [ORDERS_0, ORDERS_1, OUT_0]) == {
        ORDERS_0: ErrorCode.invalid_producer_epoch, ORDERS_1: ErrorCode.transaction_abortable,
        OUT_0: ErrorCode.concurrent_transactions}
    assert (await verify(checker, [ORDERS_1], abortable_known=False)) == {ORDERS_1: ErrorCode.invalid_txn_state}


async def test_a_request_refused_as_a_whole_refuses_every_partition():
    refused = verifier(OTHER_BROKER, remote=RemoteCoordinator(answering({}, ErrorCode.cluster_authorization_failed)))
    assert await verify(refused, [ORDERS_0, OUT_0]) == {ORDERS_0: ErrorCode.invalid_txn_state,
                                                        OUT_0: ErrorCode.invalid_txn_state}
    loading = verifier(OTHER_BROKER, remote=RemoteCoordinator(answering({}, ErrorCode.coordinator_load_in_progress)))
    assert await verify(loading, [ORDERS_0]) == {ORDERS_0: ErrorCode.coordinator_load_in_progress}


async def test_a_partition_the_answer_leaves_out_is_not_verified():
    def forgetful(request) -> dict:
        return answering({})(SimpleNamespace(transactions=[SimpleNamespace(
            transactional_id=TXN_ID, topics=[SimpleNamespace(name="orders", partitions=[0])])]))
    checker = verifier(OTHER_BROKER, remote=RemoteCoordinator(forgetful))
    assert await verify(checker, [ORDERS_0, OUT_0]) == {OUT_0: ErrorCode.invalid_txn_state}


async def test_a_coordinator_too_old_to_verify_lets_the_batches_through():
    for version in (3, None):
        remote = RemoteCoordinator(answering({ORDERS_0: ErrorCode.invalid_txn_state}), version=version)
        assert await verify(verifier(OTHER_BROKER, remote=remote), [ORDERS_0]) == {}
        assert remote.requests == []


async def test_another_brokers_coordinator_answers_over_the_wire(tmp_path):
    """Against a real broker's AddPartitionsToTxn handler and coordinator: a partition its
    producer added is verified, one it did not add is not."""
    async with in_process_broker(tmp_path, **{"transaction.state.log.num.partitions": "1"}) as broker:
        await admin.create_topic(broker.store, "orders", 2, 1)
        await eventually(lambda: broker.serving("orders", 1), WAIT_S, "the topic led there")
        async with await BrokerConnection.open("127.0.0.1", broker.server.port) as connection:
            producer = await begin_transaction(broker, connection, TXN_ID, "orders", [0])

            async def call(broker_id, send):
                assert broker_id == broker.broker_id
                return await send(connection)
            checker = TransactionVerifier(broker.broker_id + 1, broker.metadata, LocalCoordinator({}), call)
            unverified = await checker.verify(TXN_ID, producer.producer_id, producer.producer_epoch, [ORDERS_0, ORDERS_1],
                                              abortable_known=False)
            assert unverified == {ORDERS_1: ErrorCode.invalid_txn_state}
