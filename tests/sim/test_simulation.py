"""The deterministic simulation of the replication core, run over many seeds.

CI runs 3,000 seeded schedules (seeds FIRST_SEED..; scripts/test.sh sets REPLOG_SIM_RUNS) and a
bare pytest run FAST_SCHEDULES of them, so that the in-process suite (`pytest -m "not cluster"`)
stays a matter of minutes. They are spread over one worker process per core; the figures
(schedules, wall time, virtual time, acknowledged records, compacted schedules and what their
cleaners did, transactional schedules and the transactions they committed and aborted) are
printed. Compacted schedules must mostly compact: at least COMPACTING_SHARE_MIN of them see a
cleaning pass remove records, or their invariants prove little. Likewise transactional schedules
must mostly both commit and abort (TRANSACTING_SHARE_MIN).

    REPLOG_SIM_RUNS=100000 pytest tests/sim      # a soak, for humans
    REPLOG_SIM_FIRST_SEED=500000 pytest tests/sim  # other schedules than CI's
    REPLOG_SIM_SEED=1234 pytest tests/sim -s     # replay one seed, printing its whole trace

A failing seed fails the test with its violation, the end of its trace and the command that
replays it. CI's seeds are fixed so that a run that lands is a run that can be repeated; the
soak's variables explore further.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import multiprocessing
import os
import pathlib
import tempfile
import time
import traceback

import pytest

from replog.security.acls import AclBinding, AclPermissionType
from replog.groups.pending_offsets import PendingOffsets
from replog.replica.partition import Partition
from replog.storage import cleaner
from tests.sim.simulation import BROKER_ACLS, TRANSACTIONAL_EVERY, TRANSACTIONAL_SEED, Outcome, Simulation

FAST_SCHEDULES = 300  # the first tenth of CI's seeds
SCHEDULES = int(os.environ.get("REPLOG_SIM_RUNS", FAST_SCHEDULES))
FIRST_SEED = int(os.environ.get("REPLOG_SIM_FIRST_SEED", "0"))
REPLAY_SEED = os.environ.get("REPLOG_SIM_SEED")
# Schedules run in worker processes with this PYTHONHASHSEED: should any order the simulated code
# depends on follow string hashes (a set of strings), a seed still replays exactly.
HASH_SEED = "0"
CHUNK = 25  # seeds per task handed to a worker: small enough to spread evenly, to stop early
TRACE_TAIL = 60
REPLAY_CANDIDATES = 20  # seeds tried for one eventful enough to replay
FAILURES_SHOWN = 3
# The logs' files, in memory where the machine has a tmpfs: the schedules' fsyncs are real
# calls either way, and a disk would only make them slower.
MEMORY_DIR = "/dev/shm"
# Most compacted schedules clean; those that do not had their topic switched to delete, or their
# segments made huge, early on by alter_config, or no segment fell wholly below a HW in time.
COMPACTING_SHARE_MIN = 0.6
# Most transactional schedules commit some transactions and abort others; one that does neither
# lost its leaders or its coordinator for most of its faults.
TRANSACTING_SHARE_MIN = 0.8


@dataclasses.dataclass(frozen=True)
class Summary:
    """What a worker sends back of one schedule: all of a failure, figures of a success."""

    seed: int
    violation: str | None
    trace_tail: tuple[str, ...]
    virtual_s: float
    steps: int
    acknowledged: int
    compacted: bool
    cleanings: int
    records_removed: int
    transactional: bool
    committed: int
    aborted: int


def run_seeds(seeds: range) -> list[Summary]:
    """Runs in a worker process; every schedule in its own directory under a private root."""
    summaries = []
    with tempfile.TemporaryDirectory(prefix="replog-sim-", dir=MEMORY_DIR if os.access(MEMORY_DIR, os.W_OK) else None) as root:
        for seed in seeds:
            try:
                outcome = run_one(seed, root)
            except Exception:  # a bug of the simulator or one it does not catch: still this seed's
                summaries.append(Summary(seed, traceback.format_exc(), (), 0.0, 0, 0, False, 0, 0, False, 0, 0))
                continue
            # The events before the violation; the acknowledgements, most of a trace, are in the replay.
            tail = tuple([line for line in outcome.trace if " acked " not in line][-TRACE_TAIL:]) if outcome.violation else ()
            summaries.append(Summary(seed, outcome.violation, tail, outcome.virtual_s, outcome.steps, outcome.acknowledged,
                                     outcome.compacted, outcome.cleanings, outcome.records_removed,
                                     outcome.transactional, outcome.committed, outcome.aborted))
    return summaries


def run_one(seed: int, root: str, acls: tuple[AclBinding, ...] = BROKER_ACLS) -> Outcome:
    return Simulation(seed, pathlib.Path(root), acls).run()


@contextlib.contextmanager
def schedule_pool(workers: int):
    """Worker processes started afresh (spawn, not fork: the parent may hold threads) with the
    simulation's hash seed; the test process's environment is restored afterwards."""
    previous = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = HASH_SEED
    try:
        with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield pool
    finally:
        if previous is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = previous


def replay_command(seed: int) -> str:
    return f"REPLOG_SIM_SEED={seed} .venv/bin/python -m pytest -p no:cacheprovider -s tests/sim/test_simulation.py"


def describe(failure: Summary, root: pathlib.Path) -> str:
    """The failure, and whether it happens again in a fresh process, as a replay runs it: a
    worker runs many seeds, and a schedule could depend on what ran before it there (the order
    in which asyncio iterates a set of tasks follows their addresses)."""
    with schedule_pool(1) as pool:
        replayed = pool.submit(run_one, failure.seed, str(root)).result().violation
    verdict = "the same" if replayed == failure.violation else f"not the same: {replayed or 'no violation'}"
    return "\n".join([f"seed {failure.seed}: {failure.violation}", *failure.trace_tail,
                      f"in a fresh process: {verdict}", f"replay: {replay_command(failure.seed)}"])


@pytest.mark.skipif(REPLAY_SEED is not None, reason="replaying one seed")
@pytest.mark.timeout(0)  # bounded by SCHEDULES; the soak runs for hours on purpose
def test_seeded_schedules_keep_every_invariant(tmp_path, capsys):
    seeds = range(FIRST_SEED, FIRST_SEED + SCHEDULES)
    chunks = [seeds[start:start + CHUNK] for start in range(0, len(seeds), CHUNK)]
    workers = max(1, min(os.cpu_count() or 1, len(chunks)))
    started = time.monotonic()
    summaries: list[Summary] = []
    with schedule_pool(workers) as pool:
        pending = {pool.submit(run_seeds, chunk) for chunk in chunks}
        try:
            for done in concurrent.futures.as_completed(pending):
                summaries.extend(done.result())
                if sum(1 for summary in summaries if summary.violation) >= FAILURES_SHOWN:
                    break
        finally:
            for future in pending:
                future.cancel()
    elapsed = time.monotonic() - started
    failures = sorted((summary for summary in summaries if summary.violation), key=lambda summary: summary.seed)
    compacted = [summary for summary in summaries if summary.compacted]
    compacting = [summary for summary in compacted if summary.records_removed]
    transactional = [summary for summary in summaries if summary.transactional]
    transacting = [summary for summary in transactional if summary.committed and summary.aborted]
    with capsys.disabled():
        print(f"\nsimulation: {len(summaries)} schedules (seeds {seeds.start}..{seeds.stop - 1}) in {elapsed:.1f}s on "
              f"{workers} workers; {sum(summary.virtual_s for summary in summaries):.0f}s of virtual time, "
              f"{sum(summary.steps for summary in summaries)} steps, "
              f"{sum(summary.acknowledged for summary in summaries)} records acknowledged; {len(compacted)} compacted, "
              f"{len(compacting)} of them cleaned: {sum(summary.cleanings for summary in compacted)} passes changed a log, "
              f"{sum(summary.records_removed for summary in compacted)} records removed; {len(transactional)} "
              f"transactional, {len(transacting)} of them committed and aborted: "
              f"{sum(summary.committed for summary in transactional)} transactions committed, "
              f"{sum(summary.aborted for summary in transactional)} aborted; {len(failures)} failed")
    if failures:
        pytest.fail("\n\n".join(describe(failure, tmp_path / str(failure.seed)) for failure in failures), pytrace=False)
    assert len(summaries) == len(seeds)
    assert len(compacting) >= COMPACTING_SHARE_MIN * len(compacted)
    assert len(transacting) >= TRANSACTING_SHARE_MIN * len(transactional)


@pytest.mark.skipif(REPLAY_SEED is None, reason="set REPLOG_SIM_SEED to replay a seed")
def test_replay_one_seed(tmp_path, capsys):
    with schedule_pool(1) as pool:
        outcome = pool.submit(run_one, int(REPLAY_SEED), str(tmp_path)).result()
    with capsys.disabled():
        print("\n" + "\n".join(outcome.trace))
    assert outcome.violation is None, outcome.violation


def eventful(outcome: Outcome) -> bool:
    """Records acknowledged across crashes and a recreate: a schedule with something in it."""
    return (outcome.acknowledged > 0 and any("crashed" in line for line in outcome.trace)
            and any("recreate" in line for line in outcome.trace))


def test_a_seed_replays_exactly(tmp_path):
    """In two processes, as a replay runs after the run that failed. Which seeds are eventful
    follows the code's timing: the first eventful one of the first REPLAY_CANDIDATES is replayed."""
    with schedule_pool(1) as pool:
        for seed in range(REPLAY_CANDIDATES):
            first = pool.submit(run_one, seed, str(tmp_path / f"first-{seed}")).result()
            if eventful(first):
                break
    assert eventful(first), f"none of seeds 0..{REPLAY_CANDIDATES - 1} acknowledged records across crashes and a recreate"
    with schedule_pool(1) as pool:
        second = pool.submit(run_one, seed, str(tmp_path / "second")).result()
    assert first.trace == second.trace
    assert (first.steps, first.virtual_s) == (second.steps, second.virtual_s)


# The brokers' ClusterAction denied beside its ALLOW: a DENY wins.
BROKERS_DENIED = BROKER_ACLS + tuple(dataclasses.replace(binding, entry=dataclasses.replace(
    binding.entry, permission=AclPermissionType.DENY)) for binding in BROKER_ACLS)


@pytest.mark.parametrize("acls", [(), BROKERS_DENIED], ids=["brokers-acl-removed", "brokers-denied"])
def test_refused_follower_traffic_fails_the_seed(tmp_path, acls):
    """Without the ACL that lets brokers act as brokers, the first follower request is refused
    and the schedule fails on it, naming it: a missing ACL or a broken check is not taken for a
    fault the cluster survived (its partitions would merely stop replicating)."""
    with schedule_pool(1) as pool:
        outcome = pool.submit(run_one, FIRST_SEED, str(tmp_path), acls).result()
    assert outcome.violation is not None
    assert "follower traffic refused by the authorizer" in outcome.violation
    assert "principal User:broker" in outcome.violation


def _lso_at_high_watermark() -> None:
    Partition.last_stable_offset = property(lambda replica: replica.high_watermark)


def _aborted_transactions_dropped() -> None:
    read_for_consumer = Partition.read_for_consumer

    def without_aborted(replica, *args, **kwargs):
        return read_for_consumer(replica, *args, **kwargs)._replace(aborted_transactions=())

    Partition.read_for_consumer = without_aborted


def _offsets_applied_on_abort() -> None:
    end = PendingOffsets.end
    PendingOffsets.end = lambda pending, producer_id, committed, *args: end(pending, producer_id, True, *args)


def _aborted_records_kept_by_the_cleaner() -> None:
    """The cleaner takes aborted transactions' records for live ones: kept, and superseding
    the committed records of their keys."""
    aborted = cleaner._Transactions.aborted
    cleaner._Transactions.aborted = lambda transactions, header, batch: aborted(transactions, header, batch) and False


# A rule of transactions broken by hand, and what the invariants must then say.
BROKEN_RULES = {"lso-at-hw": (_lso_at_high_watermark, "LSO past an open transaction"),
                "aborted-transactions-dropped": (_aborted_transactions_dropped, "of aborted transaction"),
                "offsets-applied-on-abort": (_offsets_applied_on_abort, "committed in aborted transaction"),
                "aborted-records-kept-by-the-cleaner": (_aborted_records_kept_by_the_cleaner, "acknowledged record")}
BROKEN_RULE_SEEDS = 10  # transactional seeds tried for one that catches the broken rule


def run_broken(rule: str, seed: int, root: str) -> Outcome:
    """In a worker process of its own: the rule stays broken for every seed it runs."""
    BROKEN_RULES[rule][0]()
    return run_one(seed, root)


@pytest.mark.parametrize("rule", sorted(BROKEN_RULES))
def test_a_broken_transaction_rule_fails_a_seed(tmp_path, rule):
    """The transactions' invariants catch a partition that breaks their rules: the first of a few
    transactional seeds fails on it, naming it."""
    seeds = range(TRANSACTIONAL_SEED, TRANSACTIONAL_SEED + BROKEN_RULE_SEEDS * TRANSACTIONAL_EVERY, TRANSACTIONAL_EVERY)
    with schedule_pool(1) as pool:
        for seed in seeds:
            outcome = pool.submit(run_broken, rule, seed, str(tmp_path / str(seed))).result()
            if outcome.violation:
                break
    assert outcome.violation is not None, f"seeds {list(seeds)} all passed with {rule}"
    assert BROKEN_RULES[rule][1] in outcome.violation, outcome.violation
