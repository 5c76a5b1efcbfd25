"""kafka-python against a replog broker process."""

from __future__ import annotations

import contextlib
import logging
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic
from kafka.errors import KafkaError, KafkaTimeoutError

from .records import UNKNOWN_TOPIC_OR_PARTITION, Record
from .suite import Adapter, ClientSuite, ProduceFailed

TIMEOUT_S = 30
UNKNOWN_TOPIC_LOGGED = "not found in cluster metadata"  # kafka.cluster's log line for UNKNOWN_TOPIC_OR_PARTITION


@contextlib.contextmanager
def logged(logger_name: str):
    """The messages `logger_name` logs meanwhile."""
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())
    logger = logging.getLogger(logger_name)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


class KafkaPython(Adapter):
    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False):
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks=acks, compression_type=compression,
                                 enable_idempotence=idempotent, linger_ms=5, max_block_ms=3000)
        try:
            with logged("kafka.cluster") as cluster_log:
                futures = [producer.send(topic, value=r.value, key=r.key, headers=list(r.headers), partition=0,
                                         timestamp_ms=r.timestamp_ms) for r in batch]
            producer.flush(TIMEOUT_S)
            offsets = [future.get(TIMEOUT_S).offset for future in futures]
        except KafkaTimeoutError as e:
            # kafka-python waits out max_block_ms for a topic the broker calls unknown, logging why
            unknown = any(UNKNOWN_TOPIC_LOGGED in message for message in cluster_log)
            raise ProduceFailed(UNKNOWN_TOPIC_OR_PARTITION if unknown else e.errno, repr(e)) from e
        except KafkaError as e:
            raise ProduceFailed(getattr(e, "errno", -1), repr(e)) from e
        finally:
            producer.close(TIMEOUT_S)
        return [offset if offset >= 0 else None for offset in offsets]

    def _consumer(self, bootstrap) -> KafkaConsumer:
        return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)

    def read(self, bootstrap, topic, count, start=0):
        consumer = self._consumer(bootstrap)
        try:
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            consumer.seek(partition, start)
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                for message in consumer.poll(timeout_ms=500).get(partition, ()):
                    got.append(Record(message.key, message.value, tuple(message.headers), message.timestamp,
                                      message.offset))
            return got
        finally:
            consumer.close()

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        consumer = self._consumer(bootstrap)
        try:
            partition = TopicPartition(topic, 0)
            found = consumer.offsets_for_times({partition: timestamp_ms})[partition]
            return None if found is None else found.offset
        finally:
            consumer.close()

    def _admin(self, bootstrap, call):
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            return call(admin)
        finally:
            admin.close()

    def _error_code(self, bootstrap, call) -> int:
        try:
            self._admin(bootstrap, call)
        except KafkaError as e:
            return e.errno
        return 0

    def create_topic(self, bootstrap, name, *, replication_factor=1, config=None):
        topic = NewTopic(name, 1, replication_factor, topic_configs=config or {})
        return self._error_code(bootstrap, lambda admin: admin.create_topics([topic]))

    def delete_topic(self, bootstrap, name):
        return self._error_code(bootstrap, lambda admin: admin.delete_topics([name]))

    def describe_config(self, bootstrap, name):
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        described = self._admin(bootstrap, lambda admin: admin.describe_configs([resource], config_filter="all"))
        return {key: config["value"] for key, config in described["topic"][name].items()}

    def set_config(self, bootstrap, name, key, value):
        resource = ConfigResource(ConfigResourceType.TOPIC, name, configs={key: value})
        self._admin(bootstrap, lambda admin: admin.alter_configs([resource], incremental=True))


class TestKafkaPython(ClientSuite):
    client = KafkaPython()
