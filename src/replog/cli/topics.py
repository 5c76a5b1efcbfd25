"""`replog topics create|delete|list|describe|alter`, as kafka-topics does them, through the
store or a broker (admin_client.py)."""

from __future__ import annotations

import logging

import click

from . import arguments
from .common import AdminCommand, admin_options, parsed, print_outcome, through_admin


@click.group()
def topics() -> None:
    """Create, delete, list, describe and alter topics, through the store or a broker.

    Every subcommand takes --coord URL (acts on the coordination store itself, and works while
    brokers are down) or --bootstrap-server HOST:PORT (Kafka admin requests to a broker; the
    only door to the embedded store), also read from REPLOG_COORD and REPLOG_BOOTSTRAP_SERVER.
    """
    # Each state-change request an admin command queues would be a log line; the command's own
    # output says what happened.
    logging.getLogger("replog.state_change").setLevel(logging.WARNING)


@topics.command("create", cls=AdminCommand)
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(min=1), help="partition count [default: the brokers' num.partitions]")
@click.option("--replication-factor", type=click.IntRange(min=1),
              help="replicas per partition [default: the brokers' default.replication.factor]")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", callback=parsed(arguments.key_values),
              help="a topic setting (Kafka's name); repeatable")
@click.option("--replica-assignment", callback=parsed(arguments.replica_assignment), metavar="0:1:2,1:2:0",
              help="brokers of each partition, preferred leader first, instead of a count and factor")
@click.option("--if-not-exists", is_flag=True, help="succeed if the topic exists already")
@admin_options
def topics_create(topic: str, partitions: int | None, replication_factor: int | None, configs: dict[str, str],
                  replica_assignment: dict[int, list[int]] | None, if_not_exists: bool, coord_url: str | None,
                  bootstrap: str | None, output: str) -> None:
    """Create a topic; its replicas are spread over the brokers' racks.

    \b
    Example:
      replog topics create clicks --partitions 6 --replication-factor 3 \\
          --config min.insync.replicas=2 --bootstrap-server 127.0.0.1:9092
    """
    from replog.admin import mixed_separators_warning

    from .admin_interface import NewTopic

    request = NewTopic(topic, partitions, replication_factor, configs, replica_assignment)
    created = through_admin(coord_url, bootstrap, lambda admin: admin.create_topic(request, if_not_exists=if_not_exists))
    warning = mixed_separators_warning(topic)
    if created and warning:  # after success, so that a refusal stays one line
        click.echo(f"replog: warning: {warning}", err=True)
    print_outcome(output, {"topic": topic, "created": created},
                   f"Created topic {topic}." if created else f"Topic {topic} exists already.")


@topics.command("delete", cls=AdminCommand)
@click.argument("topic")
@click.option("--if-exists", is_flag=True, help="succeed if there is no such topic")
@admin_options
def topics_delete(topic: str, if_exists: bool, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Delete a topic and its records on every broker (a broker that is down deletes its
    replicas when it starts).

    \b
    Example:
      replog topics delete clicks --coord zk://127.0.0.1:2181/replog
    """
    deleted = through_admin(coord_url, bootstrap, lambda admin: admin.delete_topic(topic, if_exists=if_exists))
    print_outcome(output, {"topic": topic, "deleted": deleted},
                   f"Deleted topic {topic}." if deleted else f"There is no topic {topic}.")


@topics.command("list", cls=AdminCommand)
@admin_options
def topics_list(coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the topics, one name a line (JSON: {"topics": [names]}).

    \b
    Example:
      replog topics list --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_json

    names = through_admin(coord_url, bootstrap, lambda admin: admin.list_topics())
    if output == "json":
        print_json({"topics": names})
    else:
        for name in names:
            click.echo(name)


@topics.command("describe", cls=AdminCommand)
@click.argument("topic_names", metavar="[TOPIC]...", nargs=-1)
@click.option("--under-replicated-partitions", "--under-replicated", "under_replicated", is_flag=True,
              help="only partitions with fewer in-sync replicas than replicas")
@click.option("--under-min-isr-partitions", "--under-min-isr", "under_min_isr", is_flag=True,
              help="only partitions with fewer in-sync replicas than min.insync.replicas")
@click.option("--unavailable-partitions", "--offline", "offline", is_flag=True,
              help="only partitions without a leader, or whose leader is not registered")
@click.option("--unpreferred-leader-partitions", "--unpreferred-leader", "unpreferred_leader", is_flag=True,
              help="only partitions not led by their preferred (first) replica")
@admin_options
def topics_describe(topic_names: tuple[str, ...], coord_url: str | None, bootstrap: str | None, output: str,
                    **filters: bool) -> None:
    """Show each partition's leader, leader epoch, replicas, in-sync replicas, replicas being
    added or removed by a reassignment, and flags; and the topic's config overrides. All topics
    when none is named. Several filters show the partitions having any of their flags. A value
    the broker door cannot see (epoch, reassignment) shows as '-'.

    \b
    Example:
      replog topics describe --under-replicated-partitions \\
          --coord zk://127.0.0.1:2181/replog
    """
    from .render import print_json, print_topics
    from .topic_status import PartitionFlag

    wanted = {PartitionFlag[name.upper()] for name, given in filters.items() if given}
    described = through_admin(coord_url, bootstrap, lambda admin: admin.describe_topics(topic_names))
    shown = [status for status in (topic.having_any(wanted) for topic in described) if status is not None]
    if output == "json":
        print_json({"topics": [status.as_json() for status in shown]})
    else:
        print_topics(shown)


@topics.command("alter", cls=AdminCommand)
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(min=1), help="grow to this many partitions (never fewer)")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", callback=parsed(arguments.key_values),
              help="set a topic setting; repeatable")
@click.option("--delete-config", "deleted_configs", multiple=True, metavar="KEY",
              help="remove a topic setting (the brokers' value applies again); repeatable")
@admin_options
def topics_alter(topic: str, partitions: int | None, configs: dict[str, str], deleted_configs: tuple[str, ...],
                 coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Add partitions, or set and delete topic settings (validated, all or nothing). A partition
    count never shrinks: keyed records would move to other partitions.

    \b
    Example:
      replog topics alter clicks --partitions 12 \\
          --config retention.ms=86400000 --delete-config min.insync.replicas \\
          --bootstrap-server 127.0.0.1:9092
    """
    from replog.admin import AlterOp, ConfigOperation

    if partitions is None and not configs and not deleted_configs:
        raise click.UsageError("nothing to alter: give --partitions, --config or --delete-config")
    operations = [ConfigOperation(name, AlterOp.SET, value) for name, value in configs.items()]
    operations += [ConfigOperation(name, AlterOp.DELETE) for name in deleted_configs]
    through_admin(coord_url, bootstrap, lambda admin: admin.alter_topic(topic, partitions=partitions, operations=operations))
    print_outcome(output, {"topic": topic, "partitions": partitions, "configs_set": configs,
                            "configs_deleted": list(deleted_configs)}, f"Altered topic {topic}.")
