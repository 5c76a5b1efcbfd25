"""The operations figures of bench/kafka_compare.py: replog beside Apache Kafka on what an operator
waits for — failover after a leader's SIGKILL, topic creation, a broker's restart, a consumer
group's rebalance — and the memory each partition costs.

Each section function takes a scratch directory and the Sizes of the run and returns rows
(figure, replog value, Kafka value, unit); the command prints them with the ratio replog/Kafka.
Rounds alternate between the two systems, the first of them changing from round to round, so that
neither always runs on a machine the other has just warmed or loaded; each figure is the median
(or the max) over its rounds. Every cluster is a context manager: stopped when its section ends,
fails or is interrupted. Both systems run at their own defaults but where the Kafka peer sets
replog's (bench/peers/kafka); where a section changes a setting, its docstring says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiokafka import AIOKafkaProducer
from confluent_kafka.admin import NewPartitions, NewTopic

from bench.compare.clusters import Cluster, kafka_cluster, replog_cluster
from bench.groups import create_topic as create_group_topic
from bench.groups import rebalance_times
from bench.peers.kafka.peer import SHARED_SETTINGS
from bench.scale import METADATA_TIMEOUT_S, REPLICATION, TOPIC, Poll, admin_client, all_in_sync, describe
from replog.net.client import BrokerConnection, BrokerUnavailable
from replog.net.codec import ApiKey
from tests.support.failover import PARTITIONS, create_topic, wait_until_in_sync, writes_across

Row = tuple[str, float, float, str]
KINDS = ("replog", "kafka")
FAILOVER_TOPIC = "failover"
# Kafka's controller refuses one request that makes more than 10,000 metadata records
# ("excessively large batch operation"): a topic of 10,000 partitions is created in steps of
# this many, CreateTopics and then CreatePartitions, on both systems alike.
PARTITIONS_PER_REQUEST = 5000
# Kafka's as the peer sets it, given to replog too, so that a group's first generation waits as long on both.
GROUP_SETTINGS = {"group.initial.rebalance.delay.ms": SHARED_SETTINGS["group.initial.rebalance.delay.ms"]}
METADATA_VERSION = 12  # one both answer
RECORD_BYTES = 1024
PRODUCER_STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Sizes:
    kills: int  # leader SIGKILLs per system
    partitions: tuple[int, ...]  # partition counts of the creation, memory and restart rounds
    rounds: int  # fresh clusters per system and partition count
    records_per_partition: int  # the "some data" a restarted broker holds, RECORD_BYTES each
    members: int  # of the consumer group once the newcomer joined
    joins: int  # timed joins per system
    phase_timeout_s: float  # how long a phase may take before its round is given up


FULL = Sizes(kills=5, partitions=(1000, 10_000), rounds=2, records_per_partition=10, members=10, joins=5,
             phase_timeout_s=300)
QUICK = Sizes(kills=2, partitions=(100, 500), rounds=1, records_per_partition=2, members=4, joins=2, phase_timeout_s=120)


class PhaseTimeout(Exception):
    """A phase did not end within Sizes.phase_timeout_s; its round yields no figures."""


def alternating(rounds: int) -> Iterator[tuple[int, str]]:
    """(round, kind) in the order measured: replog first in even rounds, Kafka first in odd ones."""
    for index in range(rounds):
        yield from ((index, kind) for kind in (KINDS if index % 2 == 0 else KINDS[::-1]))


def cluster_of(kind: str, brokers: int, run_dir: pathlib.Path, settings: dict[str, str] | None = None) -> Cluster:
    """A cluster of `kind`, to be entered (and so started, and stopped on leaving); `settings`
    are replog's."""
    if kind == "replog":
        return replog_cluster(brokers, run_dir, settings)
    return kafka_cluster(brokers, run_dir)


@contextlib.contextmanager
def both(brokers: int, scratch: pathlib.Path, replog_settings: dict[str, str] | None = None):
    """One cluster of each kind, running side by side, by kind; both stopped on leaving."""
    with contextlib.ExitStack() as stack:
        yield {kind: stack.enter_context(cluster_of(kind, brokers, scratch / kind, replog_settings)) for kind in KINDS}


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def highest(values: list[float]) -> float:
    return max(values, default=float("nan"))


def say(kind: str, line: str) -> None:
    print(f"[{kind}] {line}", flush=True)


# --- failover ---------------------------------------------------------------------------------


def failover(scratch: pathlib.Path, sizes: Sizes) -> list[Row]:
    """Three brokers each, side by side, at their defaults (a broker's session: replog's
    coord.session.timeout.ms and Kafka's broker.session.timeout.ms, 9 s both); tests/support/failover.py's
    producer (idempotent, acks=all, a numbered record every 5 ms round robin over the 3 partitions
    of a topic with RF=3 and min.insync.replicas=2). Each kill: the leader of partition 0
    SIGKILLed once every partition acknowledged a record; the time from the kill to the first
    acknowledgement of a record sent after it, on partition 0 and on the last partition to get
    one; then the broker restarted and every replica back in every ISR before the next kill."""
    on_led: dict[str, list[float]] = defaultdict(list)
    on_all: dict[str, list[float]] = defaultdict(list)
    with both(3, scratch / "failover") as clusters:
        for cluster in clusters.values():
            create_topic(cluster.bootstrap, FAILOVER_TOPIC, PARTITIONS)
        for _, kind in alternating(sizes.kills):
            cluster = clusters[kind]
            leader = wait_until_in_sync(cluster.bootstrap, FAILOVER_TOPIC)[0].leader
            outcome = writes_across(cluster.bootstrap, FAILOVER_TOPIC, lambda: cluster.kill(leader),
                                    f"SIGKILL of broker {leader}")
            cluster.restart(leader)
            on_led[kind].append(outcome.first_acknowledged_s[0])
            on_all[kind].append(max(outcome.first_acknowledged_s.values()))
            say(kind, f"SIGKILL of leader {leader}: first acknowledgement after {on_led[kind][-1]:.2f} s on its "
                      f"partition, {on_all[kind][-1]:.2f} s on every partition")
    figure = "failover, SIGKILL of a leader: first ack"
    return [(f"{figure} on its partition, p50", median(on_led["replog"]), median(on_led["kafka"]), "s"),
            (f"{figure} on its partition, max", highest(on_led["replog"]), highest(on_led["kafka"]), "s"),
            (f"{figure} on all {PARTITIONS} partitions, p50", median(on_all["replog"]), median(on_all["kafka"]), "s"),
            (f"{figure} on all {PARTITIONS} partitions, max", highest(on_all["replog"]), highest(on_all["kafka"]), "s")]


# --- topic creation, memory per partition, restart ----------------------------------------------


def write_every_partition(bootstrap: str, partitions: int, records: int, timeout_s: float) -> None:
    """`records` records of RECORD_BYTES to each partition of TOPIC with acks=all, returning once
    every one is acknowledged; raises PhaseTimeout if not within `timeout_s`, RuntimeError on a
    refused one.

    The writer is aiokafka, which sends one ProduceRequest per broker holding a batch for each of
    its partitions, as Kafka's Java producer does. librdkafka sends one request per partition, and
    a Kafka broker answers a connection's requests one at a time: one acks=all record to each of
    10,000 partitions took Kafka 573 s that way, the time of 3,333 follower round trips in a
    row per broker, which measures the client rather than the topic."""
    # It warns of each retried batch: NOT_LEADER_OR_FOLLOWER from a Kafka broker that has yet to
    # take up a partition its controller gave it, which is part of the time measured.
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    asyncio.run(_write_every_partition(bootstrap, partitions, records, timeout_s))


async def _write_every_partition(bootstrap: str, partitions: int, records: int, timeout_s: float) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                request_timeout_ms=int(timeout_s * 1000))
    await producer.start()
    try:
        outcomes = await asyncio.wait_for(_send_every_record(producer, partitions, records), timeout_s)
    except TimeoutError:
        raise PhaseTimeout(f"records unacknowledged {timeout_s:g} s after the first was sent") from None
    finally:
        # A producer whose records are unacknowledged waits for them on stop(); it is given up on.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(producer.stop(), PRODUCER_STOP_TIMEOUT_S)
    refused = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if refused:
        raise RuntimeError(f"{len(refused)} records refused, the first with {refused[0]!r}")


async def _send_every_record(producer: AIOKafkaProducer, partitions: int, records: int) -> list:
    value = bytes(RECORD_BYTES)
    acknowledgements = [await producer.send(TOPIC, value, partition=partition)
                        for _ in range(records) for partition in range(partitions)]
    return await asyncio.gather(*acknowledgements, return_exceptions=True)


def creation(cluster: Cluster, partitions: int, timeout_s: float) -> float:
    """Seconds from a CreateTopics of TOPIC (RF=3; over PARTITIONS_PER_REQUEST partitions, then
    CreatePartitions) until the topic is ready: every partition led
    with all 3 replicas in its ISR in a client's Metadata, then one record acknowledged with
    acks=all by every partition, which a consumer could then read (it is below the high
    watermark)."""
    admin = admin_client(cluster.bootstrap, timeout_s)
    started = time.monotonic()
    admin.create_topics([NewTopic(TOPIC, min(partitions, PARTITIONS_PER_REQUEST), REPLICATION)], request_timeout=timeout_s,
                        operation_timeout=timeout_s)[TOPIC].result()
    for total in range(2 * PARTITIONS_PER_REQUEST, partitions + PARTITIONS_PER_REQUEST, PARTITIONS_PER_REQUEST):
        admin.create_partitions([NewPartitions(TOPIC, min(total, partitions))], request_timeout=timeout_s,
                                operation_timeout=timeout_s)[TOPIC].result()
    answered_s = time.monotonic() - started
    in_sync_s = Poll(lambda: describe(admin), timeout_s).until(all_in_sync(partitions), started)
    if in_sync_s is None:
        raise PhaseTimeout(f"not every partition led and in sync {timeout_s:g} s after CreateTopics")
    write_every_partition(cluster.bootstrap, partitions, 1, timeout_s)
    ready_s = time.monotonic() - started
    # Where the time went: a Metadata answer may show a full ISR before a follower has fetched.
    say(cluster.kind, f"{partitions} partitions: CreateTopics answered after {answered_s:.2f} s, every partition led "
                      f"and in sync in Metadata after {in_sync_s:.2f} s, written after {ready_s:.2f} s")
    return ready_s


def broker_address(bootstrap: str, broker_id: int) -> str:
    broker = admin_client(bootstrap).list_topics(TOPIC, timeout=METADATA_TIMEOUT_S).brokers[broker_id]
    return f"{broker.host}:{broker.port}"


async def names_itself_live(address: str, broker_id: int) -> bool | None:
    """True once the broker at `address` answers a Metadata request itself (a client library
    would send it to whichever broker it liked) and names itself among the live brokers; None
    before, so that Poll asks again at once rather than after a wait scaled to a broker still
    starting up."""
    host, port = address.rsplit(":", 1)
    try:
        async with await BrokerConnection.open(host, int(port), request_timeout_s=METADATA_TIMEOUT_S) as connection:
            answer = await connection.request(ApiKey.METADATA, METADATA_VERSION, {
                "topics": [], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
    except BrokerUnavailable:
        return None
    return any(broker.node_id == broker_id for broker in answer.brokers) or None


def restart_time(cluster: Cluster, partitions: int, stop: Callable[[int], None], timeout_s: float) -> float:
    """`stop` the cluster's last broker, then seconds from its restart until it serves again: it
    answers Metadata itself, naming itself live, and then a Metadata answer (from any broker)
    shows every partition led and it in the ISR."""
    broker_id = cluster.broker_ids()[-1]
    address = broker_address(cluster.bootstrap, broker_id)
    stop(broker_id)
    started = time.monotonic()
    cluster.restart(broker_id)
    if Poll(lambda: asyncio.run(names_itself_live(address, broker_id)), timeout_s).until(bool, started) is None:
        raise PhaseTimeout(f"broker {broker_id} not answering {timeout_s:g} s after its restart")
    admin = admin_client(cluster.bootstrap, timeout_s)
    back_s = Poll(lambda: describe(admin), timeout_s).until(
        lambda found: len(found) == partitions and all(meta.leader >= 0 and broker_id in meta.isrs for meta in found.values()),
        started)
    if back_s is None:
        raise PhaseTimeout(f"broker {broker_id} not in every ISR {timeout_s:g} s after it answered again")
    return back_s


def wait_in_sync(cluster: Cluster, partitions: int, timeout_s: float) -> None:
    """Every replica of TOPIC in every ISR, so that the next phase starts from a whole cluster."""
    admin = admin_client(cluster.bootstrap, timeout_s)
    if Poll(lambda: describe(admin), timeout_s).until(all_in_sync(partitions), time.monotonic()) is None:
        raise PhaseTimeout(f"replicas out of sync {timeout_s:g} s after a restart")


def scale_round(cluster: Cluster, partitions: int, sizes: Sizes) -> dict[tuple[str, str], float]:
    """The figures of one fresh cluster by (figure, unit), as far as it got before a phase timed
    out or failed."""
    timeout_s = sizes.phase_timeout_s
    figures: dict[tuple[str, str], float] = {}
    try:
        idle_bytes = cluster.rss_bytes()
        figures[f"topic creation, {partitions} partitions RF=3: until ready", "s"] = creation(cluster, partitions, timeout_s)
        figures[f"memory per partition, {partitions} partitions RF=3", "KiB"] = (cluster.rss_bytes() - idle_bytes) / partitions / 1024
        write_every_partition(cluster.bootstrap, partitions, sizes.records_per_partition, timeout_s)
        figures[f"restart after a clean stop, {partitions} partitions: until serving", "s"] = \
            restart_time(cluster, partitions, cluster.stop_broker, timeout_s)
        wait_in_sync(cluster, partitions, timeout_s)
        figures[f"restart after SIGKILL, {partitions} partitions: until serving", "s"] = \
            restart_time(cluster, partitions, cluster.kill, timeout_s)
    except PhaseTimeout as timeout:
        say(cluster.kind, f"{partitions} partitions: {timeout}; the round's later phases skipped")
    except Exception as failure:  # one failed round must not cost the section its other rows
        say(cluster.kind, f"{partitions} partitions: failed with {failure!r}; the round's later phases skipped")
    return figures


def scale(scratch: pathlib.Path, sizes: Sizes) -> list[Row]:
    """Per partition count, fresh clusters of three brokers (bench/scale.py's shape: one topic of
    RF=3, so each broker hosts a replica of every partition; replog's brokers over a ZooKeeper
    server, Kafka's beside one KRaft controller), one system at a time, Sizes.rounds of each:
    - topic creation: see `creation`;
    - memory per partition: the resident memory of the cluster's server processes (replog's three
      brokers and ZooKeeper; Kafka's three brokers and the controller) once the topic is ready,
      less that before it was created, over the partition count (so per 3 replicas);
    - restart: Sizes.records_per_partition records written to every partition, then the last
      broker stopped cleanly (SIGTERM, waited for) and restarted, and then SIGKILLed and restarted
      at once: see `restart_time`, which starts at the restart. (A killed broker's previous
      registration, and its session, may still be alive then: how long each system takes to
      let the new one in is part of the figure.)"""
    figures: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for partitions in sizes.partitions:
        for index, kind in alternating(sizes.rounds):
            with cluster_of(kind, 3, scratch / f"scale-{partitions}-{index}" / kind) as cluster:
                measured = scale_round(cluster, partitions, sizes)
            for key, value in measured.items():
                figures[key][kind].append(value)
            say(kind, f"round {index + 1}: " + "; ".join(f"{figure} {value:.2f} {unit}" for (figure, unit), value in measured.items()))
    return [(figure, median(values["replog"]), median(values["kafka"]), unit) for (figure, unit), values in figures.items()]


# --- consumer-group rebalance -----------------------------------------------------------------


def rebalance(scratch: pathlib.Path, sizes: Sizes) -> list[Row]:
    """bench/groups.py's measurement on one broker of each kind, side by side: Sizes.members - 1
    confluent-kafka consumers (classic protocol, range assignor, session 6 s, heartbeat 0.2 s)
    settle in a fresh group on a topic of one partition per member, then one more subscribes; the
    time from its subscribe() until every member holds its share, one join per round.
    group.initial.rebalance.delay.ms is the same on both (GROUP_SETTINGS, 3 s): it delays a new
    group's first generation only, which is not timed."""
    times: dict[str, list[float]] = defaultdict(list)
    with both(1, scratch / "rebalance", GROUP_SETTINGS) as clusters:
        for cluster in clusters.values():
            create_group_topic(cluster.bootstrap, sizes.members)
        for _, kind in alternating(sizes.joins):
            times[kind] += rebalance_times(clusters[kind].bootstrap, sizes.members, 1)
            say(kind, f"rebalance of {sizes.members} members after one joins: {times[kind][-1] * 1000:.0f} ms")
    figure = f"consumer-group rebalance, {sizes.members} members, one joins"
    return [(f"{figure}, p50", median(times["replog"]) * 1000, median(times["kafka"]) * 1000, "ms"),
            (f"{figure}, max", highest(times["replog"]) * 1000, highest(times["kafka"]) * 1000, "ms")]


SECTIONS: dict[str, Callable[[pathlib.Path, Sizes], list[Row]]] = {
    "failover": failover,
    "topic creation, memory, restart": scale,
    "consumer-group rebalance": rebalance,
}
