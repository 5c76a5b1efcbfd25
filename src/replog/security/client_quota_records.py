"""Client quotas as the coordination store keeps them, in Kafka's ZooKeeper layout: an entity's
configs at /config/users/<user>, /config/clients/<client-id> or
/config/users/<user>/clients/<client-id> (`<default>` naming the default's node; other names
URL-encoded), each value strings ({"version":1,"config":{"producer_byte_rate":"1048576"}}), then
a notification /config/changes/config_change_NNNNNNNNNN naming the entity's path
(ConfigChange), which every broker's feed follows (client_quota_feed.py).

A user's node also holds the user's SCRAM credentials (admin/scram_credentials.py): quota readers
take only the quota keys from it. A user node with no config of its own may exist as the parent
of its client ids' nodes. What cannot be read is logged and skipped: one bad node must not keep
a broker from the others' quotas.
"""

from __future__ import annotations

import logging

from replog.coord_backends import NoNode, Store, children_or_empty, get_all
from replog.coord_backends import paths
from replog.coord_backends.paths import ClientConfig, ConfigChange, InvalidNodeValue, UserConfig

from .client_quotas import ClientQuotaEntity
from .quota_limits import QUOTA_CONFIG_NAMES

logger = logging.getLogger(__name__)


def node_path(entity: ClientQuotaEntity) -> str:
    return paths.quota_entity_config(entity.user, entity.client_id)


def configs_of(entity: ClientQuotaEntity, raw: bytes) -> dict[str, str]:
    """Every config of an entity's node (a user's SCRAM credentials among them); InvalidNodeValue
    when unreadable. An empty node (made as a parent) has none."""
    if not raw:
        return {}
    return dict((UserConfig if entity.client_id is None else ClientConfig).decode(raw).config)


def encoded(entity: ClientQuotaEntity, configs: dict[str, str]) -> bytes:
    return (UserConfig if entity.client_id is None else ClientConfig)(configs).encode()


def _quota_configs(entity: ClientQuotaEntity, raw: bytes) -> dict[str, str]:
    try:
        configs = configs_of(entity, raw)
    except InvalidNodeValue as error:
        logger.warning("unreadable quota entity skipped node=%s error=%s", node_path(entity), error)
        return {}
    return {name: configs[name] for name in QUOTA_CONFIG_NAMES if name in configs}


async def read_quotas(store: Store, entity: ClientQuotaEntity) -> dict[str, str]:
    """The entity's quota configs as stored (none when it has no node)."""
    try:
        raw, _ = await store.get(node_path(entity))
    except NoNode:
        return {}
    return _quota_configs(entity, raw)


async def stored_quotas(store: Store) -> dict[ClientQuotaEntity, dict[str, str]]:
    """Every entity with a quota, and its quota configs as stored."""
    entities = [ClientQuotaEntity(None, paths.unsanitized(child)) for child in await children_or_empty(store, paths.CLIENT_CONFIGS)]
    for child in await children_or_empty(store, paths.USER_CONFIGS):
        user = paths.unsanitized(child)
        entities.append(ClientQuotaEntity(user, None))
        entities.extend(ClientQuotaEntity(user, paths.unsanitized(client))
                        for client in await children_or_empty(store, paths.user_clients(user)))
    found = {}
    for entity, answer in zip(entities, await get_all(store, [node_path(entity) for entity in entities])):
        if answer is not None and (quotas := _quota_configs(entity, answer[0])):
            found[entity] = quotas
    return found


def change_notice(entity: ClientQuotaEntity) -> bytes:
    return ConfigChange(paths.quota_entity_path(entity.user, entity.client_id)).encode()


def changed_entity(raw: bytes) -> ClientQuotaEntity | None:
    """The quota entity a notification names; None for another kind of entity (a topic's, a
    broker's: Kafka's notifications name those too). InvalidNodeValue when unreadable."""
    entity_path = ConfigChange.decode(raw).entity_path
    if not isinstance(entity_path, str) or not entity_path.startswith(("users/", "clients/")):
        return None
    try:
        return ClientQuotaEntity(*paths.quota_entity_of(entity_path))
    except ValueError as error:
        raise InvalidNodeValue(f"ConfigChange: {error}") from None
