"""The families of cases a run goes through, each always the same cases in the same order:
    frames    count, value, truncate, tail, size, version, forged: malformed requests of every
              API and version (mutations.py)
    wide      requests naming 100,000 topics, partitions, groups
    random    stacked random mutations, from a seed (the long runs)
    batches   Produce with wrong, hostile or valid batches, on a plain and a compacted topic
    bombs     decompression bombs, on both, then a log cleaner pass
    slow      slow-loris senders
    limits    floods and idle connections against max.connections & co
    (and connection_cases.DescriptorFlood, past the file limit, on its own)
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator

from .batch_cases import BatchCase, CleanerPass, batch_cases, bomb_cases
from .cases import Case, FrameCase, Target, WideCase
from .connection_cases import IdleHolders, ManyHostFlood, OneHostFlood, QueuedBytesFlood, SlowSenders
from .mutations import MappedSeed, every_mutant, mapped, random_mutant, wide_mutants
from .seeds import all_seeds

def frame_cases(target: Target) -> list[Case]:
    """Every count, truncation and tail of every seed; size lies, unknown versions, forged fetches."""
    mapped_seeds = mapped(all_seeds(target.names))
    return [FrameCase(mutant) for mutant in every_mutant(mapped_seeds, target.names, target.max_request_bytes)]


def wide_family(target: Target) -> list[Case]:
    """Each API's top-level arrays, at its highest version, 1 MiB long."""
    highest = {mapped_seed.seed.api_key: mapped_seed for mapped_seed in mapped(all_seeds(target.names))}
    return [WideCase(mutant) for mapped_seed in highest.values() for mutant in wide_mutants(mapped_seed)]


def batch_family(target: Target) -> list[Case]:
    """Every batch case on the plain topic and on the compacted one, each on a partition of its own."""
    plain = list(batch_cases())
    return _on_partitions(plain + [dataclasses.replace(case, compacted=True) for case in plain], target)


def bomb_family(target: Target) -> list[Case]:
    bombs = _on_partitions(list(bomb_cases()), target)
    return [*bombs, CleanerPass(sorted({bomb.partition for bomb in bombs if bomb.compacted}))]


def slow_family(target: Target) -> list[Case]:
    return [SlowSenders("24 connections each announcing a frame of socket.request.max.bytes, then silent", 24, None),
            SlowSenders("8 connections sending a 1 MiB frame a byte every 20 ms", 8, 1 << 20, interval_s=0.02)]


def limit_family(target: Target) -> list[Case]:
    """The cases that need the connection and memory limits (Target.limits)."""
    return [IdleHolders(), OneHostFlood(), ManyHostFlood(), QueuedBytesFlood()]


def _on_partitions(cases: list[BatchCase], target: Target) -> list[BatchCase]:
    """Each case on a partition of its own (round robin), so that one poisoned partition does
    not make the next case's checks fail."""
    placed = []
    plain = compacted = 0
    for case in cases:
        if case.compacted:
            placed.append(dataclasses.replace(case, partition=compacted % target.compacted_partitions))
            compacted += 1
        else:
            placed.append(dataclasses.replace(case, partition=plain % target.batch_partitions))
            plain += 1
    return placed


def random_cases(target: Target, seed: int, count: int) -> Iterator[Case]:
    """`count` random frame mutants from `seed`: the same seed, the same cases."""
    rng = random.Random(seed)
    mapped_seeds: list[MappedSeed] = mapped(all_seeds(target.names))
    for _ in range(count):
        yield FrameCase(random_mutant(rng, mapped_seeds))

