"""`replog acls add|remove|list`: ACL bindings, as `kafka-acls` manages them and with its options
and output, through the store or a broker (admin_client.py).

A command names resources (--topic, --group, --transactional-id, each repeatable, and
--cluster) with one pattern type, and entries: principals allowed or denied, from hosts (* when
none is named), for operations (All when none is named, or --producer / --consumer's). `add`
creates every combination; `remove` removes every binding matching one (all of a resource's
when no principal is named), after asking unless --force; `list` shows the bindings of the
resources named (every one when none is), of --principal's only if given. The output is
kafka-acls' (4.4), word for word: `add` prints what it adds, `remove` what it asks.
"""

from __future__ import annotations

import itertools
import logging

import click

from replog.security.acls import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    name_of,
    parse_name,
)

from .common import AdminCommand, admin_options, through_admin

# kafka-acls' conveniences: what a producer and a consumer need, by resource type.
PRODUCER_OPERATIONS = {ResourceType.TOPIC: (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE),
                       ResourceType.TRANSACTIONAL_ID: (AclOperation.WRITE, AclOperation.DESCRIBE)}
IDEMPOTENT_OPERATIONS = {ResourceType.CLUSTER: (AclOperation.IDEMPOTENT_WRITE,)}
CONSUMER_OPERATIONS = {ResourceType.TOPIC: (AclOperation.READ, AclOperation.DESCRIBE),
                       ResourceType.GROUP: (AclOperation.READ,)}
PATTERN_TYPES = ["literal", "prefixed", "match", "any"]


@click.group()
def acls() -> None:
    """Add, remove and list ACLs, kept in the coordination store under /kafka-acl and
    /kafka-acl-extended as Kafka keeps them; every broker's authorizer follows them.

    Every subcommand takes --coord URL or --bootstrap-server HOST:PORT, as `replog topics` does.
    """
    # The command's output is the record of what it changed; a broker asked writes the audit line.
    logging.getLogger("replog.audit").setLevel(logging.WARNING)


def _resource_options(command):
    options = (
        click.option("--topic", "topics", multiple=True, metavar="NAME",
                     help="a topic (a prefix with --resource-pattern-type prefixed); repeatable"),
        click.option("--group", "groups", multiple=True, metavar="NAME", help="a consumer group; repeatable"),
        click.option("--transactional-id", "transactional_ids", multiple=True, metavar="ID",
                     help="a transactional id; repeatable"),
        click.option("--cluster", is_flag=True, help="the cluster (Kafka's kafka-cluster resource)"),
        click.option("--resource-pattern-type", "pattern_type", type=click.Choice(PATTERN_TYPES, case_sensitive=False),
                     help="literal or prefixed names; to remove and list also match (every pattern that applies to the "
                          "names) or any [default: literal; for list without a resource, any]"),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _entry_options(command):
    options = (
        click.option("--allow-principal", "allow_principals", multiple=True, metavar="TYPE:NAME",
                     help="a principal allowed, User:alice or User:* for all; repeatable"),
        click.option("--deny-principal", "deny_principals", multiple=True, metavar="TYPE:NAME",
                     help="a principal denied; repeatable"),
        click.option("--allow-host", "allow_hosts", multiple=True, metavar="HOST",
                     help="the allowed principals' host; repeatable [default: * with --allow-principal]"),
        click.option("--deny-host", "deny_hosts", multiple=True, metavar="HOST",
                     help="the denied principals' host; repeatable [default: * with --deny-principal]"),
        click.option("--operation", "operations", multiple=True, metavar="OPERATION",
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                          "IdempotentWrite or All; repeatable [default: All]"),
        click.option("--producer", is_flag=True, help="a producer's operations: Write, Describe, Create on the topics, "
                                                      "Write, Describe on the transactional ids"),
        click.option("--idempotent", is_flag=True, help="with --producer: IdempotentWrite on the cluster as well"),
        click.option("--consumer", is_flag=True,
                     help="a consumer's operations: Read, Describe on the topics, Read on the groups"),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _pattern_type(given: str | None, default: PatternType) -> PatternType:
    return default if given is None else PatternType[given.upper()]


def _resources(topics, groups, transactional_ids, cluster: bool, pattern_type: PatternType) -> list[ResourcePattern]:
    """The resources named, with the pattern type given; the cluster's is always LITERAL, as
    kafka-acls has it."""
    return [*(ResourcePattern(ResourceType.TOPIC, name, pattern_type) for name in topics),
            *(ResourcePattern(ResourceType.GROUP, name, pattern_type) for name in groups),
            *(ResourcePattern(ResourceType.TRANSACTIONAL_ID, name, pattern_type) for name in transactional_ids),
            *([ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)] if cluster else [])]


def _named(topics, groups, transactional_ids, cluster: bool, pattern_type: PatternType) -> list[ResourcePattern]:
    """The resources `add` and `remove` act on: at least one."""
    resources = _resources(topics, groups, transactional_ids, cluster, pattern_type)
    if not resources:
        raise click.UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    return resources


def _operations(names: tuple[str, ...]) -> list[AclOperation]:
    try:
        operations = [AclOperation(parse_name(AclOperation, name)) for name in names]
    except ValueError as error:
        raise click.UsageError(f"--operation: {error}") from None
    if AclOperation.ANY in operations:
        raise click.UsageError("--operation: Any selects, it cannot be granted or removed: name the operations")
    return operations or [AclOperation.ALL]


def _operations_by_type(resources: list[ResourcePattern], operation_names: tuple[str, ...], producer: bool,
                        idempotent: bool, consumer: bool) -> dict[ResourceType, list[AclOperation]]:
    """The operations of each resource type named, as kafka-acls would grant them; --producer
    --idempotent adds the cluster to `resources`."""
    types = {resource.resource_type for resource in resources}
    from replog.net.authorization import SUPPORTED_OPERATIONS  # the operations kafka-acls allows each type

    if idempotent and not producer:
        raise click.UsageError("--idempotent goes with --producer")
    if producer or consumer:
        if operation_names:
            raise click.UsageError("--producer and --consumer name their operations: leave out --operation")
        if ResourceType.TOPIC not in types:
            raise click.UsageError("--producer and --consumer need --topic")
        if consumer and ResourceType.GROUP not in types:
            raise click.UsageError("with --consumer you must specify a --group")
        if idempotent and ResourceType.CLUSTER not in types:
            resources.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
        conveniences = [*([PRODUCER_OPERATIONS] if producer else []), *([IDEMPOTENT_OPERATIONS] if idempotent else []),
                        *([CONSUMER_OPERATIONS] if consumer else [])]
        return {resource.resource_type: [operation for each in conveniences
                                         for operation in each.get(resource.resource_type, ())] for resource in resources}
    operations = _operations(operation_names)
    for resource_type in types:
        supported = {*SUPPORTED_OPERATIONS[resource_type], AclOperation.ALL}
        if not supported.issuperset(operations):
            raise click.UsageError(f"ResourceType {resource_type.name} only supports operations "
                                   f"{','.join(operation.name for operation in sorted(supported))}")
    return {resource_type: operations for resource_type in types}


def _entries(allow_principals, deny_principals, allow_hosts, deny_hosts) -> list[tuple[str, str, AclPermissionType]]:
    """(principal, host, permission) of every principal and host named."""
    return [(principal, host, AclPermissionType.ALLOW) for principal in allow_principals
            for host in allow_hosts or (WILDCARD_HOST,)] + \
        [(principal, host, AclPermissionType.DENY) for principal in deny_principals for host in deny_hosts or (WILDCARD_HOST,)]


def kafka_pattern(pattern: ResourcePattern) -> str:
    """A pattern as kafka-acls prints it (a resource filter too)."""
    return (f"ResourcePattern(resourceType={pattern.resource_type.name}, name={pattern.name}, "
            f"patternType={pattern.pattern_type.name})")


def kafka_entry(entry: AccessControlEntry) -> str:
    return (f"(principal={entry.principal}, host={entry.host}, operation={entry.operation.name}, "
            f"permissionType={entry.permission.name})")


def _binding_json(binding: AclBinding) -> dict:
    pattern, entry = binding.pattern, binding.entry
    return {"resource_type": name_of(pattern.resource_type), "pattern_type": pattern.pattern_type.name, "name": pattern.name,
            "principal": entry.principal, "host": entry.host, "operation": name_of(entry.operation),
            "permission": name_of(entry.permission)}


def _print_bindings(heading: str, separator: str, bindings: list[AclBinding]) -> None:
    """Each pattern's bindings under `heading`, as kafka-acls prints them."""
    for pattern, group in itertools.groupby(bindings, key=lambda binding: binding.pattern):
        entries = "\n".join(f"\t{kafka_entry(binding.entry)}" for binding in group)
        click.echo(f"{heading} `{kafka_pattern(pattern)}`:{separator}{entries}\n")


async def _listed(admin, filters: list[AclBindingFilter]) -> list[AclBinding]:
    found = set()
    for acl_filter in filters:
        found.update(await admin.describe_acls(acl_filter))
    return sorted(found)


def _resource_filters(resources: list[ResourcePattern]) -> list[AclBindingFilter]:
    return [AclBindingFilter(resource.resource_type, resource.name, resource.pattern_type) for resource in resources]


def _raise_first(bindings: list[AclBinding], results) -> None:
    from replog.admin.errors import error_for_code

    for binding, error in zip(bindings, results):
        if error is not None:
            raise error_for_code(error.code, f"{kafka_pattern(binding.pattern)} "
                                             f"{kafka_entry(binding.entry)}: {error.message}")


@acls.command("add", cls=AdminCommand)
@_resource_options
@_entry_options
@admin_options
def acls_add(topics, groups, transactional_ids, cluster, pattern_type, allow_principals, deny_principals, allow_hosts,
             deny_hosts, operations, producer, idempotent, consumer, coord_url, bootstrap, output) -> None:
    """Allow or deny principals operations on resources.

    \b
    Example:
      replog acls add --allow-principal User:alice --operation Write --operation Describe \\
          --topic orders- --resource-pattern-type prefixed --bootstrap-server 127.0.0.1:9092
    """
    kind = _pattern_type(pattern_type, PatternType.LITERAL)
    if kind not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.UsageError(f"a --resource-pattern-type of {kind.name.lower()} is not valid when adding acls")
    resources = _named(topics, groups, transactional_ids, cluster, kind)
    entries = _entries(allow_principals, deny_principals, allow_hosts, deny_hosts)
    if not entries:
        raise click.UsageError("name a principal: --allow-principal or --deny-principal")
    by_type = _operations_by_type(resources, operations, producer, idempotent, consumer)
    patterns = list(dict.fromkeys(resources))
    bindings = [AclBinding(pattern, AccessControlEntry(principal, host, operation, permission))
                for pattern in patterns for principal, host, permission in entries
                for operation in by_type[pattern.resource_type]]

    async def add(admin):
        _raise_first(bindings, await admin.create_acls(bindings))

    through_admin(coord_url, bootstrap, add)
    if output == "json":
        from .render import print_json

        print_json({"created": [_binding_json(binding) for binding in bindings]})
    else:
        _print_bindings("Adding ACLs for resource", " \n ", bindings)


@acls.command("remove", cls=AdminCommand)
@_resource_options
@_entry_options
@click.option("--force", is_flag=True, help="remove without asking")
@admin_options
def acls_remove(topics, groups, transactional_ids, cluster, pattern_type, allow_principals, deny_principals, allow_hosts,
                deny_hosts, operations, producer, idempotent, consumer, force, coord_url, bootstrap, output) -> None:
    """Remove the bindings of resources: those of the principals, hosts and operations named,
    or all of them when no principal is named.

    \b
    Example:
      replog acls remove --allow-principal User:alice --operation Write --topic orders- \\
          --resource-pattern-type prefixed --force --coord zk://127.0.0.1:2181/replog
    """
    resources = _named(topics, groups, transactional_ids, cluster, _pattern_type(pattern_type, PatternType.LITERAL))
    entries = _entries(allow_principals, deny_principals, allow_hosts, deny_hosts)
    by_type = _operations_by_type(resources, operations, producer, idempotent, consumer) if entries else {}
    filters = []
    for resource in resources:
        described = kafka_pattern(resource)
        if entries:
            removed = [AccessControlEntry(principal, host, operation, permission) for principal, host, permission in entries
                       for operation in by_type[resource.resource_type]]
            listing = "\n".join(f"\t{kafka_entry(entry)}" for entry in removed)
            question = f"Are you sure you want to remove ACLs: \n {listing}\n from resource filter `{described}`? (y/n)"
            chosen = [AclBindingFilter(resource.resource_type, resource.name, resource.pattern_type, entry.principal,
                                       entry.host, entry.operation, entry.permission) for entry in removed]
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{described}`? (y/n)"
            chosen = _resource_filters([resource])
        if force or click.confirm(question, show_default=False, prompt_suffix="\n"):
            filters += chosen

    async def remove(admin):
        outcomes = await admin.delete_acls(filters) if filters else []
        failed = next((outcome for outcome in outcomes if not isinstance(outcome, list)), None)
        if failed is not None:
            raise failed
        pairs = [pair for outcome in outcomes for pair in outcome]
        _raise_first([binding for binding, _ in pairs], [error for _, error in pairs])
        return sorted({binding for binding, _ in pairs})

    removed = through_admin(coord_url, bootstrap, remove)
    if output == "json":
        from .render import print_json

        print_json({"deleted": [_binding_json(binding) for binding in removed]})


@acls.command("list", cls=AdminCommand)
@_resource_options
@click.option("--principal", "principals", multiple=True, metavar="TYPE:NAME", help="only this principal's; repeatable")
@admin_options
def acls_list(topics, groups, transactional_ids, cluster, pattern_type, principals, coord_url, bootstrap, output) -> None:
    """List the bindings of the resources named, or every binding. JSON: {"acls": [{"resource_type",
    "pattern_type", "name", "principal", "host", "operation", "permission"}]}.

    \b
    Example:
      replog acls list --topic orders-1 --resource-pattern-type match --bootstrap-server 127.0.0.1:9092
    """
    resources = _resources(topics, groups, transactional_ids, cluster, _pattern_type(pattern_type, PatternType.LITERAL))
    if resources:
        filters = _resource_filters(resources)
    else:
        filters = [AclBindingFilter(pattern_type=_pattern_type(pattern_type, PatternType.ANY))]
    by_principal = {principal: [AclBindingFilter(each.resource_type, each.name, each.pattern_type, principal)
                                for each in filters] for principal in principals} or {None: filters}

    async def listed(admin):
        return {principal: await _listed(admin, chosen) for principal, chosen in by_principal.items()}

    found = through_admin(coord_url, bootstrap, listed)
    if output == "json":
        from .render import print_json

        print_json({"acls": [_binding_json(binding) for binding in sorted({binding for bindings in found.values()
                                                                           for binding in bindings})]})
        return
    for principal, bindings in found.items():
        if principal is not None:
            click.echo(f"ACLs for principal `{principal}`")
        _print_bindings("Current ACLs for resource", "\n", bindings)
