"""Failover as an acks=all producer sees it, for tests/cluster/test_failover.py and
bench/replication.py: a producer of numbered records over every partition of a topic that
remembers when each record was sent and when it was acknowledged, a broker stopped with a
signal under it, the cluster's partitions once every replica is in sync, and the check that
every acknowledged record can be read back."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Callable, NamedTuple

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.harness import PRODUCE_INTERVAL_S, RECORDS_MAX, WAIT_S, _Background, client_config
from tests.cluster.test_replication import read_all
from tests.support.polling import wait_until

# A killed broker's peers find it gone within a second; a host that vanished would wait for the
# default 9 s session. This leaves room for either on a loaded machine.
FAILOVER_WAIT_S = 90
PARTITIONS = 3
# Brokers 0 and 1 are the preferred leaders, broker 2 only follows: killing it is a follower's
# death on every partition and a leader's on none.
FOLLOWED_ONLY_BY_2 = [[0, 1, 2], [1, 0, 2], [0, 1, 2]]


class TimedProducer(_Background):
    """Sends "0", "1", ... from a thread until stopped, record n to partition n % partitions,
    with acks=all and idempotence, and notes the monotonic time each was sent and each was
    acknowledged. Unlike the chaos harness's NumberedProducer, a record waits out the longest
    failover this module allows instead of timing out, nothing waits in librdkafka's queue
    (linger.ms 0), and librdkafka does not log every refused reconnect to a killed broker."""

    def __init__(self, bootstrap: str, topic: str, partitions: int):
        self._producer = Producer({**client_config(bootstrap), "acks": "all", "enable.idempotence": True,
                                   "message.timeout.ms": FAILOVER_WAIT_S * 1000, "linger.ms": 0, "log_level": 0})
        self._topic = topic
        self.partitions = partitions
        self._lock = threading.Lock()
        self._sent_at: list[float] = []  # by record number; appended by the sending thread only
        self._acknowledged_at: dict[int, list[tuple[int, float]]] = defaultdict(list)  # partition: [(number, when)]
        super().__init__()

    def _run(self) -> None:
        for number in range(RECORDS_MAX):  # until stopped
            if self._stopping.wait(PRODUCE_INTERVAL_S):
                return
            self._sent_at.append(time.monotonic())
            try:
                self._producer.produce(self._topic, value=str(number).encode(), partition=number % self.partitions,
                                       on_delivery=self._delivered)
            except BufferError:
                pass  # the queue is full while no leader answers: this number is simply never sent
            self._producer.poll(0)

    def _delivered(self, error, message) -> None:
        if error is None:
            acknowledged_at = time.monotonic()  # callbacks run at the next poll, within PRODUCE_INTERVAL_S
            with self._lock:
                self._acknowledged_at[message.partition()].append((int(message.value()), acknowledged_at))

    def acknowledged_on_every_partition(self, at_least: int = 1) -> bool:
        self._producer.poll(0)
        with self._lock:
            return all(len(self._acknowledged_at[partition]) >= at_least for partition in range(self.partitions))

    def first_acknowledged_after(self, moment: float) -> dict[int, float] | None:
        """By partition, the time from `moment` to the first acknowledgement of a record sent
        after it, once every partition has one; None before. (An acknowledgement of a record
        sent before may arrive after `moment`, from the old leader: it proves nothing.)"""
        self._producer.poll(0)
        with self._lock:
            first = {partition: min(at for number, at in times if self._sent_at[number] > moment) - moment
                     for partition, times in self._acknowledged_at.items()
                     if any(self._sent_at[number] > moment for number, _ in times)}
        return first if len(first) == self.partitions else None

    def longest_gap(self, since: float, partitions) -> float:
        """The longest time between consecutive acknowledgements on any of `partitions`, from
        the first acknowledgement after `since`: how long acks=all writes stalled there."""
        with self._lock:
            gaps = [later - earlier for partition in partitions
                    for acknowledged in [sorted(at for _, at in self._acknowledged_at[partition] if at > since)]
                    for earlier, later in zip(acknowledged, acknowledged[1:])]
        return max(gaps, default=float("nan"))

    def stop(self) -> dict[int, set[int]]:
        """Stop sending, wait for the answers to what was sent; the acknowledged record numbers
        by partition."""
        self._end_thread()
        self._producer.flush(FAILOVER_WAIT_S)
        with self._lock:
            return {partition: {number for number, _ in self._acknowledged_at[partition]} for partition in range(self.partitions)}


def quiet_admin(bootstrap: str) -> AdminClient:
    # Its failures come back as exceptions; librdkafka's log would only add lines about events
    # a client dropped on closing, between the bench's figures.
    return AdminClient({**client_config(bootstrap), "log_level": 0})


def create_topic(bootstrap: str, topic: str, partitions: int, assignment: list[list[int]] | None = None) -> None:
    """RF=3 (or the replicas `assignment` gives each partition), min.insync.replicas=2."""
    admin = quiet_admin(bootstrap)
    config = {"min.insync.replicas": "2"}
    # confluent-kafka 2.16 wants the partition count with an assignment too (and no replication factor).
    new = (NewTopic(topic, partitions, replica_assignment=assignment, config=config) if assignment
           else NewTopic(topic, partitions, 3, config=config))
    admin.create_topics([new])[topic].result(timeout=FAILOVER_WAIT_S)


def in_sync_partitions(bootstrap: str, topic: str | None = None) -> dict[tuple[str, int], object] | None:
    """Every partition of `topic` (of every topic if None) by (topic, partition), if each has
    a leader and all its replicas in the ISR, as one live broker describes them; else None."""
    described = quiet_admin(bootstrap).list_topics(topic, timeout=30).topics
    partitions = {(name, index): meta for name, topic_meta in described.items()
                  for index, meta in topic_meta.partitions.items()}
    settled = partitions and all(meta.leader >= 0 and sorted(meta.isrs) == sorted(meta.replicas) for meta in partitions.values())
    return partitions if settled else None


def wait_until_in_sync(bootstrap: str, topic: str | None = None) -> dict[int, object]:
    """Partition metadata by index (of `topic`) once every replica is in every ISR."""
    partitions = wait_until(lambda: in_sync_partitions(bootstrap, topic), "every replica in every ISR", FAILOVER_WAIT_S)
    return {index: meta for (_, index), meta in partitions.items()}


def follower_only(partitions: dict[int, object]) -> int:
    """A broker that leads none of `partitions` (their metadata by index) but follows them all."""
    leaders = {meta.leader for meta in partitions.values()}
    candidates = sorted(set.intersection(*(set(meta.replicas) for meta in partitions.values())) - leaders)
    assert candidates, f"every replica leads a partition ({leaders}): none only follows"
    return candidates[0]


class Failover(NamedTuple):
    first_acknowledged_s: dict[int, float]  # by partition: see TimedProducer.first_acknowledged_after
    longest_gap_s: float  # TimedProducer.longest_gap over every partition, from a second before the signal
    acknowledged: dict[int, set[int]]  # by partition, the record numbers


def writes_across(bootstrap: str, topic: str, act: Callable[[], None], what: str) -> Failover:
    """`act()` while a TimedProducer writes to every partition of `topic`, then writes on until
    every partition has acknowledged a record sent after it. `what` names the act in a timeout."""
    with TimedProducer(bootstrap, topic, PARTITIONS) as producer:
        # The producer has its id and a connection to every leader: the act is the only delay.
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        acted_at = time.monotonic()
        act()
        first = wait_until(lambda: producer.first_acknowledged_after(acted_at),
                           f"an acknowledgement on every partition of a record sent after {what}", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    return Failover(first, producer.longest_gap(acted_at - 1.0, range(PARTITIONS)), acknowledged)


def signal_under_writes(cluster, topic: str, victim: int, signum: int) -> Failover:
    """writes_across a signal to broker `victim`. Leaves the victim stopped (and reaped)."""
    # Not waiting for it to exit: a controlled shutdown takes a while, and writes go on meanwhile.
    failover = writes_across(cluster.bootstrap, topic, lambda: cluster.brokers[victim].process.send_signal(signum),
                             f"signal {signum} to broker {victim}")
    cluster.brokers[victim].stop()
    return failover


def restart_stopped(cluster) -> None:
    """Brings back any broker an earlier kill left down, so that a test starts from a full
    cluster: one that every broker's Metadata names whole. A client asking a broker whose
    metadata does not list the restarted one yet drops its connection to it (librdkafka
    decommissions brokers missing from metadata), failing what it had in flight there."""
    restarted = [broker for broker in cluster.brokers.values() if not broker.running]
    for broker in restarted:
        broker.restart()
    if restarted:
        for broker in cluster.brokers.values():
            admin = quiet_admin(broker.bootstrap)
            wait_until(lambda: _names_every_broker(admin, set(cluster.brokers)),
                       f"broker {broker.bootstrap}'s metadata naming every broker", FAILOVER_WAIT_S)


def _names_every_broker(admin: AdminClient, brokers: set[int]) -> bool:
    try:
        return set(admin.list_topics(timeout=5).brokers) == brokers
    except KafkaException:  # not answering yet
        return False


def missing_after_read_back(bootstrap: str, topic: str, acknowledged: dict[int, set[int]]) -> dict[int, list[int]]:
    """By partition, the acknowledged record numbers a consumer does not find (empty lists if
    nothing acknowledged is lost)."""
    consumer = Consumer({**client_config(bootstrap), "group.id": "read-back", "enable.auto.commit": False})

    def high_watermark(partition: int) -> tuple[int] | None:  # a tuple: 0 is an answer too
        try:
            return (consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)[1],)
        except KafkaException:
            return None  # no leader yet, or one whose HW is not available yet (KIP-207)

    try:
        # Read up to the end of the log, not just as many records as were acknowledged: records
        # whose acknowledgement never came may be in the log too.
        ends = {partition: wait_until(lambda: high_watermark(partition), f"the HW of partition {partition}", FAILOVER_WAIT_S)[0]
                for partition in acknowledged}
    finally:
        consumer.close()
    return {partition: sorted(numbers - set(read_all(bootstrap, topic, ends[partition], partition)))
            for partition, numbers in acknowledged.items()}
