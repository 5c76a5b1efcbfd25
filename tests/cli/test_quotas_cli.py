"""`replog quotas alter|describe` through both doors: the store itself (--coord, no broker
running) and a broker in this process (--bootstrap-server), which then applies the quotas. One
script of commands runs through each, and both answer it alike, word for word, in
kafka-configs' words."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import subprocess

import pytest

from replog.security.quota_limits import QuotaType
from tests.cli.test_users_cli import replog
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

ALICE = ("--entity-type", "users", "--entity-name", "alice")
KAFKA = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "kafka" / "kafka"
JAVA_TIMEOUT_S = 120

SCRIPT = [
    ("quotas", "alter", *ALICE, "--add-config", "producer_byte_rate=1048576,request_percentage=50"),
    ("quotas", "alter", *ALICE, "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=2048"),
    ("quotas", "alter", "--entity-type", "clients", "--entity-default", "--add-config", "consumer_byte_rate=4096",
     "--output", "json"),
    ("quotas", "alter", "--entity-type", "clients", "--entity-name", "app", "--add-config", "producer_byte_rate=1.5"),
    ("quotas", "alter", *ALICE, "--add-config", "producer_byte_rate=-1"),
    ("quotas", "alter", *ALICE, "--add-config", "producer_byte_rate=fast"),
    ("quotas", "alter", *ALICE, "--add-config", "segment.bytes=14"),
    ("quotas", "describe", *ALICE),
    ("quotas", "describe", "--entity-type", "users"),
    ("quotas", "describe", *ALICE, "--entity-type", "clients"),
    ("quotas", "describe", "--entity-type", "clients", "--entity-default", "--output", "json"),
    ("quotas", "alter", *ALICE, "--delete-config", "request_percentage"),
    ("quotas", "describe", *ALICE),
    ("quotas", "describe", "--entity-type", "users", "--entity-name", "bob"),
]

EXPECTED = [
    (0, "Completed updating config for user alice.\n", ""),
    (0, "Completed updating config for user alice.\n", ""),
    (0, json.dumps({"entity": {"client-id": None}, "set": {"consumer_byte_rate": 4096.0}, "removed": []}, indent=2) + "\n", ""),
    (1, "", "replog: producer_byte_rate cannot be a fractional value.\n"),
    (1, "", "replog: Quota producer_byte_rate must be greater than 0\n"),
    (2, "", "replog: quotas alter: producer_byte_rate=fast: a quota is a number\n"),
    (1, "", "replog: Invalid configuration key segment.bytes\n"),
    (0, "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0, request_percentage=50.0\n", ""),
    (0, "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0, request_percentage=50.0\n", ""),
    (0, "Quota configs for user-principal 'alice', the default client-id are consumer_byte_rate=2048.0\n", ""),
    (0, json.dumps({"quotas": [{"entity": {"client-id": None}, "values": {"consumer_byte_rate": 4096.0}}]}, indent=2) + "\n",
     ""),
    (0, "Completed updating config for user alice.\n", ""),
    (0, "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0\n", ""),
    (0, "", ""),
]


async def run_script(door: list[str]) -> list[tuple[int, str, str]]:
    return [await replog(*arguments, *door) for arguments in SCRIPT]


async def test_both_doors_answer_the_script_alike_and_the_broker_applies_it(tmp_path):
    store_file = tmp_path / "coord" / "store.db"
    store_file.parent.mkdir()
    async with in_process_broker(tmp_path / "broker") as broker:
        through_store, through_broker = await asyncio.gather(  # each door's commands in order, the doors side by side
            run_script(["--coord", f"memory://{store_file}"]),
            run_script(["--bootstrap-server", f"127.0.0.1:{broker.server.port}"]))
        await eventually(lambda: broker.client_quotas.quota(QuotaType.FETCH, "alice", "app") == (("alice", "app"), 2048.0),
                         10, "the broker to apply alice's default client's quota")
        assert broker.client_quotas.quota(QuotaType.FETCH, "bob", "app") == (("", "app"), 4096.0)
        assert broker.client_quotas.quota(QuotaType.REQUEST, "alice", "app") is None
    for answer, expected in zip(through_store, EXPECTED, strict=True):
        assert answer == expected
    assert through_broker == through_store


async def test_entities_are_named_as_kafka_configs_names_them(tmp_path):
    door = ["--coord", f"memory://{tmp_path / 'store.db'}"]
    for arguments, words in [
        (("--entity-type", "clients", "--entity-type", "users"), "give --entity-type users before --entity-type clients"),
        (("--entity-type", "users", "--entity-type", "users"), "each --entity-type may be given once"),
        (("--entity-type", "users", "--entity-name", "a", "--entity-name", "b"),
         "more --entity-name/--entity-default than --entity-type"),
        (("--entity-type", "users"), "name each --entity-type's entity with --entity-name or --entity-default"),
    ]:
        status, _, err = await replog("quotas", "alter", *arguments, "--add-config", "producer_byte_rate=1", *door)
        assert (status, err) == (2, f"replog: quotas alter: {words}\n")
    status, _, err = await replog("quotas", "alter", *ALICE, *door)
    assert (status, err) == (2, "replog: quotas alter: give --add-config or --delete-config\n")


async def kafka_configs(port: int, *args: str) -> tuple[int, str]:
    """(status, stdout) of Kafka's own kafka-configs (ConfigCommand) against the broker."""
    classpath = subprocess.run([str(KAFKA), "classpath"], capture_output=True, text=True, check=True).stdout.strip()
    process = await asyncio.create_subprocess_exec(
        "java", "-cp", classpath, "org.apache.kafka.tools.ConfigCommand", "--bootstrap-server", f"127.0.0.1:{port}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(process.communicate(), JAVA_TIMEOUT_S)
    return process.returncode, out.decode()


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed")
async def test_kafkas_own_kafka_configs_sets_and_describes_quotas(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        port = broker.server.port
        assert await kafka_configs(port, "--alter", *ALICE, "--entity-type", "clients", "--entity-default",
                                   "--add-config", "producer_byte_rate=1024") == (0, "Completed updating config for user alice.\n")
        assert await kafka_configs(port, "--describe", *ALICE, "--entity-type", "clients") == (
            0, "Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0\n")
        await eventually(lambda: broker.client_quotas.quota(QuotaType.PRODUCE, "alice", "app") == (("alice", "app"), 1024.0),
                         10, "the broker to apply the quota")
