"""Producing and reading records: offsets by timestamp, reads out of range, the bounds of a
Fetch answer, broker-set timestamps, records a compacted topic refuses."""

from __future__ import annotations

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from replog.storage.batch_format import LOG_APPEND_TIME_BIT
from tests.support.batches import build_batch

from ..protocol import batch_attributes, create_topic, fetch, list_offset, produce
from tests.support.polling import wait_until

from ..targets import Target
from .registry import scenario

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
BASE_TIMESTAMP_MS = 1_700_000_000_000
# KIP-74: a Fetch answer holds at most max_bytes (but for a first batch larger than that alone),
# whatever each partition's own limit allows.
FETCH_MAX_BYTES = 1_000_000
FETCH_PARTITION_MAX_BYTES = 20_000_000
FETCHED_PARTITIONS = 3
BATCHES_PER_PARTITION = 4
BATCH_PAYLOAD_BYTES = 500_000
CLIENT_TIMEOUT_S = 30


@scenario
def list_offsets_by_timestamp(target: Target) -> dict:
    topic = "differential-timestamps"
    create_topic(target, topic)
    for second in (1, 3, 2):  # the largest timestamp is not the last
        produce(target, topic, 0, build_batch(max_timestamp=BASE_TIMESTAMP_MS + second * 1000))
    asked = {"before_all": BASE_TIMESTAMP_MS, "between": BASE_TIMESTAMP_MS + 1500, "exact": BASE_TIMESTAMP_MS + 3000,
             "after_all": BASE_TIMESTAMP_MS + 4000, "latest": LATEST, "earliest": EARLIEST, "max_timestamp": MAX_TIMESTAMP}
    return {label: list_offset(target, topic, 0, timestamp) for label, timestamp in asked.items()}


@scenario
def list_offsets_of_an_empty_partition(target: Target) -> dict:
    topic = "differential-empty"
    create_topic(target, topic)
    asked = {"by_timestamp": BASE_TIMESTAMP_MS, "latest": LATEST, "earliest": EARLIEST, "max_timestamp": MAX_TIMESTAMP}
    return {label: list_offset(target, topic, 0, timestamp) for label, timestamp in asked.items()}


@scenario
def fetch_out_of_range(target: Target) -> dict:
    topic = "differential-range"
    create_topic(target, topic)
    produce(target, topic, 0, build_batch(record_count=2))
    answers = {label: fetch(target, {(topic, 0): offset})[(topic, 0)] for label, offset in
               {"past_the_end": 100, "negative": -5, "at_the_end": 2}.items()}
    return {label: {key: answer[key] for key in ("error_code", "high_watermark", "log_start_offset")}
            for label, answer in answers.items()}


@scenario
def fetch_response_size_limit(target: Target) -> dict:
    topic = "differential-fetch-limit"
    create_topic(target, topic, partitions=FETCHED_PARTITIONS)
    for partition in range(FETCHED_PARTITIONS):
        for _ in range(BATCHES_PER_PARTITION):
            produce(target, topic, partition, build_batch(payload_bytes=BATCH_PAYLOAD_BYTES))
    answers = fetch(target, {(topic, partition): 0 for partition in range(FETCHED_PARTITIONS)},
                    max_bytes=FETCH_MAX_BYTES, partition_max_bytes=FETCH_PARTITION_MAX_BYTES)
    sizes = [len(answers[topic, partition]["records"] or b"") for partition in range(FETCHED_PARTITIONS)]
    return {"within_max_bytes": sum(sizes) <= FETCH_MAX_BYTES, "first_partition_has_records": sizes[0] > 0}


@scenario
def log_append_time(target: Target) -> dict:
    """A topic whose timestamps the broker sets: the Produce answer carries the time it set, and
    the batch a consumer reads is marked LogAppendTime."""
    topic = "differential-log-append-time"
    create_topic(target, topic, configs={"message.timestamp.type": "LogAppendTime"})
    answer = produce(target, topic, 0, build_batch(max_timestamp=BASE_TIMESTAMP_MS))
    records = fetch(target, {(topic, 0): 0})[(topic, 0)]["records"] or b""
    return {"error_code": answer["error_code"], "log_append_time_answered": (answer["log_append_time"] or -1) > BASE_TIMESTAMP_MS,
            "batches_marked_log_append_time": [bool(attributes & LOG_APPEND_TIME_BIT) for attributes in batch_attributes(records)]}


@scenario
def keyless_records_to_a_compacted_topic(target: Target) -> dict:
    """KIP-467: the error names each refused record of the batch."""
    topic = "differential-compacted"
    create_topic(target, topic, configs={"cleanup.policy": "compact"})
    answer = produce(target, topic, 0, build_batch(record_count=3))
    return {"error_code": answer["error_code"], "record_errors": [error["batch_index"] for error in answer["record_errors"]],
            "error_message_given": bool(answer["error_message"])}


@scenario
def consumer_reads_what_a_producer_wrote(target: Target) -> list:
    """Through librdkafka both ways: keys, values, headers, timestamps and their type, offsets."""
    topic = "differential-round-trip"
    create_topic(target, topic)
    producer = target.producer(acks="all", **{"enable.idempotence": True})
    for number in range(3):
        producer.produce(topic, key=f"key-{number}".encode(), value=f"value-{number}".encode(), partition=0,
                         headers=[("number", str(number).encode())], timestamp=BASE_TIMESTAMP_MS + number)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0, f"{target.name} did not take the records"
    consumer = target.consumer(**{"group.id": "differential-round-trip"})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        messages = wait_until(lambda: consumer.consume(3, timeout=1) or None, f"records from {target.name}", CLIENT_TIMEOUT_S)
    finally:
        consumer.close()
    return [(message.error(), message.key(), message.value(), message.headers(), message.timestamp(), message.offset())
            for message in messages]
