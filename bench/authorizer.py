"""What authorization costs the hot path: produce and consume throughput of one broker with the
authorizer off, on with 10 ACLs and on with 10,000, and what one check costs.

    .venv/bin/python bench/authorizer.py [--num-records N] [--rounds R] [--checks C]

Checks, in this process: C authorize() calls for as many topic names, each a miss of the
decision cache (the index is consulted: the literal name, "*" and each prefix length), then the
same C again (answered by the cache, as produce and fetch are once a client's topics were seen),
with 10 and with 10,000 ACLs; microseconds per call.

Throughput: three `replog broker start` processes on fresh embedded stores, one without
authorizer.class.name and two with it, whose stores hold 10 and 10,000 ACLs written before they
start. Every broker holds the ACLs that let the bench's clients (User:ANONYMOUS, over PLAINTEXT)
do what they do: Write and Read on topic `perf`, Create and IdempotentWrite on the cluster, Read
on every group. The others name other principals, half PREFIXED (some on prefixes of `perf`, so
that the index finds entries and checks them) and half LITERAL. Topic `perf` has 16 partitions.
Then R rounds, the brokers' order rotating between rounds (so that a machine growing busier or
quieter weighs on all alike): `replog perf produce` of N records of 1 KiB with acks=1, then
`replog perf consume` of them, on each broker. Prints each run, then the medians and each
configuration's share of "off". Figures are printed, never asserted; the brokers and the tools
share this machine's CPUs, so read them with `nproc` in mind.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pathlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.broker_perf import TOPIC, create_topic, run  # noqa: E402
from replog.coord_backends.base import CreateOp, commit_in_batches  # noqa: E402
from replog.coord_backends.memory import MemoryStore  # noqa: E402
from replog.net.codec import ANONYMOUS  # noqa: E402
from replog.security import acl_records  # noqa: E402
from replog.security.acls import (CLUSTER_NAME, WILDCARD_RESOURCE, AccessControlEntry, AclOperation,  # noqa: E402
                                  AclPermissionType, PatternType, ResourcePattern, ResourceType)
from replog.security.authorizer import AclAuthorizer  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402

PARTITIONS = 16
RECORD_BYTES = 1024
ACL_COUNTS = (10, 10_000)
CONFIGURATIONS = ("off", *(f"{count:,} ACLs" for count in ACL_COUNTS))
HOST = "127.0.0.1"

_Acls = dict[ResourcePattern, list[AccessControlEntry]]


def bench_grants() -> _Acls:
    """What the bench's clients need, for User:ANONYMOUS from any host."""

    def allow(operation: AclOperation) -> AccessControlEntry:
        return AccessControlEntry(ANONYMOUS, "*", operation, AclPermissionType.ALLOW)

    return {
        ResourcePattern(ResourceType.TOPIC, TOPIC, PatternType.LITERAL): [allow(AclOperation.WRITE), allow(AclOperation.READ)],
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL): [allow(AclOperation.CREATE),
                                                                                 allow(AclOperation.IDEMPOTENT_WRITE)],
        ResourcePattern(ResourceType.GROUP, WILDCARD_RESOURCE, PatternType.LITERAL): [allow(AclOperation.READ)],
    }


def acls_of(count: int) -> _Acls:
    """The bench's grants and other principals' ACLs, `count` in all: half prefixed (every
    prefix of `perf` among them), half literal, of several name lengths."""
    acls = bench_grants()
    others = count - sum(len(entries) for entries in acls.values())
    for index in range(others):  # bounded by `count`
        entry = AccessControlEntry(f"User:tenant-{index}", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
        if index % 2:
            pattern = ResourcePattern(ResourceType.TOPIC, f"tenant-{index}-topic", PatternType.LITERAL)
        elif index // 2 < len(TOPIC):
            pattern = ResourcePattern(ResourceType.TOPIC, TOPIC[:index // 2 + 1], PatternType.PREFIXED)
        else:
            pattern = ResourcePattern(ResourceType.TOPIC, f"t{index}-"[:2 + index % 11], PatternType.PREFIXED)
        acls.setdefault(pattern, []).append(entry)
    return acls


def measure_checks(checks: int) -> None:
    names = [f"{TOPIC}-{index}" for index in range(checks)]
    for count in ACL_COUNTS:
        authorizer = AclAuthorizer(decision_cache_max=checks)
        authorizer.replace_all(acls_of(count))
        figures = []
        for label in ("cache miss", "cache hit"):
            started_s = time.perf_counter()
            for name in names:  # bounded by `checks`
                authorizer.authorize(ANONYMOUS, HOST, AclOperation.WRITE, ResourceType.TOPIC, name)
            figures.append(f"{label} {(time.perf_counter() - started_s) / checks * 1e6:.2f} us")
        print(f"authorize(), {authorizer.acl_count:>6,} ACLs: {', '.join(figures)} per check", flush=True)


async def write_acls(store_path: pathlib.Path, acls: _Acls) -> None:
    """As `replog acls add` would leave them, without a notification: no broker runs yet."""
    async with MemoryStore(str(store_path)) as store:
        ops = []
        for pattern, entries in acls.items():
            path = acl_records.node_path(pattern)
            parent = path.rpartition("/")[0]
            if await store.exists(parent) is None:
                await store.create(parent, make_parents=True)
            ops.append(CreateOp(path, acl_records.encoded(entries)))
        await commit_in_batches(store, ops)


@contextlib.contextmanager
def broker_of(work_dir: pathlib.Path, configuration: str) -> Iterator[BrokerProcess]:
    directory = work_dir / configuration.replace(",", "").replace(" ", "-")
    directory.mkdir()
    store_path = directory / "store.db"
    extra_args: tuple[str, ...] = ("--metrics-listen", "")
    if configuration != "off":
        asyncio.run(write_acls(store_path, acls_of(int(configuration.split()[0].replace(",", "")))))
        extra_args += ("--set", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    broker = BrokerProcess(directory / "data", coord_url=f"memory://{store_path}", extra_args=extra_args)
    broker.start()
    try:
        print(f"# {configuration}: " + "".join(line.strip() for line in broker.output if "authorizer loaded" in line), flush=True)
        create_topic(broker.bootstrap, PARTITIONS)
        yield broker
    finally:
        broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--checks", type=int, default=100_000)
    options = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; brokers and tools share them", flush=True)
    measure_checks(options.checks)
    rates: dict[str, dict[str, list[float]]] = {step: {name: [] for name in CONFIGURATIONS} for step in ("produce", "consume")}
    with tempfile.TemporaryDirectory(prefix="replog-bench-authorizer-") as scratch, contextlib.ExitStack() as brokers:
        by_configuration = {name: brokers.enter_context(broker_of(pathlib.Path(scratch), name)) for name in CONFIGURATIONS}
        records = str(options.num_records)
        for round_index in range(options.rounds):
            shift = round_index % len(CONFIGURATIONS)
            for name in CONFIGURATIONS[shift:] + CONFIGURATIONS[:shift]:
                print(f"# authorizer {name}", flush=True)
                # Each round appends N more: the consume reads the first N, there from the first round on.
                common = ("--bootstrap-server", by_configuration[name].bootstrap, "--topic", TOPIC, "--num-records", records)
                rates["produce"][name].append(run("perf", "produce", *common, "--record-size", str(RECORD_BYTES), "--acks", "1"))
                rates["consume"][name].append(run("perf", "consume", *common))
    for step, by_name in rates.items():
        medians = {name: statistics.median(values) for name, values in by_name.items()}
        shown = ", ".join(f"{name} {median * RECORD_BYTES / 1e6:.1f} MB/s ({median / medians['off']:.1%} of off)"
                          for name, median in medians.items())
        print(f"{step}, {PARTITIONS} partitions, {RECORD_BYTES} B records, median of {options.rounds}: {shown}", flush=True)


if __name__ == "__main__":
    main()
