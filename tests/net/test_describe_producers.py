"""DescribeProducers (KIP-664): a leader lists its partitions' producers with their open
transactions' first offsets; a follower, an unknown partition or topic and a topic the client
may not Read are refused as Kafka 4.4 refuses them, word for word. The handler is called directly and its answer read
back with kio."""

from __future__ import annotations

from types import SimpleNamespace

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from replog.net import codec
from replog.net.codec import ApiKey, Request
from replog.net.handlers.producers import describe_producers
from replog.obs import BrokerMetrics
from replog.replica.manager import UnknownTopicOrPartitionError
from replog.replica.partition import ReplicaState

OPEN = SimpleNamespace(producer_id=4000, producer_epoch=3, last_sequence=41, last_timestamp_ms=1_700_000_000_000,
                       coordinator_epoch=2, current_txn_start_offset=120)
IDLE = SimpleNamespace(producer_id=4001, producer_epoch=0, last_sequence=9, last_timestamp_ms=1_700_000_000_500,
                       coordinator_epoch=-1, current_txn_start_offset=-1)


class Authorizer:
    def __init__(self, readable: set[str]):
        self.readable = readable

    def authorize(self, principal, host, operation, resource_type, name) -> bool:
        return name in self.readable


def partition(state: ReplicaState, producers: list) -> SimpleNamespace:
    return SimpleNamespace(state=state, producer_states=lambda: producers)


async def describe(services, topics: dict[str, list[int]]) -> dict:
    body = codec.build(codec.request_schema(ApiKey.DESCRIBE_PRODUCERS, 0),
                       {"topics": [{"name": name, "partition_indexes": indexes} for name, indexes in topics.items()]})
    encoded = await describe_producers(services, Request(ApiKey.DESCRIBE_PRODUCERS, 0, 1, "admin", body))
    payload = b"".join(encoded.parts)
    decoded, size = entity_reader(load_response_schema(ApiKey.DESCRIBE_PRODUCERS, 0))(payload, 0)
    assert size == len(payload)
    return {(topic.name, answer.partition_index): answer for topic in decoded.topics for answer in topic.partitions}


async def test_a_leader_lists_its_producers_and_their_open_transactions():
    hosted = {("orders", 0): partition(ReplicaState.LEADER, [OPEN, IDLE]), ("orders", 1): partition(ReplicaState.FOLLOWER, [OPEN])}

    def get_partition(topic, index):
        try:
            return hosted[topic, index]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"{topic}-{index}") from None

    services = SimpleNamespace(replicas=SimpleNamespace(get_partition=get_partition), metrics=BrokerMetrics(),
                               authorizer=Authorizer({"orders", "absent"}),
                               metadata=SimpleNamespace(topics={"orders": {}, "secret": {}}),
                               unknown_partition_error=lambda topic, index: ErrorCode.unknown_topic_or_partition)
    answered = await describe(services, {"orders": [0, 1, 7], "secret": [0], "absent": [0]})
    leader = answered["orders", 0]
    assert leader.error_code == ErrorCode.none
    assert [(state.producer_id, state.producer_epoch, state.last_sequence, state.last_timestamp, state.coordinator_epoch,
             state.current_txn_start_offset) for state in leader.active_producers] == [
        (4000, 3, 41, 1_700_000_000_000, 2, 120), (4001, 0, 9, 1_700_000_000_500, -1, -1)]
    assert answered["orders", 1].error_code == ErrorCode.not_leader_or_follower
    assert (answered["orders", 7].error_code, answered["orders", 7].error_message) == (
        ErrorCode.unknown_topic_or_partition, None)
    assert (answered["secret", 0].error_code, answered["secret", 0].error_message, answered["secret", 0].active_producers) == (
        ErrorCode.topic_authorization_failed, "Topic authorization failed.", ())
    assert (answered["absent", 0].error_code, answered["absent", 0].error_message) == (
        ErrorCode.unknown_topic_or_partition, "This server does not host this topic-partition.")
