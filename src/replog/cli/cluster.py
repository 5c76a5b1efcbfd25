"""`replog cluster status|elect-leaders|state-changes|add-brokers|remove-brokers`: the
brokers, the leaders and the cluster's health, through the store or a broker."""

from __future__ import annotations

import contextlib
import json
import logging

import click

from . import arguments
from .common import FAILURE_STATUS, AdminCommand, admin_options, fail, parsed, through_admin


@click.group()
def cluster() -> None:
    """Brokers, leaders and the cluster's health: status, elect-leaders, add-brokers,
    remove-brokers, state-changes. Takes --coord URL or --bootstrap-server HOST:PORT like
    `replog topics`.
    """
    logging.getLogger("replog.state_change").setLevel(logging.WARNING)
    # An unclean election is logged for the brokers' operators; here the command's own output
    # reports it.
    logging.getLogger("replog.admin.cluster").setLevel(logging.ERROR)


@cluster.command("status", cls=AdminCommand)
@admin_options
def cluster_status(coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Show each broker (address, rack, alive, replicas, leaders, state-change queue depth),
    the moves in flight and the under-replicated and offline partitions. A broker that is known
    to the cluster (it has a state-change queue) but not registered is down. A broker serving
    PLAINTEXT beyond loopback is warned of. Through --bootstrap-server the queues, the moves
    and the listeners' bound addresses are not visible ('-').

    \b
    Example:
      replog cluster status --coord zk://127.0.0.1:2181/replog
    """
    from .render import print_cluster_status, print_json

    from replog.listener_settings import PLAINTEXT_BEYOND_LOOPBACK_ADVICE

    status = through_admin(coord_url, bootstrap, lambda admin: admin.cluster_status())
    if output == "json":
        print_json(status.as_json())
    else:
        print_cluster_status(status)
    for broker in status.brokers:
        if broker.plaintext_beyond_loopback:
            click.echo(f"replog: warning: broker {broker.broker} serves PLAINTEXT beyond loopback on "
                       f"{','.join(broker.plaintext_beyond_loopback)}: {PLAINTEXT_BEYOND_LOOPBACK_ADVICE}", err=True)


@cluster.command("elect-leaders", cls=AdminCommand)
@click.option("--preferred", "election", flag_value="preferred",
              help="move leadership to each partition's first assigned replica, if it is alive and in sync")
@click.option("--unclean", "election", flag_value="unclean",
              help="where no in-sync replica is alive, let a live out-of-sync replica lead: records may be lost")
@click.option("--topic", help="only this topic's partitions [default: every partition]")
@click.option("--partition", type=click.IntRange(min=0), help="only this partition (needs --topic)")
@admin_options
def cluster_elect_leaders(election: str | None, topic: str | None, partition: int | None, coord_url: str | None,
                          bootstrap: str | None, output: str) -> None:
    """Elect leaders and report per partition: elected, not needed (already on its preferred
    replica, or led), or not available and why. Exit status 1 if any partition was not
    elected for another reason than not needing it.

    \b
    Example:
      replog cluster elect-leaders --preferred --topic clicks \\
          --bootstrap-server 127.0.0.1:9092
    """
    from replog.admin import ElectionType

    from .render import print_elections, print_json

    if election is None:
        raise click.UsageError("give --preferred or --unclean")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    kind = ElectionType.PREFERRED if election == "preferred" else ElectionType.UNCLEAN
    results = through_admin(coord_url, bootstrap, lambda admin: admin.elect_leaders(kind, topic, partition))
    if output == "json":
        print_json({"election": election, "partitions": [result.as_json() for result in results]})
    else:
        print_elections(results)
    for result in results:
        if result.unclean_after_isr is not None:
            click.echo(f"replog: warning: {result.detail}", err=True)
    failed = [result for result in results if result.outcome not in ("elected", "not needed")]
    if failed:
        fail(f"cluster elect-leaders: {len(failed)} of {len(results)} partitions not elected; the first: "
             f"{failed[0].detail}", FAILURE_STATUS)


@cluster.command("state-changes", cls=AdminCommand)
@click.option("--topic", help="only this topic's requests [default: every topic]")
@click.option("--partition", type=click.IntRange(min=0), help="only this partition (needs --topic)")
@click.option("--follow", is_flag=True, help="print each new step as it happens, every second, until Ctrl-C")
@admin_options
def cluster_state_changes(topic: str | None, partition: int | None, follow: bool, coord_url: str | None,
                          bootstrap: str | None, output: str) -> None:
    """Show each state-change request (start-replica, close-replica) on its way: requested
    (by a leader, or an admin command), received and completed, ignored or failed by the broker
    it was sent to. Read from every running broker's recent events (state.change.events.max of
    them each) and from the requests still queued in the store, which their broker has not
    received: a broker that is down is named in one line, and what was sent to it shows as
    requested. With --follow, one line per new step (one JSON object a line with --output json).

    \b
    Examples:
      replog cluster state-changes --topic clicks --partition 0 \\
          --coord zk://127.0.0.1:2181/replog
      replog cluster state-changes --follow --bootstrap-server 127.0.0.1:9092
    """
    from .render import follow_json, follow_line, print_json, print_state_change_paths
    from .state_change_reader import follow as follow_updates, join, state_change_json

    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    if not follow:
        snapshot = through_admin(coord_url, bootstrap, lambda admin: admin.state_changes({}, topic, partition))
        paths = join(snapshot.events, snapshot.queued)
        if output == "json":
            print_json(state_change_json(paths, snapshot.unreachable))
        else:
            print_state_change_paths(paths, snapshot.unreachable)
        return

    async def print_updates(admin) -> None:
        async def look(cursors):
            return await admin.state_changes(cursors, topic, partition, topic_must_exist=False)

        async for update in follow_updates(look):
            click.echo(json.dumps(follow_json(update)) if output == "json" else follow_line(update))

    try:
        through_admin(coord_url, bootstrap, print_updates)
    except KeyboardInterrupt:
        pass  # how --follow ends


def _membership_options(command):
    options = (
        click.argument("broker_ids", metavar="IDS...", nargs=-1, required=True,
                       callback=parsed(lambda texts: sorted(arguments.broker_ids(texts)))),
        click.option("--yes", "execute", is_flag=True, help="execute the plan and wait for its moves"),
        click.option("--dry-run", is_flag=True, help="show the plan only"),
    )
    for option in reversed(options):
        command = option(command)
    return admin_options(command)


def _change_membership(command: str, broker_ids: list[int], execute: bool, dry_run: bool, coord_url: str | None,
                       bootstrap: str | None, output: str, *, remove: bool) -> None:
    """Plan; show; on --yes start the moves, wait for them with a progress bar and, removing,
    finish the removal."""
    from replog.admin.cluster import plan_as_json

    from .membership import change_membership
    from .render import moves_progress, print_json, print_plan

    if execute and dry_run:
        raise click.UsageError("--yes and --dry-run exclude each other")
    changes = {"remove": broker_ids} if remove else {"add": broker_ids}

    def progress(plan):
        if output == "json" or not plan.moves:
            return contextlib.nullcontext(lambda done, total: None)
        return moves_progress(len(plan.moves))

    def show_plan(plan) -> None:
        if output != "json":
            print_plan(plan)

    change = through_admin(coord_url, bootstrap, lambda admin: change_membership(
        admin, **changes, execute=execute, show_plan=show_plan, progress=progress))
    plan, elections, removal = change.plan, change.elections, change.removal
    ids = ",".join(map(str, broker_ids))
    if output == "json":
        document = {"brokers": broker_ids, "plan": plan_as_json(plan), "executed": execute,
                    "elections": [result.as_json() for result in elections]}
        if removal is not None:
            finished = removal.deletions_finished
            document |= {"queues_deleted": list(removal.queues_deleted),
                         "deletions_finished": None if finished is None else list(finished)}
        print_json(document)
        return
    if not execute:
        if not dry_run:
            click.echo(f"Nothing changed. To execute: replog cluster {command} {ids} --yes")
        return
    led = sum(result.error is None or result.outcome == "not needed" for result in elections)
    click.echo(f"All {len(plan.moves)} moves completed; {led} of them led by their preferred replica.")
    for result in elections:
        if result.outcome not in ("elected", "not needed"):
            click.echo(f"replog: warning: {result.detail}", err=True)
    if removal is not None:
        if removal.deletions_finished is None:
            click.echo("Any topic deletion that waited for the removed brokers completed with them (the broker does not "
                       "say which).")
        for topic in removal.deletions_finished or ():
            click.echo(f"Topic {topic}: its deletion, which waited for the removed brokers, completed.")
        click.echo(f"Removed brokers {ids}: their state-change paths are deleted; they may now be stopped.")


@cluster.command("add-brokers", cls=AdminCommand)
@_membership_options
def cluster_add_brokers(broker_ids: list[int], execute: bool, dry_run: bool, coord_url: str | None,
                        bootstrap: str | None, output: str) -> None:
    """Spread replicas and preferred leaders onto new brokers (started already, for their
    racks): every broker ends within one replica and one preferred leader of the mean, racks
    kept distinct where the layout allows, moving as few replicas as possible. Shows the plan;
    --yes executes it and waits for the moves. IDS: comma- or space-separated.

    \b
    Example:
      replog cluster add-brokers 4 --yes --coord zk://127.0.0.1:2181/replog
    """
    _change_membership("add-brokers", broker_ids, execute, dry_run, coord_url, bootstrap, output, remove=False)


@cluster.command("remove-brokers", cls=AdminCommand)
@_membership_options
def cluster_remove_brokers(broker_ids: list[int], execute: bool, dry_run: bool, coord_url: str | None,
                           bootstrap: str | None, output: str) -> None:
    """Move every replica off the brokers (racks kept distinct where the rest allows), wait for
    the moves, then delete the brokers' state-change paths: topic deletions waiting for them
    complete, and the brokers may be stopped. Refused when the other brokers cannot hold a
    partition's replication factor. Shows the plan; --yes executes it.

    \b
    Example:
      replog cluster remove-brokers 2 --dry-run --coord zk://127.0.0.1:2181/replog
    """
    _change_membership("remove-brokers", broker_ids, execute, dry_run, coord_url, bootstrap, output, remove=True)
