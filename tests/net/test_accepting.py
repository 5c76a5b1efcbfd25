"""The server's accept path in this process, under the file descriptor limit: an accept that
fails with EMFILE pauses accepting rather than spin on a listener that stays readable, and
the connections waiting are served once descriptors come back."""

from __future__ import annotations

import asyncio
import os
import resource
import socket

from replog.net.server import KafkaServer
from replog.obs import BrokerMetrics
from tests.support.frames import api_versions_frame, read_response
from tests.support.polling import eventually

WAITING = 5


def failed_accepts(metrics: BrokerMetrics) -> float:
    return metrics.registry.get_sample_value("replog_accept_pauses_total", {"limit": "accept_failed"}) or 0.0


async def test_accepts_failing_with_emfile_pause_and_resume_once_descriptors_come_back():
    metrics = BrokerMetrics()
    server = KafkaServer(None, "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=metrics)
    await server.start()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    clients = []
    try:
        # The clients' sockets are made first; then not one descriptor is left for the server's
        # accepts (the descriptors it counted at start said there were plenty).
        sockets = [socket.socket() for _ in range(WAITING)]
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) - 3, hard))  # below what is open
        loop = asyncio.get_running_loop()
        for correlation_id, client in enumerate(sockets):
            client.setblocking(False)
            await loop.sock_connect(client, ("127.0.0.1", server.port))  # completed by the kernel's backlog
            await loop.sock_sendall(client, api_versions_frame(correlation_id))
        await eventually(lambda: failed_accepts(metrics) > 0, 10, "an accept to fail with EMFILE")
        # A second's window, not a wait for anything: accepting stays paused while descriptors
        # count as exhausted, where a listener that stays readable would be tried thousands of times.
        await asyncio.sleep(1)
        assert failed_accepts(metrics) <= 2
        assert server.connection_count == 0
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        for correlation_id, client in enumerate(sockets):
            reader, writer = await asyncio.open_connection(sock=client)
            clients.append(writer)
            assert (await read_response(reader))[0] == correlation_id
        assert server.connection_count == WAITING
    finally:
        for writer in clients:
            writer.close()
        await server.stop()
