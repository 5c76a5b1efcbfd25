"""The source and sink against a secured broker, configured with the option names of Spark's
Kafka connector (`kafka.security.protocol`, `kafka.ssl.truststore.location`...) or librdkafka's
with the `kafka.` prefix: one streaming query reads a topic and writes it to another."""

from __future__ import annotations

import re
import uuid

import pytest
from pyspark.errors import AnalysisException
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.secured_broker import java_mtls_properties, librdkafka_mtls_properties, mtls_broker, ssl_address, tls_files

from .conftest import TIMEOUT_S, consume_all, numbered


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, files):
    process = mtls_broker(tmp_path_factory.mktemp("mtls-broker") / "data", files)
    yield process
    process.stop()


def kafka_options(properties: dict[str, str]) -> dict[str, str]:
    return {f"kafka.{name}": value for name, value in properties.items()}


def test_a_streaming_query_reads_and_writes_over_mtls(spark, broker, files, tmp_path):
    client = {"bootstrap.servers": ssl_address(broker), **librdkafka_mtls_properties(files)}
    source, target = f"secure-in-{uuid.uuid4().hex[:8]}", f"secure-out-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(client)
    for topic, future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(target, 2, 1)]).items():
        future.result(TIMEOUT_S)
    producer = Producer(client | {"acks": "all"})
    values = numbered(0, 30)
    for value in values:
        producer.produce(source, value, key=value[-2:])
    assert producer.flush(TIMEOUT_S) == 0

    reader = spark.readStream.format("replog").option("kafka.bootstrap.servers", ssl_address(broker))
    frame = reader.options(**kafka_options(java_mtls_properties(files))).option("subscribe", source) \
        .option("startingOffsets", "earliest").load().select("key", "value")
    query = (frame.writeStream.format("replog").option("kafka.bootstrap.servers", ssl_address(broker))
             .options(**kafka_options(librdkafka_mtls_properties(files))).option("topic", target)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None

    written = consume_all(ssl_address(broker), target, **librdkafka_mtls_properties(files))
    assert sorted((record.key, record.value) for record in written) == sorted((value[-2:], value) for value in values)


def test_security_options_are_checked_at_load_naming_the_keys(spark, files):
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t")
    with pytest.raises(AnalysisException, match=re.escape("ssl.key.location without ssl.certificate.location")):
        reader.option("kafka.security.protocol", "SSL").option("kafka.ssl.key.location", str(files.client_key)).load()
    with pytest.raises(AnalysisException, match=re.escape("'kafka.ssl.keystore.password'")):
        reader.option("kafka.ssl.keystore.password", "secret").load()


def test_a_query_without_a_client_certificate_is_refused_by_the_broker(spark, broker, files):
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", ssl_address(broker)).option("subscribe", "t") \
        .option("kafka.security.protocol", "SSL").option("kafka.ssl.ca.location", str(files.ca)) \
        .option("kafka.request.timeout.ms", "3000")
    with pytest.raises(AnalysisException, match="no broker answered metadata"):
        reader.load().collect()
