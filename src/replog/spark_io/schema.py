"""The rows the `replog` source produces and the sink accepts: Spark's Kafka source schema,
field by field (KafkaRecordToRowConverter), so that moving from `kafka` changes only the format
name. Every field is nullable, as there."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

# Kafka's timestamp types, as the source's `timestampType` column reports them.
CREATE_TIME = 0
LOG_APPEND_TIME = 1

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))

RECORD_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
)


def source_schema(include_headers: bool) -> StructType:
    """What the reader yields: the record fields, plus `headers` with includeHeaders=true."""
    fields = list(RECORD_FIELDS)
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)
