"""A broker under differential test, replog or Kafka, and the instruments the scenarios use on
it: raw requests through replog's own client (net/client.py, which negotiates with any Kafka
broker), raw frames for what no client would send, and confluent-kafka's clients.

Answers come back as plain data (`plain`): kio's entities as dicts and lists, error codes by
name, ids as strings, durations in milliseconds; the scenarios then normalise what is the
broker's own (addresses, ids) before the two answers are compared.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import enum
import socket
import struct
import uuid
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from replog.net.client import BrokerConnection, BrokerUnavailable
from tests.support.polling import wait_until

CLOSED = "connection closed"  # what a broker that does not answer a request did instead
REQUEST_TIMEOUT_S = 10  # Kafka answers every scenario's request within seconds (a new group: 3 s)
TOPIC_READY_TIMEOUT_S = 30
_SIZE = struct.Struct(">i")


def plain(value: Any) -> Any:
    """kio's answer (or any part of it) as comparable plain data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: plain(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return value


@dataclasses.dataclass(frozen=True)
class Target:
    name: str  # "kafka" or "replog": for messages only, never for a scenario to branch on
    bootstrap: str

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.bootstrap.rsplit(":", 1)
        return host, int(port)

    # raw protocol
    def request(self, api_key: int, api_version: int, values: dict) -> Any:
        """The plain answer to one request on a connection of its own, or CLOSED if the broker
        closed the connection instead of answering."""
        async def exchange() -> Any:
            host, port = self.address
            async with await BrokerConnection.open(host, port, client_id="differential",
                                                   request_timeout_s=REQUEST_TIMEOUT_S) as connection:
                return await connection.request(api_key, api_version, values)
        try:
            return plain(asyncio.run(exchange()))
        except BrokerUnavailable:
            return CLOSED

    def exchange_frame(self, frame: bytes) -> bytes | str:
        """The response frame (without its size) to a frame written as is, or CLOSED."""
        with socket.create_connection(self.address, timeout=REQUEST_TIMEOUT_S) as connection:
            try:
                connection.sendall(frame)
                header = connection.recv(_SIZE.size, socket.MSG_WAITALL)
            except ConnectionError:
                return CLOSED
            if len(header) < _SIZE.size:
                return CLOSED
            (size,) = _SIZE.unpack(header)
            return connection.recv(size, socket.MSG_WAITALL)

    # confluent-kafka
    def admin(self) -> AdminClient:
        """Keep it while its futures are awaited: they fail once the client is collected."""
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def producer(self, **config: Any) -> Producer:
        return Producer({"bootstrap.servers": self.bootstrap, **config})

    def consumer(self, **config: Any) -> Consumer:
        return Consumer({"bootstrap.servers": self.bootstrap, "enable.auto.commit": False, **config})

    # topics
    def wait_for_leaders(self, name: str) -> dict:
        def led() -> dict | None:
            answer = self.metadata([name])
            (topic,) = answer["topics"]
            ready = topic["error_code"] == "none" and all(partition["leader_id"] >= 0 for partition in topic["partitions"])
            return answer if ready else None
        return wait_until(led, f"leaders of {name} on {self.name}", TOPIC_READY_TIMEOUT_S)

    def metadata(self, names: list[str] | None, version: int = 12) -> dict:
        topics = None if names is None else [{"name": name, "topic_id": uuid.UUID(int=0)} for name in names]
        return self.request(3, version, {"topics": topics, "allow_auto_topic_creation": False,
                                         "include_topic_authorized_operations": False})
