"""`replog coord check`: connect to the coordination store and time a round trip of a node.
`replog coord secure`: give a ZooKeeper store made without ACLs the ones zookeeper.set.acl gives."""

from __future__ import annotations

import asyncio
import time
import uuid

import click

from replog.config import SETTINGS, ConfigError
from replog.coord_backends import BadStoreUrl, Store, StoreError

from .common import FAILURE_STATUS, USAGE_ERROR_STATUS, OneLineUsage, coord_config_option, fail


@click.group()
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
@coord_config_option()
def coord_check(coord_url: str, timeout_ms: int, coord_config: str | None) -> None:
    """Connect, round-trip a node (create, get, set, delete), and report latency."""
    from .admin_client import open_coord

    try:
        store = open_coord(coord_url, coord_config, session_timeout_ms=timeout_ms)
    except (BadStoreUrl, ConfigError) as error:
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


@coord.command("secure", cls=OneLineUsage)
@click.option("--coord", "coord_url", required=True, metavar="URL", help="zk://host:port[,host:port...][/chroot]")
@coord_config_option(required=True)
def coord_secure(coord_url: str, coord_config: str) -> None:
    """Set zookeeper.set.acl's ACL on every node of a ZooKeeper store made without it, as
    Kafka's zookeeper-security-migration does; --coord-config names the user (with
    zookeeper.set.acl = true), who alone may then read or change them."""
    from replog.coord_backends.zookeeper import ZooKeeperStore

    from .admin_client import open_coord

    try:
        store = open_coord(coord_url, coord_config)
    except (BadStoreUrl, ConfigError) as error:
        fail(str(error), USAGE_ERROR_STATUS)
    if not isinstance(store, ZooKeeperStore) or not store.security.set_acl:
        fail(f"{coord_url}: coord secure sets ZooKeeper ACLs: give a zk:// URL and zookeeper.set.acl = true in "
             "--coord-config", USAGE_ERROR_STATUS)

    async def secure() -> int:
        await store.start()
        try:
            return await store.secure_existing_nodes()
        finally:
            await store.close()

    try:
        count = asyncio.run(secure())
    except StoreError as error:
        fail(f"{coord_url}: {error}", FAILURE_STATUS)
    click.echo(f"secured {count} nodes for user {store.security.username}")


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
