"""`replog broker start` as an operator meets it."""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.broker_process import BrokerProcess


def broker_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replog", "broker", "start", *args], capture_output=True, text=True, timeout=60)


def test_start_line_names_listener_data_dir_and_store(tmp_path):
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        line = next(line for line in broker.output if "listening on" in line)
        assert f"127.0.0.1:{broker.port}" in line and str(tmp_path / "data") in line and "memory://" in line
    finally:
        assert broker.stop() == 0


def test_sigterm_is_a_clean_shutdown_that_leaves_clean_markers(tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("marked", 1, 1)])["marked"].result(timeout=30)
    assert broker.stop() == 0
    assert (tmp_path / "data" / "marked-0" / ".clean-shutdown").exists()
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
