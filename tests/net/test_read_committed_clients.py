"""librdkafka (and kafka-python) reading transactions from a broker in this process: a read_committed consumer gets
the committed transactions' records and the plain ones, never an aborted one's, and nothing past
an open transaction until its commit marker, written while it polls; its watermark query
answers the last stable offset. A read_uncommitted consumer gets everything. kafka-python's
read_committed consumer drops the aborted records as librdkafka's does. The records
and markers are written on the leader partition directly, as the producer and the coordinator
would have them written."""

from __future__ import annotations

import asyncio
import time

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition
from kio.schema.errors import ErrorCode

from replog import admin
from replog.storage.control_batches import ControlType, Marker
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

TOPIC = "txn-read"
COMMITTED, ABORTED, OPEN = 5000, 5001, 5002
WAIT_S = 30


def batch(values: list[bytes], producer_id: int = -1, transactional: bool = False) -> bytearray:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=int(transactional),
                                        producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                                        base_sequence=0 if producer_id >= 0 else -1, batch_size=1 << 20)
    now_ms = int(time.time() * 1000)
    for offset, value in enumerate(values):
        builder.append(offset, timestamp=now_ms, key=None, value=value, headers=[])
    return bytearray(builder.build())


def consumer(port: int, isolation_level: str) -> Consumer:
    reader = Consumer({"bootstrap.servers": f"127.0.0.1:{port}", "group.id": f"readers-{isolation_level}",
                       "isolation.level": isolation_level, "enable.auto.commit": False,
                       "fetch.wait.max.ms": 500})
    reader.assign([TopicPartition(TOPIC, 0, 0)])
    return reader


def consume_with_kafka_python(port: int) -> list[bytes]:
    reader = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", isolation_level="read_committed",
                           enable_auto_commit=False, consumer_timeout_ms=WAIT_S * 1000)
    try:
        reader.assign([KafkaTopicPartition(TOPIC, 0)])
        reader.seek_to_beginning()
        values = []
        for record in reader:  # ends after consumer_timeout_ms without records
            values.append(record.value)
            if len(values) == 6:
                return values
        return values
    finally:
        reader.close()


def consume(reader: Consumer, count: int) -> list[bytes]:
    """The values of the next `count` records, within WAIT_S."""
    values, deadline = [], time.monotonic() + WAIT_S
    while len(values) < count and time.monotonic() < deadline:
        message = reader.poll(0.2)
        if message is not None and message.error() is None:
            values.append(message.value())
    return values


async def test_read_committed_and_read_uncommitted_consumers(tmp_path):
    async with in_process_broker(tmp_path, **{"transaction.partition.verification.enable": "false"}) as broker:
        await admin.create_topic(broker.store, TOPIC, 1, 1)
        await eventually(lambda: broker.serving(TOPIC, 0), WAIT_S, "the topic led here")
        partition = broker.replicas.get_partition(TOPIC, 0)

        async def append(records: bytearray) -> None:
            assert (await partition.append_as_leader(records, acks=-1, timeout_ms=5000)).error_code == ErrorCode.none

        async def end(producer_id: int, control_type: ControlType) -> None:
            assert await partition.write_txn_marker(Marker(producer_id, 0, control_type, 0), 5000) == ErrorCode.none

        await append(batch([b"p0"]))  # 0
        await append(batch([b"a0", b"a1"], COMMITTED, transactional=True))  # 1-2
        await append(batch([b"b0"], ABORTED, transactional=True))  # 3
        await end(ABORTED, ControlType.ABORT)  # 4
        await end(COMMITTED, ControlType.COMMIT)  # 5
        await append(batch([b"p1"]))  # 6
        await append(batch([b"c0"], OPEN, transactional=True))  # 7, open
        await append(batch([b"p2"]))  # 8

        committed_reader = consumer(broker.server.port, "read_committed")
        uncommitted_reader = consumer(broker.server.port, "read_uncommitted")
        try:
            assert await asyncio.to_thread(consume, committed_reader, 4) == [b"p0", b"a0", b"a1", b"p1"]
            low, high = await asyncio.to_thread(committed_reader.get_watermark_offsets, TopicPartition(TOPIC, 0), 10,
                                                False)
            assert (low, high) == (0, 7), "read_committed's end is the last stable offset"

            rest = asyncio.create_task(asyncio.to_thread(consume, committed_reader, 2))
            await end(OPEN, ControlType.COMMIT)  # 9
            assert await rest == [b"c0", b"p2"]

            assert await asyncio.to_thread(consume, uncommitted_reader, 7) == [
                b"p0", b"a0", b"a1", b"b0", b"p1", b"c0", b"p2"]
            assert await asyncio.to_thread(consume_with_kafka_python, broker.server.port) == [
                b"p0", b"a0", b"a1", b"p1", b"c0", b"p2"]
        finally:
            committed_reader.close()
            uncommitted_reader.close()
