"""The README's Security section, run as written: its `secure.toml` block is written to that
file and its shell block's commands are run in order, in a fresh directory, as a new operator
would (openssl, `replog users`, ACLs and a quota in the store, three brokers with an authorizer,
clients with and without credentials, and with and without an ACL for what they ask).

The broker lines each run as a process of their own until the others are done, then stop with
SIGTERM. Changed in the text: the ZooKeeper address and chroot become the tests' shared
server's and a fresh chroot, the brokers' ports and metrics ports free ones.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tests.cli.test_cli import closed_port
from tests.support.servers import unique_root
from tests.test_readme import README, QuickStartBroker

pytestmark = pytest.mark.cluster  # three broker processes over ZooKeeper

DOCUMENTED_STORE = "zk://127.0.0.1:2181/secure"
DOCUMENTED_PORTS = ("9093", "9094", "9095")
DOCUMENTED_METRICS = ("127.0.0.1:9644", "127.0.0.1:9645", "127.0.0.1:9646")
COMMAND_TIMEOUT_S = 120
SECRETS = ("broker-secret", "alice-secret")


def security_section() -> str:
    return README.read_text().split("\n## Security\n", 1)[1].split("\n## ", 1)[0]


def fenced(section: str, language: str) -> str:
    return section.split(f"```{language}\n", 1)[1].split("\n```", 1)[0]


def commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_the_security_section_works_as_written(tmp_path, zookeeper_server, monkeypatch):
    section = security_section()
    lines = commands(fenced(section, "sh"))
    broker_lines = [line for line in lines if line.startswith("replog broker start")]
    assert len(broker_lines) == 3, "the section starts a three-broker cluster"
    ports = {documented: str(closed_port()) for documented in DOCUMENTED_PORTS}

    def localised(line: str) -> str:
        line = line.replace(DOCUMENTED_STORE, f"zk://{zookeeper_server.address}{unique_root_of_test}")
        for documented in DOCUMENTED_METRICS:
            line = line.replace(documented, "127.0.0.1:0")
        for documented, free in ports.items():
            line = line.replace(f"127.0.0.1:{documented}", f"127.0.0.1:{free}")
        return line

    unique_root_of_test = unique_root()
    (tmp_path / "secure.toml").write_text(fenced(section, "toml") + "\n")
    monkeypatch.setenv("PATH", f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    brokers: list[QuickStartBroker] = []
    try:
        for line in lines:
            if line in broker_lines:
                brokers.append(QuickStartBroker(localised(line), tmp_path))
                brokers[-1].start()
                continue
            done = subprocess.run(["bash", "-o", "pipefail", "-c", localised(line)], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
            assert done.returncode == 0, f"{line}\nexited {done.returncode}: {done.stdout}{done.stderr}"
            if line.startswith("replog consume"):  # what the produce line sent, in any order across partitions
                assert sorted(done.stdout.split()) == ["paid", "shipped"], done.stdout
            if line.startswith("! replog topics create"):  # refused by the authorizer, not for another reason
                assert "authorization failed" in done.stderr.lower(), done.stderr
            if line.startswith("kcat"):  # authenticated, it sees the cluster and the topic
                assert "3 brokers" in done.stdout and '"payments"' in done.stdout, done.stdout
    finally:
        statuses = [broker.stop() for broker in brokers]
    output = "".join("".join(broker.output) for broker in brokers)
    assert statuses == [0, 0, 0], output
    assert all(secret not in output for secret in SECRETS), "no password reaches a broker's log"
