"""aiokafka against a replog broker process. The adapter's methods each run one event loop."""

from __future__ import annotations

import asyncio

from aiokafka import codec
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, for_code

from .records import COMPRESSIONS, Record
from .suite import ClientSuite, NewTopicAdapter, ProduceFailed

TIMEOUT_S = 30


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, TIMEOUT_S))


class AioKafka(NewTopicAdapter):
    new_topic = NewTopic
    compressions = tuple(c for c in COMPRESSIONS if getattr(codec, f"has_{c}")())  # all but gzip need cramjam
    alter_configs = "aiokafka alters configs only with AlterConfigs (API 33), which replog does not implement"

    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False):
        async def produce():
            producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=compression,
                                        enable_idempotence=idempotent, linger_ms=5, request_timeout_ms=5000)
            await producer.start()
            try:
                futures = [await producer.send(topic, value=r.value, key=r.key, headers=list(r.headers),
                                               partition=0, timestamp_ms=r.timestamp_ms) for r in batch]
                return [getattr(await future, "offset", -1) for future in futures]  # acks=0: no metadata
            finally:
                await producer.stop()

        try:
            offsets = run(produce())
        except KafkaError as e:
            raise ProduceFailed(getattr(e, "errno", -1), repr(e)) from e
        return [offset if offset >= 0 else None for offset in offsets]

    async def _with_consumer(self, bootstrap, topic, work):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            return await work(consumer, partition)
        finally:
            await consumer.stop()

    def read(self, bootstrap, topic, count, start=0):
        async def read(consumer, partition):
            consumer.seek(partition, start)
            got = []
            while len(got) < count:  # bounded by run()'s timeout
                for message in (await consumer.getmany(partition, timeout_ms=500)).get(partition, ()):
                    got.append(Record(message.key, message.value, tuple(message.headers), message.timestamp,
                                      message.offset))
            return got

        return run(self._with_consumer(bootstrap, topic, read))

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        async def find(consumer, partition):
            found = (await consumer.offsets_for_times({partition: timestamp_ms}))[partition]
            return None if found is None else found.offset

        return run(self._with_consumer(bootstrap, topic, find))

    def _admin(self, bootstrap, call):
        async def admin_call():
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                return await call(admin)
            finally:
                await admin.close()

        return run(admin_call())

    def _error_code(self, bootstrap, call) -> int:
        """aiokafka answers topic admin calls with the raw response: the first topic's error number."""
        try:
            response = self._admin(bootstrap, call)
        except KafkaError as e:
            return e.errno
        [topic_error] = response.topic_error_codes if hasattr(response, "topic_error_codes") else response.topic_errors
        return topic_error[1]

    def describe_config(self, bootstrap, name):
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        [response] = self._admin(bootstrap, lambda admin: admin.describe_configs([resource]))
        [(error_code, error_message, _, _, configs)] = response.resources
        if error_code:
            raise for_code(error_code)(error_message)
        return {entry[0]: entry[1] for entry in configs}


class TestAioKafka(ClientSuite):
    client = AioKafka()
