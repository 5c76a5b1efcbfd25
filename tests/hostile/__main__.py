"""The fuzzer at a running broker, with none of the test's checks: what bench/hostile.py runs
beside the clients it measures.

    python -m tests.hostile --port PORT [--seconds S] [--seed N] [--families frames,random,...] [--cases-per-s R]

The broker must have the topics arena.py creates (bench/hostile.py starts it with them). Goes
through the families' cases in turn, over and over, until `--seconds` have passed, as fast as it
goes or, with `--cases-per-s`, at that pace (sleeping between cases: a hostile client's requests
beside others', rather than all the broker can take); prints how many cases ran and how many
could not reach the broker.
"""

from __future__ import annotations

import argparse
import itertools
import time
from collections.abc import Callable, Iterator

from . import catalog
from .connection_cases import DescriptorFlood
from .arena import BATCH_PARTITIONS, BATCH_TOPIC, COMPACTED_PARTITIONS, COMPACTED_TOPIC
from .cases import Case, Limits, Target
from .seeds import Names

RANDOM_CASES_PER_TURN = 1000
FAMILIES: dict[str, Callable[[Target, int], list[Case] | Iterator[Case]]] = {
    "frames": lambda target, turn: catalog.frame_cases(target),
    "random": lambda target, turn: catalog.random_cases(target, turn, RANDOM_CASES_PER_TURN),
    "wide": lambda target, turn: catalog.wide_family(target),
    "batches": lambda target, turn: catalog.batch_family(target),
    "bombs": lambda target, turn: catalog.bomb_family(target),
    "slow": lambda target, turn: catalog.slow_family(target),
    "limits": lambda target, turn: catalog.limit_family(target),
    "flood": lambda target, turn: [DescriptorFlood()],
}
DEFAULT_FAMILIES = "frames,random,wide,batches,bombs,slow"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=43, help="of the random family's first turn")
    parser.add_argument("--families", default=DEFAULT_FAMILIES,
                        help=f"any of {', '.join(FAMILIES)} (limits: the broker runs with catalog.Limits)")
    parser.add_argument("--cases-per-s", type=float, default=0.0, help="the pace of cases (0: as fast as it goes)")
    args = parser.parse_args()
    names = args.families.split(",")
    target = Target(host=args.host, port=args.port, names=Names(), batch_topic=BATCH_TOPIC,
                    compacted_topic=COMPACTED_TOPIC, batch_partitions=BATCH_PARTITIONS,
                    compacted_partitions=COMPACTED_PARTITIONS, limits=Limits() if "limits" in names else None)
    chosen = [FAMILIES[name] for name in names]
    deadline = time.monotonic() + args.seconds
    interval_s = 1 / args.cases_per_s if args.cases_per_s > 0 else 0.0
    next_case_s = time.monotonic()
    ran = unreachable = 0
    for turn in itertools.count(args.seed):  # bounded by the deadline
        for family in chosen:
            for case in family(target, turn):
                if time.monotonic() > deadline:
                    print(f"fuzzer: {ran} cases, {unreachable} could not reach the broker", flush=True)
                    return
                time.sleep(max(0.0, next_case_s - time.monotonic()))
                next_case_s = max(next_case_s + interval_s, time.monotonic() - 1.0)  # no burst after a slow case
                try:
                    case.run(target)
                except OSError:
                    unreachable += 1
                ran += 1


if __name__ == "__main__":
    main()
