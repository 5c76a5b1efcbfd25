"""The broker process's runtime around replog.broker.Broker: its event loop (uvloop), the
cycle collector's pace, SIGTERM and SIGINT, the lines an operator watches for, and the exit once
the broker has stopped cleanly. `replog broker start` parses the settings and calls run()."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys

import uvloop

from replog import broker
from replog.net.server import CannotListen
from replog.net.tls import TlsSettingsError
from replog.security.sasl import SaslSettingsError
from replog.obs import CannotServeMetrics
from replog.storage.data_dir_lock import DataDirectoryInUse, DataDirectoryUnusable

# Why a broker cannot start, each said in one line that names its cause.
CANNOT_START = (DataDirectoryInUse, DataDirectoryUnusable, broker.BrokerIdInUse, CannotListen, CannotServeMetrics,
                TlsSettingsError, SaslSettingsError)

# Allocations (net of frees) between collections of the cycle collector's youngest generation;
# CPython's default is 700. A broker holds a few hundred thousand long-lived objects per thousand
# partitions (tasks, futures, per-partition state), and at the default pace the older
# generations' passes over them took a large share of a broker's CPU while a big topic was
# created (bench/scale.py measures it). The older generations keep their default ratios.
GC_YOUNG_GENERATION_THRESHOLD = 50_000


def run(config) -> None:
    """Serve until SIGTERM or SIGINT, or until the broker fails (SystemExit(1))."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(config))


def exit_stopped_cleanly() -> None:
    """Exit once the broker has stopped cleanly (its logs closed and synced, its store session
    ended, its threads joined), without the interpreter's teardown: that frees the broker's
    objects one by one only to hand their memory back to the system, which takes seconds at
    thousands of partitions, and a rolling restart waits for it on every broker."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def tune_garbage_collector() -> None:
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_GENERATION_THRESHOLD, middle, oldest)


async def serve(config) -> None:
    tune_garbage_collector()
    node = broker.Broker(config)
    if node.store.start_wait_s:
        print(f"replog: waiting for the coordination store at {config['coord.url']} "
              f"(at most {node.store.start_wait_s:g} s)", file=sys.stderr, flush=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await node.start()
    except BaseException:
        await node.stop()  # release what did start: the store session, open logs
        raise
    metrics = f"on http://{node.metrics_address}/metrics" if node.metrics_address else "off"
    # The first listener's address first, as before named listeners; then every listener.
    print(f"replog broker {node.broker_id} listening on {node.server.host}:{node.server.port}, "
          f"metrics {metrics}, data in {node.data_dir}, coordination {config['coord.url']}, "
          f"listeners {','.join(str(endpoint) for endpoint in node.bound_listeners)}", flush=True)
    stop_asked, broker_failed = asyncio.create_task(stopping.wait()), asyncio.create_task(node.failed.wait())
    await asyncio.wait((stop_asked, broker_failed), return_when=asyncio.FIRST_COMPLETED)
    for waiter in (stop_asked, broker_failed):
        waiter.cancel()
    print(f"replog broker {node.broker_id} {'failed' if node.failed.is_set() else 'shutting down'}", flush=True)
    await node.stop()
    if node.failed.is_set():
        raise SystemExit(1)
