"""confluent-kafka's errors as AdminErrors, the one translation KafkaAdmin and the group
requests share: an error keeps its Kafka code (error_for_code picks its class), and the line the
operator reads is librdkafka's text or the caller's own words for it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from confluent_kafka import KafkaException

from replog.admin.errors import AdminError, error_for_code


def admin_error(error, message: str | None = None) -> AdminError:
    """A KafkaError as the AdminError of its code, said by `message` (default: librdkafka's text)."""
    return error_for_code(error.code(), error.str() if message is None else message)


async def outcome(future, message: Callable[[object], str]):
    """The result of one of AdminClient's futures; its KafkaException as admin_error, said by
    `message(kafka_error)`."""
    try:
        return await asyncio.wrap_future(future)
    except KafkaException as exception:
        error = exception.args[0]
        raise admin_error(error, message(error)) from None
