"""Client quotas in the coordination store, as AlterClientQuotas and DescribeClientQuotas (and
`replog quotas` through `--coord`) change and read them: the nodes are Kafka's ZooKeeper ones
(security/client_quota_records.py), each write followed by a change notification that every
broker's feed follows.

An entity is named as on the wire: entity types "user" and "client-id" (Kafka's "ip" entity,
for connection rates, is not supported), each with a name or None for the default. The checks
and their words are Kafka's (ClientQuotaControlManager, ClientQuotasImage): an entity's type
named twice, unknown or empty, a key that is not a quota, a quota not above zero, a byte rate
that is not whole; beyond Kafka, a user or client id literally named `<default>`, which the
store's layout cannot tell from the default.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from replog.coord_backends import BadVersion, NodeExists, NoNode, NotEmpty, Store, StoreError
from replog.coord_backends import paths
from replog.coord_backends.change_notifications import notify
from replog.security import client_quota_records as records
from replog.security.client_quotas import ClientQuotaEntity
from replog.security.quota_limits import DEFAULT_ENTITY, QUOTA_CONFIG_NAMES, QuotaType

from .errors import AdminError, store_failure
from .topics import CONFLICT_ATTEMPTS_MAX, _get_or_none

logger = logging.getLogger(__name__)

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
# Kafka's DescribeClientQuotas match types
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
WHOLE_QUOTAS = frozenset({QuotaType.PRODUCE.value, QuotaType.FETCH.value})  # Kafka's LONG quota configs
WHOLE_EPSILON = 1e-6  # Kafka's tolerance for a whole number sent as a double

EntityNames = tuple[tuple[str, str | None], ...]  # (entity type, name or None: the default), as on the wire


@dataclasses.dataclass(frozen=True)
class QuotaAlteration:
    entity: EntityNames
    ops: tuple[tuple[str, float | None], ...]  # (quota key, value, or None to remove it)


@dataclasses.dataclass(frozen=True)
class QuotaFilter:
    """DescribeClientQuotas' filter: each component (entity type, match type, match), and whether
    an entity may have types the components do not name (not `strict`)."""

    components: tuple[tuple[str, int, str | None], ...] = ()
    strict: bool = False


def entity_of(names: EntityNames) -> ClientQuotaEntity:
    """The entity named, or Kafka's refusal (INVALID_REQUEST) of the names."""
    types: dict[str, str | None] = {}
    if not names:
        raise AdminError(ErrorCode.invalid_request, "Invalid empty client quota entity")
    for entity_type, name in names:
        if entity_type in types:
            raise AdminError(ErrorCode.invalid_request, f"Invalid empty client quota entity, duplicate entity entry {entity_type}")
        if entity_type not in (USER, CLIENT_ID):
            raise AdminError(ErrorCode.invalid_request, f"Unhandled client quota entity type: {entity_type}")
        if name == "":
            raise AdminError(ErrorCode.invalid_request, f"Empty {entity_type} not supported")
        if name == DEFAULT_ENTITY:
            raise AdminError(ErrorCode.invalid_request, f"The {entity_type} name {DEFAULT_ENTITY} names the default entity")
        types[entity_type] = name
    return ClientQuotaEntity(*(None if part not in types else DEFAULT_ENTITY if types[part] is None else types[part]
                               for part in (USER, CLIENT_ID)))


def names_of(entity: ClientQuotaEntity) -> EntityNames:
    return tuple((entity_type, None if name == DEFAULT_ENTITY else name)
                 for entity_type, name in ((USER, entity.user), (CLIENT_ID, entity.client_id)) if name is not None)


def _value_refusal(key: str, value: float) -> AdminError | None:
    if key not in QUOTA_CONFIG_NAMES:
        return AdminError(ErrorCode.invalid_request, f"Invalid configuration key {key}")
    if not value > 0 or value == float("inf"):
        return AdminError(ErrorCode.invalid_request, f"Quota {key} must be greater than 0")
    if key in WHOLE_QUOTAS and abs(value % 1.0) > WHOLE_EPSILON:
        return AdminError(ErrorCode.invalid_request, f"{key} cannot be a fractional value.")
    return None


def _stored_value(key: str, value: float) -> str:
    """As Kafka wrote it to ZooKeeper: a byte rate whole, a percentage or rate as a double."""
    return str(int(value + WHOLE_EPSILON)) if key in WHOLE_QUOTAS else repr(float(value))


async def alter_client_quotas(store: Store, alterations: Sequence[QuotaAlteration],
                              validate_only: bool = False) -> list[AdminError | None]:
    """Each alteration's refusal or failure (its entity left as it was), or None once made (or,
    `validate_only`, found valid); in request order."""
    results: list[AdminError | None] = []
    for alteration in alterations:
        try:
            entity = entity_of(alteration.entity)
            refusal = next((refusal for key, value in alteration.ops if value is not None
                            and (refusal := _value_refusal(key, value)) is not None), None)
            if refusal is not None:
                raise refusal
            if not validate_only:
                await _alter(store, entity, alteration.ops)
        except AdminError as error:
            results.append(error)
        except StoreError as error:
            results.append(store_failure("client quotas", error))
        else:
            results.append(None)
    return results


async def _alter(store: Store, entity: ClientQuotaEntity, ops: tuple[tuple[str, float | None], ...]) -> None:
    """One entity's changes in one compare-and-set write of its node, then the notification."""
    path = records.node_path(entity)
    for _ in range(CONFLICT_ATTEMPTS_MAX):  # another admin's write in between: read again
        node = await _get_or_none(store, path)
        configs = records.configs_of(entity, node[0]) if node else {}
        before = dict(configs)
        for key, value in ops:
            if value is None:
                configs.pop(key, None)
            else:
                configs[key] = _stored_value(key, value)
        if configs == before:
            return
        try:
            await _write(store, entity, path, node, configs)
        except (NodeExists, BadVersion, NoNode):
            continue
        logger.info("altered client quotas user=%r client_id=%r quotas=%s", entity.user, entity.client_id,
                    ",".join(f"{key}={value}" for key, value in configs.items() if key in QUOTA_CONFIG_NAMES) or "-")
        await notify(store, paths.CONFIG_CHANGE_PREFIX, records.change_notice(entity))
        return
    raise AdminError(ErrorCode.unknown_server_error, "the entity's quotas kept changing meanwhile; try again")


async def _write(store: Store, entity: ClientQuotaEntity, path: str, node: tuple[bytes, int] | None,
                 configs: dict[str, str]) -> None:
    if node is None:
        if entity.user is not None and entity.client_id is not None:
            await _ensure_user_node(store, entity.user)
        await store.create(path, records.encoded(entity, configs), make_parents=True)
    elif configs:
        await store.set(path, records.encoded(entity, configs), node[1])
    else:
        try:
            await store.delete(path, node[1])
        except NotEmpty:  # a user whose client ids have quotas: the node stays, as their parent
            await store.set(path, records.encoded(entity, configs), node[1])


async def _ensure_user_node(store: Store, user: str) -> None:
    """A user's client ids' nodes sit below the user's, which holds a readable (empty) config for
    the SCRAM credentials' readers rather than the empty value of a parent made on the way."""
    user_entity = ClientQuotaEntity(user, None)
    try:
        await store.create(records.node_path(user_entity), records.encoded(user_entity, {}), make_parents=True)
    except NodeExists:
        pass


def _filter_of(quota_filter: QuotaFilter) -> tuple[dict[str, str | None], set[str]]:
    """The names each entity must have exactly, and the types it must have with any name; Kafka's
    refusals of a filter (INVALID_REQUEST, UNSUPPORTED_VERSION)."""
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for entity_type, match_type, match in quota_filter.components:
        if entity_type == "":
            raise AdminError(ErrorCode.invalid_request, "Invalid empty entity type.")
        if entity_type in exact or entity_type in specified:
            raise AdminError(ErrorCode.invalid_request, f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in (USER, CLIENT_ID, IP):
            raise AdminError(ErrorCode.unsupported_version, f"Unsupported entity type {entity_type}")
        if match_type == MATCH_EXACT:
            if match is None:
                raise AdminError(ErrorCode.invalid_request, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = match
        elif match_type == MATCH_DEFAULT:
            if match is not None:
                raise AdminError(ErrorCode.invalid_request,
                                 "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == MATCH_SPECIFIED:
            if match is not None:
                raise AdminError(ErrorCode.invalid_request,
                                 "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(entity_type)
        else:
            raise AdminError(ErrorCode.unsupported_version, f"Unknown match type {match_type}")
    if (IP in exact or IP in specified) and (exact.keys() | specified) - {IP}:
        raise AdminError(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component "
                                                    "should not be used with user or clientId filter component.")
    return exact, specified


def _matches(names: dict[str, str | None], exact: dict[str, str | None], specified: set[str], strict: bool) -> bool:
    if strict and len(names) != len(exact) + len(specified):
        return False
    return all(entity_type in names and names[entity_type] == name for entity_type, name in exact.items()) and all(
        entity_type in names for entity_type in specified)


async def describe_client_quotas(store: Store, quota_filter: QuotaFilter) -> list[tuple[EntityNames, dict[str, float]]]:
    """Each entity with a quota that the filter selects, with its quotas, by entity; AdminError
    for a filter Kafka refuses."""
    exact, specified = _filter_of(quota_filter)
    described = []
    for entity, configs in (await records.stored_quotas(store)).items():
        names = names_of(entity)
        if _matches(dict(names), exact, specified, quota_filter.strict):
            values = {}
            for key, text in configs.items():
                try:
                    values[key] = float(text)
                except ValueError:
                    logger.warning("unreadable quota skipped user=%r client_id=%r key=%s", entity.user, entity.client_id, key)
            if values:
                described.append((names, values))
    return sorted(described, key=lambda entry: [(entity_type, name or "") for entity_type, name in entry[0]])
