"""Batch reads and writes (spark.read / df.write) against a real 3-broker cluster."""

from __future__ import annotations

import json
import re
import time

import pytest
from pyspark.errors import AnalysisException, PythonException

from pyspark.sql.types import (
    ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType,
)

from tests.support.polling import wait_until

from .conftest import TIMEOUT_S, consume_all, new_topic, numbered, produce, watermarks

# Spark's Kafka source schema (KafkaRecordToRowConverter), written out here independently of
# replog's own definition so that the test compares against Spark's, not against itself.
KAFKA_SOURCE_FIELDS = [
    ("key", BinaryType()), ("value", BinaryType()), ("topic", StringType()), ("partition", IntegerType()),
    ("offset", LongType()), ("timestamp", TimestampType()), ("timestampType", IntegerType()),
]
KAFKA_HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]), True)


def read(spark, bootstrap: str, **options):
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def test_starting_and_ending_offsets_select_exactly_that_range(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=2)
    produce(bootstrap, topic, numbered(0, 30), partition=0)
    produce(bootstrap, topic, numbered(100, 30), partition=1)

    frame = read(spark, bootstrap, subscribe=topic,
                 startingOffsets=json.dumps({topic: {"0": 5, "1": -2}}),
                 endingOffsets=json.dumps({topic: {"0": 12, "1": 3}}))
    rows = sorted((row.partition, row.offset, row.value) for row in frame.collect())

    expected = [(0, offset, f"record-{offset:06d}".encode()) for offset in range(5, 12)]
    expected += [(1, offset, f"record-{100 + offset:06d}".encode()) for offset in range(3)]
    assert rows == expected


def test_schema_is_the_kafka_source_schema_field_by_field(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap)
    plain = read(spark, bootstrap, subscribe=topic).schema
    with_headers = read(spark, bootstrap, subscribe=topic, includeHeaders="true").schema

    assert [(field.name, field.dataType, field.nullable) for field in plain.fields] == [
        (name, data_type, True) for name, data_type in KAFKA_SOURCE_FIELDS]
    assert [(field.name, field.dataType) for field in with_headers.fields] == [*KAFKA_SOURCE_FIELDS, ("headers", KAFKA_HEADERS_TYPE)]


def test_records_keys_headers_and_timestamps_read_as_produced(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap)
    produce(bootstrap, topic, [b"a", b"b", b"c"], keys=[b"k0", b"k1", b"k2"],
            headers=[[("h", b"x"), ("empty", None)], None, [("h", b"z")]])

    rows = read(spark, bootstrap, subscribe=topic, includeHeaders="true").orderBy("offset").collect()

    assert [(row.key, row.value, row.topic, row.partition, row.offset, row.timestampType) for row in rows] == [
        (b"k0", b"a", topic, 0, 0, 0), (b"k1", b"b", topic, 0, 1, 0), (b"k2", b"c", topic, 0, 2, 0)]
    assert [None if row.headers is None else [(h.key, h.value) for h in row.headers] for row in rows] == [
        [("h", b"x"), ("empty", None)], None, [("h", b"z")]]  # null, not empty, without headers
    assert [round(row.timestamp.timestamp() * 1000) for row in rows] == [record.timestamp_ms for record in consume_all(bootstrap, topic)]


def test_min_partitions_splits_a_large_range_into_several_tasks(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap)
    produce(bootstrap, topic, numbered(0, 40))

    frame = read(spark, bootstrap, subscribe=topic, minPartitions="4")

    assert frame.rdd.getNumPartitions() == 4
    assert sorted(row.offset for row in frame.collect()) == list(range(40))


def test_starting_timestamp_starts_at_the_first_record_at_or_after_it(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap)
    produce(bootstrap, topic, numbered(0, 5))
    first_records_end_ms = max(record.timestamp_ms for record in consume_all(bootstrap, topic))
    wait_until(lambda: time.time() * 1000 > first_records_end_ms + 1, "the clock to pass the first records", TIMEOUT_S)
    produce(bootstrap, topic, numbered(5, 5))

    rows = read(spark, bootstrap, subscribe=topic, startingTimestamp=str(first_records_end_ms + 1)).collect()

    assert sorted(row.offset for row in rows) == list(range(5, 10))


def test_a_batch_write_lands_in_the_topic_and_a_consumer_reads_it_back(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    topic = new_topic(bootstrap, partitions=3)
    rows = [(f"key-{index}", f"value-{index}".encode(), [("origin", b"spark")]) for index in range(50)]
    frame = spark.createDataFrame(rows, "key string, value binary, headers array<struct<key: string, value: binary>>")

    frame.write.format("replog").mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()

    consumed = consume_all(bootstrap, topic)
    assert sorted((record.key, record.value) for record in consumed) == sorted((key.encode(), value) for key, value, _ in rows)
    assert all(record.headers == [("origin", b"spark")] for record in consumed)
    # Keys land where Kafka's default (murmur2) partitioner puts them: as librdkafka's murmur2 does.
    twin = new_topic(bootstrap, partitions=3)
    produce(bootstrap, twin, [value for _, value, _ in rows], keys=[key.encode() for key, _, _ in rows], partitioner="murmur2")
    assert {record.key: record.partition for record in consumed} == {record.key: record.partition for record in consume_all(bootstrap, twin)}


@pytest.mark.parametrize("option, value, named", [
    ("maxOffsetsPerTrigger", "ten", "maxOffsetsPerTrigger"),
    ("failOnDataLoss", "maybe", "failOnDataLoss"),
    ("kafka.linger.ms", "5", "kafka.linger.ms"),
    ("assign", "[0, 1]", "assign"),
])
def test_a_bad_or_unknown_option_fails_at_load_naming_it(spark, option, value, named):
    with pytest.raises(AnalysisException, match=re.escape(f"'{named}'")):
        spark.read.format("replog").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t") \
            .option(option, value).load()


def test_load_without_a_subscription_fails_naming_the_three_options(spark):
    with pytest.raises(AnalysisException, match="'subscribe', 'subscribePattern', 'assign'"):
        spark.read.format("replog").option("kafka.bootstrap.servers", "127.0.0.1:9").load()


def test_an_empty_topic_reads_as_no_rows(spark, replog_cluster):
    topic = new_topic(replog_cluster.bootstrap, partitions=2)
    assert read(spark, replog_cluster.bootstrap, subscribe=topic).count() == 0


def test_a_range_deleted_by_retention_fails_the_read_or_is_skipped_with_fail_on_data_loss_false(spark, replog_cluster):
    bootstrap = replog_cluster.bootstrap
    # Small segments and a partition size limit of about two of them: the brokers (retention
    # checked every 100 ms, see conftest) delete the oldest segments soon after the produce.
    topic = new_topic(bootstrap, config={"segment.bytes": "1024", "retention.bytes": "2048"})
    for round_start in range(0, 200, 20):  # one produce (and so at least one batch) per round: many segments
        produce(bootstrap, topic, numbered(round_start, 20), partition=0)
    wait_until(lambda: watermarks(bootstrap, topic)[0] > 0, f"retention to delete the first segment of {topic}", timeout_s=20)
    log_start_before, high_watermark = watermarks(bootstrap, topic)
    from_zero = {"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 0}})}

    with pytest.raises(PythonException, match="failOnDataLoss=false") as caught:
        read(spark, bootstrap, **from_zero).collect()
    lost = re.search(rf"{topic}-0: offsets 0\.\.(\d+) were deleted \(retention\) before they were read", str(caught.value))
    assert lost, str(caught.value)[:2000]
    # Retention may delete more between the two watermark reads, never less than seen before.
    assert log_start_before <= int(lost[1]) + 1 <= watermarks(bootstrap, topic)[0]

    rows = [(row.offset, row.value) for row in read(spark, bootstrap, **from_zero, failOnDataLoss="false").collect()]
    first = rows[0][0]
    assert log_start_before <= first <= watermarks(bootstrap, topic)[0]
    assert rows == [(offset, f"record-{offset:06d}".encode()) for offset in range(first, high_watermark)]
