"""The README's Quick Start, run as written: its commands are read from README.md, so the two
cannot drift apart.

Run as a new user would, with the package installed (the install lines are skipped: the test
runs inside the installed environment, whose bin directory goes first on PATH). The broker line
runs as a process of its own (the user's first terminal) until the others are done, then stops
with SIGTERM as Ctrl-C would stop it. One change to the text: 127.0.0.1:9092 becomes a free
port (the broker line gets `--listen` for it), and the metrics endpoint any free port
(`--metrics-listen`), so that the test runs beside anything on 9092 or 9644.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.servers import REPO
from tests.cli.test_cli import closed_port

pytestmark = pytest.mark.cluster  # the quick start starts a broker process

README = REPO / "README.md"
DOCUMENTED_ADDRESS = "127.0.0.1:9092"
INSTALL_LINE = re.compile(r"(python3 -m venv|pip install)\b")
BROKER_LINE = "replog broker start"
COMMAND_TIMEOUT_S = 120


def quick_start_commands() -> list[str]:
    """The command lines of the first ```sh block under "## Quick start", but install lines and
    comments."""
    section = README.read_text().split("\n## Quick start\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("\n```", 1)[0]
    return [line for line in block.splitlines()
            if line.strip() and not line.lstrip().startswith("#") and not INSTALL_LINE.match(line)]


class QuickStartBroker(BrokerProcess):
    """The README's broker line, run by bash (which execs it, so signals reach the broker)."""

    def __init__(self, line: str, cwd: pathlib.Path):
        super().__init__(cwd / "replog-data", cwd=cwd)
        self.line = line

    def command(self) -> list[str]:
        return ["bash", "-c", f"exec {self.line}"]


def test_the_quick_start_works_as_written(tmp_path, monkeypatch):
    commands = quick_start_commands()
    assert commands[0].startswith(BROKER_LINE), commands
    assert any(line.startswith("replog topics create greetings") for line in commands), "the Quick Start creates its topic"
    address = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("PATH", f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    broker = QuickStartBroker(f"{commands[0].split('#', 1)[0].strip()} --listen {address} --metrics-listen 127.0.0.1:0", tmp_path)
    broker.start()
    try:
        for line in commands[1:]:
            done = subprocess.run(["bash", "-o", "pipefail", "-c", line.replace(DOCUMENTED_ADDRESS, address)],
                                  cwd=tmp_path, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            assert done.returncode == 0, f"{line}\nexited {done.returncode}: {done.stderr}"
            if line.startswith("replog consume"):  # what the produce line sent, in any order across partitions
                assert sorted(done.stdout.split()) == ["hello", "world"], done.stdout
    finally:
        status = broker.stop()
    assert status == 0, "".join(broker.output)
    assert (tmp_path / "replog-data").is_dir(), "the broker keeps its data where the README says"
