"""Broker configuration: every setting's name, type, default and validation, in one place.

Names are Kafka's where Kafka has the setting (`zookeeper.session.timeout.ms` becomes
`coord.session.timeout.ms`, since the store may be etcd). A value arrives as text (a TOML
file, `--set key=value`) and is parsed and checked here, so a bad value fails at start-up with
a message naming the setting.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable


class ConfigError(ValueError):
    """A setting is unknown or its value is invalid; the message names the setting."""


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str


def _positive_int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise ValueError(f"must be at least {minimum}")
        return value

    return parse


def _coord_url(text: str) -> str:
    from replog.coord_backends import open_store

    open_store(text)  # raises BadStoreUrl naming the accepted forms
    return text


SETTINGS: dict[str, Setting] = {
    setting.name: setting
    for setting in [
        Setting("coord.url", _coord_url, "memory://", "coordination store URL (memory://, zk://..., etcd://...)"),
        Setting(
            "coord.session.timeout.ms",
            _positive_int(1000),
            18_000,
            "how long the store keeps a silent broker's session (and its ephemeral nodes) alive",
        ),
    ]
}


def parse_setting(name: str, text: str) -> Any:
    setting = SETTINGS.get(name)
    if setting is None:
        raise ConfigError(f"unknown setting {name!r}")
    try:
        return setting.parse(text)
    except ValueError as error:
        raise ConfigError(f"invalid value {text!r} for {name}: {error}") from None


def defaults() -> dict[str, Any]:
    return {name: setting.default for name, setting in SETTINGS.items()}
