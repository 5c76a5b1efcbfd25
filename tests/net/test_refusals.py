"""A refused request leaves one log line: one per kind, subject and interval, however often
a client retries it."""

from __future__ import annotations

from replog.net.codec import ApiKey
from tests.net.test_fuzz import encode_request, fuzzed_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange
from tests.polling import wait_until
from tests.unit.replica_batches import build_batch


def refusal_lines(broker, subject: str) -> list[str]:
    return [line for line in broker.output if "refused" in line and f"subject={subject}" in line]


def test_produce_to_a_missing_topic_is_logged_once_however_often_retried(fuzzed_broker):
    frame = encode_request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [
        {"name": "no-such-topic", "partition_data": [{"index": 0, "records": bytes(build_batch())}]}]})
    for _ in range(5):
        assert b"\x00\x03" in exchange(fuzzed_broker.port, frame)  # UNKNOWN_TOPIC_OR_PARTITION
    # The broker's output reaches the test through a reader thread: wait for the line, then count.
    wait_until(lambda: refusal_lines(fuzzed_broker, "no-such-topic-0"), "the refusal's log line", 10)
    assert len(refusal_lines(fuzzed_broker, "no-such-topic-0")) == 1


def test_invalid_topic_name_in_create_topics_is_logged(fuzzed_broker):
    frame = encode_request(ApiKey.CREATE_TOPICS, 5, {"timeout": 1000, "validate_only": False, "topics": [
        {"name": "bad/name", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}]})
    exchange(fuzzed_broker.port, frame)
    wait_until(lambda: refusal_lines(fuzzed_broker, "bad/name"), "the refusal's log line", 10)
    assert len(refusal_lines(fuzzed_broker, "bad/name")) == 1
