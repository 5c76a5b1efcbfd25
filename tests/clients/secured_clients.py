"""What each real client does against a secured listener (TLS, SASL), with the settings it
is given: create a topic, produce records, read them back (confluent-kafka in a group). Shared
by the TLS and SASL client tests, which differ only in the settings."""

from __future__ import annotations

import asyncio
import subprocess
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 30
RECORDS = [(f"k{index}".encode(), f"value {index}".encode()) for index in range(20)]


def new_topic(settings: dict[str, str]) -> str:
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(settings)  # held until the answer: a client destroyed meanwhile fails it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(TIMEOUT_S)
    return topic


def confluent_read(settings: dict[str, str], topic: str, count: int, group: str) -> list[tuple[bytes, bytes]]:
    consumer = Consumer(settings | {"group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got: list[tuple[bytes, bytes]] = []
    try:
        for _ in range(200):  # bounded: each poll waits at most a second
            if len(got) >= count:
                break
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append((message.key(), message.value()))
        consumer.commit(asynchronous=False)
        committed = consumer.committed(consumer.assignment(), timeout=TIMEOUT_S)
    finally:
        consumer.close()
    assert [partition.offset for partition in committed] == [count]
    return got


def confluent_round_trip(settings: dict[str, str]) -> None:
    """Admin (create, delete), produce, and consume in a group."""
    admin = AdminClient(settings)
    topic = new_topic(settings)
    producer = Producer(settings)
    for key, value in RECORDS:
        producer.produce(topic, value, key, partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert confluent_read(settings, topic, len(RECORDS), f"g-{uuid.uuid4().hex[:6]}") == RECORDS
    assert admin.delete_topics([topic])[topic].result(TIMEOUT_S) is None


def kafka_python_round_trip(settings: dict, topic: str) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(**settings, acks="all")
    for key, value in RECORDS:
        producer.send(topic, value=value, key=key, partition=0)
    producer.flush(TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(**settings, enable_auto_commit=False, consumer_timeout_ms=TIMEOUT_S * 1000)
    consumer.assign([TopicPartition(topic, 0)])
    consumer.seek_to_beginning()
    got = []
    for message in consumer:  # bounded: stops after consumer_timeout_ms without a record
        got.append((message.key, message.value))
        if len(got) == len(RECORDS):
            break
    consumer.close()
    return got


def aiokafka_round_trip(settings: dict, topic: str) -> list[tuple[bytes, bytes]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def round_trip() -> list[tuple[bytes, bytes]]:
        producer = AIOKafkaProducer(**settings, acks="all")
        await producer.start()
        try:
            for key, value in RECORDS:
                await producer.send_and_wait(topic, value=value, key=key, partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(**settings, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            await consumer.seek_to_beginning(partition)
            got = []
            while len(got) < len(RECORDS):  # bounded by the wait_for around it
                got.append(await consumer.getone())
            return [(message.key, message.value) for message in got]
        finally:
            await consumer.stop()

    return asyncio.run(asyncio.wait_for(round_trip(), TIMEOUT_S))


def kcat_round_trip(arguments: tuple[str, ...], topic: str) -> list[str]:
    """`arguments`: -b and the -X settings. The lines read back, key TAB value."""
    produced = subprocess.run(["kcat", "-P", *arguments, "-t", topic, "-p", "0", "-K", "\t"], capture_output=True,
                              text=True, input="".join(f"{key.decode()}\t{value.decode()}\n" for key, value in RECORDS),
                              timeout=TIMEOUT_S)
    assert produced.returncode == 0, produced.stderr
    consumed = subprocess.run(["kcat", "-C", *arguments, "-t", topic, "-p", "0", "-o", "beginning", "-c",
                               str(len(RECORDS)), "-f", "%k\t%s\n"], capture_output=True, text=True, timeout=TIMEOUT_S)
    assert consumed.returncode == 0, consumed.stderr
    return consumed.stdout.splitlines()


KCAT_RECORDS = [f"{key.decode()}\t{value.decode()}" for key, value in RECORDS]
