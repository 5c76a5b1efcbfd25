"""The `replog` command. Thin: parses arguments, calls into the package, prints results."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import uuid

import click

from replog import __version__
from replog.config import SETTINGS, ConfigError, load_broker_config
from replog.coord_backends import BadStoreUrl, Store, StoreError, open_store

USAGE_ERROR_STATUS = 2
FAILURE_STATUS = 1


def fail(message: str, status: int) -> None:
    """One line on stderr, then exit: the form every operator-facing error takes."""
    click.echo(f"replog: {message}", err=True)
    sys.exit(status)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replog")
def main() -> None:
    """replog: a replicated, partitioned commit log that speaks the Kafka protocol."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    # kazoo logs every failed reconnect attempt; the command reports the outcome in one line.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)


@main.group()
def coord() -> None:
    """Inspect the coordination store (embedded, ZooKeeper or etcd)."""


@coord.command("check")
@click.option(
    "--coord",
    "coord_url",
    default=SETTINGS["coord.url"].default,
    show_default=True,
    help="memory://, memory:///path/to/file, zk://host:port[,host:port...][/chroot] or etcd://host:port[/prefix]",
)
@click.option(
    "--timeout-ms", type=click.IntRange(min=1000), default=5000, show_default=True, help="give up connecting after this long"
)
def coord_check(coord_url: str, timeout_ms: int) -> None:
    """Connect, round-trip a node (create, get, set, delete), and report latency."""
    try:
        store = open_store(coord_url, session_timeout_ms=timeout_ms)
    except BadStoreUrl as error:
        fail(str(error), USAGE_ERROR_STATUS)
    try:
        report = asyncio.run(_round_trip(store))
    except StoreError as error:
        fail(f"{coord_url}: {error}", FAILURE_STATUS)
    click.echo(f"backend: {store.backend}")
    click.echo(f"url: {coord_url}")
    click.echo(f"server: {report['server'] or 'unknown'}")
    steps = ", ".join(f"{name} {report[name]:.2f} ms" for name in ("create", "get", "set", "delete"))
    click.echo(f"round trip: {steps} (total {report['total']:.2f} ms)")


async def _round_trip(store: Store) -> dict:
    await store.start()
    try:
        path = f"/replog-coord-check-{uuid.uuid4().hex[:12]}"
        payload = b"replog coord check"
        timings: dict = {"server": await store.server_version()}
        started = time.perf_counter()
        for name, step in (
            ("create", lambda: store.create(path, payload, ephemeral=True)),
            ("get", lambda: store.get(path)),
            ("set", lambda: store.set(path, payload[::-1])),
            ("delete", lambda: store.delete(path)),
        ):
            step_started = time.perf_counter()
            result = await step()
            timings[name] = (time.perf_counter() - step_started) * 1000
            if name == "get" and result[0] != payload:
                raise StoreError(f"read back {result[0]!r} from {path}, wrote {payload!r}")
        timings["total"] = (time.perf_counter() - started) * 1000
        return timings
    finally:
        await store.close()


@main.group()
def broker() -> None:
    """Run a broker."""


# Named flags and the setting each one stands for; they win over --set and the file.
BROKER_FLAGS = {
    "broker_id": "broker.id",
    "listen": "listeners",
    "advertised": "advertised.listeners",
    "rack": "broker.rack",
    "data_dir": "log.dirs",
    "coord_url": "coord.url",
}


def _parse_assignments(assignments: tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or not name.strip():
            fail(f"--set takes key=value, got {assignment!r}", USAGE_ERROR_STATUS)
        parsed[name.strip()] = value
    return parsed


@broker.command("start")
@click.option("--broker-id", type=str, help="this broker's id (broker.id) [default: 0]")
@click.option("--listen", type=str, help="host:port to bind (listeners) [default: 127.0.0.1:9092]")
@click.option("--advertised", type=str, help="host:port clients are told (advertised.listeners) [default: --listen]")
@click.option("--rack", type=str, help="rack name, for rack-aware assignment (broker.rack)")
@click.option("--data-dir", type=str, help="where partition logs live (log.dirs) [default: ./replog-data]")
@click.option("--coord", "coord_url", type=str, help="coordination store URL (coord.url) [default: memory://]")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of settings (Kafka's names)")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="any broker or topic-default setting; repeatable")
def broker_start(config_file: str | None, assignments: tuple[str, ...], **flags: str | None) -> None:
    """Start a broker: with no options, broker 0 on 127.0.0.1:9092, embedded store, ./replog-data."""
    overrides = _parse_assignments(assignments)
    overrides.update({BROKER_FLAGS[flag]: value for flag, value in flags.items() if value is not None})
    try:
        config = load_broker_config(config_file, overrides)
    except (ConfigError, OSError) as error:
        fail(str(error), USAGE_ERROR_STATUS)
    try:
        _run(_serve(config))
    except StoreError as error:
        fail(f"{config['coord.url']}: {error}", FAILURE_STATUS)
    except OSError as error:
        fail(f"cannot listen on {config['listeners']}: {error}", FAILURE_STATUS)


def _run(main_coroutine) -> None:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_coroutine)


async def _serve(config) -> None:
    import signal

    from replog.broker import Broker

    node = Broker(config)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    await node.start()
    click.echo(
        f"replog broker {node.broker_id} listening on {config['listeners'].host}:{node.server.port}, "
        f"data in {node.data_dir}, coordination {config['coord.url']}",
    )
    await stopping.wait()
    click.echo(f"replog broker {node.broker_id} shutting down")
    await node.stop()
