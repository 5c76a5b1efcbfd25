"""A real `replog broker start` process for tests: start, stop (SIGTERM), kill (SIGKILL),
pause (SIGSTOP) and resume (SIGCONT), restart on the same ports and data directory.

Its Prometheus endpoint binds a free port too (never the default 9644, which every broker on
the host would share); `metrics_address` is where it listens. `rlimits` (resource -> limit)
start it under resource limits, as a hostile client's tests do: an address-space limit turns
unbounded memory into a failure the test sees, a low file limit makes descriptors run out.
`env` is added to its environment (a benchmark points PYTHONPATH at another revision's tree).
`listeners` names its listeners, each on 127.0.0.1 (default: one PLAINTEXT); `ports` holds the
port each bound, and `port` the first's."""

from __future__ import annotations

import os
import pathlib
import re
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping

START_LINE = re.compile(r"listening on (?P<host>[\d.]+):(?P<port>\d+), metrics (on http://[\d.]+:(?P<metrics_port>\d+)|off)")
LISTENERS = re.compile(r"(?P<name>\w+)://[\d.]+:(?P<port>\d+)")
START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60


class BrokerHandle:
    """What the cluster tests and the chaos harness use of a broker, in a process of its own or
    not: `port`, `running`, `data_dir`, `output` (its log lines), `stop` and `restart`."""

    port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


class BrokerProcess(BrokerHandle):
    def __init__(self, data_dir: pathlib.Path, *, coord_url: str = "memory://", extra_args: tuple[str, ...] = (),
                 cwd: pathlib.Path | None = None, rlimits: dict[int, int] | None = None, env: Mapping[str, str] | None = None,
                 listeners: tuple[str, ...] = ("PLAINTEXT",)):
        self.data_dir = data_dir
        self.env = dict(env or {})
        self.rlimits = dict(rlimits or {})
        self.coord_url = coord_url
        self.extra_args = extra_args
        self.cwd = cwd
        self.port = 0
        self.listeners = listeners
        self.ports: dict[str, int] = {}
        self.metrics_port = 0
        self.process: subprocess.Popen | None = None
        self.output: list[str] = []
        self._pump: threading.Thread | None = None

    @property
    def metrics_address(self) -> str:
        return f"127.0.0.1:{self.metrics_port}"

    @property
    def running(self) -> bool:
        return self.process is not None

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "replog", "broker", "start",
            "--listen", self._listen(), "--metrics-listen", self.metrics_address,
            "--data-dir", str(self.data_dir), "--coord", self.coord_url,
            *self.extra_args,
        ]

    def _listen(self) -> str:
        if self.listeners == ("PLAINTEXT",):
            return f"127.0.0.1:{self.port}"
        return ",".join(f"{name}://127.0.0.1:{self.ports.get(name, 0)}" for name in self.listeners)

    def start(self) -> None:
        self.process = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                        env=os.environ | {"PYTHONUNBUFFERED": "1"} | self.env, cwd=self.cwd,
                                        preexec_fn=self._limit_resources if self.rlimits else None)
        started = threading.Event()

        def pump(stream) -> None:
            for line in stream:  # bounded by the process's life
                self.output.append(line)
                match = START_LINE.search(line)
                if match and not started.is_set():
                    self.port = int(match["port"])
                    self.ports = {found["name"]: int(found["port"]) for found in LISTENERS.finditer(line.rpartition(" listeners ")[2])}
                    self.metrics_port = int(match["metrics_port"] or 0)
                    started.set()

        self._pump = threading.Thread(target=pump, args=(self.process.stdout,), daemon=True)
        self._pump.start()
        if not started.wait(START_TIMEOUT_S):
            self.kill()
            raise RuntimeError("broker did not start:\n" + "".join(self.output[-40:]))

    def _limit_resources(self) -> None:
        """In the child, before exec: both soft and hard limits, so the broker cannot raise them."""
        for limited, value in self.rlimits.items():
            resource.setrlimit(limited, (value, value))

    def stop(self) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit status."""
        return self._signal(signal.SIGTERM)

    def kill(self) -> int:
        return self._signal(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the process keeps its sockets and sessions but runs nothing, like a long GC pause."""
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)

    def _signal(self, signum: int) -> int:
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)  # a paused process would never act on SIGTERM
            self.process.send_signal(signum)
        try:
            status = self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            status = self.process.wait(timeout=STOP_TIMEOUT_S)
        # The reader thread may still hold the last lines: once it has read to the end of the
        # pipe, `output` is all the process printed.
        self._pump.join(timeout=STOP_TIMEOUT_S)
        self.process = None
        return status

    def restart(self) -> None:
        self.start()
