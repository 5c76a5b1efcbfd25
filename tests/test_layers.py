"""The package layers (pyproject.toml's import-linter contracts, docs/design.md's layout) hold:
lint-imports keeps them on the tree, and breaks them on a copy where storage imports net."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(source_root: Path, config_dir: Path) -> subprocess.CompletedProcess:
    environment = os.environ | {"PYTHONPATH": str(source_root)}
    return subprocess.run([str(LINT_IMPORTS), "--no-cache"], cwd=config_dir, env=environment,
                          capture_output=True, text=True, timeout=120)


def test_every_contract_is_kept():
    result = lint_imports(REPO / "src", REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


def test_storage_importing_net_breaks_the_layers(tmp_path):
    copy = tmp_path / "src"
    shutil.copytree(REPO / "src" / "replog", copy / "replog", ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    segment = copy / "replog" / "storage" / "segment.py"
    segment.write_text(segment.read_text() + "\nimport replog.net  # noqa: E402\n")
    result = lint_imports(copy, tmp_path)
    assert result.returncode != 0
    assert "replog.storage is not allowed to import replog.net" in result.stdout, result.stdout
