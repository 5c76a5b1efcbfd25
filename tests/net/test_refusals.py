"""A refused request leaves one log line: one per kind, subject and interval, however often
a client retries it."""

from __future__ import annotations

import socket
import struct

import pytest
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey, decode_response
from replog.net.framing import CLOSES_LOGGED_MAX
from replog.net.handlers import REFUSAL_LINES_PER_INTERVAL_MAX
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import SERVED_TOPIC, served_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange
from tests.support.polling import wait_until
from tests.support.batches import build_batch

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)


def refusal_lines(broker, subject: str) -> list[str]:
    return [line for line in broker.output if "refused" in line and f"subject={subject}" in line]


def test_produce_to_a_missing_topic_is_logged_once_however_often_retried(served_broker):
    frame = encode_request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": bytes(build_batch())}]}]})
    for _ in range(5):
        assert b"\x00\x03" in exchange(served_broker.port, frame)  # UNKNOWN_TOPIC_OR_PARTITION
    # The broker's output reaches the test through a reader thread: wait for the line, then count.
    wait_until(lambda: refusal_lines(served_broker, "no-such-topic-0"), "the refusal's log line", 10)
    assert len(refusal_lines(served_broker, "no-such-topic-0")) == 1


def test_invalid_topic_name_in_create_topics_is_logged(served_broker):
    frame = encode_request(ApiKey.CREATE_TOPICS, 5, {"timeout": 1000, "validate_only": False, "topics": [
        {"name": "bad/name", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]})
    exchange(served_broker.port, frame)
    wait_until(lambda: refusal_lines(served_broker, "bad/name"), "the refusal's log line", 10)
    assert len(refusal_lines(served_broker, "bad/name")) == 1


def test_produce_to_partitions_a_topic_lacks_is_answered_unknown_at_once(served_broker):
    """As Kafka: UNKNOWN_TOPIC_OR_PARTITION (retriable, should the metadata lag), not
    NOT_LEADER_OR_FOLLOWER after waiting for a leader that will never be named."""
    missing = range(1, 301)  # the topic has partition 0 only
    frame = encode_request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": SERVED_TOPIC, "partition_data": [{"index": index, "records": bytes(build_batch())} for index in missing]}]})
    _, body = decode_response(ApiKey.PRODUCE, 9, exchange(served_broker.port, frame))
    answered = {(partition.index, partition.error_code) for topic in body.responses for partition in topic.partition_responses}
    assert answered == {(index, ErrorCode.unknown_topic_or_partition) for index in missing}
    # Lines for 300 subjects: the interval's budget, however many the request named.
    wait_until(lambda: refusal_lines(served_broker, f"{SERVED_TOPIC}-"), "the refusals' log lines", 10)
    assert len(refusal_lines(served_broker, f"{SERVED_TOPIC}-")) <= REFUSAL_LINES_PER_INTERVAL_MAX


def test_connections_closed_for_their_bytes_write_a_bounded_number_of_lines(served_broker):
    """Each line names its peer, so the repeat filter cannot hold them back: a client opening
    connections only to have them closed would otherwise write a line each."""
    for _ in range(CLOSES_LOGGED_MAX + 50):
        with socket.create_connection(("127.0.0.1", served_broker.port), timeout=10) as connection:
            connection.sendall(struct.pack(">i", 3) + b"\xff\xff\xff")  # shorter than a request header
            assert connection.recv(1) == b"", "the broker answered a frame it cannot read"
    closing = lambda: [line for line in served_broker.output if "closing connection peer=" in line]  # noqa: E731
    wait_until(lambda: len(closing()) >= CLOSES_LOGGED_MAX, "the closing lines", 10)
    assert len(closing()) < CLOSES_LOGGED_MAX + 50, "a line for every connection closed"
