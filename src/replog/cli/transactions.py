"""`replog transactions list|describe|describe-producers|abort`, as kafka-transactions.sh does
them: the transaction requests of transaction_requests.py, sent to the brokers."""

from __future__ import annotations

import dataclasses

import click

from .common import AdminCommand, admin_options, print_outcome, through_admin

# ListTransactions' states (Kafka's TransactionState names).
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")


@click.group()
def transactions() -> None:
    """List, describe and abort transactions, as kafka-transactions.sh does.

    A transaction's state lives with its coordinator, a partition's open transactions with the
    partition's leader: --bootstrap-server asks one broker for the others, and --coord finds the
    running brokers by their registrations in the store.
    """


def _transactions(coord_url: str | None, bootstrap: str | None, action):
    """Run `action(transactions)` with the Admin's transaction requests."""
    async def run(admin):
        return await action(await admin.transactions())

    return through_admin(coord_url, bootstrap, run)


@transactions.command("list", cls=AdminCommand)
@click.option("--state", "states", multiple=True, type=click.Choice(STATES), help="only in this state; repeatable")
@click.option("--producer-id", "producer_ids", multiple=True, type=click.IntRange(min=0), help="only of this producer; repeatable")
@click.option("--duration-ms", type=click.IntRange(min=0), help="only those open at least this long")
@admin_options
def transactions_list(states: tuple[str, ...], producer_ids: tuple[int, ...], duration_ms: int | None,
                      coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the transactions every running broker coordinates (JSON: {"transactions": [
    {"transactional_id", "coordinator", "producer_id", "state"}]}).

    \b
    Example:
      replog transactions list --state Ongoing --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_json, print_transaction_listings

    listed = _transactions(coord_url, bootstrap, lambda found: found.list(
        states, producer_ids, -1 if duration_ms is None else duration_ms))
    if output == "json":
        print_json({"transactions": [{"transactional_id": each.transactional_id, "coordinator": each.coordinator,
                                      "producer_id": each.producer_id, "state": each.state} for each in listed]})
    else:
        print_transaction_listings(listed)


@transactions.command("describe", cls=AdminCommand)
@click.option("--transactional-id", required=True, metavar="ID")
@admin_options
def transactions_describe(transactional_id: str, coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """Show a transactional id's state as its coordinator holds it: producer id and epoch,
    timeout, when the open transaction started and its partitions.

    \b
    Example:
      replog transactions describe --transactional-id payments-1 --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_json, print_transaction_description

    coordinator, described = _transactions(coord_url, bootstrap, lambda found: found.describe(transactional_id))
    if output == "json":
        print_json({"transactional_id": described.transactional_id, "coordinator": coordinator, "state": described.state,
                    "producer_id": described.producer_id, "producer_epoch": described.producer_epoch,
                    "timeout_ms": described.timeout_ms, "start_time_ms": described.start_time_ms,
                    "partitions": [{"topic": topic, "partition": partition} for topic, partition in described.partitions]})
    else:
        print_transaction_description(coordinator, described)


@transactions.command("describe-producers", cls=AdminCommand)
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=click.IntRange(min=0))
@admin_options
def transactions_describe_producers(topic: str, partition: int, coord_url: str | None, bootstrap: str | None,
                                    output: str) -> None:
    """Show a partition's active producers, as its leader tracks them, with the first offset of
    each one's open transaction: what `abort --start-offset` takes.

    \b
    Example:
      replog transactions describe-producers --topic payments --partition 0 --bootstrap-server 127.0.0.1:9092
    """
    from .render import print_json, print_producers

    leader, producers = _transactions(coord_url, bootstrap, lambda found: found.describe_producers(topic, partition))
    if output == "json":
        print_json({"topic": topic, "partition": partition, "leader": leader,
                    "producers": [producer._asdict() for producer in producers]})
    else:
        print_producers(leader, producers)


@transactions.command("abort", cls=AdminCommand)
@click.option("--topic", required=True)
@click.option("--partition", required=True, type=click.IntRange(min=0))
@click.option("--start-offset", type=click.IntRange(min=0), metavar="OFFSET",
              help="the first offset of the open transaction (describe-producers shows it)")
@click.option("--producer-id", type=click.IntRange(min=0), help="instead of --start-offset: the transaction's producer")
@click.option("--producer-epoch", type=click.IntRange(min=0), help="with --producer-id")
@click.option("--coordinator-epoch", type=click.IntRange(min=0), help="with --producer-id")
@admin_options
def transactions_abort(topic: str, partition: int, start_offset: int | None, producer_id: int | None,
                       producer_epoch: int | None, coordinator_epoch: int | None, coord_url: str | None,
                       bootstrap: str | None, output: str) -> None:
    """End a hanging transaction in one partition: its leader writes an abort marker, so that the
    partition's last stable offset moves past it. Only for a transaction its coordinator no
    longer ends (a hanging one): the coordinator of a live one goes on as if nothing happened.
    Give --start-offset, or --producer-id with --producer-epoch and --coordinator-epoch.

    \b
    Example:
      replog transactions abort --topic payments --partition 0 --start-offset 1234 \\
          --bootstrap-server 127.0.0.1:9092
    """
    from .transaction_requests import AbortSpec

    by_producer = (producer_id, producer_epoch, coordinator_epoch)
    if (start_offset is None) == all(value is None for value in by_producer) or \
            (start_offset is None and any(value is None for value in by_producer)):
        raise click.UsageError("give --start-offset, or all of --producer-id, --producer-epoch, --coordinator-epoch")

    async def abort(found):
        spec = AbortSpec(*by_producer) if start_offset is None else await found.abort_spec(topic, partition, start_offset)
        return spec, await found.abort(topic, partition, spec)

    spec, leader = _transactions(coord_url, bootstrap, abort)
    print_outcome(output, {"topic": topic, "partition": partition, "leader": leader, **dataclasses.asdict(spec)},
                  f"Aborted the transaction of producer {spec.producer_id} (epoch {spec.producer_epoch}) in "
                  f"{topic}-{partition}: broker {leader} wrote the marker.")
