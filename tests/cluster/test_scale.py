"""A topic of 500 partitions with three replicas each, over ZooKeeper and over a stock etcd (at
most 128 operations per transaction): created through confluent-kafka in one request, led with
a full ISR, and every partition takes and serves a record."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.polling import wait_until

PARTITIONS = 500
REPLICAS = 3
WAIT_S = 180


def fully_led(admin: AdminClient, topic: str) -> bool:
    metadata = admin.list_topics(topic, timeout=WAIT_S).topics[topic]
    return (metadata.error is None and len(metadata.partitions) == PARTITIONS
            and all(partition.leader >= 0 and len(partition.isrs) == REPLICAS for partition in metadata.partitions.values()))


def test_a_topic_of_500_partitions_is_created_led_and_serves_every_partition(cluster):
    topic = "wide"
    # librdkafka gives up on any request after socket.timeout.ms (60 s), whatever its own timeout.
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": WAIT_S * 1000})
    admin.create_topics([NewTopic(topic, PARTITIONS, REPLICAS)], request_timeout=WAIT_S,
                        operation_timeout=WAIT_S)[topic].result(WAIT_S)
    wait_until(lambda: fully_led(admin, topic), "every partition led with a full ISR", WAIT_S)

    failures = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 20})
    for partition in range(PARTITIONS):
        producer.produce(topic, value=str(partition).encode(), partition=partition,
                         on_delivery=lambda error, message: failures.append(error) if error else None)
    assert producer.flush(WAIT_S) == 0
    assert failures == []

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wide-reader", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, 0) for partition in range(PARTITIONS)])
        read: dict[int, bytes] = {}

        def all_read() -> bool:
            for message in consumer.consume(PARTITIONS, timeout=1):
                if message.error() is None:
                    read[message.partition()] = message.value()
            return len(read) == PARTITIONS

        wait_until(all_read, "a record read from every partition", WAIT_S)
        assert read == {partition: str(partition).encode() for partition in range(PARTITIONS)}
    finally:
        consumer.close()
