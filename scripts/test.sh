#!/usr/bin/env bash
# The test command: on a fresh Debian machine with only Python, installs everything the tests
# need (Debian's ZooKeeper and etcd, the package with its test extra in ./.venv) and runs them.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-test-deps.sh
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
# The simulator's CI seeds: 3,000 schedules (a bare pytest runs 300, tests/sim/test_simulation.py).
export REPLOG_SIM_RUNS="${REPLOG_SIM_RUNS:-3000}"
# The package layers (pyproject.toml's import-linter contracts) before any test.
.venv/bin/lint-imports --no-cache
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
