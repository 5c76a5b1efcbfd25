"""`replog broker start` as an operator meets it."""

from __future__ import annotations

import hashlib
import pathlib
import socket
import subprocess
import sys
import time

import pytest

from replog.storage.clean_shutdown import recorded_cleanly_closed
from tests.support.broker_process import BrokerProcess
from tests.support.servers import unique_root
from tests.cli.test_cli import closed_port

pytestmark = pytest.mark.cluster  # each test starts a broker process

SETTLE_TIMEOUT_S = 10
POLL_INTERVAL_S = 0.02


def broker_command(*args: str) -> subprocess.CompletedProcess:
    """A start expected to fail: without a metrics endpoint (9644 may be any other broker's), unless `args` ask."""
    return subprocess.run([sys.executable, "-m", "replog", "broker", "start", "--metrics-listen", "", *args],
                          capture_output=True, text=True, timeout=60)


def test_start_line_names_listener_data_dir_and_store(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        line = next(line for line in broker.output if "listening on" in line)
        assert f"127.0.0.1:{broker.port}" in line and str(tmp_path / "data") in line and "memory://" in line
        assert f"metrics on http://127.0.0.1:{broker.metrics_port}/metrics" in line and broker.metrics_port != 0
    finally:
        assert broker.stop() == 0


def test_sigterm_is_a_clean_shutdown_that_records_the_logs_closed_cleanly(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("marked", 1, 1)])["marked"].result(timeout=30)
    assert broker.stop() == 0
    assert "marked-0" in recorded_cleanly_closed(tmp_path / "data")
    assert any("shutting down" in line for line in broker.output)


def test_logs_of_topics_unknown_to_the_store_are_reported_and_kept(tmp_path):
    stray = tmp_path / "data" / "ghost-0"
    stray.mkdir(parents=True)
    (stray / "00000000000000000000.log").write_bytes(b"")
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        assert any("stray partition log kept" in line and "ghost-0" in line for line in broker.output)
    finally:
        broker.stop()
    assert stray.exists()


def test_bad_setting_is_one_line_with_status_2(tmp_path):
    done = broker_command("--data-dir", str(tmp_path), "--set", "log.retention.ms=soon")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "log.retention.ms" in done.stderr
    done = broker_command("--data-dir", str(tmp_path), "--set", "no-equals-sign")
    assert done.returncode == 2 and "key=value" in done.stderr
    done = broker_command("--data-dir", str(tmp_path), "--set", "no.such.setting=1")
    assert done.returncode == 2 and "no.such.setting" in done.stderr


def test_a_bad_flag_value_names_the_flag_with_status_2(tmp_path):
    done = broker_command("--data-dir", str(tmp_path), "--broker-id", "abc")
    assert done.returncode == 2
    assert done.stderr == "replog: --broker-id: 'abc' is not an integer\n"


def test_config_file_is_layered_under_flags(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text('"broker.id" = 7\n"listeners" = "127.0.0.1:1"\n')
    broker = BrokerProcess(tmp_path / "data", extra_args=("--config", str(config)))
    broker.start()  # --listen 127.0.0.1:0 from the fixture overrides the file's port
    try:
        assert any("replog broker 7 listening" in line for line in broker.output)
    finally:
        broker.stop()


def test_port_in_use_is_one_line_with_status_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = broker_command("--data-dir", str(tmp_path), "--listen", f"127.0.0.1:{taken.getsockname()[1]}")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot listen" in done.stderr


def test_a_metrics_port_in_use_is_one_line_naming_the_setting_with_status_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        done = broker_command("--data-dir", str(tmp_path), "--listen", "127.0.0.1:0",
                              "--metrics-listen", f"127.0.0.1:{taken.getsockname()[1]}")
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "cannot serve metrics" in done.stderr and "metrics.listeners" in done.stderr, done.stderr


@pytest.mark.parametrize("below_the_file", ["", "sub"])
def test_a_data_dir_that_is_a_file_or_under_one_is_named_with_status_1(tmp_path, below_the_file):
    """A data directory that cannot be one is named in one line; it used to say
    `cannot listen on ...: [Errno 17] File exists`."""
    a_file = tmp_path.resolve() / "afile"
    a_file.write_text("")
    data_dir = a_file / below_the_file if below_the_file else a_file
    done = broker_command("--data-dir", str(data_dir), "--listen", "127.0.0.1:0")
    assert done.returncode == 1
    at_fault = "" if data_dir == a_file else f"{a_file} "
    assert done.stderr == (f"replog: data directory {data_dir}: {at_fault}is a file, not a directory; "
                           "give log.dirs (--data-dir) a directory\n")


def test_a_start_failing_on_an_unreachable_store_says_only_that(tmp_path):
    """A broker that never started says only why, in one line: no controlled-shutdown warnings
    (registration not removed, hand-over skipped) before its failure line."""
    url = f"etcd://127.0.0.1:{closed_port()}"
    done = broker_command("--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--coord", url)
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"replog: {url}: coordination store unavailable"), done.stderr


def test_a_start_on_an_unreachable_zookeeper_says_at_once_that_it_waits_and_how_long(tmp_path):
    """It says at once that it waits, and how long, rather than stay silent for the whole
    connection timeout before its error."""
    url = f"zk://127.0.0.1:{closed_port()}/replog"
    done = broker_command("--data-dir", str(tmp_path), "--listen", "127.0.0.1:0", "--coord", url,
                          "--set", "coord.session.timeout.ms=1000")
    assert done.returncode == 1
    waiting, failure = done.stderr.splitlines()
    assert waiting == f"replog: waiting for the coordination store at {url} (at most 1 s)"
    assert failure.startswith(f"replog: {url}: coordination store unavailable: cannot reach ZooKeeper"), failure


def files_under(directory: pathlib.Path) -> dict[str, str] | None:
    """Every file under `directory`, by relative name, with a digest of its bytes; None while the
    running broker is between writing a checkpoint's `.tmp` and renaming it over the file."""
    digests = {}
    for path in sorted(directory.rglob("*")):
        if path.name.endswith(".tmp"):
            return None
        if path.is_file():
            try:
                digests[str(path.relative_to(directory))] = hashlib.sha256(path.read_bytes()).hexdigest()
            except FileNotFoundError:  # renamed over or deleted while listed: look again
                return None
    return digests


def wait_for(condition, what: str):
    """`condition()` once it is truthy, polled until SETTLE_TIMEOUT_S."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while not (outcome := condition()):
        assert time.monotonic() < deadline, f"timed out after {SETTLE_TIMEOUT_S}s waiting for {what}"
        time.sleep(POLL_INTERVAL_S)
    return outcome


def settled_files_under(directory: pathlib.Path) -> dict[str, str]:
    return wait_for(lambda: files_under(directory), f"no checkpoint being written under {directory}")


@pytest.mark.parametrize("store, server_fixture", [("memory", None), ("zk", "zookeeper_server"), ("etcd", "etcd_server")])
def test_a_second_broker_on_a_directory_in_use_exits_with_one_line_and_touches_nothing(store, server_fixture, tmp_path, request):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    if server_fixture is None:
        coord_url = "memory://"
    else:
        coord_url = f"{store}://{request.getfixturevalue(server_fixture).address}{unique_root()}"
    data_dir = (tmp_path / "data").resolve()
    running = BrokerProcess(data_dir, coord_url=coord_url)
    running.start()
    try:
        # A log with records: what a second broker that went ahead could recover and mark clean.
        admin = AdminClient({"bootstrap.servers": running.bootstrap})
        # The start line comes before the broker's metadata lists it over ZooKeeper (a watch away);
        # a librdkafka admin told of no brokers would not send CreateTopics for minutes.
        wait_for(lambda: 0 in admin.list_topics(timeout=5).brokers, "the broker to list itself in its metadata")
        admin.create_topics([NewTopic("held", 1, 1)])["held"].result(timeout=30)
        producer = Producer({"bootstrap.servers": running.bootstrap, "acks": "all"})
        for number in range(10):
            producer.produce("held", f"record-{number}".encode())
        assert producer.flush(30) == 0
        del producer  # or it reconnects to the stopped broker, logging, until collected
        # The running broker rewrites this file every few seconds; from now on with the same bytes.
        checkpoint = data_dir / "replication-offset-checkpoint"
        wait_for(lambda: checkpoint.exists() and "held 0 10" in checkpoint.read_text(), "held-0's high watermark checkpointed")
        before = settled_files_under(data_dir)

        second = broker_command("--data-dir", str(data_dir), "--listen", "127.0.0.1:0", "--coord", coord_url)

        assert second.returncode != 0
        assert second.stdout == ""
        lines = second.stderr.splitlines()
        assert len(lines) == 1, second.stderr
        assert str(data_dir) in lines[0] and f"process {running.process.pid}" in lines[0], lines[0]
        assert settled_files_under(data_dir) == before
        metadata = admin.list_topics(timeout=30)
        assert metadata.topics["held"].partitions[0].leader == 0
    finally:
        assert running.stop() == 0


@pytest.mark.parametrize("store, server_fixture", [("zk", "zookeeper_server"), ("etcd", "etcd_server")])
def test_a_broker_restarted_right_after_sigkill_replaces_its_previous_registration_and_starts(
        store, server_fixture, tmp_path, request):
    """A previous life's registration (docs/design.md §3.2): the killed process's session, and its
    registration, outlive it for up to a session timeout. The restart listens on the address that
    registration names, so that life is over: it takes the registration over rather than failing
    on NodeExists or waiting out the session (120 s here, longer than the wait below)."""
    from confluent_kafka.admin import AdminClient

    coord_url = f"{store}://{request.getfixturevalue(server_fixture).address}{unique_root()}"
    broker = BrokerProcess(tmp_path / "data", coord_url=coord_url, extra_args=("--set", "coord.session.timeout.ms=120000"))
    broker.start()
    broker.kill()
    broker.start()  # at once, on the same port: the killed life's session still holds /brokers/ids/0
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        wait_for(lambda: 0 in admin.list_topics(timeout=5).brokers, "the restarted broker registered")
        assert any("removed this broker's previous registration" in line for line in broker.output), "".join(broker.output)
    finally:
        assert broker.stop() == 0


async def test_a_broker_id_registered_by_a_live_broker_fails_the_start_saying_so(tmp_path):
    from replog.broker import Broker, BrokerIdInUse
    from replog.config import load_broker_config
    from replog.coord_backends import paths
    from replog.coord_backends.memory import MemoryStore

    other = MemoryStore(str(tmp_path / "store.db"))
    await other.start()
    try:
        await other.create(paths.broker(0), b'{"host": "127.0.0.1", "port": 1, "rack": null}', ephemeral=True, make_parents=True)
        broker = Broker(load_broker_config(None, {
            "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}", "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
            "coord.session.timeout.ms": "1000",
        }))
        try:
            with pytest.raises(BrokerIdInUse, match="broker id 0 is registered by another live broker"):
                await broker.start()
        finally:
            await broker.stop()
        # A broker that never registered removes nothing: the registration is the other's.
        assert await other.exists(paths.broker(0)) is not None
    finally:
        await other.close()
