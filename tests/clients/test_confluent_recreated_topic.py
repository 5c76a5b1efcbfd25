"""librdkafka keeps producing to a topic deleted and created again with fewer partitions. It takes
a smaller partition count for the same topic only when the topic's id changed (KIP-516): with
the null id Metadata once answered, a producer kept the 10 partitions of the deleted topic for
the new one of 3, and its messages for partitions 3-9 never left.

Messages the producer held for the deleted topic's partitions when it learned of the new topic
fail with librdkafka's own errors (_UNKNOWN_PARTITION, _DESTROY), as they do against Kafka; later
ones go to partitions 0-2."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from tests.support.polling import wait_until

from .conftest import create_topic

MESSAGES = 60
TIMEOUT_S = 30
# What librdkafka fails the messages held for partitions of the deleted topic with.
PURGED = {KafkaError._UNKNOWN_PARTITION, KafkaError._DESTROY}


def produce_round(producer: Producer, topic: str) -> tuple[list[int], list[KafkaError]]:
    """(the partitions of the messages delivered, the errors of those not) of MESSAGES messages
    left to the partitioner, once each is delivered or failed (within TIMEOUT_S)."""
    delivered, errors = [], []

    def report(error, message) -> None:
        (errors if error else delivered).append(error or message.partition())

    for index in range(MESSAGES):
        producer.produce(topic, key=str(index).encode(), value=b"v", on_delivery=report)
    wait_until(lambda: producer.flush(0.1) == 0, "every message delivered or failed", TIMEOUT_S)
    return delivered, errors


def test_a_producer_follows_a_topic_created_again_with_fewer_partitions(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, partitions=10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "message.timeout.ms": TIMEOUT_S * 1000})
    delivered, errors = produce_round(producer, topic_name)
    assert errors == [] and len(set(delivered)) > 3

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic_name])[topic_name].result(TIMEOUT_S)
    wait_until(lambda: topic_name not in admin.list_topics(timeout=TIMEOUT_S).topics, "the topic gone", TIMEOUT_S)
    create_topic(broker.bootstrap, topic_name, partitions=3)

    def all_delivered_to_the_new_partitions() -> bool:
        delivered, errors = produce_round(producer, topic_name)
        assert {error.code() for error in errors} <= PURGED, [str(error) for error in errors]
        assert set(delivered) <= {0, 1, 2}
        return not errors

    wait_until(all_delivered_to_the_new_partitions, "a round of messages all delivered", TIMEOUT_S)
