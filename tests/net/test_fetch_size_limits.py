"""A Fetch answer's records are bounded as Kafka bounds them (KIP-74, ReplicaManager.readFromLog):
by the request's max_bytes as a whole and each partition's partition_max_bytes, except that the
first batch of the first partition with data is sent whole whatever its size. Raw requests to a
broker process, whose topic's partitions each hold batches of a known size."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.net.codec import ApiKey, decode_response
from tests.hostile.seeds import encode as encode_request
from tests.net.served_broker import served_broker  # noqa: F401  (the fixture)
from tests.net.test_nullable_fields import exchange
from tests.support.batches import build_batch

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

TOPIC = "size-limits"
PARTITIONS = 3
BATCHES_PER_PARTITION = 4
BATCH_BYTES = len(build_batch(payload_bytes=100_000))
FETCH_VERSION = 12


@pytest.fixture(scope="module")
def filled(served_broker):  # noqa: F811
    """The broker, with BATCHES_PER_PARTITION batches of BATCH_BYTES in each partition of TOPIC."""
    admin = AdminClient({"bootstrap.servers": served_broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=30)
    batch = bytes(build_batch(payload_bytes=100_000))
    for _ in range(BATCHES_PER_PARTITION):
        frame = encode_request(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout": 10_000, "topic_data": [
            {"name": TOPIC, "partition_data": [{"index": index, "records": batch} for index in range(PARTITIONS)]}]})
        _, body = decode_response(ApiKey.PRODUCE, 9, exchange(served_broker.port, frame))
        assert [partition.error_code for topic in body.responses for partition in topic.partition_responses] == \
            [ErrorCode.none] * PARTITIONS
    return served_broker


def fetched_sizes(broker, max_bytes: int, partition_max_bytes: int) -> list[int]:
    """The records' bytes of each partition in the answer to a fetch of every partition from 0."""
    frame = encode_request(ApiKey.FETCH, FETCH_VERSION, {
        "replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": max_bytes, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
        "topics": [{"topic": TOPIC, "partitions": [
            {"partition": index, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
             "log_start_offset": -1, "partition_max_bytes": partition_max_bytes} for index in range(PARTITIONS)]}]})
    _, body = decode_response(ApiKey.FETCH, FETCH_VERSION, exchange(broker.port, frame))
    [topic] = body.responses
    assert [partition.error_code for partition in topic.partitions] == [ErrorCode.none] * PARTITIONS
    return [len(partition.records or b"") for partition in topic.partitions]


def test_the_response_limit_bounds_the_first_partition_too(filled):
    """The consumer that stalled: a per-partition limit far above the response's, which the first
    partition read up to, ignoring the response's."""
    sizes = fetched_sizes(filled, max_bytes=250_000, partition_max_bytes=20_000_000)
    assert sizes == [250_000, 0, 0]


def test_the_remaining_response_bytes_bound_the_next_partitions(filled):
    """Each partition reads at most what the response has left; a later batch that does not fit
    is cut (the reader drops it), and with nothing left a partition reads nothing."""
    sizes = fetched_sizes(filled, max_bytes=2 * BATCH_BYTES + 1000, partition_max_bytes=BATCH_BYTES + 500)
    assert sizes == [BATCH_BYTES + 500, BATCH_BYTES + 500, 0]


def test_only_the_first_batch_of_the_first_partition_may_exceed_the_limits(filled):
    """Below one batch, the first partition still gets its first batch whole, so its reader
    progresses; the others, whose first batch does not fit, get nothing (not a cut batch alone)."""
    assert fetched_sizes(filled, max_bytes=10_000_000, partition_max_bytes=1000) == [BATCH_BYTES, 0, 0]
    assert fetched_sizes(filled, max_bytes=1000, partition_max_bytes=10_000_000) == [BATCH_BYTES, 0, 0]


def test_limits_above_the_data_read_everything(filled):
    assert fetched_sizes(filled, max_bytes=50_000_000, partition_max_bytes=10_000_000) == \
        [BATCHES_PER_PARTITION * BATCH_BYTES] * PARTITIONS
