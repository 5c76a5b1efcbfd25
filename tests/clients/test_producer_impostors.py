"""An impostor naming a confluent-kafka idempotent producer's id, epoch and sequences, which any
consumer reads in the batch headers, against a broker process: its replay is acknowledged where
the producer's batch went and not appended, an older epoch and a sequence out of order are
refused, and the producer itself goes on undisturbed, every record of it read back once, in
order (tests/replica/test_producer_fencing.py has the rest of what Kafka allows)."""

from __future__ import annotations

import asyncio
import contextlib

from confluent_kafka import Consumer, Producer, TopicPartition
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.storage.batch_format import HEADER
from tests.support.producer_batches import readable_producer_batch as batch

TIMEOUT_S = 30
SENT_EACH_TIME = 10


def produce(producer: Producer, topic: str, values: list[bytes]) -> None:
    """Each value a batch of its own, acknowledged."""
    errors = []
    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=lambda error, _: errors.append(error))
        assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None] * len(values)


async def impersonate(port: int, topic: str) -> list[tuple[int, int]]:
    """(error code, base offset) of each forged batch, from what a consumer reads of the log."""
    async with await BrokerConnection.open("127.0.0.1", port, client_id="impostor") as connection:
        records = (await connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=0)).records
        position, last = 0, None
        while position < len(records):
            last = HEADER.unpack_from(records, position)
            position += 12 + last[1]
        base_offset, batch_length, *_, producer_id, epoch, base_sequence, count = last
        assert producer_id >= 0 and base_sequence >= 0, "the producer is idempotent"
        replay = records[position - 12 - batch_length:position]
        next_sequence = base_sequence + count
        forged = [replay, batch(producer_id, epoch - 1, next_sequence, 1, b"impostor"),
                  batch(producer_id, epoch, next_sequence + 3, 1, b"impostor"), batch(producer_id, epoch, 0, 1, b"impostor")]
        return [tuple(await connection.produce(topic, 0, bytes(each), acks=-1, timeout_ms=5000)) for each in forged]


def test_an_impostor_naming_an_idempotent_producer_disturbs_none_of_its_records(broker, make_topic):
    topic = make_topic()
    sent = [f"victim-{number}".encode() for number in range(2 * SENT_EACH_TIME)]
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    produce(producer, topic, sent[:SENT_EACH_TIME])

    answers = asyncio.run(impersonate(broker.port, topic))
    assert answers == [(ErrorCode.none, SENT_EACH_TIME - 1), (ErrorCode.invalid_producer_epoch, -1),
                       (ErrorCode.out_of_order_sequence_number, -1), (ErrorCode.out_of_order_sequence_number, -1)]

    produce(producer, topic, sent[SENT_EACH_TIME:])
    with contextlib.closing(Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "impostors",
                                      "enable.auto.commit": False})) as consumer:
        consumer.assign([TopicPartition(topic, 0, 0)])
        read = []
        while len(read) < len(sent) and (messages := consumer.consume(len(sent), timeout=TIMEOUT_S)):
            read += [(message.offset(), message.value()) for message in messages if message.error() is None]
    assert read == list(enumerate(sent)), "the impostor's batches reached the log, or the producer's were lost"
