"""A broker process under an address-space and a file limit, the topics the cases need, and the
run that throws the cases at it, checking after each one.

After every case: the process is alive, it answers ApiVersions on a connection of its own, and
it logged nothing that marks an internal failure (an ERROR or CRITICAL line, a traceback, an
allocation failure). Every `witness_every_s` and at the end, the well-behaved clients must have
every acknowledged record. A case that kills or wedges the broker is a failure, and the broker
is started again on the same port and data (so that the well-behaved clients reconnect) for the
cases after it, up to `deaths_max` times.

One broker serves every case: each case cleans up after itself (its connections closed, its
batches on a partition of its own), and a broker a case hurt is what the checks are for.

With `tls` (a CA and the broker's certificate, trustme's) the broker has a listener of
`tls_listener` too, SSL or SASL_SSL, and the cases and the checks after each go to it, every
byte inside TLS (and, on SASL_SSL, never authenticated); the well-behaved clients and the
topics' set-up stay on the PLAINTEXT listener, which the cases leave alone.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import resource
import ssl
import time
from collections.abc import Iterable, Mapping

from confluent_kafka.admin import AdminClient, NewTopic

from replog.config import SETTINGS

from tests.support.broker_process import BrokerProcess

from .batch_cases import COMPACTED_SEGMENT_MS
from .cases import Case, Limits, Target
from .seeds import Names
from .witness import PartitionProbe, Witness

ADDRESS_SPACE_BYTES = 2 << 30
FILES_MAX = 1024
WITNESS_TOPIC = "hostile-witness"
BATCH_TOPIC = "hostile-batches"
COMPACTED_TOPIC = "hostile-compacted"
BATCH_PARTITIONS = 64
COMPACTED_PARTITIONS = 64
# Short, so that the cleaner reaches what the bombs left within a case's patience: it cleans
# only below the recovery point, which the background flush moves. Every log flushed twice a
# second costs the broker CPU, so a benchmark's arena leaves them at their defaults.
CLEANER_PASS_SETTINGS = {"log.cleaner.backoff.ms": "500", "log.flush.offset.checkpoint.interval.ms": "500"}
COMPACTED_CONFIG = {"cleanup.policy": "compact", "segment.ms": str(COMPACTED_SEGMENT_MS), "min.cleanable.dirty.ratio": "0.01"}
# An internal failure's own line, not its consequences ("closing connection ... internal error"),
# which the broker logs after it and the output pump may deliver after the case's check.
_TROUBLE = re.compile(r"Traceback|\bERROR\b|\bCRITICAL\b|memory allocation of|MemoryError|Fatal Python error"
                      r"|Segmentation fault|core dumped")
ANSWER_AFTER_CASE_S = 10.0
WEDGED_AFTER_S = 30.0  # a broker that answers nothing for this long after a case is killed and started again
ADMIN_TIMEOUT_S = 30.0


@dataclasses.dataclass(frozen=True)
class TlsFiles:
    """PEM files: the CA the cases trust, and the broker's key and certificate chain it signed."""

    ca_file: pathlib.Path
    keystore: pathlib.Path


@dataclasses.dataclass
class Failure:
    kind: str
    case: str
    problems: list[str]
    reproducer: bytes | None
    log: list[str]

    def describe(self) -> str:
        lines = [f"[{self.kind}] {self.case}", *(f"    {problem}" for problem in self.problems)]
        if self.reproducer is not None:
            shown = self.reproducer if len(self.reproducer) <= 256 else self.reproducer[:256]
            more = "" if len(self.reproducer) <= 256 else f" ... ({len(self.reproducer)} bytes)"
            lines.append(f"    bytes: {shown.hex()}{more}")
        lines += [f"    | {line.rstrip()}" for line in self.excerpt()]
        return "\n".join(lines)

    def excerpt(self, lines_max: int = 8) -> list[str]:
        """The broker's lines from its first sign of trouble, or its last lines."""
        first = next((index for index, line in enumerate(self.log) if _TROUBLE.search(line)), None)
        return self.log[first:first + lines_max] if first is not None else self.log[-lines_max:]

    def signature(self) -> str:
        """What tells two failures apart: the kind of case, what went wrong, and what the broker
        said last, with numbers and names taken out."""
        said = next(iter(self.excerpt(1)), "")
        text = f"{self.kind}|{self.problems[0] if self.problems else ''}|{said.split(': ', 1)[-1]}"
        return re.sub(r"0x[0-9a-f]+|\d+", "N", text)


@dataclasses.dataclass
class RunReport:
    cases_run: int = 0
    deaths: int = 0
    failures: list[Failure] = dataclasses.field(default_factory=list)
    stopped_early: str = ""
    seconds: float = 0.0

    def distinct(self) -> list[tuple[Failure, list[Failure]]]:
        """One failure per signature, the one with the shortest reproducer, and the others like it."""
        groups: dict[str, list[Failure]] = {}
        for failure in self.failures:
            groups.setdefault(failure.signature(), []).append(failure)
        distinct = []
        for group in groups.values():
            shortest = min(group, key=lambda failure: len(failure.reproducer or b"") or 1 << 60)
            distinct.append((shortest, [failure for failure in group if failure is not shortest]))
        return distinct

    def summary(self) -> str:
        lines = [f"{self.cases_run} cases in {self.seconds:.0f} s, {len(self.failures)} failed, "
                 f"the broker died or hung {self.deaths} times{'; ' + self.stopped_early if self.stopped_early else ''}"]
        for failure, others in self.distinct():
            lines.append(f"--- {1 + len(others)} failure(s) like:\n{failure.describe()}")
            if others:
                lines.append(f"    also: {'; '.join(other.case for other in others[:20])}"
                             f"{f' and {len(others) - 20} more' if len(others) > 20 else ''}")
        return "\n".join(lines)


class Arena:
    def __init__(self, data_dir: pathlib.Path, *, limits: Limits | None = Limits(),
                 address_space_bytes: int = ADDRESS_SPACE_BYTES, files_max: int = FILES_MAX,
                 broker_settings: Mapping[str, str] = CLEANER_PASS_SETTINGS, tls: TlsFiles | None = None,
                 tls_listener: str = "SSL"):
        self.data_dir = data_dir
        self.tls = tls
        self.tls_listener = tls_listener
        self.broker_settings = dict(broker_settings)
        self.limits = limits
        self.limits_refused = ""  # why the broker runs without the limits, if it does
        self.rlimits = {resource.RLIMIT_AS: address_space_bytes, resource.RLIMIT_NOFILE: files_max}
        self.broker: BrokerProcess | None = None
        self.target: Target | None = None
        self._seen_lines = 0

    def __enter__(self) -> Arena:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> Target:
        unknown = [name for name in (self.limits.settings() if self.limits else {}) if name not in SETTINGS]
        if unknown:
            self.limits_refused = f"the broker does not know the settings {', '.join(unknown)}"
            self.limits = None
        self.broker = self._start_broker()
        self._create_topics()
        attacked = self.broker.ports[self.tls_listener] if self.tls else self.broker.port
        self.target = Target(host="127.0.0.1", port=attacked, names=Names(),
                             batch_topic=BATCH_TOPIC, compacted_topic=COMPACTED_TOPIC,
                             batch_partitions=BATCH_PARTITIONS, compacted_partitions=COMPACTED_PARTITIONS,
                             probe=PartitionProbe(self.broker.bootstrap), limits=self.limits,
                             metrics_address=self.broker.metrics_address,
                             tls=ssl.create_default_context(cafile=str(self.tls.ca_file)) if self.tls else None)
        self._seen_lines = len(self.broker.output)
        return self.target

    def stop(self) -> None:
        if self.target is not None and self.target.probe is not None:
            self.target.probe.close()
        if self.broker is not None:
            self.broker.stop()

    def _start_broker(self) -> BrokerProcess:
        settings = self.broker_settings | (self.limits.settings() if self.limits else {})
        if self.tls:
            settings["ssl.keystore.location"] = str(self.tls.keystore)
        broker = BrokerProcess(self.data_dir, rlimits=self.rlimits, listeners=("PLAINTEXT", self.tls_listener) if self.tls else ("PLAINTEXT",),
                               extra_args=tuple(arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")))
        broker.start()
        return broker

    def _create_topics(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.broker.bootstrap})
        topics = [NewTopic(WITNESS_TOPIC, 1, 1), NewTopic(Names.topic, 1, 1), NewTopic(Names.doomed_topic, 1, 1),
                  NewTopic(BATCH_TOPIC, BATCH_PARTITIONS, 1),
                  NewTopic(COMPACTED_TOPIC, COMPACTED_PARTITIONS, 1, config=COMPACTED_CONFIG)]
        for future in admin.create_topics(topics).values():
            future.result(timeout=ADMIN_TIMEOUT_S)

    def witness(self) -> Witness:
        return Witness(self.broker.bootstrap, WITNESS_TOPIC)

    # the run
    def run(self, cases: Iterable[Case], witness: Witness, *, deaths_max: int = 5, witness_every_s: float = 20.0,
            progress_every: int = 0) -> RunReport:
        report = RunReport()
        started_s = last_witness_s = time.monotonic()
        last_case: Case | None = None
        for case in cases:  # bounded by the catalog the caller gives
            problems = self._attempt(case)
            problems += self._check_after()
            report.cases_run += 1
            last_case = case
            if problems:
                report.failures.append(Failure(case.kind, case.name, problems, case.reproducer(), self._new_lines()))
            self._seen_lines = len(self.broker.output)
            if self.broker.process is None or self.broker.process.poll() is not None or any(
                    "no longer answers" in problem for problem in problems):
                report.deaths += 1
                self._restart()
                if report.deaths >= deaths_max:
                    report.stopped_early = f"the rest of the cases skipped after {deaths_max} deaths"
                    break
            if time.monotonic() - last_witness_s > witness_every_s:
                self._check_witness(witness, report, f"up to case {report.cases_run} ({case.name})")
                last_witness_s = time.monotonic()
            if progress_every and report.cases_run % progress_every == 0:
                print(f"{report.cases_run} cases, {len(report.failures)} failed, {time.monotonic() - started_s:.0f} s",
                      flush=True)
        self._check_witness(witness, report, f"at the end (last case: {last_case.name if last_case else 'none'})")
        report.seconds = time.monotonic() - started_s
        return report

    def _attempt(self, case: Case) -> list[str]:
        try:
            return case.run(self.target)
        except OSError as error:
            # The checks' own connections failing is the broker's doing; an attacker's may be refused.
            return [f"a check of the case could not talk to the broker: {error!r}"]

    def _check_after(self) -> list[str]:
        process = self.broker.process
        if process.poll() is not None:
            return [f"the broker died (exit status {process.returncode})"]
        problems = []
        if not self.target.answers_api_versions(ANSWER_AFTER_CASE_S):
            deadline = time.monotonic() + WEDGED_AFTER_S
            while not self.target.answers_api_versions(ANSWER_AFTER_CASE_S):  # bounded by the deadline
                if process.poll() is not None:
                    return [f"the broker died (exit status {process.returncode})"]
                if time.monotonic() > deadline:
                    return [f"the broker is alive but no longer answers ApiVersions ({WEDGED_AFTER_S:.0f} s)"]
            problems.append(f"ApiVersions was not answered within {ANSWER_AFTER_CASE_S:.0f} s after the case")
        trouble = [line.rstrip() for line in self._new_lines() if _TROUBLE.search(line)]
        if trouble:
            problems.append(f"the broker logged an internal failure: {trouble[0][:300]}")
        return problems

    def _new_lines(self) -> list[str]:
        return self.broker.output[self._seen_lines:]

    def _restart(self) -> None:
        self.broker.kill()  # a wedged one is killed; a dead one is reaped, its output read to the end
        self.broker.restart()
        self._seen_lines = len(self.broker.output)

    def _check_witness(self, witness: Witness, report: RunReport, when: str) -> None:
        problems = witness.check()
        if problems:
            report.failures.append(Failure("witness", f"well-behaved clients, {when}", problems, None, self._new_lines()))
