"""`replog consume`: records out, one line each, like kafka-console-consumer. No consumer
group: partitions are assigned directly and nothing is committed, so every run starts where its
options say (beginning, end, an offset, or the first record at or after a timestamp)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from replog.tools.kafka_client import CONNECT_TIMEOUT_S, BadArguments, ToolError, client_config, kafka, topic_partition_count

# librdkafka needs a group.id even for assign(); with commits off the group is never joined.
CONSOLE_GROUP_ID = "replog-console-consumer"
# Without an idle timeout, how often the loop wakes so that Ctrl-C is noticed.
POLL_INTERVAL_S = 0.5
NULL_FIELD = b"null"  # how Kafka's console consumer prints a null key or value
# librdkafka's logical offsets (RD_KAFKA_OFFSET_BEGINNING / _END).
OFFSET_BEGINNING = -2
OFFSET_END = -1
NAMED_OFFSETS = {"earliest": OFFSET_BEGINNING, "latest": OFFSET_END}


@dataclass(frozen=True)
class StartPosition:
    """Where reading begins in each partition: an offset (possibly a logical one) or the first
    record whose timestamp is at or after `timestamp_ms`."""

    offset: int = OFFSET_END
    timestamp_ms: int | None = None


def start_position(from_beginning: bool, offset: str | None, timestamp_ms: int | None, partition: int | None) -> StartPosition:
    """The one start the options ask for; BadArguments when they ask for several or for an
    offset number without saying which partition it is in."""
    chosen = [name for name, given in (("--from-beginning", from_beginning), ("--offset", offset is not None), ("--timestamp", timestamp_ms is not None)) if given]
    if len(chosen) > 1:
        raise BadArguments(f"{' and '.join(chosen)} are alternatives; give one")
    if from_beginning:
        return StartPosition(OFFSET_BEGINNING)
    if timestamp_ms is not None:
        return StartPosition(timestamp_ms=timestamp_ms)
    if offset is None:
        return StartPosition()
    if offset in NAMED_OFFSETS:
        return StartPosition(NAMED_OFFSETS[offset])
    if not offset.isdigit():
        raise BadArguments(f"--offset takes a number, 'earliest' or 'latest', not {offset!r}")
    if partition is None:
        # An offset number means one position in one partition's log, as in Kafka's tool.
        raise BadArguments("--offset with a number needs --partition")
    return StartPosition(int(offset))


def format_record(message, print_key: bool, key_separator: bytes) -> bytes:
    value = message.value()
    line = NULL_FIELD if value is None else value
    if print_key:
        key = message.key()
        line = (NULL_FIELD if key is None else key) + key_separator + line
    return line + b"\n"


def consume(
    write: Callable[[bytes], object],
    *,
    bootstrap: str,
    security: Mapping[str, object],
    topic: str,
    start: StartPosition,
    partition: int | None,
    max_messages: int | None,
    print_key: bool,
    key_separator: bytes,
    idle_timeout_ms: int | None,
) -> int:
    """Pass each record, formatted as a line, to `write` until `max_messages`, until nothing
    arrives for `idle_timeout_ms`, or until Ctrl-C; returns how many were written."""
    confluent_kafka = kafka()
    count = topic_partition_count(bootstrap, security, topic, partition)
    partitions = [partition] if partition is not None else range(count)
    consumer = confluent_kafka.Consumer(
        client_config(bootstrap, security) | {"group.id": CONSOLE_GROUP_ID, "enable.auto.commit": False}
    )
    wait_s = idle_timeout_ms / 1000 if idle_timeout_ms is not None else POLL_INTERVAL_S
    written = 0
    try:
        consumer.assign(_start_offsets(consumer, topic, partitions, start))
        while max_messages is None or written < max_messages:
            message = consumer.poll(wait_s)
            if message is None:
                if idle_timeout_ms is not None:
                    break
                continue
            if message.error() is not None:
                raise ToolError(f"topic {topic!r} partition {message.partition()}: {message.error().str()}")
            write(format_record(message, print_key, key_separator))
            written += 1
    except KeyboardInterrupt:
        pass  # Ctrl-C is how an operator ends an unbounded read; the count is still reported
    finally:
        consumer.close()
    return written


def _start_offsets(consumer, topic: str, partitions, start: StartPosition) -> list:
    confluent_kafka = kafka()
    TopicPartition = confluent_kafka.TopicPartition
    if start.timestamp_ms is None:
        return [TopicPartition(topic, number, start.offset) for number in partitions]
    # A partition with no record at or after the timestamp comes back as -1, which librdkafka
    # reads as OFFSET_END: such a partition yields only records produced from now on.
    wanted = [TopicPartition(topic, number, start.timestamp_ms) for number in partitions]
    try:
        return consumer.offsets_for_times(wanted, timeout=CONNECT_TIMEOUT_S)
    except confluent_kafka.KafkaException as error:
        raise ToolError(f"topic {topic!r}: no offsets for timestamp {start.timestamp_ms}: {error.args[0].str()}") from error
