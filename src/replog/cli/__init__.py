"""The `replog` command: one module per command group (coord, broker, tools, topics, reassign,
cluster, groups, users, acls, quotas, transactions). A command parses its options, calls into the package and prints the outcome;
the broker's runtime is replog.runtime, the admin commands' client side is admin_client.py and
its neighbours here."""

from __future__ import annotations

import logging

import click

from replog import __version__

from . import acls, broker, cluster, coord, groups, quotas, reassign, tools, topics, transactions, users


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replog")
def main() -> None:
    """replog: a replicated, partitioned commit log that speaks the Kafka protocol."""
    # Here, not at the top: replog.obs brings prometheus_client, which `replog --help` need not load.
    from replog.obs.logs import TEXT_FORMAT

    logging.basicConfig(format=TEXT_FORMAT, level=logging.WARNING)
    # kazoo logs every failed reconnect attempt; the command reports the outcome in one line.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    # Kafka's state-change log: every start-replica and close-replica, requested, received and
    # completed, is worth an operator's eyes.
    logging.getLogger("replog.state_change").setLevel(logging.INFO)
    # The audit trail: every ACL change, every request refused for want of a permission.
    logging.getLogger("replog.audit").setLevel(logging.INFO)


for command in (coord.coord, broker.broker, *tools.COMMANDS, topics.topics, reassign.reassign, cluster.cluster,
                groups.groups, users.users, acls.acls, quotas.quotas, transactions.transactions):
    main.add_command(command)
