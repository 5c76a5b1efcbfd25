"""What every command shares: the one-line error form and its exit statuses, the command
classes that give it to usage errors and failures, the admin commands' options and the way
they reach the store or the brokers.

`replog --help` loads every command module, so they import the admin client (admin_client.py
and what it brings: replog.admin, the wire protocol's client), the renderer (rich, and the
admin client's types) and the broker's runtime inside the commands that use them: at the top,
they would triple the time `replog --help` and the produce/consume tools take to start.
"""

from __future__ import annotations

import asyncio
import sys

import click

from replog import tools
from replog.coord_backends import BadStoreUrl, StoreError


USAGE_ERROR_STATUS = 2
FAILURE_STATUS = 1


def fail(message: str, status: int) -> None:
    """One line on stderr, then exit: the form every operator-facing error takes."""
    click.echo(f"replog: {message}", err=True)
    sys.exit(status)


class OneLineUsage(click.Command):
    """A command whose usage errors are one line on stderr with status 2, like every other
    operator-facing error, instead of click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            fail(f"{subcommand(ctx)}: {error.format_message()}", USAGE_ERROR_STATUS)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except tools.BadArguments as error:
            fail(f"{subcommand(ctx)}: {error}", USAGE_ERROR_STATUS)
        except tools.ToolError as error:
            fail(str(error), FAILURE_STATUS)


def subcommand(ctx: click.Context) -> str:
    """'perf produce' for `replog perf produce`, however the program itself was invoked."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


def parsed(parse):
    """A click callback: the option's value through `parse` (one of arguments.py's), a
    ValueError as click's BadParameter; an option not given stays None."""

    def callback(_ctx, _param, value):
        try:
            return None if value is None else parse(value)
        except ValueError as error:
            raise click.BadParameter(str(error)) from None

    return callback


class AdminCommand(OneLineUsage):
    """An admin command: a refusal or failure is one line and status 1; --coord or
    --bootstrap-server not given as they must be is a usage error (status 2)."""

    def invoke(self, ctx: click.Context):
        from replog.admin import AdminError
        from replog.config import ConfigError

        from .admin_client import AdminChoiceError

        try:
            return super().invoke(ctx)
        except (AdminChoiceError, BadStoreUrl) as error:
            fail(f"{subcommand(ctx)}: {error}", USAGE_ERROR_STATUS)
        except ConfigError as error:  # --coord-config's
            fail(f"{subcommand(ctx)}: {error}", USAGE_ERROR_STATUS)
        except click.UsageError as error:
            fail(f"{subcommand(ctx)}: {error.format_message()}", USAGE_ERROR_STATUS)
        except AdminError as error:
            fail(f"{error}{ADMIN_HINTS.get(type(error).__name__, '')}", FAILURE_STATUS)
        except StoreError as error:
            fail(f"{ctx.params['coord_url']}: {error}", FAILURE_STATUS)


# What to do next, after the errors where that is not in the message already.
ADMIN_HINTS = {
    "UnknownTopicOrPartition": "; `replog topics list` shows the topics",
    "TopicAlreadyExists": "; --if-not-exists accepts an existing topic",
    "AdminUnreachable": "; is it running, and is that its address?",
}


# Where an admin command's --coord-config and --command-config wait: only through_admin, which
# every admin command calls, reads them, so they are kept aside rather than passed to each.
COORD_CONFIG_META = "replog.coord_config"
COMMAND_CONFIG_META = "replog.command_config"
COMMAND_CONFIG_HELP = ("Kafka client properties file: security.protocol, sasl.mechanism, sasl.jaas.config or "
                       "sasl.username/sasl.password, ssl.truststore.location or ssl.ca.location... (as Kafka's tools take it)")


def _remember_coord_config(ctx: click.Context, _param, value: str | None) -> None:
    ctx.meta[COORD_CONFIG_META] = value


def coord_config_option(**options):
    """--coord-config FILE: who the command is in the store, and over what, as Kafka's tools
    take --zk-tls-config-file; a broker's own config file will do (its other settings are not used)."""
    return click.option(
        "--coord-config", envvar="REPLOG_COORD_CONFIG", metavar="FILE", type=click.Path(dir_okay=False),
        help="TOML file of the store connection's settings (coord.username, coord.password.file, zookeeper.set.acl, "
             "coord.ssl.*), as in a broker's --config [env: REPLOG_COORD_CONFIG; user and password also from "
             "REPLOG_COORD_USERNAME, REPLOG_COORD_PASSWORD]", **options)


def client_properties(_ctx, _param, path: str | None):
    """A click callback: --command-config FILE read and checked, the files it names too, so that
    a bad file is a usage error before anything connects (net/client_properties.py)."""
    from replog.net.client_properties import NO_PROPERTIES, ClientPropertiesError, read_client_properties

    try:
        properties = NO_PROPERTIES if path is None else read_client_properties(path)
        properties.client_security()  # reads the certificates, keys and token it names
    except ClientPropertiesError as error:
        raise click.BadParameter(str(error)) from None
    return properties


def _remember_client_properties(ctx: click.Context, param, path: str | None) -> None:
    ctx.meta[COMMAND_CONFIG_META] = client_properties(ctx, param, path)


def admin_options(command):
    """The way in (--coord or --bootstrap-server), how the store and the brokers are connected
    to (--coord-config, --command-config) and --output, for every admin command."""
    options = (
        click.option("--coord", "coord_url", envvar="REPLOG_COORD", metavar="URL",
                     help="act on this coordination store (zk://, etcd://, memory:///file) [env: REPLOG_COORD]"),
        coord_config_option(expose_value=False, callback=_remember_coord_config),
        click.option("--bootstrap-server", "bootstrap", envvar="REPLOG_BOOTSTRAP_SERVER", metavar="HOST:PORT",
                     help="ask this broker (Kafka admin requests) [env: REPLOG_BOOTSTRAP_SERVER]"),
        click.option("--command-config", metavar="FILE", expose_value=False, callback=_remember_client_properties,
                     help=f"{COMMAND_CONFIG_HELP}; with --coord, for the brokers asked what only they know"),
        click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
                     help="json: one document, stable keys (README, `replog topics`)"),
    )
    for option in reversed(options):
        command = option(command)
    return command


def through_admin(coord_url: str | None, bootstrap: str | None, action):
    """Run `action(admin)` with the Admin the operator chose (admin_client.open_admin),
    connecting as the command's --coord-config and --command-config say, and return its result."""
    from .admin_client import open_admin

    meta = click.get_current_context().meta
    coord_config, properties = meta.get(COORD_CONFIG_META), meta[COMMAND_CONFIG_META]

    async def run():
        async with open_admin(coord_url, bootstrap, coord_config, properties) as admin:
            return await action(admin)

    return asyncio.run(run())


def print_outcome(output: str, document: dict, line: str) -> None:
    from .render import print_json

    if output == "json":
        print_json(document)
    else:
        click.echo(line)
