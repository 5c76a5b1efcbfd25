"""The transaction APIs spoken over the wire to one broker in this process: the coordinator found
with FindCoordinator key type 1 (which makes __transaction_state), a producer initialised,
fenced and refused as Kafka refuses it, verify_only, and the administration APIs."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from replog import admin
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from replog.transactions import TRANSACTION_STATE_TOPIC
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

TOPIC, ID = "out", "handler-tx"
WAIT_S = 30


@pytest.fixture
async def connection(tmp_path):
    async with in_process_broker(tmp_path, **{"transaction.state.log.num.partitions": "3"}) as broker:
        await admin.create_topic(broker.store, TOPIC, 2, 1)
        await eventually(lambda: broker.serving(TOPIC, 1), WAIT_S, "the topic led here")
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S) as opened:
            yield broker, opened


async def init(connection, version: int = 4, producer_id: int = -1, epoch: int = -1):
    return await connection.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": ID, "transaction_timeout": 60_000, "producer_id": producer_id, "producer_epoch": epoch})


async def add_partitions(connection, producer_id: int, epoch: int, topics: list[dict], version: int = 3) -> dict:
    answer = await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, version, {
        "v3_and_below_transactional_id": ID, "v3_and_below_producer_id": producer_id,
        "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": topics})
    return {(topic.name, partition.partition_index): partition.partition_error_code
            for topic in answer.results_by_topic_v3_and_below for partition in topic.results_by_partition}


async def coordinated(connection) -> None:
    """Once the coordinator of ID is found (which makes __transaction_state) and has loaded it."""
    async def found() -> bool:
        answer = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": ID, "key_type": 1})
        return answer.error_code == ErrorCode.none and answer.node_id == 1

    async def loaded() -> bool:
        answer = await connection.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [ID]})
        return answer.transaction_states[0].error_code == ErrorCode.transactional_id_not_found

    await eventually(found, WAIT_S, "the transaction coordinator")
    await eventually(loaded, WAIT_S, "the coordinator to load")


async def test_a_transaction_is_begun_and_ended_through_the_coordinator_found_by_key_type_1(connection):
    broker, connection = connection
    await coordinated(connection)
    assert len((await admin.describe_topic(broker.store, TRANSACTION_STATE_TOPIC)).partitions) == 3
    configs = {entry.name: entry.value for entry in await admin.describe_topic_config(broker.store, TRANSACTION_STATE_TOPIC)}
    assert configs["cleanup.policy"] == "compact"
    assert configs["min.insync.replicas"] == "1"  # at most its replicas, one here
    first = await init(connection)
    assert first.error_code == ErrorCode.none
    producer_id, epoch = first.producer_id, first.producer_epoch
    assert await add_partitions(connection, producer_id, epoch, [{"name": TOPIC, "partitions": [0, 1]}]) == {
        (TOPIC, 0): ErrorCode.none, (TOPIC, 1): ErrorCode.none}
    # One refused partition fails the request: the rest are not attempted. Internal topics join
    # through AddOffsetsToTxn only.
    assert await add_partitions(connection, producer_id, epoch, [{"name": TOPIC, "partitions": [0, 9]}]) == {
        (TOPIC, 0): ErrorCode.operation_not_attempted, (TOPIC, 9): ErrorCode.unknown_topic_or_partition}
    assert await add_partitions(connection, producer_id, epoch, [{"name": "__consumer_offsets", "partitions": [0]}]) == {
        ("__consumer_offsets", 0): ErrorCode.topic_authorization_failed}
    offsets = await connection.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
        "transactional_id": ID, "producer_id": producer_id, "producer_epoch": epoch, "group_id": "g"})
    assert offsets.error_code == ErrorCode.none

    verified = await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, 5, {"transactions": [
        {"transactional_id": ID, "producer_id": producer_id, "producer_epoch": epoch, "verify_only": True,
         "topics": [{"name": TOPIC, "partitions": [0]}]}]})
    (result,) = verified.results_by_transaction
    assert [(partition.partition_index, partition.partition_error_code)
            for partition in result.topic_results[0].results_by_partition] == [(0, ErrorCode.none)]

    (state,) = await connection.describe_transactions([ID])
    assert (state.error_code, state.state, state.producer_id) == (ErrorCode.none, "Ongoing", producer_id)
    assert state.start_time_ms == broker.transactions.describe([ID])[0].start_timestamp_ms
    assert set(state.partitions) >= {(TOPIC, 0), (TOPIC, 1)}
    listed = await connection.request(ApiKey.LIST_TRANSACTIONS, 1, {
        "state_filters": ["Ongoing", "Nonsense"], "producer_id_filters": [], "duration_filter": -1})
    assert [(item.transactional_id, item.transaction_state) for item in listed.transaction_states] == [(ID, "Ongoing")]
    assert listed.unknown_state_filters == ("Nonsense",)

    ended = await connection.request(ApiKey.END_TXN, 3, {
        "transactional_id": ID, "producer_id": producer_id, "producer_epoch": epoch, "committed": True})
    assert ended.error_code == ErrorCode.none
    (state,) = (await connection.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [ID]})).transaction_states
    assert state.transaction_state in ("PrepareCommit", "CompleteCommit")


async def test_producers_are_fenced_with_the_error_their_version_knows(connection):
    _, connection = connection
    await coordinated(connection)
    zombie = await init(connection)
    current = await init(connection)
    assert (current.producer_id, current.producer_epoch) == (zombie.producer_id, zombie.producer_epoch + 1)
    (described,) = await connection.describe_transactions([ID])
    assert (described.state, described.start_time_ms) == ("Empty", -1)  # no transaction open: Kafka's null
    assert await add_partitions(connection, zombie.producer_id, zombie.producer_epoch,
                                [{"name": TOPIC, "partitions": [0]}]) == {(TOPIC, 0): ErrorCode.producer_fenced}
    assert await add_partitions(connection, zombie.producer_id, zombie.producer_epoch,
                                [{"name": TOPIC, "partitions": [0]}], version=1) == {(TOPIC, 0): ErrorCode.invalid_producer_epoch}
    for version, expected in ((1, ErrorCode.invalid_producer_epoch), (3, ErrorCode.producer_fenced)):
        ended = await connection.request(ApiKey.END_TXN, version, {
            "transactional_id": ID, "producer_id": zombie.producer_id, "producer_epoch": zombie.producer_epoch,
            "committed": True})
        assert ended.error_code == expected
    stale = await init(connection, version=3, producer_id=zombie.producer_id, epoch=zombie.producer_epoch)
    assert stale.error_code == ErrorCode.invalid_producer_epoch  # InitProducerId learnt PRODUCER_FENCED at v4
    too_long = await connection.request(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": ID, "transaction_timeout": 900_001, "producer_id": -1, "producer_epoch": -1})
    assert too_long.error_code == ErrorCode.invalid_transaction_timeout
