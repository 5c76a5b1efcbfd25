"""librdkafka fails exactly the records the broker names (KIP-467): of a batch for a compacted
topic, the keyless ones with INVALID_RECORD and the rest of the batch, refused with them, with
_INVALID_DIFFERENT_RECORD, as against Kafka. Named by index alone, the first keyless record was
the only INVALID_RECORD, however many others the batch held."""

from __future__ import annotations

from confluent_kafka import KafkaError, Producer

from tests.support.polling import wait_until

from .conftest import create_topic

KEYS = [b"k0", None, b"k2", None, b"k4", b"k5"]
TIMEOUT_S = 30


def test_only_the_keyless_records_of_a_batch_fail_as_invalid(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, {"cleanup.policy": "compact"})
    # One batch of all six: sent once it is full, long before linger.ms.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 10_000, "batch.num.messages": len(KEYS),
                         "enable.idempotence": False, "retries": 0})
    # Its leader known first: with retries=0, an early UNKNOWN_TOPIC_OR_PARTITION would be final.
    wait_until(lambda: leader_of(producer, topic_name) >= 0, "the producer to know the partition's leader", TIMEOUT_S)
    errors: dict[int, int] = {}
    for index, key in enumerate(KEYS):
        producer.produce(topic_name, key=key, value=b"v", partition=0,
                         on_delivery=lambda error, message, index=index: errors.update({index: error and error.code()}))
    wait_until(lambda: producer.flush(0.1) == 0, "every message reported", TIMEOUT_S)
    assert errors == {index: KafkaError.INVALID_RECORD if key is None else KafkaError._INVALID_DIFFERENT_RECORD
                      for index, key in enumerate(KEYS)}


def leader_of(producer: Producer, topic: str) -> int:
    partition = producer.list_topics(topic, timeout=TIMEOUT_S).topics[topic].partitions.get(0)
    return -1 if partition is None else partition.leader
