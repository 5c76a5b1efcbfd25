"""Consumer groups with real clients against a real broker process: partitions shared and moved,
every record read once when each consumer commits after processing, committed offsets resumed,
groups mixing confluent-kafka with aiokafka, kafka-python and kcat, and bad input refused with
Kafka's errors while the coordinator keeps serving."""

from __future__ import annotations

import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from tests.support.group_clients import FOREIGN_CONSUMERS, KcatConsumer, confluent_consumer, poll_round, poll_until

from .conftest import create_topic

PARTITIONS = 6
WAIT_S = 60



def new_topic(broker) -> str:
    return create_topic(broker.bootstrap, f"t-{uuid.uuid4().hex[:10]}", partitions=PARTITIONS)


def produce(bootstrap: str, topic: str, values: list[str]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for index, value in enumerate(values):
        producer.produce(topic, value=value.encode(), partition=index % PARTITIONS)
    assert producer.flush(WAIT_S) == 0


def assigned(consumer: Consumer) -> set[int]:
    return {partition.partition for partition in consumer.assignment()}


def shared_by(consumers: list[Consumer]) -> bool:
    """Every partition is assigned to exactly one consumer, and each consumer has some."""
    assignments = [assigned(consumer) for consumer in consumers]
    return all(assignments) and sorted(p for a in assignments for p in a) == list(range(PARTITIONS))


def test_consumers_share_partitions_read_each_record_once_and_resume_at_committed_offsets(group_broker):
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    first_values = [f"a{index}" for index in range(300)]
    produce(bootstrap, topic, first_values)
    consumers = [confluent_consumer(bootstrap, group, topic) for _ in range(3)]
    read: dict[int, list[str]] = {}
    try:
        poll_until(consumers, read, lambda: shared_by(consumers) and sum(map(len, read.values())) == len(first_values),
                   "three consumers sharing the partitions and reading every record")
        leaving = consumers.pop()
        leaving_partitions = assigned(leaving)
        leaving.close()  # leaves the group: its partitions move to the others
        poll_until(consumers, read, lambda: shared_by(consumers), "the partitions of the consumer that left to move")
        assert leaving_partitions <= assigned(consumers[0]) | assigned(consumers[1])
        second_values = [f"b{index}" for index in range(300)]
        produce(bootstrap, topic, second_values)
        poll_until(consumers, read, lambda: sum(map(len, read.values())) >= len(first_values) + len(second_values),
                   "the remaining consumers to read the new records")
        everything = [value for values in read.values() for value in values]
        assert sorted(everything) == sorted(first_values + second_values)  # each record exactly once
    finally:
        for consumer in consumers:
            consumer.close()
    third_values = [f"c{index}" for index in range(60)]
    produce(bootstrap, topic, third_values)
    restarted = [confluent_consumer(bootstrap, group, topic)]
    resumed: dict[int, list[str]] = {}
    try:
        poll_until(restarted, resumed, lambda: len(resumed.get(0, ())) >= len(third_values), "the restarted consumer")
        poll_round(restarted, resumed)
        assert sorted(resumed[0]) == sorted(third_values)  # from the committed offsets on, nothing earlier
    finally:
        restarted[0].close()


def test_cooperative_sticky_consumers_share_and_hand_over(group_broker):
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    values = [f"v{index}" for index in range(120)]
    produce(bootstrap, topic, values)
    sticky = {"partition.assignment.strategy": "cooperative-sticky"}
    consumers = [confluent_consumer(bootstrap, group, topic, sticky) for _ in range(2)]
    read: dict[int, list[str]] = {}
    try:
        poll_until(consumers, read, lambda: shared_by(consumers) and sum(map(len, read.values())) == len(values),
                   "cooperative consumers sharing the partitions")
        consumers.pop().close()
        poll_until(consumers, read, lambda: len(assigned(consumers[0])) == PARTITIONS, "the partitions to move")
        assert sorted(value for values in read.values() for value in values) == sorted(values)
    finally:
        for consumer in consumers:
            consumer.close()


@pytest.mark.parametrize("client", sorted(FOREIGN_CONSUMERS))
def test_other_clients_share_a_group_with_confluent_kafka(group_broker, client):
    """One group of a confluent-kafka consumer and one of `client`: they agree on a protocol
    and split the partitions; together they read each record once."""
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    foreign = FOREIGN_CONSUMERS[client](bootstrap, group, topic)
    foreign.start()
    ours = [confluent_consumer(bootstrap, group, topic)]
    read: dict[int, list[str]] = {}
    try:
        poll_until(ours, read, lambda: len(assigned(ours[0])) == PARTITIONS // 2, "the group to split the partitions")
        values = [f"{client}-{index}" for index in range(60)]
        produce(bootstrap, topic, values)
        poll_until(ours, read, lambda: len(read.get(0, ())) + len(foreign.values()) >= len(values),
                   f"confluent-kafka and {client} to read every record")
        ours_partitions = assigned(ours[0])
        assert foreign.values() and read.get(0)
        assert sorted(read[0] + foreign.values()) == sorted(values)
        assert all(int(value.rsplit("-", 1)[1]) % PARTITIONS in ours_partitions for value in read[0])
    finally:
        ours[0].close()
        foreign.stop()


def test_metadata_up_to_offset_metadata_max_bytes_is_kept(group_broker):
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, ["x"] * PARTITIONS)
    consumer = confluent_consumer(bootstrap, group, topic)
    read: dict[int, list[str]] = {}
    try:
        poll_until([consumer], read, lambda: len(read.get(0, ())) == PARTITIONS, "the consumer to read")
        # confluent-kafka sends the metadata with its C string's NUL: 4095 characters are 4096 bytes.
        with pytest.raises(KafkaException) as refused:
            consumer.commit(offsets=[TopicPartition(topic, 0, 1, metadata="m" * 4096)], asynchronous=False)
        assert refused.value.args[0].name() == "OFFSET_METADATA_TOO_LARGE"
        consumer.commit(offsets=[TopicPartition(topic, 0, 1, metadata="m" * 4095)], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert (committed.offset, committed.metadata.rstrip("\x00")) == (1, "m" * 4095)
    finally:
        consumer.close()


def scraped_group_lag(broker, group: str) -> tuple[float | None, float | None]:
    """(total, max) lag of `group` on the broker's metrics endpoint."""
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=WAIT_S) as answer:
        body = answer.read().decode()
    samples = {sample.name: sample.value for family in text_string_to_metric_families(body)
               for sample in family.samples if sample.labels.get("group") == group}
    return samples.get("replog_consumer_group_lag_records"), samples.get("replog_consumer_group_max_lag_records")


def scrape_until(broker, group: str, expected: tuple[int, int]) -> None:
    deadline = time.monotonic() + WAIT_S
    while (scraped := scraped_group_lag(broker, group)) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"group lag {scraped}, not {expected}, after {WAIT_S}s")
        time.sleep(0.1)


def test_a_groups_lag_is_scraped_as_its_partitions_ends_less_its_committed_offsets(group_broker):
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    produce(bootstrap, topic, ["x"] * 3 * PARTITIONS)  # 3 records a partition
    consumer = confluent_consumer(bootstrap, group, topic)
    read: dict[int, list[str]] = {}
    try:
        poll_until([consumer], read, lambda: len(read.get(0, ())) == 3 * PARTITIONS, "the consumer to read")
        consumer.commit(offsets=[TopicPartition(topic, 0, 1), TopicPartition(topic, 1, 2)], asynchronous=False)
        scrape_until(group_broker, group, (2 + 1, 2))
        produce(bootstrap, topic, ["y"] * 3 * PARTITIONS)  # acknowledged by all: the ends moved
        scrape_until(group_broker, group, (2 + 1 + 3 * PARTITIONS, 2 + 3))
    finally:
        consumer.close()


def test_static_member_restarted_keeps_its_partitions_without_a_rebalance(group_broker):
    """KIP-345: a consumer with group.instance.id that restarts within its session takes its
    old place (a new member id, the same assignment); the other member is not disturbed."""
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    revocations: list[list] = []  # of the member that stays
    static = [confluent_consumer(bootstrap, group, topic, {"group.instance.id": "instance-0"},
                                 on_revoke=lambda consumer, partitions: revocations.append(partitions)),
              confluent_consumer(bootstrap, group, topic, {"group.instance.id": "instance-1"})]
    read: dict[int, list[str]] = {}
    try:
        poll_until(static, read, lambda: shared_by(static), "two static members sharing the partitions")
        before = [assigned(consumer) for consumer in static]
        revocations.clear()  # the rebalances that formed the group
        static.pop().close()  # a static member's close sends no LeaveGroup: its place is kept
        static.append(confluent_consumer(bootstrap, group, topic, {"group.instance.id": "instance-1"}))
        poll_until(static, read, lambda: assigned(static[1]) == before[1], "the restarted member's old partitions")
        assert assigned(static[0]) == before[0]
        values = [f"s{index}" for index in range(60)]
        produce(bootstrap, topic, values)
        poll_until(static, read, lambda: sum(map(len, read.values())) >= len(values), "both members to read")
        assert sorted(value for values in read.values() for value in values) == sorted(values)
        assert revocations == []  # no rebalance took the other member's partitions away
    finally:
        for consumer in static:
            consumer.close()


def test_a_killed_member_expires_after_its_session_and_its_partitions_move(group_broker):
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    killed = KcatConsumer(bootstrap, group, topic, session_timeout_ms=1500)
    killed.start()
    ours = [confluent_consumer(bootstrap, group, topic)]
    read: dict[int, list[str]] = {}
    try:
        poll_until(ours, read, lambda: len(assigned(ours[0])) == PARTITIONS // 2, "the group to split the partitions")
        killed.kill()
        poll_until(ours, read, lambda: len(assigned(ours[0])) == PARTITIONS, "the killed member's session to expire")
    finally:
        ours[0].close()


def test_a_second_instance_with_the_same_group_instance_id_fences_the_first(group_broker):
    """KIP-345: the consumer that a newer one with its group.instance.id replaced is told
    FENCED_INSTANCE_ID, fatal to librdkafka, and stops; the group settles with the new one.
    (Told UNKNOWN_MEMBER_ID instead, the old one would rejoin and replace the new one, which
    would do the same, for ever.)"""
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    old = confluent_consumer(bootstrap, group, topic, {"group.instance.id": "twin"})
    new: Consumer | None = None
    read: dict[int, list[str]] = {}
    try:
        poll_until([old], read, lambda: len(assigned(old)) == PARTITIONS, "the first instance to own every partition")
        new = confluent_consumer(bootstrap, group, topic, {"group.instance.id": "twin"})
        deadline = time.monotonic() + WAIT_S
        fenced = None
        while fenced is None:  # librdkafka reports a fatal error as a message's error
            assert time.monotonic() < deadline, "the first instance was never fenced"
            message = old.poll(0.1)
            assert message is None or message.error() is not None, "the first instance read a record"
            fenced = message.error() if message is not None and message.error().code() == KafkaError._FATAL else None
            poll_round([new], read)
        assert "Static consumer fenced" in fenced.str(), fenced  # librdkafka's text for FENCED_INSTANCE_ID
        values = [f"n{index}" for index in range(30)]
        produce(bootstrap, topic, values)
        poll_until([new], read, lambda: len(read.get(0, [])) >= len(values), "the new instance to read every record")
        assert sorted(read[0]) == sorted(values) and assigned(new) == set(range(PARTITIONS))
        admin = AdminClient({"bootstrap.servers": bootstrap})
        (description,) = admin.describe_consumer_groups([group])[group].result(WAIT_S).members
        assert (description.member_id, description.group_instance_id) == (new.memberid(), "twin")
    finally:
        old.close()
        if new is not None:
            new.close()


def test_offsets_sent_in_a_transaction_apply_on_commit_and_a_left_generations_are_refused(group_broker):
    """confluent-kafka's send_offsets_to_transaction: the offsets are the group's once the
    transaction commits, not if it aborts; and once a rebalance has moved the group to a new
    generation, offsets sent with the consumer's old group metadata are refused (KIP-447), an
    error the producer must abort on."""
    bootstrap, topic, group = group_broker.bootstrap, new_topic(group_broker), f"g-{uuid.uuid4().hex[:8]}"
    first = confluent_consumer(bootstrap, group, topic)
    second: Consumer | None = None
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    read: dict[int, list[str]] = {}
    try:
        poll_until([first], read, lambda: len(assigned(first)) == PARTITIONS, "the consumer to own every partition")
        old_generation = first.consumer_group_metadata()
        producer.init_transactions(WAIT_S)

        def in_transaction(offset: int, metadata, commit: bool) -> None:
            producer.begin_transaction()
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, offset)], metadata, WAIT_S)
            producer.commit_transaction(WAIT_S) if commit else producer.abort_transaction(WAIT_S)

        in_transaction(5, old_generation, commit=True)
        in_transaction(6, old_generation, commit=False)
        (committed,) = first.committed([TopicPartition(topic, 0)], WAIT_S)
        assert committed.offset == 5

        second = confluent_consumer(bootstrap, group, topic)
        poll_until([first, second], read, lambda: shared_by([first, second]), "a rebalance to a new generation")
        producer.begin_transaction()
        with pytest.raises(KafkaException) as refused:
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, 7)], old_generation, WAIT_S)
        assert refused.value.args[0].code() == KafkaError.ILLEGAL_GENERATION, refused.value
        assert refused.value.args[0].txn_requires_abort()
        producer.abort_transaction(WAIT_S)
        in_transaction(8, first.consumer_group_metadata(), commit=True)  # the current generation's
        (committed,) = second.committed([TopicPartition(topic, 0)], WAIT_S)
        assert committed.offset == 8
    finally:
        first.close()
        if second is not None:
            second.close()
