"""Produce names the records it refuses one by one (KIP-467), as Kafka 4 does, word for word:
every keyless record of a batch for a compacted topic, or record out of the timestamp bounds, in
record_errors, and error_message summing them up; the batch is refused whole. Raw Produce
requests to a broker process."""

from __future__ import annotations

import time

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey, decode_response
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import served_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

COMPACTED = "compacted"
HOUR_MS = 3_600_000
NO_KEY = f"Compacted topic cannot accept message without key in topic partition {COMPACTED}-0"


@pytest.fixture(scope="module")
def compacted(served_broker):  # noqa: F811
    admin = AdminClient({"bootstrap.servers": served_broker.bootstrap})
    admin.create_topics([NewTopic(COMPACTED, 1, 1, config={"cleanup.policy": "compact"})])[COMPACTED].result(timeout=30)
    return served_broker


def batch(keys: list[bytes | None], timestamps: list[int]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
    for offset, (key, timestamp) in enumerate(zip(keys, timestamps)):
        builder.append(offset, timestamp=timestamp, key=key, value=b"v%d" % offset, headers=[])
    return bytes(builder.build())


def produce(broker, topic: str, records: bytes):
    frame = encode_request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 10_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    _, body = decode_response(ApiKey.PRODUCE, 9, exchange(broker.port, frame))
    [answer] = body.responses[0].partition_responses
    return answer


def test_every_keyless_record_for_a_compacted_topic_is_named(compacted):
    now_ms = int(time.time() * 1000)
    answer = produce(compacted, COMPACTED, batch([b"k0", None, b"k2", None, b"k4"], [now_ms] * 5))
    assert (answer.error_code, answer.base_offset) == (ErrorCode.invalid_record, -1)
    assert [(error.batch_index, error.batch_index_error_message) for error in answer.record_errors] == [
        (1, NO_KEY), (3, NO_KEY)]
    assert answer.error_message == (
        "One or more records have been rejected due to 2 record errors in total, and only showing the first three "
        f"errors at most: [RecordError(batchIndex=1, message='{NO_KEY}'), RecordError(batchIndex=3, message='{NO_KEY}')]")


def test_a_timestamp_out_of_bounds_makes_the_batch_an_invalid_timestamp(compacted):
    now_ms = int(time.time() * 1000)
    answer = produce(compacted, COMPACTED, batch([b"k0", None, b"k2"], [now_ms, now_ms + 2 * HOUR_MS, now_ms + 2 * HOUR_MS]))
    assert answer.error_code == ErrorCode.invalid_timestamp
    assert answer.error_message == "One or more records have been rejected due to invalid timestamp"
    [keyless, future] = answer.record_errors
    assert (keyless.batch_index, keyless.batch_index_error_message) == (1, NO_KEY)
    assert future.batch_index == 2
    assert future.batch_index_error_message.startswith(
        f"Timestamp {now_ms + 2 * HOUR_MS} of message with offset 2 is out of range. The timestamp should be within [")


def test_a_batch_with_every_record_valid_is_appended(compacted):
    now_ms = int(time.time() * 1000)
    answer = produce(compacted, COMPACTED, batch([b"k0", b"k1"], [now_ms] * 2))
    assert (answer.error_code, answer.record_errors, answer.error_message) == (ErrorCode.none, (), None)
    assert answer.base_offset >= 0
