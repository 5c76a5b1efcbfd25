"""Real ZooKeeper and etcd servers on 127.0.0.1, run by scripts/zookeeper.sh and scripts/etcd.sh
(installed from Debian by the README's test command), and what tests ask of them."""

from __future__ import annotations

import pathlib
import re
import socket
import subprocess
import uuid
from collections.abc import Iterable

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


SCRIPT_TIMEOUT_S = 120


class ServerProcess:
    """A ZooKeeper or etcd server run by its script; `address` is host:port on 127.0.0.1."""

    def __init__(self, kind: str, state_dir: pathlib.Path):
        self.script = SCRIPTS / f"{kind}.sh"
        self.state_dir = state_dir
        self.address = ""

    def _launch(self, action: str) -> subprocess.Popen:
        return subprocess.Popen(["bash", str(self.script), action, str(self.state_dir)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def _finish(self, action: str, running: subprocess.Popen) -> str:
        stdout, stderr = running.communicate(timeout=SCRIPT_TIMEOUT_S)
        if running.returncode != 0:
            raise RuntimeError(f"{self.script.name} {action} failed: {stderr.strip()}")
        return stdout.strip()

    def _run(self, action: str) -> str:
        return self._finish(action, self._launch(action))

    def start(self) -> None:
        self.address = self._run("start")

    def stop(self) -> None:
        self._run("stop")

    def restart(self) -> None:
        self.address = self._run("restart")


def stop_side_by_side(servers: Iterable[ServerProcess]) -> None:
    """Stop `servers` at once rather than in turn: each graceful shutdown takes a second or two
    (ZooKeeper's JVM, etcd), which the servers a whole run shares spent one after the other at
    its end, inside the teardown of whichever test came last."""
    stopping = [(server, server._launch("stop")) for server in servers]
    for server, running in stopping:
        server._finish("stop", running)


def four_letter(address: str, command: str) -> str:
    """A ZooKeeper four-letter command's whole answer (scripts/zookeeper.sh whitelists a few)."""
    host, port = address.split(":")
    with socket.create_connection((host, int(port)), timeout=60) as connection:
        connection.sendall(command.encode())
        chunks = []
        while chunk := connection.recv(1 << 16):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace")


def zookeeper_watch_count(mntr: str) -> int | None:
    """The server's watch count (data and child watches) in a `mntr` answer; None without one, as
    from a server that answers ruok but does not serve yet."""
    found = re.search(r"^zk_watch_count\s+(\d+)", mntr, re.M)
    return int(found[1]) if found else None


def unique_root() -> str:
    """A fresh chroot/prefix so that tests sharing one server never see each other's nodes."""
    return f"/test-{uuid.uuid4().hex[:12]}"
