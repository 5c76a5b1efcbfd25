"""bench/security.py runs as written: `--quick` goes through every listener (PLAINTEXT, SSL,
SASL_SSL with SCRAM-SHA-512) and the connections' measurement, and prints a figure for each. The
figures themselves are never asserted."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cluster  # the bench starts a broker process

BENCH = pathlib.Path(__file__).resolve().parents[1] / "bench" / "security.py"


def test_the_security_bench_runs_quick(tmp_path):
    done = subprocess.run([sys.executable, str(BENCH), "--quick", "--sizes", "16384", "--handshakes", "5"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    medians = [line for line in done.stdout.splitlines() if " median " in line]
    assert len(medians) == 4, done.stdout  # produce and consume, MB/s and the broker's CPU
    assert all("SSL/PLAINTEXT" in line and "SASL_SSL/PLAINTEXT" in line for line in medians)
    assert sum(line.startswith("connections, ") for line in done.stdout.splitlines()) == 3
