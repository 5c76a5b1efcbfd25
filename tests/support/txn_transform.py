"""confluent-kafka's consume-transform-produce loop, exactly once, as a process of its own that a
test can SIGKILL midway (tests/cluster/test_transactions.py):

    python -m tests.support.txn_transform BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Reads INPUT read_committed in GROUP, writes each record's value prefixed with "out-" to the same
partition of OUTPUT, and commits the read offsets in the same transaction, a few records per
transaction, until killed or SIGTERMed. An abortable error aborts the transaction and rewinds to
the committed offsets; a retriable one retries the call; anything else ends the process, with
the error on stderr and status 1."""

from __future__ import annotations

import signal
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

RECORDS_PER_TRANSACTION = 10
TIMEOUT_S = 120


def rewind(consumer: Consumer) -> None:
    for committed in consumer.committed(consumer.assignment(), timeout=TIMEOUT_S):
        # Never committed: from the start, as auto.offset.reset says.
        committed.offset = max(committed.offset, 0)
        consumer.seek(committed)


def next_offsets(source: str, messages) -> list[TopicPartition]:
    following: dict[int, int] = {}
    for message in messages:
        following[message.partition()] = max(following.get(message.partition(), 0), message.offset() + 1)
    return [TopicPartition(source, partition, offset) for partition, offset in following.items()]


def retried(call) -> None:
    """`call()` again while it fails with a retriable error, as librdkafka asks of
    send_offsets_to_transaction and commit_transaction (e.g. CONCURRENT_TRANSACTIONS while a
    new coordinator completes the previous transaction)."""
    while True:  # bounded by the transaction's timeout: past it the error is no longer retriable
        try:
            call()
            return
        except KafkaException as error:
            if not error.args[0].retriable():
                raise


def transform(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "heartbeat.interval.ms": 500, "log_level": 0})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id, "linger.ms": 5,
                         "log_level": 0})
    producer.init_transactions(TIMEOUT_S)
    consumer.subscribe([source])
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    while not stopping:
        messages = [message for message in consumer.consume(RECORDS_PER_TRANSACTION, 0.5) if message.error() is None]
        if not messages:
            continue
        producer.begin_transaction()
        try:
            for message in messages:
                producer.produce(sink, value=b"out-" + message.value(), partition=message.partition())
            offsets = next_offsets(source, messages)
            retried(lambda: producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), TIMEOUT_S))
            retried(lambda: producer.commit_transaction(TIMEOUT_S))
        except KafkaException as error:
            if not error.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(TIMEOUT_S)
            rewind(consumer)
    consumer.close()


if __name__ == "__main__":
    transform(*sys.argv[1:6])
