"""A topic's configuration overrides in the coordination store (/config/topics/[topic], as
text): described with their effective values and sources (DescribeConfigs), altered operation
by operation (IncrementalAlterConfigs) or replaced as a whole (the legacy AlterConfigs).

Writes are compare-and-set on the config node's version, re-planned from a fresh read after a
concurrent writer's (topics.py's CONFLICT_ATTEMPTS_MAX), and validated as a whole before.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence

from replog.config import (
    DEFAULT_SOURCE,
    TOPIC_SETTINGS,
    TOPIC_SOURCE,
    BrokerConfig,
    effective_topic_config,
    format_value,
    load_broker_config,
)
from replog.coord_backends import Store, paths
from replog.coord_backends.paths import TopicConfig

from .errors import InvalidConfig
from .topics import _get_or_none, _partition_ids, _retrying, _topic_config_errors


class ConfigSource(enum.IntEnum):
    """Kafka's DescribeConfigs config_source values (the ones a topic's or a broker's entries can have)."""

    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


@dataclasses.dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


async def _topic_overrides(store: Store, name: str) -> tuple[dict[str, str], int | None]:
    """The topic's stored overrides and the config node's version (None: no node yet)."""
    await _partition_ids(store, name)  # raises UnknownTopicOrPartition
    stored = await _get_or_none(store, paths.topic_config(name))
    if stored is None:
        return {}, None
    return dict(TopicConfig.decode(stored[0]).configs), stored[1]


async def describe_topic_config(
    store: Store, name: str, broker_config: BrokerConfig | None = None
) -> list[ConfigEntry]:
    """Every topic setting with its effective value and where it comes from, by name.

    Without `broker_config` (an admin command run away from any broker), broker-level values
    are the registry defaults.
    """
    overrides, _ = await _topic_overrides(store, name)
    return topic_config_entries(broker_config or load_broker_config(), overrides)


def topic_config_entries(broker_config: BrokerConfig, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """What `describe_topic_config` answers for a topic with these overrides, by name."""
    settings = effective_topic_config(broker_config, overrides)
    sources = {TOPIC_SOURCE: ConfigSource.DYNAMIC_TOPIC_CONFIG, DEFAULT_SOURCE: ConfigSource.DEFAULT_CONFIG}
    return [
        ConfigEntry(setting, format_value(value), sources.get(settings.sources[setting], ConfigSource.STATIC_BROKER_CONFIG))
        for setting, value in sorted(settings.items())
    ]


class AlterOp(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation values."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclasses.dataclass(frozen=True)
class ConfigOperation:
    name: str
    op: AlterOp
    value: str | None = None


def _apply_operation(
    topic: str, overrides: dict[str, str], operation: ConfigOperation, broker_config: BrokerConfig
) -> None:
    setting = TOPIC_SETTINGS.get(operation.name)
    if setting is None:
        raise InvalidConfig(f"topic {topic!r}: Unknown topic config name: {operation.name}")
    if operation.op == AlterOp.DELETE:
        overrides.pop(operation.name, None)
        return
    if operation.value is None:
        raise InvalidConfig(f"topic {topic!r}: {operation.op.name} {operation.name} needs a value")
    if operation.op == AlterOp.SET:
        overrides[operation.name] = operation.value
        return
    if not setting.is_list:
        raise InvalidConfig(
            f"topic {topic!r}: {operation.op.name} applies only to list settings, and {operation.name} is not one"
        )
    # As Kafka does, APPEND and SUBTRACT start from the override, else the broker's value.
    current = overrides.get(operation.name) or format_value(broker_config.topic_defaults()[operation.name]) or ""
    items = [item for item in current.split(",") if item]
    given = [item.strip() for item in operation.value.split(",") if item.strip()]
    if operation.op == AlterOp.APPEND:
        items += [item for item in given if item not in items]
    else:
        items = [item for item in items if item not in given]
    overrides[operation.name] = ",".join(items)


async def alter_topic_config(
    store: Store,
    name: str,
    operations: Sequence[ConfigOperation],
    *,
    broker_config: BrokerConfig | None = None,
    validate_only: bool = False,
) -> dict[str, str]:
    """Apply IncrementalAlterConfigs operations to the topic's overrides; returns the new overrides.

    All or nothing: the operations are applied in order to a copy, the result is validated as a
    whole (INVALID_CONFIG names the first bad setting), then written compare-and-set.
    """
    names = [operation.name for operation in operations]
    if len(set(names)) != len(names):
        raise InvalidConfig(f"topic {name!r}: a setting appears more than once in {names}")
    broker_config = broker_config or load_broker_config()

    def altered(overrides: dict[str, str]) -> dict[str, str]:
        for operation in operations:
            _apply_operation(name, overrides, operation, broker_config)
        return overrides

    return await _rewrite_topic_config(store, name, altered, validate_only, broker_config)


async def replace_topic_config(store: Store, name: str, configs: Mapping[str, str], *,
                               broker_config: BrokerConfig | None = None, validate_only: bool = False) -> dict[str, str]:
    """Make `configs` the topic's whole set of overrides, as Kafka's legacy AlterConfigs does:
    every override not named goes back to the broker's value. Validated first, like
    alter_topic_config; returns the new overrides."""
    return await _rewrite_topic_config(store, name, lambda overrides: dict(configs), validate_only, broker_config)


async def _rewrite_topic_config(store: Store, name: str, change: Callable[[dict[str, str]], dict[str, str]],
                                validate_only: bool, broker_config: BrokerConfig | None) -> dict[str, str]:
    """Read the topic's overrides (UNKNOWN_TOPIC_OR_PARTITION if there is no topic), `change` them,
    validate the result and write it compare-and-set, reading again after another's write."""

    async def attempt() -> dict[str, str]:
        overrides, version = await _topic_overrides(store, name)
        overrides = change(overrides)
        _topic_config_errors(name, overrides, broker_config)
        if validate_only:
            return overrides
        encoded = TopicConfig(overrides).encode()
        if version is None:
            await store.create(paths.topic_config(name), encoded, make_parents=True)
        else:
            await store.set(paths.topic_config(name), encoded, version)
        return overrides

    return await _retrying(attempt)
