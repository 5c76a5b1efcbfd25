"""`replog produce`: lines in, one record per line, like kafka-console-producer with
parse.key. Lines are bytes end to end, so a record's key and value are exactly what the line
held (only the terminating newline is dropped)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from replog.tools.kafka_client import (LIBRDKAFKA_MESSAGE_MAX_BYTES, RecordTooLarge, ToolError, client_config, delivery_failure,
                                       kafka, new_client, producer_settings, send, topic_partition_count)

# librdkafka gives up on a record after this long; the final flush waits a little past it so
# that every record ends delivered or reported, never silently pending.
DELIVERY_TIMEOUT_MS = 60_000
FLUSH_MARGIN_S = 5.0


def split_key(line: bytes, key_separator: bytes | None, line_number: int) -> tuple[bytes | None, bytes]:
    """(key, value) of one line; without a separator the whole line is the value."""
    if key_separator is None:
        return None, line
    key, separator, value = line.partition(key_separator)
    if not separator:
        raise ToolError(f"line {line_number} has no key separator {key_separator!r}")
    return key, value


def produce_lines(
    lines: Iterable[bytes],
    *,
    bootstrap: str,
    security: Mapping[str, object],
    topic: str,
    key_separator: bytes | None,
    acks: str,
    compression: str,
    partition: int | None,
    headers: list[tuple[str, str]],
    producer_properties: list[tuple[str, str]],
) -> int:
    """Send each line as a record; returns how many were delivered. ToolError names the first
    record the broker refused, or the line that could not be parsed or sent. `producer_properties`
    are librdkafka settings (Kafka's --producer-property), over the tool's own."""
    topic_partition_count(bootstrap, security, topic, partition)
    failures: list = []

    def on_delivery(error, _message) -> None:
        if error is not None:
            failures.append(error)

    settings = (
        client_config(bootstrap, security)
        | producer_settings(acks)
        | {"compression.type": compression, "delivery.timeout.ms": DELIVERY_TIMEOUT_MS, "on_delivery": on_delivery}
        | dict(producer_properties)
    )
    producer = new_client(kafka().Producer, settings)
    target = {"partition": partition} if partition is not None else {}
    encoded_headers = [(name, value.encode()) for name, value in headers] or None
    sent = 0
    try:
        for line_number, line in enumerate(lines, start=1):
            key, value = split_key(line.removesuffix(b"\n"), key_separator, line_number)
            try:
                send(producer, topic, value, key=key, headers=encoded_headers, **target)
            except RecordTooLarge as error:
                limit = settings.get("message.max.bytes", LIBRDKAFKA_MESSAGE_MAX_BYTES)
                raise ToolError(
                    f"line {line_number}: {error} ({limit}); raise it with --producer-property message.max.bytes=BYTES "
                    "(the topic's max.message.bytes, which defaults to the broker's message.max.bytes, must allow it too)"
                ) from None
            sent += 1
            producer.poll(0)
    finally:
        # Records already queued end delivered or reported even when a later line is malformed.
        pending = producer.flush(DELIVERY_TIMEOUT_MS / 1000 + FLUSH_MARGIN_S)
    if failures:
        raise ToolError(f"{len(failures)} of {sent} records not delivered to {topic!r}: {delivery_failure(failures[0])}")
    if pending:
        raise ToolError(f"{pending} of {sent} records still undelivered to {topic!r}")
    return sent
