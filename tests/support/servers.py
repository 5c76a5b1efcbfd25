"""Real ZooKeeper and etcd servers on 127.0.0.1, run by scripts/zookeeper.sh and scripts/etcd.sh
(installed from Debian by the README's test command), and what tests ask of them."""

from __future__ import annotations

import pathlib
import re
import socket
import subprocess
import uuid

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"


class ServerProcess:
    """A ZooKeeper or etcd server run by its script; `address` is host:port on 127.0.0.1."""

    def __init__(self, kind: str, state_dir: pathlib.Path):
        self.script = SCRIPTS / f"{kind}.sh"
        self.state_dir = state_dir
        self.address = ""

    def _run(self, action: str) -> str:
        done = subprocess.run(
            ["bash", str(self.script), action, str(self.state_dir)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(f"{self.script.name} {action} failed: {done.stderr.strip()}")
        return done.stdout.strip()

    def start(self) -> None:
        self.address = self._run("start")

    def stop(self) -> None:
        self._run("stop")

    def restart(self) -> None:
        self.address = self._run("restart")


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
