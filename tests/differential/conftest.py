"""One Apache Kafka broker (a combined KRaft node, bench/peers/kafka) and one replog broker for
the whole session: each scenario runs against both."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.broker_process import BrokerProcess
from tests.support.servers import REPO

from .targets import Target

KAFKA = REPO / "bench" / "peers" / "kafka" / "kafka"
KAFKA_TIMEOUT_S = 600  # the first run resolves Kafka's jars from Maven Central
BOOTSTRAP_PREFIX = "bootstrap: "


def _kafka(action: str, run_dir) -> str:
    done = subprocess.run([sys.executable, str(KAFKA), action, "--run-dir", str(run_dir)],
                          capture_output=True, text=True, timeout=KAFKA_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"kafka {action} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


@pytest.fixture(scope="session")
def kafka(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("kafka")
    try:
        last_line = _kafka("start", run_dir).strip().splitlines()[-1]
        assert last_line.startswith(BOOTSTRAP_PREFIX), last_line
        yield Target("kafka", last_line.removeprefix(BOOTSTRAP_PREFIX))
    finally:
        _kafka("stop", run_dir)


@pytest.fixture(scope="session")
def replog(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("replog") / "data")
    broker.start()
    try:
        yield Target("replog", broker.bootstrap)
    finally:
        broker.stop()
