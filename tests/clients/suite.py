"""The acceptance tests every client runs: each client module subclasses `ClientSuite` with its
adapter (`client`), a class that speaks that client's API and answers in `Record`s and Kafka error
numbers. What a client cannot do is an adapter attribute, and the test skips saying why."""

from __future__ import annotations

import pytest

from .records import (
    COMPRESSIONS, INVALID_REPLICATION_FACTOR, INVALID_TOPIC_EXCEPTION, MESSAGE_TOO_LARGE, TOPIC_ALREADY_EXISTS,
    UNKNOWN_TOPIC_OR_PARTITION, Record, assert_same, now_ms, records,
)


class ProduceFailed(Exception):
    """A client reported a failed delivery; `code` is Kafka's error number (negative: the client's own)."""

    def __init__(self, code: int, detail: str = ""):
        super().__init__(f"error {code}: {detail}")
        self.code = code


class Adapter:
    """What every adapter provides; subclasses override the methods and narrow the capabilities."""

    compressions: tuple[str, ...] = COMPRESSIONS
    admin: str | None = None  # why the client has no admin API, or None when it has one
    alter_configs: str | None = None  # likewise for altering topic configs
    idempotence: bool = True

    def sample(self, count: int) -> list[Record]:
        return records(count)

    def produce(self, bootstrap: str, topic: str, batch: list[Record], *, acks: int | str = "all",
                compression: str | None = None, idempotent: bool = False) -> list[int | None]:
        """Send `batch` to partition 0 and wait for every delivery; the offsets (None where the client
        does not learn them, as with acks=0). Raises ProduceFailed."""
        raise NotImplementedError

    def read(self, bootstrap: str, topic: str, count: int, start: int = 0) -> list[Record]:
        """`count` records of partition 0 from offset `start`, waiting (bounded) until they are there."""
        raise NotImplementedError

    def offset_for_time(self, bootstrap: str, topic: str, timestamp_ms: int) -> int | None:
        raise NotImplementedError

    def create_topic(self, bootstrap: str, name: str, *, replication_factor: int = 1,
                     config: dict[str, str] | None = None) -> int:
        """Kafka's error number for creating `name` with one partition; 0 on success."""
        raise NotImplementedError

    def delete_topic(self, bootstrap: str, name: str) -> int:
        raise NotImplementedError

    def describe_config(self, bootstrap: str, name: str) -> dict[str, str]:
        raise NotImplementedError

    def set_config(self, bootstrap: str, name: str, key: str, value: str) -> None:
        raise NotImplementedError


class NewTopicAdapter(Adapter):
    """Topic admin for clients whose admin takes `NewTopic(name, partitions, replication_factor,
    topic_configs=)` (kafka-python, aiokafka): `_error_code(bootstrap, call)` runs `call(admin)`
    and answers Kafka's error number for it."""

    new_topic: type

    def _error_code(self, bootstrap: str, call) -> int:
        raise NotImplementedError

    def create_topic(self, bootstrap, name, *, replication_factor=1, config=None):
        topic = self.new_topic(name, 1, replication_factor, topic_configs=config or {})
        return self._error_code(bootstrap, lambda admin: admin.create_topics([topic]))

    def delete_topic(self, bootstrap, name):
        return self._error_code(bootstrap, lambda admin: admin.delete_topics([name]))


def produce_and_read(client: Adapter, bootstrap: str, topic: str, sent: list[Record], **produce_options) -> None:
    before = now_ms()
    offsets = client.produce(bootstrap, topic, sent, **produce_options)
    after = now_ms()
    if produce_options.get("acks") != 0:
        assert offsets == [None] * len(sent) or offsets == list(range(len(sent))), offsets
    assert_same(sent, client.read(bootstrap, topic, len(sent)), produced_between=(before, after))


class ClientSuite:
    client: Adapter

    @pytest.mark.parametrize("acks", [0, 1, "all"])
    def test_records_read_back_byte_identical(self, broker, make_topic, acks):
        produce_and_read(self.client, broker.bootstrap, make_topic(), self.client.sample(120), acks=acks)

    @pytest.mark.parametrize("codec", COMPRESSIONS)
    def test_compressed_batches(self, broker, make_topic, codec):
        if codec not in self.client.compressions:
            pytest.skip(f"{type(self.client).__name__} cannot produce {codec}")
        produce_and_read(self.client, broker.bootstrap, make_topic(), self.client.sample(200), compression=codec)

    def test_idempotent_producer_appends_each_record_once(self, broker, make_topic):
        if not self.client.idempotence:
            pytest.skip(f"{type(self.client).__name__} has no idempotent producer")
        topic = make_topic()
        sent = self.client.sample(150)
        produce_and_read(self.client, broker.bootstrap, topic, sent, idempotent=True)
        # a second producer (a new producer id) appends after the first
        self.client.produce(broker.bootstrap, topic, sent[:10], idempotent=True)
        assert_same(sent + sent[:10], self.client.read(broker.bootstrap, topic, len(sent) + 10),
                    produced_between=(0, now_ms()))

    def test_seek_by_timestamp(self, broker, make_topic):
        topic = make_topic()
        sent = self.client.sample(80)
        self.client.produce(broker.bootstrap, topic, sent)
        stored = self.client.read(broker.bootstrap, topic, len(sent))
        for target in (stored[0].timestamp_ms, stored[37].timestamp_ms, stored[37].timestamp_ms - 1, stored[-1].timestamp_ms):
            expected = next(r.offset for r in stored if r.timestamp_ms >= target)
            found = self.client.offset_for_time(broker.bootstrap, topic, target)
            assert found == expected, f"offset for {target}: {found}, expected {expected}"
            assert self.client.read(broker.bootstrap, topic, len(sent) - expected, start=found) == stored[expected:]
        assert self.client.offset_for_time(broker.bootstrap, topic, stored[-1].timestamp_ms + 1) is None

    def test_produce_to_missing_topic_fails_unknown_topic(self, broker, topic_name):
        with pytest.raises(ProduceFailed) as failure:
            self.client.produce(broker.bootstrap, topic_name, self.client.sample(1), acks=1)
        assert failure.value.code == UNKNOWN_TOPIC_OR_PARTITION

    def test_batch_over_max_message_bytes_fails_message_too_large(self, broker, make_topic):
        topic = make_topic({"max.message.bytes": "2000"})
        big = Record(b"k", b"x" * 3000, (), None)
        with pytest.raises(ProduceFailed) as failure:
            self.client.produce(broker.bootstrap, topic, [big], acks=1)
        assert failure.value.code == MESSAGE_TOO_LARGE
        # the topic still takes records that fit
        produce_and_read(self.client, broker.bootstrap, topic, self.client.sample(5), acks=1)

    def _need_admin(self) -> None:
        if self.client.admin:
            pytest.skip(self.client.admin)

    def test_admin_create_and_delete_topic(self, broker, topic_name):
        self._need_admin()
        bootstrap = broker.bootstrap
        assert self.client.create_topic(bootstrap, topic_name) == 0
        produce_and_read(self.client, bootstrap, topic_name, self.client.sample(3), acks=1)
        assert self.client.create_topic(bootstrap, topic_name) == TOPIC_ALREADY_EXISTS
        assert self.client.delete_topic(bootstrap, topic_name) == 0
        assert self.client.delete_topic(bootstrap, topic_name) == UNKNOWN_TOPIC_OR_PARTITION
        assert self.client.create_topic(bootstrap, topic_name) == 0  # the name is free again, and the topic empty
        produce_and_read(self.client, bootstrap, topic_name, self.client.sample(2), acks=1)

    @pytest.mark.parametrize("name, replication_factor, error", [
        ("bad/name", 1, INVALID_TOPIC_EXCEPTION),
        ("x" * 250, 1, INVALID_TOPIC_EXCEPTION),
        ("..", 1, INVALID_TOPIC_EXCEPTION),
        ("fine-name-rf3", 3, INVALID_REPLICATION_FACTOR),
    ])
    def test_admin_create_topic_errors(self, broker, name, replication_factor, error):
        self._need_admin()
        assert self.client.create_topic(broker.bootstrap, name, replication_factor=replication_factor) == error

    def test_admin_describe_and_alter_configs(self, broker, topic_name):
        self._need_admin()
        bootstrap = broker.bootstrap
        assert self.client.create_topic(bootstrap, topic_name, config={"retention.ms": "123456"}) == 0
        configs = self.client.describe_config(bootstrap, topic_name)
        assert configs["retention.ms"] == "123456"
        assert "max.message.bytes" in configs
        if self.client.alter_configs:
            pytest.skip(self.client.alter_configs)
        self.client.set_config(bootstrap, topic_name, "retention.ms", "654321")
        self.client.set_config(bootstrap, topic_name, "flush.messages", "5")
        configs = self.client.describe_config(bootstrap, topic_name)
        assert (configs["retention.ms"], configs["flush.messages"]) == ("654321", "5")
