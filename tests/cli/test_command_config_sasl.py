"""`--command-config FILE` against a broker whose only listener is SASL_SSL: `replog users`
makes a SCRAM user with an admin's PLAIN credentials, and that user's SCRAM-SHA-512 file (Java's
sasl.jaas.config, as Kafka's tools take it) carries the admin commands and the tools; a wrong
password is one line that holds no password."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.secured_broker import (
    ADMIN_PASSWORD,
    ADMIN_USER,
    sasl_ssl_address,
    sasl_ssl_broker,
    sasl_ssl_properties,
    tls_files,
    write_properties,
)
from tests.tools.conftest import replog

pytestmark = pytest.mark.cluster  # a broker process per module

USER, PASSWORD = "alice", "alice-Pa55-word"
RECORDS = [b"k0\tfirst", b"k1\tsecond", b"k2\tthird"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, files):
    process = sasl_ssl_broker(tmp_path_factory.mktemp("sasl-broker") / "data", files)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def user_config(broker, files, tmp_path_factory) -> str:
    """USER's SCRAM-SHA-512 file, the user made by `replog users create` as the PLAIN admin."""
    directory = tmp_path_factory.mktemp("config")
    admin = write_properties(directory / "admin.properties", sasl_ssl_properties(files, "PLAIN", ADMIN_USER, ADMIN_PASSWORD))
    ok(replog("users", "create", USER, "--mechanism", "SCRAM-SHA-512", "--password-stdin", "--bootstrap-server",
              sasl_ssl_address(broker), "--command-config", str(admin), stdin=PASSWORD.encode()))
    listed = json.loads(ok(replog("users", "list", "--output", "json", "--bootstrap-server", sasl_ssl_address(broker),
                                  "--command-config", str(admin))))
    assert USER in json.dumps(listed)
    return str(write_properties(directory / "alice.properties", sasl_ssl_properties(files, "SCRAM-SHA-512", USER, PASSWORD)))


def ok(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def test_admin_commands_and_tools_authenticate_with_scram(broker, user_config):
    door = ("--bootstrap-server", sasl_ssl_address(broker), "--command-config", user_config)
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "1", *door))
    assert topic in ok(replog("topics", "list", *door)).split()
    # replog's own client (BrokerConnection) asks the broker for its state-change events.
    assert json.loads(ok(replog("cluster", "state-changes", "--topic", topic, "--output", "json", *door)))["unreachable"] == []
    ok(replog("produce", "--topic", topic, "--key-separator", "\t", *door, stdin=b"".join(line + b"\n" for line in RECORDS)))
    consumed = ok(replog("consume", "--topic", topic, "--from-beginning", "--print-key", "--max-messages", str(len(RECORDS)), *door))
    assert consumed.encode().splitlines() == RECORDS


def test_a_wrong_password_is_one_line_without_the_password(broker, files, user_config, tmp_path):
    wrong = write_properties(tmp_path / "wrong.properties", sasl_ssl_properties(files, "SCRAM-SHA-512", USER, "not-" + PASSWORD))
    for command in (("topics", "list"), ("cluster", "state-changes"), ("consume", "--topic", "t", "--timeout-ms", "100")):
        done = replog(*command, "--bootstrap-server", sasl_ssl_address(broker), "--command-config", str(wrong))
        assert done.returncode == 1, done.stderr
        message = done.stderr.decode()
        assert message.startswith("replog: ") and message.count("\n") == 1 and PASSWORD not in message
        assert "SASL authentication error: Authentication failed during authentication due to invalid credentials" in message
