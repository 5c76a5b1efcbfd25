"""`--command-config FILE` on the admin commands and the tools, against a broker whose only
listener is SSL with ssl.client.auth=required: every connection a command opens (librdkafka's
and replog's own) presents the file's client certificate, in Java's names or librdkafka's; a
command without it is refused by the broker, and a bad file is a usage error before anything
connects."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.support.secured_broker import (
    java_mtls_properties,
    librdkafka_mtls_properties,
    mtls_broker,
    ssl_address,
    tls_files,
    write_properties,
)
from tests.tools.conftest import replog

pytestmark = pytest.mark.cluster  # a broker process per module

RECORDS = [b"k0\tfirst", b"k1\tsecond", b"k2\tthird"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return tls_files(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, files):
    process = mtls_broker(tmp_path_factory.mktemp("mtls-broker") / "data", files)
    yield process
    process.stop()


@pytest.fixture(scope="module", params=["java", "librdkafka"])
def command_config(request, tmp_path_factory, files) -> str:
    properties = java_mtls_properties(files) if request.param == "java" else librdkafka_mtls_properties(files)
    return str(write_properties(tmp_path_factory.mktemp("config") / "client.properties", properties))


def ok(done) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout.decode()


def test_admin_commands_through_a_broker_present_the_files_certificate(broker, command_config):
    door = ("--bootstrap-server", ssl_address(broker), "--command-config", command_config)
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "2", *door))
    assert topic in ok(replog("topics", "list", *door)).split()
    # replog's own client (BrokerConnection) asks each broker for its state-change events.
    events = json.loads(ok(replog("cluster", "state-changes", "--topic", topic, "--output", "json", *door)))
    assert events["unreachable"] == []
    ok(replog("topics", "delete", topic, *door))


def test_the_tools_present_the_files_certificate(broker, command_config):
    door = ("--bootstrap-server", ssl_address(broker), "--command-config", command_config)
    topic = f"cc-{uuid.uuid4().hex[:8]}"
    ok(replog("topics", "create", topic, "--partitions", "1", *door))
    ok(replog("produce", "--topic", topic, "--key-separator", "\t", *door, stdin=b"".join(line + b"\n" for line in RECORDS)))
    consumed = ok(replog("consume", "--topic", topic, "--from-beginning", "--print-key", "--max-messages", str(len(RECORDS)), *door))
    assert consumed.encode().splitlines() == RECORDS
    perf = replog("perf", "produce", "--topic", topic, "--num-records", "20", "--record-size", "100", *door)
    assert "20 records sent" in ok(perf)
    assert "20 records consumed" in ok(replog("perf", "consume", "--topic", topic, "--num-records", "20", *door))


@pytest.mark.parametrize("command", [("topics", "list"), ("consume", "--topic", "t", "--timeout-ms", "100")])
def test_without_the_certificate_the_broker_refuses_in_one_line(broker, command):
    done = replog(*command, "--bootstrap-server", ssl_address(broker))
    assert done.returncode == 1
    assert done.stderr.decode().startswith(f"replog: cannot reach a broker at {ssl_address(broker)}")
    assert done.stderr.decode().count("\n") == 1


def test_a_bad_file_is_a_usage_error_naming_the_key_and_no_secret(tmp_path):
    path = write_properties(tmp_path / "client.properties", {"security.protocol": "SSL", "sasl.password": "hunter2"})
    for command in (("topics", "list", "--bootstrap-server", "127.0.0.1:9"), ("produce", "--topic", "t")):
        done = replog(*command, "--command-config", str(path))
        assert done.returncode == 2
        message = done.stderr.decode()
        assert message == (f"replog: {' '.join(command[:2]) if command[0] == 'topics' else command[0]}: Invalid value for "
                           f"'--command-config': {path}: sasl.password set, but security.protocol=SSL uses no SASL\n")
        assert "hunter2" not in message
