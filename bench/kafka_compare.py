"""replog beside Apache Kafka, in one run: every bench with a Kafka equivalent, both systems on the
same machine, with the same clients, topic shapes and record sizes, rounds alternating between
them, each figure printed as `figure  replog  kafka  ratio` (medians over rounds; ratio =
replog / Kafka).

    .venv/bin/python bench/kafka_compare.py [--quick] [--sections NAME ...] [--rounds N] [--run-dir DIR]

Sections, in the order they run (bench/README.md says what each figure means):
  single       one broker: produce acks=1 and acks=all, consume; 1 KiB and 16 KiB; librdkafka, Java
  replicated   three brokers, RF=3 acks=all, idempotent and not; both sizes, both clients
  latency      end-to-end p50/p99 at 1,000 and 10,000 records/s, RF=3 acks=all, librdkafka
and those of bench/compare/operations.py (its SECTIONS: name -> function of a scratch directory
and its QUICK or FULL sizes, returning (figure, replog, kafka, unit) rows; its own rounds), named
here in lower case with dashes ("consumer-group-rebalance"). Kafka is bench/peers/kafka's
release, its jars resolved on first use.
--quick moves little data per run and runs one round, to see that everything works; its figures
mean little. Every cluster started is stopped at the end, on failure, Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.compare import operations, throughput  # noqa: E402
from bench.compare.clusters import Pairs  # noqa: E402
from bench.compare.report import Row, header  # noqa: E402

DEFAULT_ROUNDS = 3


def sections(pairs: Pairs, args: argparse.Namespace) -> dict[str, Callable[[], list[Row]]]:
    """Every section by its --sections name, in the order they run: throughput.py's, then
    operations.py's, which start clusters of their own, so the pair before them is stopped."""
    volume = throughput.QUICK if args.quick else throughput.FULL
    chosen = {name: (lambda section=section: section(pairs, args.rounds, volume)) for name, section in throughput.SECTIONS.items()}
    sizes = operations.QUICK if args.quick else operations.FULL

    def run(name: str, section) -> list[Row]:
        pairs.close()
        rows = section(args.run_dir / command_name(name), sizes)
        return [Row(figure, unit, [replog], [kafka]) for figure, replog, kafka, unit in rows]

    for name, section in operations.SECTIONS.items():
        chosen[command_name(name)] = lambda name=name, section=section: run(name, section)
    return chosen


def command_name(section_name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", section_name.lower()).strip("-")


def interrupt_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, through every cluster's stop."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def print_table(results: list[tuple[str, list[Row], float]]) -> None:
    print(header())
    for name, rows, seconds in results:
        print(f"-- {name} ({seconds:.0f} s)")
        for row in rows:
            print(row.line())
    sys.stdout.flush()


def main() -> None:
    names = [*throughput.SECTIONS, *(command_name(name) for name in operations.SECTIONS)]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="little data per run and one round: a smoke run")
    parser.add_argument("--sections", nargs="+", choices=names, metavar="NAME",
                        help=f"run only these sections (default: all): {', '.join(names)}")
    parser.add_argument("--rounds", type=int, help=f"rounds per system of the throughput sections (default {DEFAULT_ROUNDS}, --quick 1); "
                             "the others run their sizes' own")
    parser.add_argument("--run-dir", type=pathlib.Path, help="clusters' data and logs (default: a fresh temporary directory)")
    args = parser.parse_args()
    args.rounds = args.rounds or (1 if args.quick else DEFAULT_ROUNDS)
    interrupt_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="replog-kafka-compare-") as scratch:
        args.run_dir = (args.run_dir or pathlib.Path(scratch)).resolve()
        with Pairs(args.run_dir) as pairs:
            runnable = sections(pairs, args)
            started = time.monotonic()
            results = []
            for name in [name for name in runnable if args.sections is None or name in args.sections]:
                print(f"== {name}", flush=True)
                section_started = time.monotonic()
                try:
                    rows = runnable[name]()
                except Exception:  # one section's failure leaves the others' figures
                    traceback.print_exc()
                    rows = []
                results.append((name, rows, time.monotonic() - section_started))
                print_table(results[-1:])
        sizes = operations.QUICK if args.quick else operations.FULL
        print(f"\nreplog beside Kafka{' (--quick)' if args.quick else ''}, medians over {args.rounds} round(s) "
              f"({sizes.rounds} in {', '.join(map(command_name, operations.SECTIONS))}); ratio = replog / kafka")
        print_table(results)
        print(f"total {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
