"""`replog produce`, `replog consume` and `replog perf produce|consume|end-to-end`: the
console and perf tools of replog.tools, which talk to brokers as any Kafka client does."""

from __future__ import annotations

import click

from replog import tools

from . import arguments
from .common import COMMAND_CONFIG_HELP, FAILURE_STATUS, OneLineUsage, client_properties, fail, parsed


def _librdkafka_security(ctx: click.Context, param, path: str | None) -> dict[str, object]:
    return client_properties(ctx, param, path).librdkafka()


def broker_options(command):
    """Where the brokers are and how to connect to them: the tools' `bootstrap` and `security`."""
    command = click.option("--command-config", "security", metavar="FILE", callback=_librdkafka_security,
                           help=COMMAND_CONFIG_HELP)(command)
    return click.option("--bootstrap-server", "bootstrap", default="127.0.0.1:9092", show_default=True,
                        help="host:port[,host:port...] of brokers")(command)


topic_option = click.option("--topic", required=True, help="topic to use")
acks_option = click.option("--acks", type=click.Choice(tools.ACKS_CHOICES), default="all", show_default=True)
compression_option = click.option(
    "--compression", type=click.Choice(tools.COMPRESSION_CHOICES), default="none", show_default=True
)
partition_option = click.option("--partition", type=click.IntRange(min=0), help="only this partition")


@click.command("produce", cls=OneLineUsage)
@broker_options
@topic_option
@click.option("--file", "input_file", type=click.File("rb"), default="-", help="read lines from this file [default: stdin]")
@click.option("--key-separator", help="split each line at the first SEP into key and value (Kafka's parse.key)")
@acks_option
@compression_option
@partition_option
@click.option("--header", "headers", multiple=True, callback=parsed(arguments.key_value_pairs), metavar="KEY=VALUE",
              help="add to every record; repeatable")
@click.option("--producer-property", "producer_properties", multiple=True, metavar="KEY=VALUE",
              callback=parsed(lambda texts: list(arguments.key_values(texts).items())),
              help="librdkafka producer setting, e.g. message.max.bytes=2000000 for larger records; repeatable")
def produce(input_file, key_separator: str | None, **options) -> None:
    """Send one record per input line, like kafka-console-producer."""
    separator = key_separator.encode() if key_separator is not None else None
    tools.produce_lines(input_file, key_separator=separator, **options)


@click.command("consume", cls=OneLineUsage)
@broker_options
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


@click.group()
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
                   num_records_option, topic_option, broker_options):
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
@broker_options
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


COMMANDS = (produce, consume, perf)
