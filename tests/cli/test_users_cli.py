"""`replog users create|delete|list` through both doors: the store itself (--coord, no broker
running) and a broker in this process (--bootstrap-server). One script of commands runs through
each, and both answer it alike, word for word; the password is in no output and in no log line."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys

import pytest

from replog.admin.scram_credentials import credential
from replog.coord_backends.memory import MemoryStore
from replog.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, credential_from_password
from tests.net.in_process_broker import in_process_broker

PASSWORD = "s3cr3t-Pässword"
TIMEOUT_S = 120


async def replog(*args: str, stdin: str | bytes | None = None) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `replog ARGS` in a process of its own, while this process's
    event loop goes on serving the broker it may ask."""
    clean = {name: value for name, value in os.environ.items() if not name.startswith("REPLOG_")}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replog", *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=clean)
    data = stdin if stdin is None or isinstance(stdin, bytes) else stdin.encode()
    out, err = await asyncio.wait_for(process.communicate(data), TIMEOUT_S)
    return process.returncode, out.decode(), err.decode()


def script(password_file) -> list[tuple[tuple[str, ...], str | bytes | None]]:
    """(arguments, stdin) of each command, the door's options left out."""
    return [
        (("users", "list", "--output", "json"), None),
        (("users", "create", "alice", "--password-file", str(password_file)), None),
        (("users", "create", "alice", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192", "--password-stdin",
          "--output", "json"), PASSWORD + "\n"),
        (("users", "create", "bob", "--mechanism", "SCRAM-SHA-256", "--password-stdin"), PASSWORD),
        (("users", "list"), None),
        (("users", "list", "bob", "--output", "json"), None),
        (("users", "list", "carol"), None),
        (("users", "create", "carol", "--iterations", "4095", "--password-stdin"), PASSWORD),
        (("users", "create", "carol", "--iterations", "16385", "--password-stdin"), PASSWORD),
        (("users", "create", "carol", "--password-stdin"), ""),
        (("users", "create", "carol", "--password-stdin"), b"caf\xe9"),
        (("users", "create", "carol", "--password-stdin", "--password-file", str(password_file)), PASSWORD),
        (("users", "create", "carol", "--mechanism", "SCRAM-SHA-1", "--password-stdin"), PASSWORD),
        (("users", "delete", "alice", "--mechanism", "SCRAM-SHA-512"), None),
        (("users", "delete", "alice", "--mechanism", "SCRAM-SHA-512"), None),
        (("users", "delete", "bob", "--output", "json"), None),
        (("users", "delete", "bob"), None),
        (("users", "list", "--output", "json"), None),
    ]


EXPECTED = [
    (0, '{\n  "users": []\n}\n', ""),
    (0, "Set user alice's SCRAM-SHA-512 credential (4096 iterations).\n", ""),
    (0, '{\n  "user": "alice",\n  "mechanism": "SCRAM-SHA-256",\n  "iterations": 8192\n}\n', ""),
    (0, "Set user bob's SCRAM-SHA-256 credential (4096 iterations).\n", ""),
    (0, None, ""),  # the table: checked apart
    (0, json.dumps({"users": [{"user": "bob", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 4096}]}]},
                   indent=2) + "\n", ""),
    (1, "", "replog: Attempt to describe a user credential that does not exist: carol\n"),
    (1, "", "replog: user 'carol': Too few iterations\n"),
    (1, "", "replog: user 'carol': Too many iterations\n"),
    (2, "", "replog: users create: the password is empty\n"),
    (2, "", "replog: users create: the password is not UTF-8 text\n"),
    (2, "", "replog: users create: give the password with exactly one of --password-file FILE and --password-stdin\n"),
    (2, "", None),  # click's words for a choice not offered: checked apart
    (0, "Deleted user alice's SCRAM-SHA-512 credential.\n", ""),
    (1, "", "replog: user 'alice': Attempt to delete a user credential that does not exist\n"),
    (0, '{\n  "user": "bob",\n  "deleted": [\n    "SCRAM-SHA-256"\n  ]\n}\n', ""),
    (1, "", "replog: Attempt to describe a user credential that does not exist: bob\n"),
    (0, json.dumps({"users": [{"user": "alice", "credentials": [{"mechanism": "SCRAM-SHA-256", "iterations": 8192}]}]},
                   indent=2) + "\n", ""),
]


async def run_script(door: list[str], password_file) -> list[tuple[int, str, str]]:
    return [await replog(*arguments, *door, stdin=stdin) for arguments, stdin in script(password_file)]


def check(answers: list[tuple[int, str, str]]) -> None:
    for answer, (status, out, err) in zip(answers, EXPECTED, strict=True):
        assert answer[0] == status, answer
        assert out is None or answer[1] == out, answer
        assert err is None or answer[2] == err, answer
    table = answers[4][1].splitlines()
    assert [line.split() for line in table[2:]] == [["alice", "SCRAM-SHA-256", "8192"], ["alice", "SCRAM-SHA-512", "4096"],
                                                    ["bob", "SCRAM-SHA-256", "4096"]]
    assert answers[12][2].startswith("replog: users create: Invalid value for '--mechanism': 'SCRAM-SHA-1' is not one of")
    for status, out, err in answers:
        assert PASSWORD not in out and PASSWORD not in err


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "password"
    path.write_text(PASSWORD + "\n")
    return path


async def test_both_doors_answer_the_script_alike_and_store_what_the_password_makes(tmp_path, password_file, caplog):
    store_file = tmp_path / "coord" / "store.db"
    store_file.parent.mkdir()
    caplog.set_level(logging.DEBUG)
    async with in_process_broker(tmp_path / "broker") as broker:
        through_store, through_broker = await asyncio.gather(  # each door's commands in order, the doors side by side
            run_script(["--coord", f"memory://{store_file}"], password_file),
            run_script(["--bootstrap-server", f"127.0.0.1:{broker.server.port}"], password_file))
        through_broker_stored = await credential(broker.store, "alice", "SCRAM-SHA-256")
    check(through_store)
    assert through_broker == through_store
    assert PASSWORD not in caplog.text and "alice" in caplog.text, "the broker logged the changes, not the password"
    assert through_broker_stored == credential_from_password(SCRAM_SHA_256, PASSWORD, 8192, through_broker_stored.salt)

    store = MemoryStore(str(store_file))
    await store.start()
    try:
        stored = await credential(store, "alice", "SCRAM-SHA-256")
        assert stored == credential_from_password(SCRAM_SHA_256, PASSWORD, 8192, stored.salt)
        assert await credential(store, "alice", "SCRAM-SHA-512") is None
    finally:
        await store.close()


async def test_the_password_files_line_end_is_not_part_of_it(tmp_path):
    store_file = tmp_path / "store.db"
    password_file = tmp_path / "password"
    password_file.write_bytes(PASSWORD.encode() + b"\r\n")
    status, _, err = await replog("users", "create", "dave", "--password-file", str(password_file), "--coord", f"memory://{store_file}")
    assert status == 0, err
    store = MemoryStore(str(store_file))
    await store.start()
    try:
        stored = await credential(store, "dave", "SCRAM-SHA-512")
    finally:
        await store.close()
    assert stored == credential_from_password(SCRAM_SHA_512, PASSWORD, 4096, stored.salt)
