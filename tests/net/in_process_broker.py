"""One broker in the test's own process and event loop, on the embedded store: for tests of
admin requests that real clients send (confluent-kafka's AdminClient, `replog` subprocesses),
whose log lines the test reads with caplog."""

from __future__ import annotations

import contextlib

from replog.broker import Broker
from replog.config import load_broker_config


@contextlib.asynccontextmanager
async def in_process_broker(tmp_path, **settings: str):
    """The started broker (`broker.server.port`, `broker.store`); stopped at the end.
    `settings`: more, or other, settings by Kafka name."""
    broker = Broker(load_broker_config(None, {
        "broker.id": "1", "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}",
        "listeners": "127.0.0.1:0", "metrics.listeners": "", **settings,
    }))
    await broker.start()
    try:
        yield broker
    finally:
        await broker.stop()
