"""Consumer groups on one fresh broker: rebalance time and OffsetCommit rate.

    .venv/bin/python bench/groups.py [--members 10] [--rounds 5] [--commits 20000] [--in-flight 8]

Starts `replog broker start` (embedded store, group.initial.rebalance.delay.ms=0 so that only
the rebalance itself is timed, as Kafka's own benchmarks run it) and a topic with one partition
per member. Rebalance: members-1 confluent-kafka consumers (range assignor) settle in a group,
then one more subscribes; the time from its subscribe() until every member holds its share of
the partitions, for --rounds joins (the newcomer leaves between rounds, which is a rebalance too,
not timed). OffsetCommit: replog's own client sends --commits simple commits (generation -1,
as a consumer's commitSync outside a group does) of one partition, --in-flight at a time, to
the group's coordinator; each is written to __consumer_offsets with acks=all. Figures are
printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "src"))

from confluent_kafka import Consumer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402
from kio.schema.errors import ErrorCode  # noqa: E402

from replog.net.client import BrokerConnection  # noqa: E402
from replog.net.codec import ApiKey  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402

TOPIC = "group-bench"
SETTLE_S = 60
GROUP_SETTINGS = ("--set", "group.initial.rebalance.delay.ms=0", "--set", "group.min.session.timeout.ms=1000",
                  "--set", "offsets.topic.num.partitions=10")


def create_topic(bootstrap: str, partitions: int) -> None:
    # The admin client lives only here: left open, it would log reconnects after the broker stops.
    # log_level 0: nor its closing, between the figures.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(SETTLE_S)


def member(bootstrap: str, group: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                         "partition.assignment.strategy": "range", "log_level": 0})
    consumer.subscribe([TOPIC])
    return consumer


def settled(members: list[Consumer], partitions: int) -> bool:
    """Every member holds partitions / members of them (range over a partition each)."""
    for consumer in members:
        consumer.poll(0.01)
    held = [len(consumer.assignment()) for consumer in members]
    return sum(held) == partitions and max(held) - min(held) <= 1 and min(held) > 0


def wait_settled(members: list[Consumer], partitions: int) -> float:
    started = time.perf_counter()
    while not settled(members, partitions):  # bounded by SETTLE_S
        if time.perf_counter() - started > SETTLE_S:
            raise SystemExit(f"the group did not settle within {SETTLE_S} s")
    return time.perf_counter() - started


def rebalance_times(bootstrap: str, members_count: int, rounds: int) -> list[float]:
    group = f"bench-{uuid.uuid4().hex[:6]}"
    members = [member(bootstrap, group) for _ in range(members_count - 1)]
    times = []
    try:
        wait_settled(members, members_count)
        for _ in range(rounds):
            joining = member(bootstrap, group)
            started = time.perf_counter()
            while not settled([*members, joining], members_count):  # bounded by SETTLE_S
                if time.perf_counter() - started > SETTLE_S:
                    raise SystemExit(f"the join did not settle within {SETTLE_S} s")
            times.append(time.perf_counter() - started)
            joining.close()
            wait_settled(members, members_count)
    finally:
        for consumer in members:
            consumer.close()
    return times


async def commit_rate(port: int, commits: int, in_flight: int) -> float:
    group = f"commits-{uuid.uuid4().hex[:6]}"
    async with await BrokerConnection.open("127.0.0.1", port, request_timeout_s=SETTLE_S) as connection:
        deadline = time.monotonic() + SETTLE_S
        while True:  # until the coordinator is known (the offsets topic is made on first use)
            found = await connection.request(ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})
            if found.error_code == ErrorCode.none:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"no coordinator for {group}: {found.error_code.name}")
            await asyncio.sleep(0.1)
        sent = 0

        async def committer() -> None:
            nonlocal sent
            while sent < commits:  # bounded by --commits
                sent += 1
                answer = await connection.request(ApiKey.OFFSET_COMMIT, None, {
                    "group_id": group, "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
                    "retention_time_ms": -1,
                    "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": sent,
                                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}]})
                error = answer.topics[0].partitions[0].error_code
                if error != ErrorCode.none:
                    raise SystemExit(f"commit refused: {error.name}")

        started = time.perf_counter()
        await asyncio.gather(*(committer() for _ in range(in_flight)))
        return commits / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--commits", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=8)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="replog-bench-") as data_dir:
        broker = BrokerProcess(pathlib.Path(data_dir) / "data", extra_args=GROUP_SETTINGS)
        broker.start()
        try:
            create_topic(broker.bootstrap, options.members)
            times = rebalance_times(broker.bootstrap, options.members, options.rounds)
            print(f"rebalance of {options.members} members after one joins: p50 {statistics.median(times) * 1000:.0f} ms, "
                  f"max {max(times) * 1000:.0f} ms over {len(times)} joins", flush=True)
            rate = asyncio.run(commit_rate(broker.port, options.commits, options.in_flight))
            print(f"OffsetCommit: {rate:.0f} requests/s ({options.commits} commits, {options.in_flight} in flight, "
                  "acks=all to __consumer_offsets)", flush=True)
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
