"""Dynamic broker configs in the coordination store: what Kafka's IncrementalAlterConfigs sets on a
BROKER resource (a broker id, or "" for the cluster's default) and DescribeConfigs shows beside
a broker's static settings. Only the reassignment throttle's rates change while brokers run
(config.DYNAMIC_BROKER_SETTINGS); a broker watches its own node and the default's
(replication/throttle_rates.py).

    alter_broker_config      SET or DELETE, validated first: a bad operation changes nothing
    replace_broker_config    legacy AlterConfigs: the given configs become the whole dynamic set
    dynamic_broker_config    a broker's rates and where each comes from (its own node, the default)
    remove_throttle_rates    `replog reassign verify`, once nothing moves: every rate goes, as
                             kafka-reassign-partitions --verify removes the throttle it set
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from replog.config import DYNAMIC_BROKER_SETTINGS, ConfigError, dynamic_broker_setting, parse_dynamic_broker_setting
from replog.coord_backends import BadVersion, NodeExists, NoNode, Store, children_or_empty
from replog.coord_backends import paths
from replog.coord_backends.paths import DynamicBrokerConfig

from .errors import AdminError, InvalidConfig
from .topic_configs import AlterOp, ConfigOperation, ConfigSource
from .topics import CONFLICT_ATTEMPTS_MAX, _get_or_none


def broker_resource(name: str) -> int | None:
    """The broker a BROKER resource names; None for "", the cluster's default."""
    if name == "":
        return None
    if not name.isdigit():
        raise AdminError(ErrorCode.invalid_request, f"broker resource {name!r} is not a broker id; name one, or \"\" for the "
                                          "cluster's default")
    return int(name)


def _subject(broker: int | None) -> str:
    return "the cluster's default broker config" if broker is None else f"broker {broker}'s config"


async def alter_broker_config(store: Store, broker: int | None, operations: Sequence[ConfigOperation], *,
                              validate_only: bool = False) -> None:
    """Apply SET and DELETE operations to a broker's dynamic configs (None: the default)."""
    for operation in operations:
        if operation.op not in (AlterOp.SET, AlterOp.DELETE):
            raise InvalidConfig(f"{_subject(broker)}: {operation.name} is a number; SET or DELETE it")
        try:
            if operation.op is AlterOp.SET:
                parse_dynamic_broker_setting(operation.name, operation.value)
            else:
                dynamic_broker_setting(operation.name)
        except ConfigError as error:
            raise InvalidConfig(f"{_subject(broker)}: {error}") from None
    if validate_only:
        return
    path = paths.broker_config(broker)
    for _ in range(CONFLICT_ATTEMPTS_MAX):  # another admin's write in between: read again
        node = await _get_or_none(store, path)
        configs = dict(DynamicBrokerConfig.decode(node[0]).configs) if node else {}
        for operation in operations:
            if operation.op is AlterOp.SET:
                configs[operation.name] = operation.value
            else:
                configs.pop(operation.name, None)
        value = DynamicBrokerConfig(configs).encode()
        try:
            if node is None:
                await store.create(path, value, make_parents=True)
            else:
                await store.set(path, value, node[1])
        except (NodeExists, BadVersion, NoNode):
            continue
        return
    raise AdminError(InvalidConfig.code, f"{_subject(broker)} kept changing meanwhile; try again")


async def replace_broker_config(store: Store, broker: int | None, configs: Mapping[str, str], *,
                                validate_only: bool = False) -> None:
    """Make `configs` the broker's whole set of dynamic configs (None: the default's), as Kafka's
    legacy AlterConfigs does: every dynamic setting not named is deleted."""
    operations = ([ConfigOperation(name, AlterOp.SET, value) for name, value in configs.items()]
                  + [ConfigOperation(name, AlterOp.DELETE, None) for name in DYNAMIC_BROKER_SETTINGS if name not in configs])
    await alter_broker_config(store, broker, operations, validate_only=validate_only)


async def dynamic_broker_config(store: Store, broker: int | None) -> dict[str, tuple[str, ConfigSource]]:
    """The broker's dynamic configs by name, with their source: the broker's own node, else the
    cluster's default (for None, the default's only)."""
    levels = [(None, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    if broker is not None:
        levels.append((broker, ConfigSource.DYNAMIC_BROKER_CONFIG))
    found = {}
    for level, source in levels:  # the broker's own last: it overrides the default
        node = await _get_or_none(store, paths.broker_config(level))
        if node is not None:
            found |= {name: (value, source) for name, value in DynamicBrokerConfig.decode(node[0]).configs.items()}
    return found


async def remove_throttle_rates(store: Store) -> list[str]:
    """Delete the throttle rates from every broker's dynamic configs and the default's; the nodes
    that had one, by name."""
    removed = []
    for child in sorted(await children_or_empty(store, paths.BROKER_CONFIGS)):
        broker = None if child == paths.DEFAULT_BROKER_CONFIG else int(child)
        node = await _get_or_none(store, paths.broker_config(broker))
        if node is not None and set(DynamicBrokerConfig.decode(node[0]).configs) & set(DYNAMIC_BROKER_SETTINGS):
            await alter_broker_config(store, broker, [ConfigOperation(name, AlterOp.DELETE, None)
                                                      for name in DYNAMIC_BROKER_SETTINGS])
            removed.append(child)
    return removed
