"""The source and sink against secured brokers (mTLS; SASL_SSL with SCRAM-SHA-512), configured
with the option names of Spark's Kafka connector (`kafka.security.protocol`,
`kafka.sasl.jaas.config`, `kafka.ssl.truststore.location`...) or librdkafka's with the `kafka.`
prefix: one streaming query reads a topic and writes it to another."""

from __future__ import annotations

import re
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.errors import AnalysisException

from tests.support import secured_broker as secured
from tests.support.secured_broker import mtls, sasl_ssl, tls  # noqa: F401  (fixtures)

from .conftest import TIMEOUT_S, consume_all, numbered


def kafka_options(properties: dict[str, str]) -> dict[str, str]:
    return {f"kafka.{name}": value for name, value in properties.items()}


def copy_through_a_query(spark, bootstrap: str, security: dict[str, str], source_options: dict[str, str],
                         sink_options: dict[str, str], checkpoint) -> None:
    """Produce to a new topic (with `security`, confluent-kafka's settings), copy it to another
    with one streaming query, source and sink, and check the copy."""
    source, target = f"secure-in-{uuid.uuid4().hex[:8]}", f"secure-out-{uuid.uuid4().hex[:8]}"
    client = {"bootstrap.servers": bootstrap, **security}
    admin = AdminClient(client)
    for future in admin.create_topics([NewTopic(source, 2, 1), NewTopic(target, 2, 1)]).values():
        future.result(TIMEOUT_S)
    producer = Producer(client | {"acks": "all"})
    values = numbered(0, 30)
    for value in values:
        producer.produce(source, value, key=value[-2:])
    assert producer.flush(TIMEOUT_S) == 0

    reader = spark.readStream.format("replog").option("kafka.bootstrap.servers", bootstrap)
    frame = reader.options(**source_options).option("subscribe", source).option("startingOffsets", "earliest").load() \
        .select("key", "value")
    query = (frame.writeStream.format("replog").option("kafka.bootstrap.servers", bootstrap).options(**sink_options)
             .option("topic", target).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(TIMEOUT_S)
    assert query.exception() is None

    written = consume_all(bootstrap, target, **security)
    assert sorted((record.key, record.value) for record in written) == sorted((value[-2:], value) for value in values)


def test_a_streaming_query_reads_and_writes_over_mtls(spark, mtls, tls, tmp_path):  # noqa: F811
    librdkafka = secured.librdkafka_mtls_properties(tls)
    copy_through_a_query(spark, secured.ssl_address(mtls), librdkafka, kafka_options(secured.java_mtls_properties(tls)),
                         kafka_options(librdkafka), tmp_path / "checkpoint")


def test_a_streaming_query_reads_and_writes_over_sasl_ssl_with_scram(spark, sasl_ssl, tls, tmp_path):  # noqa: F811
    secured.create_scram_user(sasl_ssl, tls, "spark", "spark-Pa55-word")
    librdkafka = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "spark",
                  "sasl.password": "spark-Pa55-word", "ssl.ca.location": str(tls.ca)}
    java = secured.sasl_ssl_properties(tls, "SCRAM-SHA-512", "spark", "spark-Pa55-word")
    copy_through_a_query(spark, secured.sasl_ssl_address(sasl_ssl), librdkafka, kafka_options(java), kafka_options(librdkafka),
                         tmp_path / "checkpoint")


def test_security_options_are_checked_at_load_naming_the_keys(spark, tls):  # noqa: F811
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t")
    with pytest.raises(AnalysisException, match=re.escape("ssl.key.location without ssl.certificate.location")):
        reader.option("kafka.security.protocol", "SSL").option("kafka.ssl.key.location", str(tls.client_key)).load()
    with pytest.raises(AnalysisException, match=re.escape("'kafka.ssl.keystore.password'")):
        reader.option("kafka.ssl.keystore.password", "secret").load()


def test_a_query_without_a_client_certificate_is_refused_by_the_broker(spark, mtls, tls):  # noqa: F811
    reader = spark.read.format("replog").option("kafka.bootstrap.servers", secured.ssl_address(mtls)).option("subscribe", "t") \
        .option("kafka.security.protocol", "SSL").option("kafka.ssl.ca.location", str(tls.ca)) \
        .option("kafka.request.timeout.ms", "3000")
    with pytest.raises(AnalysisException, match="no broker answered metadata"):
        reader.load().collect()
