"""`replog reassign generate|execute|verify|cancel`, as kafka-reassign-partitions does them,
with its JSON plan files: parses, calls reassign_actions.py through the store or a broker,
prints."""

from __future__ import annotations

import json
import logging

import click

from . import arguments
from .common import AdminCommand, admin_options, parsed, through_admin


@click.group()
def reassign() -> None:
    """Move partitions' replicas between brokers, with plan files in the JSON formats of
    kafka-reassign-partitions: generate proposes a plan, execute starts it and prints the plan
    that rolls it back, verify follows it, cancel ends it. Each partition's leader carries its
    move out, so a move goes on after the command exits and through broker restarts.

    Every subcommand takes --coord URL (acts on the coordination store itself, and works while
    brokers are down) or --bootstrap-server HOST:PORT (Kafka admin requests to a broker; the
    only door to the embedded store), also read from REPLOG_COORD and REPLOG_BOOTSTRAP_SERVER.
    """
    # As for `topics`: the command's own output says what happened.
    logging.getLogger("replog.state_change").setLevel(logging.WARNING)


def _plan_file(parser: str):
    """A click callback reading a plan file with replog.admin's `parser`; a file that is not a
    plan is a usage error."""

    def read(_ctx, _param, file):
        from replog import admin

        try:
            return getattr(admin, parser)(file.read())
        except admin.AdminError as error:
            raise click.BadParameter(f"{file.name}: {error}") from None

    return read


reassignment_file_option = click.option(
    "--reassignment-json-file", "plan", type=click.File("r"), required=True, metavar="FILE",
    callback=_plan_file("parse_reassignment"), help="the plan: kafka-reassign-partitions' JSON, as generate proposes")


def _plan_json(assignment) -> dict:
    from replog.admin import format_reassignment

    return json.loads(format_reassignment(assignment))


def _partition_keys(keys) -> list[dict]:
    return [{"topic": topic, "partition": partition} for topic, partition in keys]


def _partition_names(keys) -> str:
    return ",".join(f"{topic}-{partition}" for topic, partition in keys)


def _print_then_refuse(output: str, document: dict, lines: list[str], outcome) -> None:
    """What a request did (the JSON document, or the lines), then the first of the partitions it
    refused, if any, as the command's error: the others went ahead, so both are said."""
    from .render import print_json

    if output == "json":
        print_json(document)
    else:
        for line in lines:
            click.echo(line)
    refused = outcome.first_error()
    if refused is not None:
        raise refused


@reassign.command("generate", cls=AdminCommand)
@click.option("--topics-to-move-json-file", "topics_to_move", type=click.File("r"), required=True, metavar="FILE",
              callback=_plan_file("parse_topics_to_move"),
              help='the topics: {"version":1,"topics":[{"topic":"clicks"}]}')
@click.option("--broker-list", "broker_ids", required=True, metavar="0,1,2", callback=parsed(lambda text: arguments.broker_ids([text])),
              help="the registered brokers to place the replicas on")
@admin_options
def reassign_generate(topics_to_move: list[str], broker_ids: list[int], coord_url: str | None, bootstrap: str | None,
                      output: str) -> None:
    """Propose an assignment of the topics' partitions over the brokers given: balanced within
    one replica and one preferred leader per broker, racks kept distinct where the brokers'
    racks allow, moving as few replicas as that takes. Prints the assignment now (keep it: it
    rolls the moves back) and the proposal (save it for execute). Nothing moves yet.

    \b
    Example:
      replog reassign generate --topics-to-move-json-file topics.json \\
          --broker-list 1,2,3 --bootstrap-server 127.0.0.1:9092
    where topics.json holds {"version":1,"topics":[{"topic":"clicks"}]}
    """
    from replog.admin import format_reassignment

    from .reassign_actions import generate
    from .render import print_json

    current, plan = through_admin(coord_url, bootstrap, lambda admin: generate(admin, topics_to_move, broker_ids))
    if output == "json":
        print_json({"current": _plan_json(current), "proposed": _plan_json(plan.assignment),
                    "replicas_moved": plan.replicas_moved, "bytes_moved": plan.bytes_moved, "lower_bound": plan.lower_bound})
        return
    click.echo(f"Current partition replica assignment\n{format_reassignment(current)}\n")
    click.echo(f"Proposed partition reassignment configuration\n{format_reassignment(plan.assignment)}\n")
    click.echo(f"The proposal moves {plan.replicas_moved} replicas, {plan.bytes_moved} bytes "
               f"(balance alone needs {plan.lower_bound} replicas).")


@reassign.command("execute", cls=AdminCommand)
@reassignment_file_option
@click.option("--throttle", type=click.IntRange(min=1), metavar="BYTES/S",
              help="each moving partition's leader sends the replicas it adds at most this (with --coord)")
@admin_options
def reassign_execute(plan: dict, throttle: int | None, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Start moving each partition of the plan to its replicas (those already there are left
    alone). Prints the assignment before the moves first: save it, execute it to roll back. A
    partition being moved already is refused (verify follows it, cancel ends it). --throttle
    through --coord goes into the moves; through --bootstrap-server it is set as the brokers'
    leader.replication.throttled.rate (every move's, until verify removes it).

    \b
    Example:
      replog reassign execute --reassignment-json-file plan.json \\
          --throttle 50000000 --coord zk://127.0.0.1:2181/replog
    """
    from replog.admin import format_reassignment

    from .reassign_actions import execute

    started = through_admin(coord_url, bootstrap, lambda admin: execute(admin, plan, throttle_bytes_per_s=throttle))
    lines = [f"Current partition replica assignment\n\n{format_reassignment(started.rollback)}\n\n"
             "Save this to use as the --reassignment-json-file option during rollback"]
    if started.started:
        lines.append(f"Successfully started partition reassignments for {_partition_names(started.started)}")
    if started.unchanged:
        lines.append(f"Already on their target replicas: {_partition_names(started.unchanged)}")
    _print_then_refuse(output, {"rollback": _plan_json(started.rollback), "started": _partition_keys(started.started),
                                "unchanged": _partition_keys(started.unchanged)}, lines, started)


@reassign.command("verify", cls=AdminCommand)
@reassignment_file_option
@click.option("--wait", is_flag=True, help="show a progress bar until no partition of the plan is in progress")
@admin_options
def reassign_verify(plan: dict, wait: bool, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Show each partition of the plan: done, in progress (replicas being added, each in sync
    or catching up to the leader's high watermark HW, and replicas being removed) or not on
    its target with no move in flight. Once nothing moves in the cluster, removes the brokers'
    throttle rates (leader.replication.throttled.rate), as an execute --throttle through
    --bootstrap-server or Kafka's tool set them. Status 1 if a partition is not on its target.

    \b
    Example:
      replog reassign verify --reassignment-json-file plan.json --wait \\
          --coord zk://127.0.0.1:2181/replog
    """
    from .reassign_actions import (
        not_on_target_error,
        remove_throttle_when_settled,
        verified_json,
        verify,
        wait_until_settled,
    )
    from .render import print_json, print_reassignment_progress, reassignment_progress_bar

    async def follow(admin):
        if not wait:
            progress = await verify(admin, plan)
        else:
            with reassignment_progress_bar() as update:
                progress = await wait_until_settled(admin, plan, update)
        return progress, await remove_throttle_when_settled(admin, progress)

    progress, throttle_removed = through_admin(coord_url, bootstrap, follow)
    if output == "json":
        print_json(verified_json(progress) | {"throttle_removed": throttle_removed})
    else:
        print_reassignment_progress(progress)
        if throttle_removed:
            click.echo("Throttle removed: no partition is moving.")
    stuck = not_on_target_error(progress)
    if stuck is not None:
        raise stuck


@reassign.command("cancel", cls=AdminCommand)
@reassignment_file_option
@admin_options
def reassign_cancel(plan: dict, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Cancel the moves in flight of the plan's partitions: each goes back to the replicas it
    had when its move began, which kept every record; replicas the move added are deleted.

    \b
    Example:
      replog reassign cancel --reassignment-json-file plan.json \\
          --bootstrap-server 127.0.0.1:9092
    """
    from .reassign_actions import cancel

    cancelled = through_admin(coord_url, bootstrap, lambda admin: cancel(admin, plan))
    lines = []
    if cancelled.cancelled:
        lines.append(f"Successfully cancelled partition reassignments for {_partition_names(cancelled.cancelled)}")
    if cancelled.idle:
        lines.append(f"No reassignment in flight for {_partition_names(cancelled.idle)}")
    _print_then_refuse(output, {"cancelled": _partition_keys(cancelled.cancelled), "idle": _partition_keys(cancelled.idle)},
                       lines, cancelled)
