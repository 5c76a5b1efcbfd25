"""Streaming reads and writes (readStream / writeStream) against a real 3-broker cluster."""

from __future__ import annotations

import contextlib
import threading

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from tests.support.polling import wait_until

from .conftest import TIMEOUT_S, consume_all, delete_topic, new_topic, numbered, produce, wait_for_leaders


class Collected:
    """A foreachBatch sink keeping every micro-batch's (partition, offset, value) rows by batch id;
    it can fail one batch once, as a failing sink would."""

    def __init__(self, fail_batch_id: int | None = None):
        self.batches: list[tuple[int, list[tuple[int, int, bytes]]]] = []
        self.fail_batch_id = fail_batch_id
        self.on_batch = None
        self._lock = threading.Lock()

    def __call__(self, frame, batch_id: int) -> None:
        rows = sorted((row.partition, row.offset, bytes(row.value)) for row in frame.select("partition", "offset", "value").collect())
        with self._lock:
            self.batches.append((batch_id, rows))
        if self.on_batch is not None:
            self.on_batch(batch_id)
        if batch_id == self.fail_batch_id:
            self.fail_batch_id = None
            raise RuntimeError(f"sink failure injected in batch {batch_id}")

    @property
    def rows(self) -> list[tuple[int, int, bytes]]:
        with self._lock:
            return [row for _, rows in self.batches for row in rows]


def start(spark, bootstrap: str, sink: Collected, checkpoint, *, available_now: bool = False, **options):
    reader = spark.readStream.format("replog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    writer = reader.load().writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")
    return writer.start()


@contextlib.contextmanager
def running(query):
    """The query, stopped when the block ends whatever happened in it."""
    try:
        yield query
    finally:
        query.stop()


def wait_for_rows(query, sink: Collected, count: int) -> None:
    """Until `count` rows went through the sink and their batches are committed to the
    checkpoint (Spark reports a batch's progress after its commit)."""
    def enough() -> bool:
        if query.exception() is not None:
            raise AssertionError(f"query failed: {query.exception()}")
        if len(sink.rows) < count:
            return False
        return sink.batches[-1][0] in {progress["batchId"] for progress in query.recentProgress}

    wait_until(enough, f"{count} rows through the query", TIMEOUT_S)


def expected_rows(bootstrap: str, topic: str) -> list[tuple[int, int, bytes]]:
    return [(record.partition, record.offset, record.value) for record in consume_all(bootstrap, topic)]


def test_a_stream_reads_each_record_once_while_appended_and_resumes_from_its_checkpoint(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, numbered(0, 20))
    first = Collected()
    query = start(spark, bootstrap, first, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest")
    with running(query):
        for chunk in range(1, 4):  # appended while the query runs
            produce(bootstrap, topic, numbered(20 * chunk, 20))
        wait_for_rows(query, first, 80)
    assert sorted(first.rows) == expected_rows(bootstrap, topic)  # no gaps, no duplicates

    produce(bootstrap, topic, numbered(80, 20))
    second = Collected()
    query = start(spark, bootstrap, second, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest")
    with running(query):
        wait_for_rows(query, second, 20)
    # Resumed exactly where it stopped: the next batch id, only the records appended since.
    assert second.batches[0][0] == first.batches[-1][0] + 1
    assert sorted(first.rows + second.rows) == expected_rows(bootstrap, topic)


def test_a_batch_replayed_after_a_sink_failure_has_the_identical_range(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, numbered(0, 30))
    failing = Collected(fail_batch_id=1)
    query = start(spark, bootstrap, failing, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest",
                  maxOffsetsPerTrigger="10")
    with pytest.raises(StreamingQueryException, match="sink failure injected"):
        query.awaitTermination(TIMEOUT_S)
    failed_batch = dict(failing.batches)[1]

    replaying = Collected()
    query = start(spark, bootstrap, replaying, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest",
                  maxOffsetsPerTrigger="10", available_now=True)
    assert query.awaitTermination(TIMEOUT_S)
    assert replaying.batches[0] == (1, failed_batch)
    assert sorted(failing.rows[:len(dict(failing.batches)[0])] + replaying.rows) == expected_rows(bootstrap, topic)


def test_max_offsets_per_trigger_bounds_each_batch_and_available_now_stops_at_the_offsets_present_at_start(
        spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=3)
    produce(bootstrap, topic, numbered(0, 55))
    present = expected_rows(bootstrap, topic)
    sink = Collected()
    # Records appended once the query has begun are past its AvailableNow target.
    sink.on_batch = lambda batch_id: batch_id == 0 and produce(bootstrap, topic, numbered(1000, 15))
    query = start(spark, bootstrap, sink, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest",
                  maxOffsetsPerTrigger="10", available_now=True)

    assert query.awaitTermination(TIMEOUT_S)
    assert [len(rows) for _, rows in sink.batches] == [10, 10, 10, 10, 10, 5]
    assert sorted(sink.rows) == present
    assert len(consume_all(bootstrap, topic)) == 70


def test_the_query_follows_a_killed_leader_and_sees_every_record_once(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=1)
    produce(bootstrap, topic, numbered(0, 30))
    sink = Collected()
    query = start(spark, bootstrap, sink, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader_id = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    leader = replog_cluster.brokers[leader_id]
    try:
        wait_for_rows(query, sink, 30)
        leader.kill()
        produce(replog_cluster.bootstrap, topic, numbered(30, 30))
        wait_for_rows(query, sink, 60)
    finally:
        query.stop()
        leader.restart()
    assert sorted(sink.rows) == expected_rows(replog_cluster.bootstrap, topic)
    assert len(sink.rows) == 60


def test_a_stream_picks_up_new_partitions_and_new_topics_matching_its_pattern(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    first = new_topic(bootstrap, prefix="pattern-a")
    prefix = first.rsplit("-", 1)[0]
    produce(bootstrap, first, numbered(0, 5))
    sink = Collected()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    query = start(spark, bootstrap, sink, tmp_path / "checkpoint", subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    with running(query):
        wait_for_rows(query, sink, 5)
        admin.create_partitions([NewPartitions(first, 2)])[first].result(TIMEOUT_S)
        wait_for_leaders(admin, first, 2)
        produce(bootstrap, first, numbered(5, 4), partition=1)
        second = new_topic(bootstrap, partitions=2, prefix=prefix)
        produce(bootstrap, second, numbered(9, 6))
        wait_for_rows(query, sink, 15)
    assert sorted(value for *_, value in sink.rows) == numbered(0, 15)


def test_deleting_the_topic_under_a_running_query_fails_it_with_a_clear_message(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap)
    produce(bootstrap, topic, numbered(0, 5))
    sink = Collected()
    query = start(spark, bootstrap, sink, tmp_path / "checkpoint", subscribe=topic, startingOffsets="earliest")
    with running(query):
        wait_for_rows(query, sink, 5)
        delete_topic(bootstrap, topic)
        with pytest.raises(StreamingQueryException, match=f"{topic}-0 was deleted.*failOnDataLoss=false"):
            query.awaitTermination(TIMEOUT_S)


def test_with_fail_on_data_loss_false_a_deleted_topic_is_skipped_and_the_query_goes_on(spark, replog_cluster, tmp_path):
    bootstrap = replog_cluster.bootstrap
    doomed, kept = new_topic(bootstrap), new_topic(bootstrap)
    produce(bootstrap, doomed, numbered(0, 5))
    produce(bootstrap, kept, numbered(5, 5))
    sink = Collected()
    query = start(spark, bootstrap, sink, tmp_path / "checkpoint", subscribe=f"{doomed},{kept}", startingOffsets="earliest",
                  failOnDataLoss="false")
    with running(query):
        wait_for_rows(query, sink, 10)
        delete_topic(bootstrap, doomed)
        produce(bootstrap, kept, numbered(10, 5))
        wait_for_rows(query, sink, 15)
    assert sorted(value for *_, value in sink.rows) == numbered(0, 15)


def test_a_streaming_aggregation_written_to_a_topic_is_read_back_by_a_consumer(spark, replog_cluster, tmp_path):
    """The README's example: read a topic as a stream, count by key, write the counts to another topic."""
    bootstrap = replog_cluster.bootstrap
    source, target = new_topic(bootstrap, partitions=2), new_topic(bootstrap, partitions=2)
    keys = [f"page-{index % 7}".encode() for index in range(40)]
    produce(bootstrap, source, numbered(0, 40), keys=keys)
    clicks = (spark.readStream.format("replog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source)
              .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 15).load())
    per_page = (clicks.groupBy(F.col("key").cast("string").alias("page")).count()
                .select(F.col("page").alias("key"), F.col("count").cast("string").alias("value")))
    query = (per_page.writeStream.format("replog").option("kafka.bootstrap.servers", bootstrap).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).outputMode("complete").trigger(availableNow=True).start())

    assert query.awaitTermination(TIMEOUT_S)
    latest_count = {record.key: int(record.value) for record in sorted(consume_all(bootstrap, target), key=lambda r: int(r.value))}
    assert latest_count == {key: keys.count(key) for key in set(keys)}
