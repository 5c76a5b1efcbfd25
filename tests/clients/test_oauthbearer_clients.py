"""Real clients over SASL_SSL with OAUTHBEARER: confluent-kafka (an oauth_cb; produce, a consumer
group, admin), kafka-python and aiokafka (a sasl_oauth_token_provider), against a broker process
whose only listener is SASL_SSL and whose JWKS a loopback HTTP server owned by the test serves.
Tokens are signed here with a key made here; an expired one, or one signed by another key, is
refused with Kafka's invalid_token answer, and the broker logs why but not the token. Tokens that
last seconds end their sessions, and librdkafka re-authenticates with fresh ones.

kcat is not covered: the only OAUTHBEARER tokens its librdkafka can present without a callback
are unsecured ones (alg none, which replog refuses) or OIDC client-credentials tokens, and the
kcat packaged here is built without librdkafka's http/oidc feature."""

from __future__ import annotations

import ssl
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.clients import secured_clients
from tests.clients.secured_clients import RECORDS, TIMEOUT_S, new_topic
from tests.clients.test_tls_clients import ca, started, tls_files  # noqa: F401 (fixtures)
from tests.net.test_connection_limits import metric
from tests.support.broker_process import BrokerProcess
from tests.support.oauthbearer import AUDIENCE, ISSUER, JwksServer, SigningKey, jwks
from tests.support.polling import wait_until


@pytest.fixture(scope="module")
def signer() -> SigningKey:
    return SigningKey("RS256")


@pytest.fixture(scope="module")
def jwks_server(signer):
    with JwksServer(jwks(signer)) as server:
        yield server


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls_files, jwks_server):
    process = started(tmp_path_factory.mktemp("oauth-broker") / "data", tls_files,
                      "listener.name.sasl_ssl.sasl.enabled.mechanisms=OAUTHBEARER",
                      f"listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url={jwks_server.url}",
                      f"sasl.oauthbearer.expected.issuer={ISSUER}", f"sasl.oauthbearer.expected.audience={AUDIENCE}",
                      listeners=("SASL_SSL",))
    yield process
    process.stop()


def address(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SASL_SSL']}"


def confluent_oauth(broker: BrokerProcess, ca_file, token_of) -> dict:
    def oauth_cb(_config: str) -> tuple[str, float]:
        token = token_of()
        return token, time.time() + 300

    return {"bootstrap.servers": address(broker), "security.protocol": "SASL_SSL", "ssl.ca.location": str(ca_file),
            "sasl.mechanism": "OAUTHBEARER", "oauth_cb": oauth_cb}


def test_confluent_kafka_produces_consumes_in_a_group_and_administers(broker, tls_files, signer, jwks_server):
    ca_file, _ = tls_files
    secured_clients.confluent_round_trip(confluent_oauth(broker, ca_file, lambda: signer.token("alice")))
    assert jwks_server.requests == 1  # one JWKS for the listener's many connections


@pytest.mark.parametrize("bad_token", ["expired", "another key"])
def test_confluent_kafka_with_a_bad_token_is_refused_with_invalid_token(broker, tls_files, signer, bad_token):
    ca_file, _ = tls_files
    token = signer.token(lifetime_s=-3600) if bad_token == "expired" else SigningKey("RS256", kid=signer.kid).token()
    errors: list[str] = []
    settings = confluent_oauth(broker, ca_file, lambda: token) | {"error_cb": lambda error: errors.append(str(error))}
    admin = AdminClient(settings)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(0)
    assert any("invalid_token" in error for error in errors), errors
    reason = "expired" if bad_token == "expired" else "signature does not verify"
    wait_until(lambda: any("OAUTHBEARER token refused" in line and reason in line for line in broker.output),
               "the broker to log why it refused the token")
    assert token.split(".")[2] not in "".join(broker.output)


def test_confluent_kafka_reauthenticates_with_fresh_tokens_and_loses_nothing(broker, tls_files, signer):
    """The session ends with the token (its exp is the session's lifetime in SaslAuthenticate), so
    librdkafka refreshes the token and re-authenticates on the same connections before then,
    while it produces."""
    ca_file, _ = tls_files
    tokens_issued = []

    def short_lived(_config: str) -> tuple[str, float]:
        tokens_issued.append(signer.token("dave", lifetime_s=5))
        return tokens_issued[-1], time.time() + 5

    admin_settings = confluent_oauth(broker, ca_file, lambda: signer.token("admin"))
    topic = new_topic(admin_settings)
    labels = {"listener": "SASL_SSL", "mechanism": "OAUTHBEARER", "kind": "reauthentication"}
    before = metric(broker, "replog_sasl_authentications_total", **labels)

    def reauthenticated() -> float:
        return metric(broker, "replog_sasl_authentications_total", **labels) - before

    producer = Producer(confluent_oauth(broker, ca_file, lambda: "") | {"oauth_cb": short_lived})
    failures: list[str] = []
    sent = 0
    deadline = time.monotonic() + 60
    while len(tokens_issued) < 3 or reauthenticated() < 2:
        assert time.monotonic() < deadline, (len(tokens_issued), reauthenticated())
        producer.produce(topic, b"value", partition=0,
                         on_delivery=lambda error, _message: error is None or failures.append(str(error)))
        sent += 1
        producer.flush(TIMEOUT_S)  # one record at a time; serves the token refresh too
    assert failures == []
    consumer = Consumer(admin_settings | {"group.id": f"g-{uuid.uuid4().hex[:6]}"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S) == (0, sent)
    finally:
        consumer.close()


def test_kafka_python_produces_and_consumes(broker, tls_files, signer):
    try:
        from kafka.net.sasl.oauth import AbstractTokenProvider
    except ImportError:  # kafka-python before 3
        from kafka.sasl.oauth import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        def token(self) -> str:
            return signer.token("bob")

        def extensions(self) -> dict[str, str]:
            return {"traceId": "kafka-python"}

    ca_file, _ = tls_files
    topic = new_topic(confluent_oauth(broker, ca_file, lambda: signer.token("admin")))
    client = {"bootstrap_servers": address(broker), "security_protocol": "SASL_SSL", "ssl_cafile": str(ca_file),
              "sasl_mechanism": "OAUTHBEARER", "sasl_oauth_token_provider": Tokens()}
    assert secured_clients.kafka_python_round_trip(client, topic) == RECORDS


def test_aiokafka_produces_and_consumes(broker, tls_files, signer):
    from aiokafka.abc import AbstractTokenProvider

    class Tokens(AbstractTokenProvider):
        async def token(self) -> str:
            return signer.token("carol")

    ca_file, _ = tls_files
    topic = new_topic(confluent_oauth(broker, ca_file, lambda: signer.token("admin")))
    client = {"bootstrap_servers": address(broker), "security_protocol": "SASL_SSL",
              "ssl_context": ssl.create_default_context(cafile=str(ca_file)), "sasl_mechanism": "OAUTHBEARER",
              "sasl_oauth_token_provider": Tokens()}
    assert secured_clients.aiokafka_round_trip(client, topic) == RECORDS
