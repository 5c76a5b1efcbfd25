"""How admin commands show their results: tables drawn by rich, which fit the terminal (80
columns when the output is not a terminal), or one JSON document (`--output json`, formats
documented beside the data: topic_status.py)."""

from __future__ import annotations

import contextlib
import datetime
import json
from collections.abc import Callable, Iterable, Iterator, Sequence

from rich import box, filesize
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from replog.admin.cluster import ClusterStatus, ElectionResult
from replog.admin.planner import Plan
from replog.admin.scram_credentials import UserScramCredentials
from replog.admin.state_change_events import event_json
from replog.net.client import ProducerState, TransactionDescription
from replog.replication.state_changes import FROM_ADMIN

from .group_admin import GroupDescription, GroupListing, OffsetReset
from .reassign_actions import CatchingUp, PartitionProgress, State
from .state_change_reader import (
    Missed,
    QueuedSeen,
    Reachable,
    RequestPath,
    Step,
    UnreachableBroker,
    Update,
    unreachable_json,
)
from .topic_status import TopicStatus
from .transaction_requests import Listed

UNKNOWN = "-"  # a value the Admin asked cannot tell


def console() -> Console:
    # No highlighting: numbers in ids and epochs are data, not syntax.
    return Console(highlight=False)


def print_json(document: object) -> None:
    # Not through rich, which would wrap long lines at the terminal's width.
    print(json.dumps(document, indent=2))


def _ids(replicas: Iterable[int] | None) -> str:
    return UNKNOWN if replicas is None else ",".join(map(str, replicas))


def _value(value: int | None) -> str:
    return UNKNOWN if value is None else str(value)


def print_topics(statuses: Sequence[TopicStatus]) -> None:
    """kafka-topics --describe's content: a line per topic, a table row per partition."""
    out = console()
    for index, status in enumerate(statuses):
        if index:
            out.print()
        configs = ",".join(f"{name}={value}" for name, value in sorted(status.overrides.items())) or "none"
        out.print(f"[bold]{status.name}[/bold]  partitions: {status.partition_count}  "
                  f"replication factor: {status.replication_factor}  configs: {configs}")
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for header in ("PART", "LEADER", "EPOCH", "REPLICAS", "ISR", "ADDING", "REMOVING"):
            table.add_column(header, no_wrap=header in ("PART", "LEADER", "EPOCH"))
        table.add_column("FLAGS", overflow="fold")
        for partition in status.partitions:
            table.add_row(
                str(partition.partition), _value(partition.leader), _value(partition.leader_epoch),
                _ids(partition.replicas), _ids(partition.isr), _ids(partition.adding_replicas),
                _ids(partition.removing_replicas), " ".join(status.flags(partition)),
            )
        out.print(table)


def print_reassignment_progress(progress: Sequence[PartitionProgress]) -> None:
    """`reassign verify`: a row per partition of the plan; each replica being added with how far
    it is behind its leader."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("PARTITION", overflow="fold")
    for header in ("STATUS", "TARGET", "REPLICAS", "REMOVING"):
        table.add_column(header)
    table.add_column("ADDING", overflow="fold")
    for partition in progress:
        table.add_row(
            f"{partition.topic}-{partition.partition}", str(partition.state), _ids(partition.target),
            _ids(partition.replicas), _ids(partition.removing), "\n".join(map(_catching_up, partition.adding)),
        )
    console().print(table)


def _catching_up(replica: CatchingUp) -> str:
    if replica.in_sync:
        return f"{replica.broker}: in sync"
    if replica.bytes_behind is None:
        return f"{replica.broker}: catching up (its broker or the leader does not answer)"
    offsets = "" if replica.offsets_behind is None else f"{replica.offsets_behind} offsets, "
    return f"{replica.broker}: {offsets}{filesize.decimal(replica.bytes_behind)} behind"


@contextlib.contextmanager
def reassignment_progress_bar() -> Iterator[Callable[[Sequence[PartitionProgress]], None]]:
    """A bar of the plan's partitions on their targets, on stderr (stdout keeps the result), and
    only on a terminal: in a log it would be noise; yields the function that moves it."""
    terminal = Console(stderr=True, highlight=False)
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   console=terminal, transient=True, disable=not terminal.is_terminal)
    with bar:
        task = bar.add_task("reassigning", total=None)

        def update(progress: Sequence[PartitionProgress]) -> None:
            adding = [replica for partition in progress for replica in partition.adding]
            in_sync = sum(replica.in_sync for replica in adding)
            behind = sum(replica.bytes_behind or 0 for replica in adding)
            catching_up = f", {in_sync}/{len(adding)} added replicas in sync, {filesize.decimal(behind)} to copy" if adding else ""
            bar.update(task, total=len(progress), completed=sum(partition.state is State.DONE for partition in progress),
                       description=f"partitions on their targets{catching_up}")

        yield update


# -- replog cluster --------------------------------------------------------------------------------

def _text(value: object) -> str:
    return UNKNOWN if value is None else str(value)


def print_cluster_status(status: ClusterStatus) -> None:
    out = console()
    out.print(f"[bold]cluster[/bold] {_text(status.cluster_id)}  partitions: {status.partitions}  "
              f"under-replicated: {status.under_replicated}  offline: {status.offline}  "
              f"reassignments: {_text(status.reassignments)}")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("BROKER", "ADDRESS", "RACK", "ALIVE", "REPLICAS", "LEADERS", "QUEUE"):
        table.add_column(header, no_wrap=True)
    for broker in status.brokers:
        address = f"{broker.host}:{broker.port}" if broker.host is not None else UNKNOWN
        table.add_row(str(broker.broker), address, _text(broker.rack), "yes" if broker.alive else "no",
                      str(broker.replicas), str(broker.leaders), _text(broker.queue_depth))
    out.print(table)


def print_elections(results: Sequence[ElectionResult]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("TOPIC", "PART", "OUTCOME", "LEADER"):
        table.add_column(header, no_wrap=header != "TOPIC", overflow="fold")
    table.add_column("DETAIL", overflow="fold")
    for result in results:
        # The row names the partition already; the detail names it too, to stand alone elsewhere.
        detail = result.detail.removeprefix(f"{result.topic}-{result.partition}: ")
        table.add_row(result.topic, str(result.partition), result.outcome, _text(result.leader), detail)
    console().print(table)


def print_plan(plan: Plan) -> None:
    """The moves, then what they copy: bytes where the sizes are known, else replicas."""
    out = console()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for header in ("TOPIC", "PART", "FROM", "TO", "ADDED", "REMOVED"):
        table.add_column(header, no_wrap=header != "TOPIC", overflow="fold")
    for move in plan.moves:
        table.add_row(move.topic, str(move.partition), _ids(move.old_replicas), _ids(move.new_replicas),
                      _ids(move.added) or UNKNOWN, _ids(move.removed) or UNKNOWN)
    if plan.moves:
        out.print(table)
    copied = f"{filesize.decimal(plan.bytes_moved)} in {plan.replicas_moved} replicas" if plan.bytes_moved else f"{plan.replicas_moved} replicas"
    out.print(f"{len(plan.moves)} partitions change; {copied} to copy "
              f"(balance alone needs at least {plan.lower_bound} replicas moved)")


@contextlib.contextmanager
def moves_progress(total: int) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on stderr; yields the callback that advances it: (done, total)."""
    with Progress(TextColumn("moving partitions"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True, highlight=False), transient=False) as progress:
        task = progress.add_task("moves", total=total)

        def advance(done: int, _total: int) -> None:
            progress.update(task, completed=done)

        yield advance


# -- replog users ----------------------------------------------------------------------------------

def print_users(described: Sequence[UserScramCredentials]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("USER", overflow="fold")
    table.add_column("MECHANISM", no_wrap=True)
    table.add_column("ITERATIONS", justify="right", no_wrap=True)
    for entry in described:
        for mechanism, iterations in entry.credentials:
            table.add_row(Text(entry.user), mechanism, str(iterations))  # Text: a name is not markup
    console().print(table)


# -- replog groups ---------------------------------------------------------------------------------

def print_group_listings(listed: Sequence[GroupListing]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("GROUP", overflow="fold")
    table.add_column("STATE", no_wrap=True)
    for group in listed:
        table.add_row(group.group_id, group.state + (" (simple)" if group.simple else ""))
    console().print(table)


def print_group_description(group: GroupDescription) -> None:
    out = console()
    out.print(f"[bold]{group.group_id}[/bold]  state: {group.state}  assignor: {group.assignor or UNKNOWN}  "
              f"coordinator: {_text(group.coordinator)}  members: {len(group.members)}")
    clients = {member.member_id: f"{member.client_id}@{member.host}" for member in group.members}
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("TOPIC", overflow="fold")
    for header in ("PART", "COMMITTED", "LOG-END", "LAG"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("CONSUMER", overflow="fold")
    for lag in group.partitions:
        table.add_row(lag.topic, str(lag.partition), _text(lag.committed), _text(lag.log_end_offset), _text(lag.lag),
                      clients.get(lag.member_id, UNKNOWN) if lag.member_id else UNKNOWN)
    out.print(table)


def print_offset_resets(resets: Sequence[OffsetReset]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("TOPIC", overflow="fold")
    for header in ("PART", "BEFORE", "AFTER"):
        table.add_column(header, justify="right", no_wrap=True)
    for reset in resets:
        table.add_row(reset.topic, str(reset.partition), _text(reset.before), str(reset.after))
    console().print(table)


def _clock(at_ms: int, precise: bool = False) -> str:
    text = datetime.datetime.fromtimestamp(at_ms / 1000).strftime("%H:%M:%S.%f" if precise else "%H:%M:%S")
    return text[:-3] if precise else text


def _sender(broker: int) -> str:
    return "admin" if broker == FROM_ADMIN else str(broker)


def _sequence(name: str) -> str:
    return str(int(name)) if name.isdigit() else name or UNKNOWN


def _when(step: Step | None) -> str:
    if step is None:
        return UNKNOWN
    return "unknown" if step.at_ms is None else _clock(step.at_ms)


def _unreachable_line(down: UnreachableBroker) -> str:
    return f"broker {down.broker} unreachable ({down.why}): its events are not shown"


def print_state_change_paths(paths: Sequence[RequestPath], unreachable: Sequence[UnreachableBroker]) -> None:
    """One row per request: when it was requested (by FROM; "queued": it waits in TO's queue),
    when TO received it and what came of it; the reasons of those ignored or failed below the
    table. The request's type is shortened (start, close) so that a row fits 80 columns."""
    out = console()
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1, 0, 0))
    for header in ("REQ", "PARTITION", "EPOCH", "FROM", "TO", "SEQ", "REQUESTED", "RECEIVED", "OUTCOME"):
        table.add_column(header, no_wrap=header != "PARTITION", overflow="fold")
    reasons = []
    for path in paths:
        table.add_row(path.request_type.removesuffix("-replica"), f"{path.topic}-{path.partition}", str(path.epoch),
                      _sender(path.from_broker), str(path.to_broker), _sequence(path.queue_sequence),
                      "queued" if path.queued else _when(path.requested), _when(path.received),
                      UNKNOWN if path.outcome is None else path.outcome.value)
        if path.outcome_step is not None and path.outcome_step.reason:
            reasons.append(f"{path.request_type} {path.topic}-{path.partition} to {path.to_broker} seq "
                           f"{_sequence(path.queue_sequence)}: {path.state}: {path.outcome_step.reason}")
    out.print(table if paths else "No state change recorded.")
    for line in reasons:
        out.print(line, soft_wrap=True)
    for down in unreachable:
        out.print(_unreachable_line(down), soft_wrap=True)


def follow_line(update: Update) -> str:
    """One line of `replog cluster state-changes --follow`."""
    match update:
        case UnreachableBroker():
            return _unreachable_line(update)
        case Reachable(broker=broker):
            return f"broker {broker} reachable again"
        case Missed(broker=broker, count=count):
            return f"broker {broker} dropped {count} events before they were read (state.change.events.max)"
        case QueuedSeen(to_broker=to_broker, queue_sequence=name, request=request):
            return (f"queued     {request.kind} {request.topic}-{request.partition} epoch={request.leader_epoch} "
                    f"from={_sender(request.from_broker)} to={to_broker} seq={_sequence(name)}")
    reason = f" reason={update.reason}" if update.reason else ""
    return (f"{_clock(update.timestamp_ms, precise=True)} broker {update.recorded_by} {update.kind} {update.request_type}"
            f" {update.topic}-{update.partition} epoch={update.epoch} from={_sender(update.from_broker)}"
            f" to={update.to_broker} seq={_sequence(update.queue_sequence)}{reason}")


def follow_json(update: Update) -> dict:
    """One JSON line of `replog cluster state-changes --follow --output json`: {"update": kind, ...}."""
    match update:
        case UnreachableBroker():
            return {"update": "unreachable"} | unreachable_json(update)
        case Reachable(broker=broker):
            return {"update": "reachable", "broker": broker}
        case Missed(broker=broker, count=count):
            return {"update": "missed", "broker": broker, "count": count}
        case QueuedSeen(to_broker=to_broker, queue_sequence=name, request=request):
            return {"update": "queued", "request_type": request.kind, "topic": request.topic, "partition": request.partition,
                    "from_broker": request.from_broker, "to_broker": to_broker, "epoch": request.leader_epoch,
                    "queue_sequence": name}
    return {"update": "event"} | event_json(update)


# -- replog transactions ---------------------------------------------------------------------------

def print_transaction_listings(listed: Sequence[Listed]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("TRANSACTIONAL-ID", overflow="fold")
    for header in ("COORDINATOR", "PRODUCER-ID"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("STATE", no_wrap=True)
    for found in listed:
        table.add_row(found.transactional_id, str(found.coordinator), str(found.producer_id), found.state)
    console().print(table)


def print_transaction_description(coordinator: int, described: TransactionDescription) -> None:
    started = "-" if described.start_time_ms < 0 else _clock(described.start_time_ms)
    partitions = ", ".join(f"{topic}-{partition}" for topic, partition in described.partitions) or "-"
    console().print(f"[bold]{described.transactional_id}[/bold]  coordinator: {coordinator}  state: {described.state}  "
                    f"producer: {described.producer_id} epoch {described.producer_epoch}  "
                    f"timeout: {described.timeout_ms} ms  started: {started}  partitions: {partitions}")


def print_producers(leader: int, producers: Sequence[ProducerState]) -> None:
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title=f"leader: broker {leader}")
    for header in ("PRODUCER-ID", "EPOCH", "COORDINATOR-EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "TXN-START-OFFSET"):
        table.add_column(header, justify="right", no_wrap=True)
    for producer in producers:
        table.add_row(str(producer.producer_id), str(producer.producer_epoch), str(producer.coordinator_epoch),
                      str(producer.last_sequence), str(producer.last_timestamp_ms),
                      "-" if producer.current_txn_start_offset < 0 else str(producer.current_txn_start_offset))
    console().print(table)
