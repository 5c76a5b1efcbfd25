"""`replog groups list|describe|reset-offsets|delete`, as kafka-consumer-groups does them:
the group requests of group_admin.py, sent to the brokers."""

from __future__ import annotations

import click

from .common import AdminCommand, admin_options, print_outcome, through_admin


@click.group()
def groups() -> None:
    """List, describe, reset and delete consumer groups, as kafka-consumer-groups does.

    Groups and their committed offsets live in the brokers: --bootstrap-server asks one, and
    --coord finds the running brokers by their registrations in the store.
    """


def _consumer_groups(coord_url: str | None, bootstrap: str | None, action):
    """Run `action(groups, admin)` with the Admin's consumer-group requests."""
    return through_admin(coord_url, bootstrap, lambda admin: _with_group_admin(admin, action))


async def _with_group_admin(admin, action):
    return await action(await admin.group_admin(), admin)


@groups.command("list", cls=AdminCommand)
@admin_options
def groups_list(coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the groups with their state (JSON: {"groups": [{"group", "state", "simple"}]}).

    \b
    Example:
      replog groups list --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_group_listings, print_json

    listed = _consumer_groups(coord_url, bootstrap, lambda groups, _admin: groups.list())
    if output == "json":
        print_json({"groups": [{"group": group.group_id, "state": group.state, "simple": group.simple} for group in listed]})
    else:
        print_group_listings(listed)


@groups.command("describe", cls=AdminCommand)
@click.argument("group_id", metavar="GROUP")
@admin_options
def groups_describe(group_id: str, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Show a group's state and members and, per partition it committed or is assigned: the
    committed offset, the log end offset, the lag and the member consuming it.

    \b
    Example:
      replog groups describe clicks-app --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_group_description, print_json

    described = _consumer_groups(coord_url, bootstrap, lambda groups, _admin: groups.describe(group_id))
    if output == "json":
        print_json(described.as_json())
    else:
        print_group_description(described)


@groups.command("reset-offsets", cls=AdminCommand)
@click.argument("group_id", metavar="GROUP")
@click.option("--topic", "topic_names", multiple=True, help="reset this topic's partitions; repeatable [default: every topic the group committed]")
@click.option("--to-earliest", "to", flag_value="earliest", help="each partition's first offset")
@click.option("--to-latest", "to", flag_value="latest", help="each partition's log end: skip everything")
@click.option("--to-offset", type=int, metavar="N", help="offset N (clamped to each partition's log)")
@click.option("--to-timestamp", "to_timestamp_ms", type=click.IntRange(min=0), metavar="MS",
              help="the first offset at or after this time (ms since the epoch), else the log end")
@click.option("--shift-by", type=int, metavar="N", help="the committed offset plus N (negative: back)")
@click.option("--dry-run", is_flag=True, help="show the new offsets, change nothing")
@admin_options
def groups_reset_offsets(group_id: str, topic_names: tuple[str, ...], to: str | None, to_offset: int | None,
                         to_timestamp_ms: int | None, shift_by: int | None, dry_run: bool, coord_url: str | None,
                         bootstrap: str | None, output: str) -> None:
    """Set a stopped group's committed offsets (refused while it has members, who would commit
    over them). Give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp,
    --shift-by.

    \b
    Example:
      replog groups reset-offsets clicks-app --topic clicks --to-earliest \\
          --bootstrap-server 127.0.0.1:9092
    """
    from .group_admin import ResetSpec, ResetTo, reset_offsets
    from .render import print_json, print_offset_resets

    given = [(ResetTo(to), 0)] if to else []
    given += [(kind, value) for kind, value in ((ResetTo.OFFSET, to_offset), (ResetTo.TIMESTAMP, to_timestamp_ms),
                                                (ResetTo.SHIFT, shift_by)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp, --shift-by")
    spec = ResetSpec(*given[0])

    async def partitions_of(admin, topic: str) -> list[int]:
        [status] = await admin.describe_topics([topic])
        return [partition.partition for partition in status.partitions]

    resets = _consumer_groups(coord_url, bootstrap, lambda groups, admin: reset_offsets(
        groups, group_id, topic_names or None, spec, dry_run=dry_run, partitions_of=lambda topic: partitions_of(admin, topic)))
    if output == "json":
        print_json({"group": group_id, "executed": not dry_run, "partitions": [
            {"topic": reset.topic, "partition": reset.partition, "before": reset.before, "after": reset.after}
            for reset in resets]})
    else:
        print_offset_resets(resets)
        click.echo("Dry run: nothing changed." if dry_run else f"Reset the offsets of group {group_id}.")


@groups.command("delete", cls=AdminCommand)
@click.argument("group_ids", metavar="GROUP...", nargs=-1, required=True)
@admin_options
def groups_delete(group_ids: tuple[str, ...], coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Delete groups and their committed offsets; a group with members is refused.

    \b
    Example:
      replog groups delete clicks-app --bootstrap-server 127.0.0.1:9092
    """
    async def delete(groups, _admin) -> None:
        for group_id in group_ids:
            await groups.delete(group_id)

    _consumer_groups(coord_url, bootstrap, delete)
    print_outcome(output, {"deleted": list(group_ids)}, f"Deleted groups {', '.join(group_ids)}.")
