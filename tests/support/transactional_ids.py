"""A transactional id begun on a broker in the test's process, as a producer begins it: the
broker's __transaction_state made and loaded, a producer id and epoch from InitProducerId, and
partitions added to the transaction (AddPartitionsToTxn, a client's version)."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.support.polling import eventually

LOAD_WAIT_S = 30


async def begin_transaction(broker, connection: BrokerConnection, transactional_id: str, topic: str,
                            added: list[int]) -> Any:
    """The InitProducerId answer (producer_id, producer_epoch) of `transactional_id`, whose
    transaction now holds partitions `added` of `topic`."""
    broker.create_transaction_state_topic()

    async def init_producer_id():
        answer = await connection.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": transactional_id, "transaction_timeout": 60_000, "producer_id": -1, "producer_epoch": -1})
        return answer if answer.error_code == ErrorCode.none else None

    await eventually(init_producer_id, LOAD_WAIT_S, "the transaction coordinator loaded")
    producer = await init_producer_id()
    answer = await connection.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
        "v3_and_below_transactional_id": transactional_id, "v3_and_below_producer_id": producer.producer_id,
        "v3_and_below_producer_epoch": producer.producer_epoch,
        "v3_and_below_topics": [{"name": topic, "partitions": added}]})
    assert [result.partition_error_code for each in answer.results_by_topic_v3_and_below
            for result in each.results_by_partition] == [ErrorCode.none] * len(added)
    return producer
