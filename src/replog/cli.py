"""The `replog` command. Thin: parses arguments, calls into the package, prints results."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import sys
import time
import uuid

import click

from replog import __version__, tools
from replog.config import SETTINGS, ConfigError, load_broker_config
from replog.coord_backends import BadStoreUrl, Store, StoreError, open_store
from replog.storage.data_dir_lock import DataDirectoryInUse, DataDirectoryUnusable

USAGE_ERROR_STATUS = 2
FAILURE_STATUS = 1


def fail(message: str, status: int) -> None:
    """One line on stderr, then exit: the form every operator-facing error takes."""
    click.echo(f"replog: {message}", err=True)
    sys.exit(status)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="replog")
def main() -> None:
    """replog: a replicated, partitioned commit log that speaks the Kafka protocol."""
    from replog.obs.logs import TEXT_FORMAT

    logging.basicConfig(format=TEXT_FORMAT, level=logging.WARNING)
    # kazoo logs every failed reconnect attempt; the command reports the outcome in one line.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    # Kafka's state-change log: every start-replica and close-replica, requested, received and
    # completed, is worth an operator's eyes.
    logging.getLogger("replog.state_change").setLevel(logging.INFO)


@main.group()
def coord() -> None:
    """Inspect the coordination store (embedded, ZooKeeper or etcd)."""


@coord.command("check")
@click.option(
    "--coord",
    "coord_url",
    default=SETTINGS["coord.url"].default,
    show_default=True,
    help="memory://, memory:///path/to/file, zk://host:port[,host:port...][/chroot] or etcd://host:port[/prefix]",
)
@click.option(
    "--timeout-ms", type=click.IntRange(min=1000), default=5000, show_default=True, help="give up connecting after this long"
)
def coord_check(coord_url: str, timeout_ms: int) -> None:
    """Connect, round-trip a node (create, get, set, delete), and report latency."""
    try:
        store = open_store(coord_url, session_timeout_ms=timeout_ms)
    except BadStoreUrl as error:
        fail(str(error), USAGE_ERROR_STATUS)
    try:
        report = asyncio.run(_round_trip(store))
    except StoreError as error:
        fail(f"{coord_url}: {error}", FAILURE_STATUS)
    click.echo(f"backend: {store.backend}")
    click.echo(f"url: {coord_url}")
    click.echo(f"server: {report['server'] or 'unknown'}")
    steps = ", ".join(f"{name} {report[name]:.2f} ms" for name in ("create", "get", "set", "delete"))
    click.echo(f"round trip: {steps} (total {report['total']:.2f} ms)")


async def _round_trip(store: Store) -> dict:
    await store.start()
    try:
        path = f"/replog-coord-check-{uuid.uuid4().hex[:12]}"
        payload = b"replog coord check"
        timings: dict = {"server": await store.server_version()}
        started = time.perf_counter()
        for name, step in (
            ("create", lambda: store.create(path, payload, ephemeral=True)),
            ("get", lambda: store.get(path)),
            ("set", lambda: store.set(path, payload[::-1])),
            ("delete", lambda: store.delete(path)),
        ):
            step_started = time.perf_counter()
            result = await step()
            timings[name] = (time.perf_counter() - step_started) * 1000
            if name == "get" and result[0] != payload:
                raise StoreError(f"read back {result[0]!r} from {path}, wrote {payload!r}")
        timings["total"] = (time.perf_counter() - started) * 1000
        return timings
    finally:
        await store.close()


@main.group()
def broker() -> None:
    """Run a broker."""


# Named flags, by parameter, and the setting each one stands for; they win over --set and the file.
BROKER_FLAGS = {
    "broker_id": ("--broker-id", "broker.id"),
    "listen": ("--listen", "listeners"),
    "advertised": ("--advertised", "advertised.listeners"),
    "metrics_listen": ("--metrics-listen", "metrics.listeners"),
    "rack": ("--rack", "broker.rack"),
    "data_dir": ("--data-dir", "log.dirs"),
    "coord_url": ("--coord", "coord.url"),
}


def _parse_assignments(assignments: tuple[str, ...]) -> dict[str, str]:
    parsed = {}
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or not name.strip():
            fail(f"--set takes key=value, got {assignment!r}", USAGE_ERROR_STATUS)
        parsed[name.strip()] = value
    return parsed


@broker.command("start")
@click.option("--broker-id", type=str, help="this broker's id (broker.id) [default: 0]")
@click.option("--listen", type=str, help="host:port to bind (listeners) [default: 127.0.0.1:9092]")
@click.option("--advertised", type=str, help="host:port clients are told (advertised.listeners) [default: --listen]")
@click.option("--metrics-listen", type=str,
              help='host:port of the Prometheus endpoint (metrics.listeners); "" for none [default: 127.0.0.1:9644]')
@click.option("--rack", type=str, help="rack name, for rack-aware assignment (broker.rack)")
@click.option("--data-dir", type=str, help="where partition logs live (log.dirs) [default: ./replog-data]")
@click.option("--coord", "coord_url", type=str, help="coordination store URL (coord.url) [default: memory://]")
@click.option("--config", "config_file", type=click.Path(dir_okay=False), help="TOML file of settings (Kafka's names)")
@click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help="any broker or topic-default setting; repeatable")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False), default="INFO",
              show_default=True, help="INFO: elections, ISR changes, fencing, completed state changes; DEBUG: every "
                                      "replica's steps")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object a line, each key=value field a key, for log shippers")
def broker_start(config_file: str | None, assignments: tuple[str, ...], log_level: str, log_format: str,
                 **flags: str | None) -> None:
    """Start a broker: with no options, broker 0 on 127.0.0.1:9092, embedded store, ./replog-data."""
    from replog.obs.logs import configure_logging

    logging.getLogger().setLevel(log_level.upper())
    configure_logging(log_format)
    named = {BROKER_FLAGS[flag][1]: (BROKER_FLAGS[flag][0], value) for flag, value in flags.items() if value is not None}
    try:
        config = load_broker_config(config_file, _parse_assignments(assignments), named)
    except (ConfigError, OSError) as error:
        fail(str(error), USAGE_ERROR_STATUS)
    # here, as in _serve: the other commands start without them
    from replog.broker import BrokerIdInUse
    from replog.net.server import CannotListen
    from replog.obs import CannotServeMetrics

    try:
        _run(_serve(config))
    except (DataDirectoryInUse, DataDirectoryUnusable, BrokerIdInUse, CannotListen, CannotServeMetrics) as error:
        fail(str(error), FAILURE_STATUS)
    except StoreError as error:
        fail(f"{config['coord.url']}: {error}", FAILURE_STATUS)
    except OSError as error:  # reading or writing the partition logs: the error names the file
        fail(f"broker {config['broker.id']} cannot start: {error}", FAILURE_STATUS)
    _exit_stopped_cleanly()


def _exit_stopped_cleanly() -> None:
    """Exit once the broker has stopped cleanly (its logs closed and synced, its store session
    ended, its threads joined), without the interpreter's teardown: that frees the broker's
    objects one by one only to hand their memory back to the system, and at 10,000 partitions
    took 3-5 s of a stop of 15-20 s, which a rolling restart waits for on every broker."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(main_coroutine) -> None:
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main_coroutine)


# Allocations (net of frees) between collections of the cycle collector's youngest generation;
# CPython's default is 700. A broker holds a few hundred thousand long-lived objects per thousand
# partitions (tasks, futures, per-partition state), and at the default pace the older
# generations' passes over them took a fifth of a broker's CPU while a topic of 1,000
# partitions was created (bench/scale.py). The older generations keep their default ratios.
GC_YOUNG_GENERATION_THRESHOLD = 50_000


def tune_garbage_collector() -> None:
    _, middle, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_GENERATION_THRESHOLD, middle, oldest)


async def _serve(config) -> None:
    import signal

    from replog.broker import Broker

    tune_garbage_collector()
    node = Broker(config)
    if node.store.start_wait_s:
        click.echo(f"replog: waiting for the coordination store at {config['coord.url']} "
                   f"(at most {node.store.start_wait_s:g} s)", err=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await node.start()
    except BaseException:
        await node.stop()  # release what did start: the store session, open logs
        raise
    metrics = f"on http://{node.metrics_address}/metrics" if node.metrics_address else "off"
    click.echo(
        f"replog broker {node.broker_id} listening on {config['listeners'].host}:{node.server.port}, "
        f"metrics {metrics}, data in {node.data_dir}, coordination {config['coord.url']}",
    )
    stop_asked, broker_failed = asyncio.create_task(stopping.wait()), asyncio.create_task(node.failed.wait())
    await asyncio.wait((stop_asked, broker_failed), return_when=asyncio.FIRST_COMPLETED)
    for waiter in (stop_asked, broker_failed):
        waiter.cancel()
    click.echo(f"replog broker {node.broker_id} {'failed' if node.failed.is_set() else 'shutting down'}")
    await node.stop()
    if node.failed.is_set():
        raise SystemExit(1)


class OneLineUsage(click.Command):
    """A command whose usage errors are one line on stderr with status 2, like every other
    operator-facing error, instead of click's usage block."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            fail(f"{_subcommand(ctx)}: {error.format_message()}", USAGE_ERROR_STATUS)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except tools.BadArguments as error:
            fail(f"{_subcommand(ctx)}: {error}", USAGE_ERROR_STATUS)
        except tools.ToolError as error:
            fail(str(error), FAILURE_STATUS)


def _subcommand(ctx: click.Context) -> str:
    """'perf produce' for `replog perf produce`, however the program itself was invoked."""
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name)
        ctx = ctx.parent
    return " ".join(reversed(names))


def _parse_key_values(_ctx, _param, assignments: tuple[str, ...]) -> list[tuple[str, str]]:
    pairs = []
    for assignment in assignments:
        name, sep, value = assignment.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"takes key=value, got {assignment!r}")
        pairs.append((name, value))
    return pairs


bootstrap_option = click.option(
    "--bootstrap-server", "bootstrap", default="127.0.0.1:9092", show_default=True, help="host:port[,host:port...] of brokers"
)
topic_option = click.option("--topic", required=True, help="topic to use")
acks_option = click.option("--acks", type=click.Choice(tools.ACKS_CHOICES), default="all", show_default=True)
compression_option = click.option(
    "--compression", type=click.Choice(tools.COMPRESSION_CHOICES), default="none", show_default=True
)
partition_option = click.option("--partition", type=click.IntRange(min=0), help="only this partition")


@main.command("produce", cls=OneLineUsage)
@bootstrap_option
@topic_option
@click.option("--file", "input_file", type=click.File("rb"), default="-", help="read lines from this file [default: stdin]")
@click.option("--key-separator", help="split each line at the first SEP into key and value (Kafka's parse.key)")
@acks_option
@compression_option
@partition_option
@click.option("--header", "headers", multiple=True, callback=_parse_key_values, metavar="KEY=VALUE", help="add to every record; repeatable")
@click.option("--producer-property", "producer_properties", multiple=True, callback=_parse_key_values, metavar="KEY=VALUE",
              help="librdkafka producer setting, e.g. message.max.bytes=2000000 for larger records; repeatable")
def produce(input_file, key_separator: str | None, **options) -> None:
    """Send one record per input line, like kafka-console-producer."""
    separator = key_separator.encode() if key_separator is not None else None
    tools.produce_lines(input_file, key_separator=separator, **options)


@main.command("consume", cls=OneLineUsage)
@bootstrap_option
@topic_option
@click.option("--from-beginning", is_flag=True, help="start at each partition's first record")
@click.option("--offset", help="start at offset N (needs --partition), 'earliest' or 'latest' [default: latest]")
@click.option("--timestamp", "timestamp_ms", type=click.IntRange(min=0), help="start at the first record at or after this time (ms since the epoch)")
@partition_option
@click.option("--max-messages", type=click.IntRange(min=1), help="exit after this many records")
@click.option("--print-key", is_flag=True, help="print KEY<SEP>VALUE")
@click.option("--key-separator", default=tools.DEFAULT_KEY_SEPARATOR, help="between key and value with --print-key [default: tab]")
@click.option("--timeout-ms", "idle_timeout_ms", type=click.IntRange(min=1), help="exit when no record arrives for this long")
def consume(from_beginning: bool, offset: str | None, timestamp_ms: int | None, key_separator: str, **options) -> None:
    """Print records, one line each, like kafka-console-consumer (no group: nothing is committed)."""
    start = tools.start_position(from_beginning, offset, timestamp_ms, options["partition"])
    output = click.get_binary_stream("stdout")
    written = tools.consume(output.write, start=start, key_separator=key_separator.encode(), **options)
    output.flush()
    click.echo(f"Processed a total of {written} messages", err=True)


@main.group()
def perf() -> None:
    """Throughput and latency tests, like kafka-producer-perf-test, kafka-consumer-perf-test and
    Kafka's EndToEndLatency."""


num_records_option = click.option("--num-records", type=click.IntRange(min=1), required=True)
record_size_option = click.option(
    "--record-size", "record_size_bytes", type=click.IntRange(min=0), default=1024, show_default=True, help="bytes per record"
)
idempotence_option = click.option(
    "--idempotence/--no-idempotence", default=None,
    help="librdkafka enable.idempotence; it keeps one Produce in flight per partition, so replicated "
         "acks=all runs are bound by its round trip [default: on with --acks all]",
)
reporting_interval_option = click.option(
    "--reporting-interval-ms", type=click.IntRange(min=1), default=5000, show_default=True, help="print a progress line this often"
)


def produce_run_options(command):
    """The options of a tools.ProduceRun, which perf produce and perf end-to-end share."""
    for option in (reporting_interval_option, compression_option, idempotence_option, acks_option, record_size_option,
                   num_records_option, topic_option, bootstrap_option):
        command = option(command)
    return command


def _perf_report(report: tools.LatencyReport) -> None:
    click.echo(report.summary())
    if report.failed:
        fail(f"{report.failed} records not delivered: {report.first_error}", FAILURE_STATUS)


@perf.command("produce", cls=OneLineUsage)
@produce_run_options
@click.option("--throughput", "throughput_records_per_s", type=float, default=-1, show_default=True, help="target records/s; -1: as fast as possible")
@click.option("--batch-size", "batch_size_bytes", type=click.IntRange(min=1), default=1_000_000, show_default=True, help="librdkafka batch.size, bytes")
@click.option("--linger-ms", type=click.FloatRange(min=0), default=5, show_default=True)
def perf_produce(batch_size_bytes: int, linger_ms: float, **options) -> None:
    """Send records as fast as possible (or at --throughput) and report rate and latency."""
    run = tools.ProduceRun(**options)
    _perf_report(tools.perf_produce(run, batch_size_bytes=batch_size_bytes, linger_ms=linger_ms, progress=click.echo))


@perf.command("consume", cls=OneLineUsage)
@bootstrap_option
@topic_option
@num_records_option
@click.option("--timeout-ms", "idle_timeout_ms", type=click.IntRange(min=1), default=10_000, show_default=True, help="stop when no record arrives for this long")
@click.option("--fetch-size", "fetch_size_bytes", type=click.IntRange(min=1), default=1_048_576, show_default=True, help="bytes per partition per fetch (max.partition.fetch.bytes)")
@reporting_interval_option
def perf_consume(**options) -> None:
    """Read a topic from the beginning and report the rate."""
    click.echo(tools.perf_consume(progress=click.echo, **options).summary())


@perf.command("end-to-end", cls=OneLineUsage)
@produce_run_options
@click.option("--throughput", "throughput_records_per_s", type=click.FloatRange(min=0, min_open=True), default=1000,
              show_default=True, help="records/s sent")
def perf_end_to_end(**options) -> None:
    """Send records at --throughput to a topic of their own while a consumer reads them; report
    each record's latency from produce to consume. One untimed record per partition goes first,
    so that connections and ids are set up before the clock starts."""
    _perf_report(tools.perf_end_to_end(tools.ProduceRun(**options), progress=click.echo))


@main.group()
def topics() -> None:
    """Create, delete, list, describe and alter topics, through the store or a broker.

    Every subcommand takes --coord URL (acts on the coordination store itself, and works while
    brokers are down) or --bootstrap-server HOST:PORT (Kafka admin requests to a broker; the
    only door to the embedded store), also read from REPLOG_COORD and REPLOG_BOOTSTRAP_SERVER.
    """
    # Each state-change request an admin command queues would be a log line; the command's own
    # output says what happened.
    logging.getLogger("replog.state_change").setLevel(logging.WARNING)


class AdminCommand(OneLineUsage):
    """An admin command: a refusal or failure is one line and status 1; a door not chosen as
    it must be is a usage error (status 2)."""

    def invoke(self, ctx: click.Context):
        from replog.admin import AdminError
        from replog.admin.doors import DoorChoiceError

        try:
            return super().invoke(ctx)
        except (DoorChoiceError, BadStoreUrl) as error:
            fail(f"{_subcommand(ctx)}: {error}", USAGE_ERROR_STATUS)
        except click.UsageError as error:
            fail(f"{_subcommand(ctx)}: {error.format_message()}", USAGE_ERROR_STATUS)
        except AdminError as error:
            fail(f"{error}{ADMIN_HINTS.get(type(error).__name__, '')}", FAILURE_STATUS)
        except StoreError as error:
            fail(f"{ctx.params['coord_url']}: {error}", FAILURE_STATUS)


# What to do next, after the errors where that is not in the message already.
ADMIN_HINTS = {
    "UnknownTopicOrPartition": "; `replog topics list` shows the topics",
    "TopicAlreadyExists": "; --if-not-exists accepts an existing topic",
    "Unreachable": "; is it running, and is that its address?",
}


def admin_options(command):
    """The door (--coord or --bootstrap-server) and --output, for every admin command."""
    options = (
        click.option("--coord", "coord_url", envvar="REPLOG_COORD", metavar="URL",
                     help="act on this coordination store (zk://, etcd://, memory:///file) [env: REPLOG_COORD]"),
        click.option("--bootstrap-server", "bootstrap", envvar="REPLOG_BOOTSTRAP_SERVER", metavar="HOST:PORT",
                     help="ask this broker (Kafka admin requests) [env: REPLOG_BOOTSTRAP_SERVER]"),
        click.option("--output", type=click.Choice(["table", "json"]), default="table", show_default=True,
                     help="json: one document, stable keys (README, `replog topics`)"),
    )
    for option in reversed(options):
        command = option(command)
    return command


def _through_door(coord_url: str | None, bootstrap: str | None, action):
    """Run `action(door)` through the door chosen, and return its result."""
    from replog.admin.doors import open_door

    async def run():
        async with open_door(coord_url, bootstrap) as door:
            return await action(door)

    return asyncio.run(run())


def _key_values(_ctx, _param, assignments: tuple[str, ...]) -> dict[str, str]:
    from replog.admin.arguments import key_values

    try:
        return key_values(assignments)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _replica_assignment(_ctx, _param, text: str | None) -> dict[int, list[int]] | None:
    from replog.admin.arguments import replica_assignment

    try:
        return None if text is None else replica_assignment(text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


def _print_outcome(output: str, document: dict, line: str) -> None:
    from replog.admin.render import print_json

    if output == "json":
        print_json(document)
    else:
        click.echo(line)


@topics.command("create", cls=AdminCommand)
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(min=1), help="partition count [default: the brokers' num.partitions]")
@click.option("--replication-factor", type=click.IntRange(min=1),
              help="replicas per partition [default: the brokers' default.replication.factor]")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", callback=_key_values,
              help="a topic setting (Kafka's name); repeatable")
@click.option("--replica-assignment", callback=_replica_assignment, metavar="0:1:2,1:2:0",
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
    from replog.admin.doors import NewTopic

    request = NewTopic(topic, partitions, replication_factor, configs, replica_assignment)
    created = _through_door(coord_url, bootstrap, lambda door: door.create_topic(request, if_not_exists=if_not_exists))
    warning = mixed_separators_warning(topic)
    if created and warning:  # after success, so that a refusal stays one line
        click.echo(f"replog: warning: {warning}", err=True)
    _print_outcome(output, {"topic": topic, "created": created},
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
    deleted = _through_door(coord_url, bootstrap, lambda door: door.delete_topic(topic, if_exists=if_exists))
    _print_outcome(output, {"topic": topic, "deleted": deleted},
                   f"Deleted topic {topic}." if deleted else f"There is no topic {topic}.")


@topics.command("list", cls=AdminCommand)
@admin_options
def topics_list(coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the topics, one name a line (JSON: {"topics": [names]}).

    \b
    Example:
      replog topics list --bootstrap-server 127.0.0.1:9092
    """
    from replog.admin.render import print_json

    names = _through_door(coord_url, bootstrap, lambda door: door.list_topics())
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
    from replog.admin.render import print_json, print_topics
    from replog.admin.topic_status import PartitionFlag

    wanted = {PartitionFlag[name.upper()] for name, given in filters.items() if given}
    described = _through_door(coord_url, bootstrap, lambda door: door.describe_topics(topic_names))
    shown = [status for status in (topic.having_any(wanted) for topic in described) if status is not None]
    if output == "json":
        print_json({"topics": [status.as_json() for status in shown]})
    else:
        print_topics(shown)


@topics.command("alter", cls=AdminCommand)
@click.argument("topic")
@click.option("--partitions", type=click.IntRange(min=1), help="grow to this many partitions (never fewer)")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE", callback=_key_values,
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
    _through_door(coord_url, bootstrap, lambda door: door.alter_topic(topic, partitions=partitions, operations=operations))
    _print_outcome(output, {"topic": topic, "partitions": partitions, "configs_set": configs,
                            "configs_deleted": list(deleted_configs)}, f"Altered topic {topic}.")


@main.group()
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


def _broker_list(_ctx, _param, text: str) -> list[int]:
    from replog.admin.arguments import broker_list

    try:
        return broker_list(text)
    except ValueError as error:
        raise click.BadParameter(str(error)) from None


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
    from replog.admin.render import print_json

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
@click.option("--broker-list", "broker_ids", required=True, metavar="0,1,2", callback=_broker_list,
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
    from replog.admin.reassign_commands import generate
    from replog.admin.render import print_json

    current, plan = _through_door(coord_url, bootstrap, lambda door: generate(door, topics_to_move, broker_ids))
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
    from replog.admin.reassign_commands import execute

    started = _through_door(coord_url, bootstrap, lambda door: execute(door, plan, throttle_bytes_per_s=throttle))
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
    from replog.admin.reassign_commands import (
        not_on_target_error,
        remove_throttle_when_settled,
        verified_json,
        verify,
        wait_until_settled,
    )
    from replog.admin.render import print_json, print_reassignment_progress, reassignment_progress_bar

    async def follow(door):
        if not wait:
            progress = await verify(door, plan)
        else:
            with reassignment_progress_bar() as update:
                progress = await wait_until_settled(door, plan, update)
        return progress, await remove_throttle_when_settled(door, progress)

    progress, throttle_removed = _through_door(coord_url, bootstrap, follow)
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
    from replog.admin.reassign_commands import cancel

    cancelled = _through_door(coord_url, bootstrap, lambda door: cancel(door, plan))
    lines = []
    if cancelled.cancelled:
        lines.append(f"Successfully cancelled partition reassignments for {_partition_names(cancelled.cancelled)}")
    if cancelled.idle:
        lines.append(f"No reassignment in flight for {_partition_names(cancelled.idle)}")
    _print_then_refuse(output, {"cancelled": _partition_keys(cancelled.cancelled), "idle": _partition_keys(cancelled.idle)},
                       lines, cancelled)


@main.group()
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
    to the cluster (it has a state-change queue) but not registered is down. Through
    --bootstrap-server the queues and the moves are not visible ('-').

    \b
    Example:
      replog cluster status --coord zk://127.0.0.1:2181/replog
    """
    from replog.admin.render import print_cluster_status, print_json

    status = _through_door(coord_url, bootstrap, lambda door: door.cluster_status())
    if output == "json":
        print_json(status.as_json())
    else:
        print_cluster_status(status)


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
    from replog.admin.render import print_elections, print_json

    if election is None:
        raise click.UsageError("give --preferred or --unclean")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    kind = ElectionType.PREFERRED if election == "preferred" else ElectionType.UNCLEAN
    results = _through_door(coord_url, bootstrap, lambda door: door.elect_leaders(kind, topic, partition))
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
    from replog.admin.render import follow_json, follow_line, print_json, print_state_change_paths
    from replog.admin.state_change_paths import follow as follow_updates, join, state_change_json

    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")
    if not follow:
        snapshot = _through_door(coord_url, bootstrap, lambda door: door.state_changes({}, topic, partition))
        paths = join(snapshot.events, snapshot.queued)
        if output == "json":
            print_json(state_change_json(paths, snapshot.unreachable))
        else:
            print_state_change_paths(paths, snapshot.unreachable)
        return

    async def print_updates(door) -> None:
        async def look(cursors):
            return await door.state_changes(cursors, topic, partition, topic_must_exist=False)

        async for update in follow_updates(look):
            click.echo(json.dumps(follow_json(update)) if output == "json" else follow_line(update))

    try:
        _through_door(coord_url, bootstrap, print_updates)
    except KeyboardInterrupt:
        pass  # how --follow ends


def _broker_ids(_ctx, _param, values: tuple[str, ...]) -> list[int]:
    ids = []
    for value in values:
        for part in filter(None, value.split(",")):
            if not part.strip().isdigit():
                raise click.BadParameter(f"broker ids are non-negative integers, got {part!r}")
            ids.append(int(part))
    if not ids:
        raise click.BadParameter("give at least one broker id")
    return sorted(set(ids))


def _membership_options(command):
    options = (
        click.argument("broker_ids", metavar="IDS...", nargs=-1, required=True, callback=_broker_ids),
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
    from replog.admin.render import moves_progress, print_json, print_plan

    if execute and dry_run:
        raise click.UsageError("--yes and --dry-run exclude each other")
    plan_args = {"remove": broker_ids} if remove else {"add": broker_ids}

    async def change(door):
        plan = await door.plan_membership(**plan_args)
        if output != "json":
            print_plan(plan)
        if not execute:
            return plan, [], None
        await door.execute_plan(plan)
        if output == "json" or not plan.moves:
            await door.wait_for_moves(plan, lambda done, total: None)
        else:
            with moves_progress(len(plan.moves)) as advance:
                await door.wait_for_moves(plan, advance)
        elections = await door.lead_as_planned(plan)
        return plan, elections, (await door.finish_removal(broker_ids) if remove else None)

    plan, elections, removal = _through_door(coord_url, bootstrap, change)
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


# -- replog groups ---------------------------------------------------------------------------------

@main.group()
def groups() -> None:
    """List, describe, reset and delete consumer groups, as kafka-consumer-groups does.

    Groups and their committed offsets live in the brokers: --bootstrap-server asks one, and
    --coord finds the running brokers by their registrations in the store.
    """


def _consumer_groups(coord_url: str | None, bootstrap: str | None, action):
    """Run `action(groups, door)` with the door's consumer-group requests."""
    return _through_door(coord_url, bootstrap, lambda door: _with_group_admin(door, action))


async def _with_group_admin(door, action):
    return await action(await door.group_admin(), door)


@groups.command("list", cls=AdminCommand)
@admin_options
def groups_list(coord_url: str | None, bootstrap: str | None, output: str) -> None:
    """List the groups with their state (JSON: {"groups": [{"group", "state", "simple"}]}).

    \b
    Example:
      replog groups list --bootstrap-server 127.0.0.1:9092
    """
    from replog.admin.render import print_group_listings, print_json

    listed = _consumer_groups(coord_url, bootstrap, lambda groups, _door: groups.list())
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
    from replog.admin.render import print_group_description, print_json

    described = _consumer_groups(coord_url, bootstrap, lambda groups, _door: groups.describe(group_id))
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
    from replog.admin.groups import ResetSpec, ResetTo, reset_offsets
    from replog.admin.render import print_json, print_offset_resets

    given = [(ResetTo(to), 0)] if to else []
    given += [(kind, value) for kind, value in ((ResetTo.OFFSET, to_offset), (ResetTo.TIMESTAMP, to_timestamp_ms),
                                                (ResetTo.SHIFT, shift_by)) if value is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-timestamp, --shift-by")
    spec = ResetSpec(*given[0])

    async def partitions_of(door, topic: str) -> list[int]:
        [status] = await door.describe_topics([topic])
        return [partition.partition for partition in status.partitions]

    resets = _consumer_groups(coord_url, bootstrap, lambda groups, door: reset_offsets(
        groups, group_id, topic_names or None, spec, dry_run=dry_run, partitions_of=lambda topic: partitions_of(door, topic)))
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
    async def delete(groups, _door) -> None:
        for group_id in group_ids:
            await groups.delete(group_id)

    _consumer_groups(coord_url, bootstrap, delete)
    _print_outcome(output, {"deleted": list(group_ids)}, f"Deleted groups {', '.join(group_ids)}.")
