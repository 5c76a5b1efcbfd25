"""A broker whose only listener is secured, and the client properties files that reach it, for
the tests of replog's own clients (`--command-config`, the Spark connector's kafka.* options):
certificates made here with trustme, one CA for the broker and its clients. A SASL_SSL broker
offers SCRAM-SHA-512, and PLAIN for one admin user of its JAAS config, who makes the SCRAM users
(a broker with the embedded store has no other door for them).

An OAUTHBEARER broker checks tokens against the JWKS of `signer`, served on loopback.

The fixtures `tls`, `mtls`, `sasl_ssl`, `signer` and `oauth_ssl` (one of each per module) are
imported by the tests that use them."""

from __future__ import annotations

import pathlib
from typing import NamedTuple

import pytest
import trustme
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from tests.support.broker_process import BrokerProcess
from tests.support.oauthbearer import AUDIENCE, ISSUER, JwksServer, SigningKey, jwks

ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-Pa55-word"
TIMEOUT_S = 30


class TlsFiles(NamedTuple):
    ca: pathlib.Path  # the CA's certificate, PEM
    broker: pathlib.Path  # the broker's key and chain, PEM
    client: pathlib.Path  # a client's key and chain, PEM, that the CA signed
    client_chain: pathlib.Path  # the same client's chain alone, as librdkafka's ssl.certificate.location
    client_key: pathlib.Path  # its key alone, as librdkafka's ssl.key.location


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> TlsFiles:
    directory = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    files = TlsFiles(*(directory / name for name in ("ca.pem", "broker.pem", "client.pem", "chain.pem", "key.pem")))
    ca.cert_pem.write_to_path(str(files.ca))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(files.broker))
    client = ca.issue_cert("client.example")
    client.private_key_and_cert_chain_pem.write_to_path(str(files.client))
    for blob in client.cert_chain_pems:
        blob.write_to_path(str(files.client_chain), append=True)
    client.private_key_pem.write_to_path(str(files.client_key))
    return files


@pytest.fixture(scope="module")
def mtls(tmp_path_factory, tls):
    """A broker whose one SSL listener takes only clients with a certificate the CA signed."""
    yield from _running(BrokerProcess(tmp_path_factory.mktemp("mtls-broker") / "data", listeners=("SSL",),
                                      extra_args=mtls_settings(tls)))


def mtls_settings(files: TlsFiles) -> tuple[str, ...]:
    """A broker's arguments: its SSL listeners take only clients with a certificate the CA signed."""
    return ("--set", f"ssl.keystore.location={files.broker}", "--set", f"ssl.truststore.location={files.ca}",
            "--set", "ssl.client.auth=required")


@pytest.fixture(scope="module")
def sasl_ssl(tmp_path_factory, tls):
    """A broker whose one SASL_SSL listener offers SCRAM-SHA-512 and PLAIN (ADMIN_USER alone)."""
    plain_users = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
                   f'user_{ADMIN_USER}="{ADMIN_PASSWORD}";')
    yield from _running(BrokerProcess(tmp_path_factory.mktemp("sasl-broker") / "data", listeners=("SASL_SSL",), extra_args=(
        "--set", f"ssl.keystore.location={tls.broker}", "--set", "sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN",
        "--set", f"listener.name.sasl_ssl.plain.sasl.jaas.config={plain_users}")))


@pytest.fixture(scope="module")
def signer() -> SigningKey:
    return SigningKey("RS256")


@pytest.fixture(scope="module")
def oauth_ssl(tmp_path_factory, tls, signer):
    """A broker whose one SASL_SSL listener offers OAUTHBEARER, for tokens `signer` signs."""
    with JwksServer(jwks(signer)) as server:
        yield from _running(BrokerProcess(tmp_path_factory.mktemp("oauth-broker") / "data", listeners=("SASL_SSL",),
                                          extra_args=(
            "--set", f"ssl.keystore.location={tls.broker}", "--set", "sasl.enabled.mechanisms=OAUTHBEARER",
            "--set", f"listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url={server.url}",
            "--set", f"sasl.oauthbearer.expected.issuer={ISSUER}", "--set", f"sasl.oauthbearer.expected.audience={AUDIENCE}")))


def _running(process: BrokerProcess):
    process.start()
    yield process
    process.stop()


def oauthbearer_properties(files: TlsFiles, token_file: pathlib.Path) -> dict[str, str]:
    """A SASL_SSL client presenting the token in `token_file`, in Java's names (KIP-768's file: URL)."""
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER", "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca),
            "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "sasl.login.callback.handler.class": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            "sasl.oauthbearer.token.endpoint.url": token_file.as_uri()}


def sasl_ssl_properties(files: TlsFiles, mechanism: str, user: str, password: str) -> dict[str, str]:
    """A SASL_SSL client in Java's names: the JAAS config Kafka's tools and Spark take."""
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism, "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(files.ca),
            "sasl.jaas.config": f'org.apache.kafka.common.security.{module} required username="{user}" password="{password}";'}


def create_scram_user(broker: BrokerProcess, files: TlsFiles, user: str, password: str) -> None:
    """A SCRAM-SHA-512 credential for `user`, made by the admin user over PLAIN."""
    admin = AdminClient({"bootstrap.servers": sasl_ssl_address(broker), "security.protocol": "SASL_SSL",
                         "ssl.ca.location": str(files.ca), "sasl.mechanisms": "PLAIN", "sasl.username": ADMIN_USER,
                         "sasl.password": ADMIN_PASSWORD})
    upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode())
    admin.alter_user_scram_credentials([upsert])[user].result(TIMEOUT_S)


def sasl_ssl_address(broker: BrokerProcess) -> str:
    """The address of a SASL_SSL broker (sasl_ssl or oauth_ssl)."""
    return f"127.0.0.1:{broker.ports['SASL_SSL']}"


def java_mtls_properties(files: TlsFiles) -> dict[str, str]:
    """A client certificate in Java's names (KIP-651's PEM stores)."""
    return {"security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": str(files.ca),
            "ssl.keystore.type": "PEM", "ssl.keystore.location": str(files.client)}


def librdkafka_mtls_properties(files: TlsFiles) -> dict[str, str]:
    """The same in librdkafka's names."""
    return {"security.protocol": "ssl", "ssl.ca.location": str(files.ca), "ssl.certificate.location": str(files.client_chain),
            "ssl.key.location": str(files.client_key)}


def write_properties(path: pathlib.Path, properties: dict[str, str]) -> pathlib.Path:
    path.write_text("# written by the test\n" + "".join(f"{key}={value}\n" for key, value in properties.items()))
    return path


def ssl_address(broker: BrokerProcess) -> str:
    return f"127.0.0.1:{broker.ports['SSL']}"
