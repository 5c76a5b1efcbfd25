"""`replog quotas alter|describe`: client quotas, as `kafka-configs --entity-type users|clients
--alter --add-config producer_byte_rate=1048576` manages them, through the store or a broker
(admin_client.py).

An entity is named as kafka-configs names it: `--entity-type users` or `clients`, or both for a
user's client id, each followed by `--entity-name NAME` or `--entity-default`, paired in the
order given. Describing with a type and no name lists every entity of that type.
"""

from __future__ import annotations

import click

from replog.admin.client_quotas import CLIENT_ID, MATCH_DEFAULT, MATCH_EXACT, MATCH_SPECIFIED, USER, EntityNames, QuotaFilter
from replog.security.quota_limits import DEFAULT_ENTITY, QUOTA_CONFIG_NAMES

from .common import AdminCommand, admin_options, print_outcome, through_admin

ENTITY_TYPES = {"users": USER, "clients": CLIENT_ID}  # kafka-configs' names -> the wire's
DESCRIBED_AS = {USER: "user-principal", CLIENT_ID: "client-id"}  # as kafka-configs prints them


@click.group()
def quotas() -> None:
    """Set and describe client quotas (producer_byte_rate, consumer_byte_rate,
    request_percentage, controller_mutation_rate) on users, client ids, or a user's client ids,
    kept in the coordination store under /config/users and /config/clients as Kafka keeps them;
    every broker applies a change within moments.

    Every subcommand takes --coord URL or --bootstrap-server HOST:PORT, as `replog topics` does.
    """


def entity_options(command):
    options = (
        click.option("--entity-type", "entity_types", type=click.Choice(list(ENTITY_TYPES)), multiple=True, required=True,
                     help="users or clients; both, users first, for a user's client id"),
        click.option("--entity-name", "entity_names", multiple=True, metavar="NAME",
                     help="the entity of the --entity-type before it (a user without its User: prefix)"),
        click.option("--entity-default", "entity_names", flag_value=DEFAULT_ENTITY, multiple=True,
                     help="the default entity of the --entity-type before it"),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _typed(entity_types: tuple[str, ...], entity_names: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(wire entity type, name, DEFAULT_ENTITY or None when not named) for each type given."""
    types = [ENTITY_TYPES[entity_type] for entity_type in entity_types]
    if len(set(types)) < len(types):
        raise click.UsageError("each --entity-type may be given once")
    if types == [CLIENT_ID, USER]:
        raise click.UsageError("give --entity-type users before --entity-type clients")
    if len(entity_names) > len(types):
        raise click.UsageError("more --entity-name/--entity-default than --entity-type")
    return [(entity_type, entity_names[index] if index < len(entity_names) else None) for index, entity_type in enumerate(types)]


def _quota_value(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise click.UsageError(f"{key}={text}: a quota is a number") from None


def _additions(add_config: str | None) -> list[tuple[str, float]]:
    additions = []
    for item in filter(None, (add_config or "").split(",")):
        key, equals, text = item.partition("=")
        if not equals:
            raise click.UsageError(f"--add-config {item!r}: expected KEY=VALUE")
        additions.append((key.strip(), _quota_value(key.strip(), text.strip())))
    return additions


@quotas.command("alter", cls=AdminCommand)
@entity_options
@click.option("--add-config", metavar="K=V,...", help=f"quotas to set: {', '.join(QUOTA_CONFIG_NAMES)}")
@click.option("--delete-config", metavar="K,...", help="quotas to remove")
@admin_options
def quotas_alter(entity_types: tuple[str, ...], entity_names: tuple[str, ...], add_config: str | None,
                 delete_config: str | None, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Set and remove an entity's quotas, all or none of them.

    \b
    Examples:
      replog quotas alter --entity-type users --entity-name alice \\
          --add-config producer_byte_rate=1048576,consumer_byte_rate=2097152 --bootstrap-server 127.0.0.1:9092
      replog quotas alter --entity-type users --entity-name alice --entity-type clients --entity-default \\
          --delete-config request_percentage --coord zk://127.0.0.1:2181/replog
    """
    typed = _typed(entity_types, entity_names)
    if any(name is None for _, name in typed):
        raise click.UsageError("name each --entity-type's entity with --entity-name or --entity-default")
    ops = [*_additions(add_config), *((key.strip(), None) for key in filter(None, (delete_config or "").split(",")))]
    if not ops:
        raise click.UsageError("give --add-config or --delete-config")
    entity: EntityNames = tuple((entity_type, None if name == DEFAULT_ENTITY else name) for entity_type, name in typed)
    through_admin(coord_url, bootstrap, lambda admin: admin.alter_client_quotas(entity, ops))
    (entity_type, name), *_ = typed
    kind = next(kind for kind, wire in ENTITY_TYPES.items() if wire == entity_type)
    print_outcome(output, {"entity": dict(entity), "set": dict(op for op in ops if op[1] is not None),
                           "removed": [key for key, value in ops if value is None]},
                  f"Completed updating default config for {kind} in the cluster." if name == DEFAULT_ENTITY
                  else f"Completed updating config for {kind.removesuffix('s')} {name}.")


@quotas.command("describe", cls=AdminCommand)
@entity_options
@admin_options
def quotas_describe(entity_types: tuple[str, ...], entity_names: tuple[str, ...], coord_url: str | None,
                    bootstrap: str | None, output: str) -> None:
    """Describe the quotas of the entities named, or of every entity of the types given without
    a name, as kafka-configs --describe prints them. JSON: {"quotas": [{"entity": {"user": NAME
    or null for the default, "client-id": ...}, "values": {key: value}}]}.

    \b
    Example:
      replog quotas describe --entity-type users --bootstrap-server 127.0.0.1:9092
    """
    components = tuple(
        (entity_type, MATCH_SPECIFIED, None) if name is None else (entity_type, MATCH_DEFAULT, None) if name == DEFAULT_ENTITY
        else (entity_type, MATCH_EXACT, name) for entity_type, name in _typed(entity_types, entity_names))
    described = through_admin(coord_url, bootstrap, lambda admin: admin.describe_client_quotas(QuotaFilter(components, True)))
    if output == "json":
        from .render import print_json

        print_json({"quotas": [{"entity": dict(entity), "values": values} for entity, values in described]})
        return
    for entity, values in described:
        who = ", ".join(f"{DESCRIBED_AS[entity_type]} '{name}'" if name is not None else f"the default {DESCRIBED_AS[entity_type]}"
                        for entity_type, name in entity)
        click.echo(f"Quota configs for {who} are {', '.join(f'{key}={value!r}' for key, value in sorted(values.items()))}")
