"""Requests whose nullable fields are null get an answer, never an internal error.

Found by the fuzz test: a null where the broker expected a name or a value must be answered
with the matching Kafka error (or taken as Kafka takes it), not crash the handler.
"""

from __future__ import annotations

import datetime
import socket
import struct
import uuid

import pytest

from replog.net.codec import ApiKey
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import SERVED_TOPIC, served_broker  # noqa: F401  (the fixture)
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

UNKNOWN_TOPIC_ID = 100


def exchange(port: int, frame: bytes) -> bytes:
    """The response to `frame`, read whole (a socket with a timeout returns what it has, however
    much MSG_WAITALL asks for)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(frame)
        stream = connection.makefile("rb")
        header = stream.read(4)
        assert len(header) == 4, "the broker closed the connection instead of answering"
        (size,) = struct.unpack(">i", header)
        response = stream.read(size)
        assert len(response) == size, "the broker closed the connection inside its answer"
        return response


def no_internal_errors(broker) -> bool:
    return not any("request failed" in line or "Traceback" in line for line in broker.output)


def test_metadata_for_a_topic_named_only_by_id(served_broker):
    frame = encode_request(ApiKey.METADATA, 12, {"topics": [{"name": None, "topic_id": uuid.uuid4()}], "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
    response = exchange(served_broker.port, frame)
    assert struct.pack(">h", UNKNOWN_TOPIC_ID) in response
    assert no_internal_errors(served_broker)


def test_delete_topics_by_id_only(served_broker):
    frame = encode_request(ApiKey.DELETE_TOPICS, 6, {"timeout": 1000, "topics": [{"name": None, "topic_id": uuid.uuid4()}]})
    response = exchange(served_broker.port, frame)
    assert struct.pack(">h", UNKNOWN_TOPIC_ID) in response
    assert no_internal_errors(served_broker)


@pytest.mark.parametrize("operation", [0, 2, 3])  # SET, APPEND, SUBTRACT with a null value
def test_alter_configs_with_a_null_value(served_broker, operation):
    frame = encode_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": True, "resources": [
        {"resource_type": 2, "resource_name": SERVED_TOPIC, "configs": [{"name": "retention.ms", "config_operation": operation, "value": None}]}]})
    exchange(served_broker.port, frame)
    assert no_internal_errors(served_broker)


def test_create_topics_with_a_null_config_value(served_broker):
    frame = encode_request(ApiKey.CREATE_TOPICS, 5, {"timeout": 1000, "validate_only": True, "topics": [
        {"name": "nulls", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": [{"name": "retention.ms", "value": None}]}]})
    exchange(served_broker.port, frame)
    assert no_internal_errors(served_broker)


def test_describe_configs_of_a_missing_topic_and_an_unknown_resource(served_broker):
    for resource_type, name in [(2, "no-such-topic"), (99, "x"), (4, "12345")]:
        frame = encode_request(ApiKey.DESCRIBE_CONFIGS, 4, {"include_synonyms": False, "include_documentation": False,
                                                            "resources": [{"resource_type": resource_type, "resource_name": name, "configuration_keys": None}]})
        exchange(served_broker.port, frame)
    assert no_internal_errors(served_broker)


@pytest.mark.parametrize("field", ["configs", "assignments"])
def test_a_null_array_where_the_schema_forbids_one_is_refused_as_malformed(served_broker, field):
    # kio reads the null; Kafka refuses the request, and the broker closes the connection
    # (a warning) rather than failing inside the handler (an internal error).
    topic = {"name": f"null-{field}", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
    topic[field] = None
    frame = encode_request(ApiKey.CREATE_TOPICS, 5, {"topics": [topic], "timeout": datetime.timedelta(seconds=5), "validate_only": False})
    def warnings() -> int:
        return sum("where the schema allows none" in line for line in served_broker.output)

    before = warnings()
    with socket.create_connection(("127.0.0.1", served_broker.port), timeout=10) as connection:
        connection.sendall(frame)
        assert connection.recv(4) == b"", "the broker answered a malformed request"
    # The broker's output reaches the test through a reader thread: wait for the warning.
    wait_until(lambda: warnings() > before, "the warning", 10)
    assert no_internal_errors(served_broker)
