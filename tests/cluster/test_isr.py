"""The leader's ISR upkeep across broker processes: shrink on a dead follower, writes go on,
and acks=all is refused once the ISR is below min.insync.replicas."""

from __future__ import annotations


from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from replog.net.client import BrokerConnection
from tests.support.batches import build_batch
from tests.support.polling import wait_until

NOT_ENOUGH_REPLICAS = 19

WAIT_S = 30


def create(cluster, name: str, min_insync: int) -> dict:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, 1, 3, config={"min.insync.replicas": str(min_insync)})
    admin.create_topics([topic])[name].result(timeout=60)
    return {"admin": admin, "replicas": admin.list_topics(name, timeout=30).topics[name].partitions[0].replicas}


def isr_of(admin: AdminClient, name: str) -> list[int]:
    return sorted(admin.list_topics(name, timeout=30).topics[name].partitions[0].isrs)


def produce_one(cluster, name: str) -> KafkaError | None:
    outcome = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 8000})
    producer.produce(name, value=b"v", on_delivery=lambda error, message: outcome.append(error))
    producer.flush(20)
    assert len(outcome) == 1
    return outcome[0]


def test_a_stopped_follower_leaves_the_isr_and_acks_all_writes_go_on(cluster):
    topic = create(cluster, "shrinks", min_insync=1)
    leader, follower = topic["replicas"][0], topic["replicas"][1]
    cluster.brokers[follower].stop()
    wait_until(lambda: follower not in isr_of(topic["admin"], "shrinks"), "the stopped follower to leave the ISR", WAIT_S)
    assert leader in isr_of(topic["admin"], "shrinks")
    assert produce_one(cluster, "shrinks") is None


async def test_acks_all_is_refused_below_min_insync_replicas(cluster):
    topic = create(cluster, "strict", min_insync=3)
    leader = topic["replicas"][0]
    cluster.brokers[topic["replicas"][2]].stop()
    wait_until(lambda: len(isr_of(topic["admin"], "strict")) < 3, "the ISR to shrink below 3", WAIT_S)
    # librdkafka retries NOT_ENOUGH_REPLICAS until its own timeout; ask the leader directly.
    connection = await BrokerConnection.open("127.0.0.1", cluster.brokers[leader].port)
    try:
        answer = await connection.produce("strict", 0, bytes(build_batch()), -1, 5000)
    finally:
        connection.close()
    assert answer.error_code == NOT_ENOUGH_REPLICAS


def test_a_broker_killed_and_restarted_on_its_address_rejoins_every_isr(cluster):
    """A broker restarted replaces its registration by one of a new life, and its leaders count
    only that life's fetches: they must see the new registration even when they read the
    registered names only after both steps, which then look unchanged."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("rejoins", 6, 3)])["rejoins"].result(timeout=60)
    everyone = sorted(cluster.brokers)

    def isrs() -> list[list[int]]:
        partitions = admin.list_topics("rejoins", timeout=30).topics["rejoins"].partitions.values()
        return [sorted(partition.isrs) for partition in partitions]

    wait_until(lambda: isrs() == [everyone] * 6, "every partition in full ISR", WAIT_S)
    victim = cluster.brokers[1]
    victim.kill()
    victim.restart()
    wait_until(lambda: isrs() == [everyone] * 6, "the restarted broker back in every ISR", WAIT_S)
