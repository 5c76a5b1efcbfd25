"""confluent-kafka (librdkafka) against a replog broker process."""

from __future__ import annotations

import contextlib
import functools

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from tests.support.polling import wait_until

from .records import Record, collect
from .suite import Adapter, ClientSuite, ProduceFailed

TIMEOUT_S = 30


class Confluent(Adapter):
    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False, partition=0,
                **settings):
        producer = Producer({
            "bootstrap.servers": bootstrap, "acks": str(acks), "enable.idempotence": idempotent,
            "compression.type": compression or "none", "linger.ms": 5, "message.timeout.ms": 15_000,
            "topic.metadata.propagation.max.ms": 1000, **settings,
        })
        reports: list = [False] * len(batch)

        def delivered(i, error, message):
            reports[i] = error if error else message.offset()

        for i, record in enumerate(batch):
            producer.produce(topic, value=record.value, key=record.key, partition=partition,
                             headers=list(record.headers), timestamp=record.timestamp_ms or 0,
                             on_delivery=functools.partial(delivered, i))
        assert producer.flush(TIMEOUT_S) == 0, "deliveries still outstanding"
        for report in reports:
            if report is not None and not isinstance(report, int):
                raise ProduceFailed(report.code(), report.str())
        return [offset if offset is not None and offset >= 0 else None for offset in reports]

    def _consumer(self, bootstrap) -> Consumer:
        return Consumer({"bootstrap.servers": bootstrap, "group.id": "replog-tests", "enable.auto.commit": False})

    def read(self, bootstrap, topic, count, start=0, partition=0):
        def poll():
            for message in consumer.consume(count, timeout=0.5):
                if message.error():
                    raise KafkaException(message.error())
                yield Record(message.key(), message.value(), tuple(message.headers() or ()), message.timestamp()[1],
                             message.offset())

        with contextlib.closing(self._consumer(bootstrap)) as consumer:
            consumer.assign([TopicPartition(topic, partition, start)])
            return collect(poll, count)

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        with contextlib.closing(self._consumer(bootstrap)) as consumer:
            [found] = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp_ms)], timeout=TIMEOUT_S)
        return found.offset if found.offset >= 0 else None

    def _admin_call(self, bootstrap, method, argument, *, errors=True):
        """One AdminClient call on one resource: its result, or with `errors` its Kafka error number
        (0 on success). The client lives until the result is in: it fails its futures when destroyed."""
        admin = AdminClient({"bootstrap.servers": bootstrap})
        [future] = getattr(admin, method)(argument).values()
        if not errors:
            return future.result(TIMEOUT_S)
        try:
            future.result(TIMEOUT_S)
        except KafkaException as e:
            return e.args[0].code()
        return 0

    def create_topic(self, bootstrap, name, *, replication_factor=1, config=None):
        return self._admin_call(bootstrap, "create_topics", [NewTopic(name, 1, replication_factor, config=config or {})])

    def delete_topic(self, bootstrap, name):
        return self._admin_call(bootstrap, "delete_topics", [name])

    def describe_config(self, bootstrap, name):
        configs = self._admin_call(bootstrap, "describe_configs", [ConfigResource(ResourceType.TOPIC, name)], errors=False)
        return {key: entry.value for key, entry in configs.items()}

    def set_config(self, bootstrap, name, key, value):
        entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        resource = ConfigResource(ResourceType.TOPIC, name, incremental_configs=[entry])
        self._admin_call(bootstrap, "incremental_alter_configs", [resource], errors=False)


class TestConfluent(ClientSuite):
    client = Confluent()

    def test_admin_create_topic_with_the_broker_defaults(self, broker, topic_name):
        """-1 partitions and replication factor mean the broker's num.partitions and
        default.replication.factor (both 1 here)."""
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(topic_name, -1, -1)])[topic_name].result(TIMEOUT_S)
        partitions = admin.list_topics(topic_name, timeout=TIMEOUT_S).topics[topic_name].partitions
        assert [len(meta.replicas) for meta in partitions.values()] == [1]

    def test_altered_topic_settings_apply_to_the_running_partition(self, broker, make_topic):
        """IncrementalAlterConfigs takes effect without a restart, as in Kafka:
        min.insync.replicas at the next acks=all produce, segment.bytes at the next append."""
        name = make_topic()
        record = [Record(b"k", b"v" * 400_000)]
        self.client.set_config(broker.bootstrap, name, "min.insync.replicas", "2")

        def refused_for_too_few_replicas() -> bool:
            try:
                self.client.produce(broker.bootstrap, name, record, acks="all", retries=0)
            except ProduceFailed as failed:
                return failed.code == 19  # NOT_ENOUGH_REPLICAS: one replica, two required
            return False

        def accepted() -> bool:
            try:
                return self.client.produce(broker.bootstrap, name, record, acks="all", retries=0) is not None
            except ProduceFailed:
                return False

        wait_until(refused_for_too_few_replicas, "acks=all refused under min.insync.replicas=2", 10)
        self.client.set_config(broker.bootstrap, name, "min.insync.replicas", "1")
        self.client.set_config(broker.bootstrap, name, "segment.bytes", "1048576")  # Kafka 4's least
        wait_until(accepted, "acks=all accepted again under min.insync.replicas=1", 10)
        for _ in range(3):  # one batch each, each smaller than segment.bytes: 1 MiB holds two
            self.client.produce(broker.bootstrap, name, record, acks="all")
        segments = list((broker.data_dir / f"{name}-0").glob("*.log"))
        assert len(segments) > 1, "the active segment rolled by the new segment.bytes"
