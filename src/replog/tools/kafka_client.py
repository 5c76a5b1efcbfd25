"""What every tool needs from confluent-kafka: the library itself, a base client
configuration, and a check that the broker answers and the topic exists before any record
moves, so that each failure is one line naming its cause instead of librdkafka retrying
forever in the background."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

CONNECT_TIMEOUT_S = 10.0
# One metadata attempt; short so that a refused connection is noticed between attempts.
METADATA_ATTEMPT_S = 1.0
# Kafka's own console tools default to this separator between key and value.
DEFAULT_KEY_SEPARATOR = "\t"
# How long to let librdkafka drain its queue when produce() finds it full.
QUEUE_FULL_WAIT_S = 0.05
# librdkafka's own default for message.max.bytes: produce() refuses a larger record outright.
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000
ACKS_CHOICES = ("0", "1", "all", "-1")
COMPRESSION_CHOICES = ("none", "gzip", "snappy", "lz4", "zstd")


class ToolError(Exception):
    """A failure the operator reads as one line; the command exits with status 1."""


class BadArguments(ToolError):
    """Arguments that contradict each other; the command exits with status 2, as for usage errors."""


class NotAuthenticated(ToolError):
    """The broker refused the client's SASL credentials (librdkafka's words, which hold none)."""


class RecordTooLarge(ToolError):
    """librdkafka refused a record over its message.max.bytes before sending it; the tool that
    sent it adds how to send it after all."""


def kafka():
    """The confluent_kafka module, imported on first use: the broker itself never needs it."""
    try:
        import confluent_kafka
    except ImportError as error:
        raise ToolError("the produce/consume tools need confluent-kafka: pip install confluent-kafka") from error
    return confluent_kafka


def client_config(bootstrap: str, security: Mapping[str, object]) -> dict:
    """librdkafka settings every tool starts from, with `security` (--command-config, in
    librdkafka's names); callers add their own with `|`."""
    return {
        "bootstrap.servers": bootstrap,
        # librdkafka prints every failed reconnect to stderr; tools report failures themselves.
        "log_level": 0,
    } | dict(security)


def producer_settings(acks: str, idempotence: bool | None = None) -> dict:
    """acks=all gets idempotence unless `idempotence` is False, as Kafka's own producer
    defaults to: retries then never duplicate or reorder records. Idempotence needs acks=all."""
    acks_all = acks in ("all", "-1")
    if idempotence and not acks_all:
        raise BadArguments(f"idempotence needs --acks all, not --acks {acks}")
    return {"acks": acks, "enable.idempotence": acks_all if idempotence is None else idempotence}


def new_client(client_class, settings: dict):
    """A confluent-kafka Producer, Consumer or AdminClient; BadArguments when librdkafka refuses a
    setting."""
    try:
        return client_class(settings)
    except kafka().KafkaException as error:
        raise BadArguments(f"librdkafka refused a setting: {error.args[0].str().strip()}") from None


def send(producer, topic: str, value: bytes, **fields) -> None:
    """producer.produce, waiting while librdkafka's queue is full instead of failing; a record
    librdkafka refuses is a ToolError (RecordTooLarge for one over its message.max.bytes)."""
    while True:  # bounded: each wait lets librdkafka deliver or expire queued records
        try:
            producer.produce(topic, value, **fields)
            return
        except BufferError:
            producer.poll(QUEUE_FULL_WAIT_S)
        except kafka().KafkaException as error:  # an expression evaluated only once produce() raised
            refusal = error.args[0]
            if refusal.code() == kafka().KafkaError.MSG_SIZE_TOO_LARGE:
                size = len(value) + len(fields.get("key") or b"")
                raise RecordTooLarge(f"a record of {size} bytes is over the producer's limit, librdkafka's "
                                     "message.max.bytes") from None
            raise ToolError(f"the producer refused a record: {refusal.str()}") from None


def delivery_failure(error) -> str:
    """A delivery report's error as the operator reads it: for a batch the broker refused as too
    large, which settings decide."""
    if error.code() != kafka().KafkaError.MSG_SIZE_TOO_LARGE:
        return error.str()
    return (f"{error.str()}: a record batch is over the topic's max.message.bytes (which defaults to the broker's "
            "message.max.bytes); raise it, or send smaller records and batches (librdkafka's batch.size)")


def admin_client(bootstrap: str, security: Mapping[str, object]) -> tuple[Any, list]:
    """An AdminClient, and the list its error_cb fills (answered_metadata reads it)."""
    kafka()
    from confluent_kafka.admin import AdminClient

    errors: list = []
    return new_client(AdminClient, client_config(bootstrap, security) | {"error_cb": errors.append}), errors


def answered_metadata(admin, errors: list, bootstrap: str, topic: str | None = None,
                      ready: Callable[[Any], bool] = lambda metadata: True):
    """Metadata (of `topic`, else of every topic) once `ready(metadata)` holds; ToolError as soon
    as every broker refused the connection or a TLS handshake failed, NotAuthenticated as soon as
    a broker refused the credentials, or ToolError after CONNECT_TIMEOUT_S. `ready` may raise
    ToolError itself."""
    confluent_kafka = kafka()
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    detail = f"no usable answer within {CONNECT_TIMEOUT_S:g} s"
    while True:
        try:
            metadata = admin.list_topics(topic, timeout=METADATA_ATTEMPT_S)
        except confluent_kafka.KafkaException as error:
            metadata, detail = None, error.args[0].str()
        if metadata is not None and ready(metadata):
            return metadata
        admin.poll(0)  # serves error_cb, which says when every broker refused
        # Retrying cannot mend credentials or certificates: say what the broker refused at once.
        for error in errors:
            if error.code() == confluent_kafka.KafkaError._AUTHENTICATION:
                raise NotAuthenticated(error.str())  # names the broker
            if error.code() == confluent_kafka.KafkaError._SSL:
                detail = error.str()
        all_down = any(error.code() in (confluent_kafka.KafkaError._ALL_BROKERS_DOWN, confluent_kafka.KafkaError._SSL)
                       for error in errors)
        if all_down or time.monotonic() > deadline:
            raise ToolError(f"cannot reach a broker at {bootstrap}: {detail}")


def topic_partition_count(bootstrap: str, security: Mapping[str, object], topic: str, partition: int | None = None) -> int:
    """How many partitions `topic` has; ToolError if no broker answers within
    CONNECT_TIMEOUT_S, the topic does not exist, or `partition` is not one of them."""
    confluent_kafka = kafka()

    def has_leaders(metadata) -> bool:
        found = metadata.topics[topic]
        # LEADER_NOT_AVAILABLE: the topic is being created (auto-create) and will answer soon.
        if found.error is not None and found.error.code() != confluent_kafka.KafkaError.LEADER_NOT_AVAILABLE:
            raise ToolError(f"topic {topic!r}: {found.error.str()}")
        return found.error is None

    admin, errors = admin_client(bootstrap, security)
    count = len(answered_metadata(admin, errors, bootstrap, topic, has_leaders).topics[topic].partitions)
    if partition is not None and not 0 <= partition < count:
        raise ToolError(f"topic {topic!r} has partitions 0..{count - 1}, not {partition}")
    return count
