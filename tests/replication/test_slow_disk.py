"""A slow disk must not cost a broker its store session (docs/design.md §11.1).

etcd keeps a session alive with a lease whose keepalives run on the broker's event loop, so
disk work done on the loop for longer than the session timeout drops the session and with it
every leadership of the broker. Here opening a partition's log (its recovery scan) is made to
take three session timeouts; the broker's session must stay connected throughout.
"""

from __future__ import annotations

import time

from replog import admin
from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import SessionState, open_store, paths
from replog.storage import log as log_module
from replog.replica.partition import ReplicaState
from tests.support.servers import unique_root
from tests.support.polling import eventually

TOPIC = "slow"
BROKER = 1
SESSION_TIMEOUT_MS = 2000
WAIT_S = 30


async def test_a_slow_log_open_does_not_cost_the_session(etcd_server, tmp_path, monkeypatch):
    url = f"etcd://{etcd_server.address}{unique_root()}"
    broker = Broker(load_broker_config(None, {
        "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": url,
        "coord.session.timeout.ms": str(SESSION_TIMEOUT_MS), "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0",
    }))
    tool = open_store(url)
    await tool.start()
    await broker.start()
    try:
        opened_slowly: list[bool] = []
        original_init = log_module.Log.__init__

        def slow_open(self, *args, **kwargs):
            time.sleep(3 * SESSION_TIMEOUT_MS / 1000)  # a disk this slow, wherever the open runs
            original_init(self, *args, **kwargs)
            opened_slowly.append(True)

        monkeypatch.setattr(log_module.Log, "__init__", slow_open)
        # The registration is an ephemeral node on the session's lease: a lease that expired
        # while the loop was blocked took it along, server-side, whatever the broker noticed.
        registered_version = await tool.exists(paths.broker(BROKER))
        await admin.create_topic(tool, TOPIC, None, None, replica_assignment={0: [BROKER]},
                                 limits=admin.StateChangeLimits(timeout_s=WAIT_S))

        async def led() -> bool:
            hosted = broker.replicas.hosted(TOPIC, 0)
            return hosted is not None and hosted.state is ReplicaState.LEADER and not hosted.fenced

        await eventually(led, WAIT_S, "the partition led once its slow open is done")
        assert opened_slowly
        assert await tool.exists(paths.broker(BROKER)) == registered_version, "the session's lease expired"
        assert broker.store.session_state is SessionState.CONNECTED
    finally:
        await broker.stop()
        await tool.close()
