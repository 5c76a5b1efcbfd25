"""`--command-config FILE` on the admin commands and the tools, against brokers whose only
listener is secured: every connection a command opens (librdkafka's and replog's own) presents
the file's credentials.

- mTLS (SSL, ssl.client.auth=required): the file's client certificate, in Java's names or
  librdkafka's; a command without it is refused by the broker.
- SASL_SSL: `replog users` makes a SCRAM user with an admin's PLAIN credentials, and that
  user's SCRAM-SHA-512 file (Java's sasl.jaas.config, as Kafka's tools take it) carries the
  commands; a wrong password is one line that holds no password.
- SASL_SSL with OAUTHBEARER: the token in the file a file: URL names (KIP-768); an expired one
  is one line.

Through the store (--coord), a broker is asked at its listener of the file's security.protocol.
A bad file is a usage error before anything connects."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.secured_broker import (  # noqa: F401  (mtls, oauth_ssl, sasl_ssl, signer and tls are fixtures)
    ADMIN_PASSWORD,
    ADMIN_USER,
    java_mtls_properties,
    librdkafka_mtls_properties,
    mtls,
    mtls_settings,
    oauth_ssl,
    oauthbearer_properties,
    sasl_ssl,
    sasl_ssl_address,
    sasl_ssl_properties,
    signer,
    ssl_address,
    tls,
    write_properties,
)
from tests.support.broker_process import BrokerProcess
from tests.support.servers import unique_root
from tests.tools.conftest import replog

pytestmark = pytest.mark.cluster  # broker processes, one of each kind per module

RECORDS = [b"k0\tfirst", b"k1\tsecond", b"k2\tthird"]
USER, PASSWORD = "alice", "alice-Pa55-word"


@pytest.fixture(scope="module", params=["java", "librdkafka"])
def mtls_config(request, tmp_path_factory, tls) -> str:  # noqa: F811
    properties = java_mtls_properties(tls) if request.param == "java" else librdkafka_mtls_properties(tls)
    return str(write_properties(tmp_path_factory.mktemp("config") / "client.properties", properties))


@pytest.fixture(scope="module")
def scram_config(sasl_ssl, tls, tmp_path_factory) -> str:  # noqa: F811
    """USER's SCRAM-SHA-512 file, the user made by `replog users create` as the PLAIN admin."""
    directory = tmp_path_factory.mktemp("config")
    admin = ("--bootstrap-server", sasl_ssl_address(sasl_ssl), "--command-config",
             str(write_properties(directory / "admin.properties", sasl_ssl_properties(tls, "PLAIN", ADMIN_USER, ADMIN_PASSWORD))))
    ok(replog("users", "create", USER, "--mechanism", "SCRAM-SHA-512", "--password-stdin", *admin, stdin=PASSWORD.encode()))
    assert USER in ok(replog("users", "list", "--output", "json", *admin))
    return str(write_properties(directory / "alice.properties", sasl_ssl_properties(tls, "SCRAM-SHA-512", USER, PASSWORD)))


def ok(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def admin_commands_work(door: tuple[str, ...]) -> None:
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "2", *door))
    assert topic in ok(replog("topics", "list", *door)).split()
    # replog's own client (BrokerConnection) asks each broker for its state-change events.
    assert json.loads(ok(replog("cluster", "state-changes", "--topic", topic, "--output", "json", *door)))["unreachable"] == []
    assert "groups" in json.loads(ok(replog("groups", "list", "--output", "json", *door)))
    ok(replog("topics", "delete", topic, *door))


def tools_work(door: tuple[str, ...]) -> None:
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "1", *door))
    ok(replog("produce", "--topic", topic, "--key-separator", "\t", *door, stdin=b"".join(line + b"\n" for line in RECORDS)))
    consumed = ok(replog("consume", "--topic", topic, "--from-beginning", "--print-key", "--max-messages", str(len(RECORDS)), *door))
    assert consumed.encode().splitlines() == RECORDS


def test_admin_commands_present_the_files_certificate(mtls, mtls_config):  # noqa: F811
    admin_commands_work(("--bootstrap-server", ssl_address(mtls), "--command-config", mtls_config))


def test_the_tools_present_the_files_certificate(mtls, mtls_config):  # noqa: F811
    door = ("--bootstrap-server", ssl_address(mtls), "--command-config", mtls_config)
    tools_work(door)
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "1", *door))
    assert "20 records sent" in ok(replog("perf", "produce", "--topic", topic, "--num-records", "20", "--record-size", "100", *door))
    assert "20 records consumed" in ok(replog("perf", "consume", "--topic", topic, "--num-records", "20", *door))


def test_through_the_store_a_broker_is_asked_at_its_listener_of_the_files_protocol(zookeeper_server, tls, mtls_config,  # noqa: F811
                                                                                   tmp_path):
    coord = f"zk://{zookeeper_server.address}{unique_root()}"
    # Its inter-broker listener, the registration's host:port, is PLAINTEXT: not the file's.
    broker = BrokerProcess(tmp_path / "data", coord_url=coord, listeners=("PLAINTEXT", "SSL"), extra_args=mtls_settings(tls))
    broker.start()
    try:
        topic = f"cc-{uuid.uuid4().hex[:8]}"
        ok(replog("topics", "create", topic, "--partitions", "1", "--coord", coord))
        events = ok(replog("cluster", "state-changes", "--topic", topic, "--output", "json", "--coord", coord,
                           "--command-config", mtls_config))
        assert json.loads(events)["unreachable"] == []
    finally:
        broker.stop()


@pytest.mark.parametrize("command", [("topics", "list"), ("consume", "--topic", "t", "--timeout-ms", "100")])
def test_without_the_certificate_the_broker_refuses_in_one_line(mtls, command):  # noqa: F811
    done = replog(*command, "--bootstrap-server", ssl_address(mtls))
    assert done.returncode == 1
    assert done.stderr.decode().startswith(f"replog: cannot reach a broker at {ssl_address(mtls)}")
    assert done.stderr.decode().count("\n") == 1


def test_admin_commands_and_tools_authenticate_with_scram(sasl_ssl, scram_config):  # noqa: F811
    door = ("--bootstrap-server", sasl_ssl_address(sasl_ssl), "--command-config", scram_config)
    admin_commands_work(door)
    tools_work(door)


def test_a_wrong_password_is_one_line_without_the_password(sasl_ssl, tls, scram_config, tmp_path):  # noqa: F811
    wrong = write_properties(tmp_path / "wrong.properties", sasl_ssl_properties(tls, "SCRAM-SHA-512", USER, "not-" + PASSWORD))
    for command in (("topics", "list"), ("cluster", "state-changes"), ("consume", "--topic", "t", "--timeout-ms", "100")):
        done = replog(*command, "--bootstrap-server", sasl_ssl_address(sasl_ssl), "--command-config", str(wrong))
        assert done.returncode == 1, done.stderr
        message = done.stderr.decode()
        assert message.startswith("replog: ") and message.count("\n") == 1 and PASSWORD not in message
        assert "SASL authentication error: Authentication failed during authentication due to invalid credentials" in message


def test_admin_commands_and_tools_present_an_oauthbearer_token_from_its_file(oauth_ssl, tls, signer, tmp_path):  # noqa: F811
    token_file = tmp_path / "token.jwt"
    token_file.write_text(signer.token("alice"))
    config = write_properties(tmp_path / "oauth.properties", oauthbearer_properties(tls, token_file))
    door = ("--bootstrap-server", sasl_ssl_address(oauth_ssl), "--command-config", str(config))
    admin_commands_work(door)
    tools_work(door)
    expired = signer.token("alice", lifetime_s=-600)
    token_file.write_text(expired)
    for command in (("topics", "list"), ("consume", "--topic", "t", "--timeout-ms", "100")):
        done = replog(*command, *door)
        assert done.returncode == 1, done.stderr
        message = done.stderr.decode()
        assert message.count("\n") == 1 and "SASL authentication error" in message and expired not in message


def test_a_bad_file_is_a_usage_error_naming_the_key_and_no_secret(tmp_path):
    path = write_properties(tmp_path / "client.properties", {"security.protocol": "SSL", "sasl.password": "hunter2"})
    missing_ca = write_properties(tmp_path / "missing-ca.properties", {"security.protocol": "SSL",
                                                                       "ssl.ca.location": str(tmp_path / "ca.pem")})
    for command, named in ((("topics", "list", "--bootstrap-server", "127.0.0.1:9"), "topics list"), (("produce", "--topic", "t"), "produce")):
        done = replog(*command, "--command-config", str(path))
        assert done.returncode == 2
        assert done.stderr.decode() == (f"replog: {named}: Invalid value for '--command-config': {path}: sasl.password set, "
                                        "but security.protocol=SSL uses no SASL\n")
        done = replog(*command, "--command-config", str(missing_ca))
        assert done.returncode == 2
        assert done.stderr.decode() == (f"replog: {named}: Invalid value for '--command-config': cannot use the CA "
                                        f"certificates in {tmp_path / 'ca.pem'}: No such file or directory\n")
