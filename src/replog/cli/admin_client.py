"""The way an admin command reaches the cluster: `--coord URL` (StoreAdmin) or
`--bootstrap-server HOST:PORT` (KafkaAdmin), also read from the environment; exactly one. The
store door connects with the settings of `--coord-config FILE` and the environment."""

from __future__ import annotations

import urllib.parse

from replog.config import load_broker_config, store_security
from replog.coord_backends import Store, open_store
from replog.net.client_properties import NO_PROPERTIES, ClientProperties, ClientPropertiesError

from .admin_interface import Admin, AdminChoiceError
from .kafka_admin import KafkaAdmin
from .store_admin import StoreAdmin

COORD_ENV = "REPLOG_COORD"
BOOTSTRAP_ENV = "REPLOG_BOOTSTRAP_SERVER"


def open_coord(coord_url: str, coord_config: str | None, **options) -> Store:
    """The store at `coord_url`, connecting with `coord_config`'s coord.* settings and the
    environment's (ConfigError if they cannot be read or used)."""
    return open_store(coord_url, security=store_security(load_broker_config(coord_config)), **options)


def open_admin(coord_url: str | None, bootstrap: str | None, coord_config: str | None = None,
               properties: ClientProperties = NO_PROPERTIES) -> Admin:
    """The Admin the operator chose, reaching the store as `coord_config` says and brokers as
    `properties` say; AdminChoiceError (or BadStoreUrl, ConfigError) if the choice is not exactly
    one that can work or a TLS file is unusable."""
    if coord_url and bootstrap:
        raise AdminChoiceError(
            f"both --coord and --bootstrap-server are given (as flags, or by {COORD_ENV} and {BOOTSTRAP_ENV}); give one"
        )
    if not coord_url and not bootstrap:
        raise AdminChoiceError(
            "give --coord URL to act on the coordination store (works while brokers are down) or --bootstrap-server"
            f" HOST:PORT to ask a broker, or set {COORD_ENV} or {BOOTSTRAP_ENV}"
        )
    try:
        return _admin(coord_url, bootstrap, coord_config, properties)
    except ClientPropertiesError as error:
        raise AdminChoiceError(f"--command-config: {error}") from None


def _admin(coord_url: str | None, bootstrap: str | None, coord_config: str | None, properties: ClientProperties) -> Admin:
    if bootstrap:
        return KafkaAdmin(bootstrap, properties)
    parsed = urllib.parse.urlsplit(coord_url)
    if parsed.scheme == "memory" and not parsed.path.strip("/"):
        raise AdminChoiceError(
            f"--coord {coord_url}: the embedded store lives inside its broker's process; use --bootstrap-server"
            " HOST:PORT of that broker"
        )
    return StoreAdmin(open_coord(coord_url, coord_config), coord_url, properties)
