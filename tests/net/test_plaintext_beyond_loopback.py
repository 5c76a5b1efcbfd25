"""A broker bound beyond loopback with a PLAINTEXT listener starts, but says so in one WARNING
line naming the listener and how to secure it; `replog cluster status` warns of it too, from the
broker's registration in etcd (its listeners as bound). A PLAINTEXT listener on loopback, or a broker
bound to loopback alone, is warned of nowhere. The broker binds 0.0.0.0 but advertises
127.0.0.1, and nothing here connects beyond loopback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import sys

from replog.broker import Broker
from replog.config import load_broker_config
from tests.support.servers import unique_root

TIMEOUT_S = 60

WARNING = "PLAINTEXT listener bound beyond loopback"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


@contextlib.asynccontextmanager
async def started(tmp_path, coord_url: str, listeners: str, **settings: str):
    broker = Broker(load_broker_config(None, {
        "broker.id": "1", "log.dirs": str(tmp_path / "data"), "coord.url": coord_url,
        "listeners": listeners, "metrics.listeners": "", **settings,
    }))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()


async def cluster_status(coord_url: str, *options: str) -> tuple[int, str, str]:
    """(status, stdout, stderr) of `replog cluster status` through the store door, while this
    process's event loop goes on serving the broker."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "replog", "cluster", "status", "--coord", coord_url, *options,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    return process.returncode, out.decode(), err.decode()


def test_plaintext_on_every_address_is_warned_of_at_start_and_in_cluster_status(tmp_path, caplog, etcd_server):
    port = free_port()
    coord_url = f"etcd://{etcd_server.address}{unique_root()}"

    async def scenario():
        async with started(tmp_path, coord_url, f"PLAINTEXT://0.0.0.0:{port},INTERNAL://127.0.0.1:0",
                           **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
                              "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
                              "inter.broker.listener.name": "PLAINTEXT"}):
            return await cluster_status(coord_url), await cluster_status(coord_url, "--output", "json")

    with caplog.at_level(logging.WARNING, logger="replog.broker"):
        text, as_json = asyncio.run(scenario())
    [line] = [record.getMessage() for record in caplog.records if WARNING in record.getMessage()]
    assert f"PLAINTEXT://0.0.0.0:{port}" in line and "INTERNAL" not in line, "the loopback listener is not named"
    assert "SSL or SASL_SSL" in line, "it says how to secure the listener"

    status, _, err = text
    assert status == 0, err
    assert f"broker 1 serves PLAINTEXT beyond loopback on PLAINTEXT://0.0.0.0:{port}" in err
    [broker] = json.loads(as_json[1])["brokers"]
    assert broker["plaintext_beyond_loopback"] == [f"PLAINTEXT://0.0.0.0:{port}"]


def test_a_broker_bound_to_loopback_is_warned_of_nowhere(tmp_path, caplog, etcd_server):
    coord_url = f"etcd://{etcd_server.address}{unique_root()}"

    async def scenario():
        async with started(tmp_path, coord_url, "PLAINTEXT://127.0.0.1:0"):
            return await cluster_status(coord_url), await cluster_status(coord_url, "--output", "json")

    with caplog.at_level(logging.WARNING, logger="replog.broker"):
        text, as_json = asyncio.run(scenario())
    assert not [record for record in caplog.records if WARNING in record.getMessage()]
    assert text[0] == 0 and "beyond loopback" not in text[2]
    [broker] = json.loads(as_json[1])["brokers"]
    assert broker["plaintext_beyond_loopback"] == []
