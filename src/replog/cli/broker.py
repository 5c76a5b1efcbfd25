"""`replog broker start`: the broker's settings from its flags, --set and --config, then the
broker's runtime (replog.runtime) until it stops."""

from __future__ import annotations

import logging

import click

from replog.config import ConfigError, load_broker_config
from replog.coord_backends import BadStoreUrl, StoreError

from . import arguments
from .common import FAILURE_STATUS, USAGE_ERROR_STATUS, fail


@click.group()
def broker() -> None:
    """Run a broker."""


# Named flags, by parameter, and the setting each one stands for; they win over --set and the file.
BROKER_FLAGS = {
    "broker_id": ("--broker-id", "broker.id"),
    "listen": ("--listen", "listeners"),
    "advertised": ("--advertised", "advertised.listeners"),
    "metrics_listen": ("--metrics-listen", "metrics.listeners"),
    "rack": ("--rack", "broker.rack"),
    "data_dir": ("--data-dir", "log.dirs"),
    "coord_url": ("--coord", "coord.url"),
}


@broker.command("start")
@click.option("--broker-id", type=str, help="this broker's id (broker.id) [default: 0]")
@click.option("--listen", type=str, help="host:port of the PLAINTEXT listener, or NAME://host:port,... (listeners) "
                                         "[default: 127.0.0.1:9092]")
@click.option("--advertised", type=str, help="host:port clients are told, or NAME://host:port,... per listener "
                                             "(advertised.listeners) [default: each listener's own]")
@click.option("--metrics-listen", type=str,
              help='host:port of the Prometheus endpoint (metrics.listeners); "" for none [default: 127.0.0.1:9644]')
@click.option("--rack", type=str, help="rack name, for rack-aware assignment (broker.rack)")
@click.option("--data-dir", type=str, help="where partition logs live (log.dirs) [default: ./replog-data]")
@click.option("--coord", "coord_url", type=str, help="coordination store URL (coord.url) [default: memory://]")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of settings (Kafka's names)")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="any broker or topic-default setting; repeatable")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False), default="INFO",
              show_default=True, help="INFO: elections, ISR changes, fencing, completed state changes; DEBUG: every "
                                      "replica's steps")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object a line, each key=value field a key, for log shippers")
def broker_start(config_file: str | None, assignments: tuple[str, ...], log_level: str, log_format: str,
                 **flags: str | None) -> None:
    """Start a broker: with no options, broker 0 on 127.0.0.1:9092, embedded store, ./replog-data."""
    from replog.obs.logs import configure_logging

    logging.getLogger().setLevel(log_level.upper())
    configure_logging(log_format)
    named = {BROKER_FLAGS[flag][1]: (BROKER_FLAGS[flag][0], value) for flag, value in flags.items() if value is not None}
    try:
        settings = arguments.key_values(assignments)
    except ValueError as error:
        fail(f"--set {error}", USAGE_ERROR_STATUS)
    try:
        config = load_broker_config(config_file, settings, named)
    except (ConfigError, OSError) as error:
        fail(str(error), USAGE_ERROR_STATUS)
    from replog import runtime

    try:
        runtime.run(config)
    except runtime.CANNOT_START as error:
        fail(str(error), FAILURE_STATUS)
    except (ConfigError, BadStoreUrl) as error:  # coord.* settings that cannot be used with the store named
        fail(str(error), USAGE_ERROR_STATUS)
    except StoreError as error:
        fail(f"{config['coord.url']}: {error}", FAILURE_STATUS)
    except OSError as error:  # reading or writing the partition logs: the error names the file
        fail(f"broker {config['broker.id']} cannot start: {error}", FAILURE_STATUS)
    runtime.exit_stopped_cleanly()


