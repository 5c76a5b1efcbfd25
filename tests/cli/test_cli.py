"""The `replog` command as an operator runs it: a real process, real servers."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

import pytest

from replog import __version__
from replog.coord_backends import hide_credentials
from tests.support.servers import unique_root

CONSOLE_SCRIPT = pathlib.Path(sys.executable).with_name("replog")


def replog(*args: str, timeout_s: float = 60, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replog", *args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_console_script_is_installed_and_answers_help():
    done = subprocess.run([str(CONSOLE_SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "coord" in done.stdout


def test_version():
    done = replog("--version")
    assert done.returncode == 0
    assert __version__ in done.stdout


def test_coord_check_on_the_embedded_store():
    done = replog("coord", "check")
    assert done.returncode == 0, done.stderr
    assert "backend: memory" in done.stdout
    assert "round trip: create" in done.stdout


def test_coord_check_on_a_persistent_embedded_store(tmp_path):
    done = replog("coord", "check", "--coord", f"memory://{tmp_path}/coord.sqlite")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "coord.sqlite").exists()


@pytest.mark.parametrize("kind, fixture", [("zk", "zookeeper_server"), ("etcd", "etcd_server")])
def test_coord_check_on_a_server(kind, fixture, request):
    server = request.getfixturevalue(fixture)
    done = replog("coord", "check", "--coord", f"{kind}://{server.address}{unique_root()}")
    assert done.returncode == 0, done.stderr
    assert f"backend: {kind}" in done.stdout
    version_line = next(line for line in done.stdout.splitlines() if line.startswith("server: "))
    assert version_line.split(": ", 1)[1][0].isdigit(), version_line


def made_in(directory: pathlib.Path) -> list[pathlib.Path]:
    """What a command made in `directory`, its working directory. Hypothesis's example database is
    not the command's: kio imports hypothesis where it is installed (as here), and hypothesis makes
    its .hypothesis directory in the working directory."""
    return [entry for entry in directory.iterdir() if entry.name != ".hypothesis"]


@pytest.mark.parametrize("url", ["nonsense", "kafka://127.0.0.1:9092", "zk://", "etcd://127.0.0.1", "zk://h:99999", "memory://host",
                                 "memory:127.0.0.1", "zk:127.0.0.1:2181", "etcd:127.0.0.1:2379", "zk://127.0.0.1:2181//replog",
                                 "etcd://root:secret@127.0.0.1:2379", "etcd://127.0.0.1:2379:2379"])
def test_bad_url_is_one_line_naming_the_accepted_forms_with_status_2(url, tmp_path):
    done = replog("coord", "check", "--coord", url, cwd=tmp_path)
    assert made_in(tmp_path) == [], "a store was opened"
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert hide_credentials(url) in lines[0] and "zk://host:port" in lines[0] and "etcd://host:port" in lines[0]
    assert "secret" not in lines[0]


def test_a_broker_given_memory_without_slashes_refuses_to_start_in_one_line_with_status_2(tmp_path):
    """memory:127.0.0.1 read as urllib reads it was an embedded store in a file named 127.0.0.1
    in the working directory: a broker alone, where the operator meant a cluster."""
    done = replog("broker", "start", "--coord", "memory:127.0.0.1", "--data-dir", str(tmp_path / "data"),
                  "--listen", "127.0.0.1:0", "--metrics-listen", "", cwd=tmp_path, timeout_s=20)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "memory:127.0.0.1" in lines[0] and "memory://" in lines[0] and "zk://host:port" in lines[0]
    assert made_in(tmp_path) == [], "the broker started, or made its data directory"


@pytest.mark.parametrize("kind", ["zk", "etcd"])
def test_unreachable_server_is_one_line_with_status_1(kind):
    done = replog("coord", "check", "--coord", f"{kind}://127.0.0.1:{closed_port()}", "--timeout-ms", "1500")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "unavailable" in lines[0]


def test_bad_option_value_is_a_usage_error():
    done = replog("coord", "check", "--timeout-ms", "ten")
    assert done.returncode == 2
    assert "--timeout-ms" in done.stderr
