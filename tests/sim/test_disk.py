"""The power-loss model of disk.py, on the cases the simulation's verdicts rest on."""

from __future__ import annotations

import os
import random

from replog.storage.checkpoint import fsync_directory
from tests.sim.disk import PageCache

SEEDS = range(20)  # enough draws of the model's random cut to see both outcomes


def _write_durably(path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def _power_loss_after_replace(root, seed: int, target_durable: bool) -> bytes | None:
    """`name` written durably (its name too if `target_durable`), then replaced by a durable
    file whose rename is not made durable; what `name` holds after a power loss (None: gone)."""
    directory = root / str(seed)
    directory.mkdir()
    with PageCache(root, random.Random(seed)).installed() as cache:
        _write_durably(directory / "name", b"old")
        if target_durable:
            fsync_directory(directory)
        _write_durably(directory / "name.tmp", b"new")
        os.replace(directory / "name.tmp", directory / "name")
        cache.lose_unflushed(directory)
    return (directory / "name").read_bytes() if (directory / "name").exists() else None


def test_a_replace_onto_a_durable_name_leaves_the_old_file_or_the_new_one(tmp_path):
    outcomes = {_power_loss_after_replace(tmp_path, seed, target_durable=True) for seed in SEEDS}
    assert outcomes == {b"old", b"new"}


def test_a_name_never_made_durable_may_vanish(tmp_path):
    outcomes = {_power_loss_after_replace(tmp_path, seed, target_durable=False) for seed in SEEDS}
    assert outcomes == {None, b"new"}
