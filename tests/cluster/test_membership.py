"""`replog cluster` (docs/design.md §12): status, adding and removing brokers, preferred and unclean leader
elections, on broker processes over ZooKeeper in two racks, with an acks=all idempotent producer
of numbered records running through each change and a read-back at the end (not through the
unclean election, which may lose records by design). DescribeCluster and ElectLeaders are asked
through confluent-kafka's and kafka-python's admin clients too.

The tests share one cluster and run in order: brokers 0-3 (racks a, b, a, b) hold a 12-partition
topic; broker 4 (rack a) is added, then removed again, both through a broker (--bootstrap-server:
Kafka's requests, UnregisterBroker to finish the removal) after the store door planned the same. Automatic leader rebalancing is off, so
that only the command under test moves leadership back."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest
from confluent_kafka import ElectionType, TopicPartition
from kafka import KafkaAdminClient
from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey

from tests.support.harness import WAIT_S
from tests.support.cluster import QUICK_SETTINGS, Cluster
from tests.support.failover import FAILOVER_WAIT_S, TimedProducer, missing_after_read_back, quiet_admin
from tests.support.servers import unique_root
from tests.cli.test_topics_cli import one_line_error, replog, succeeded
from tests.support.polling import wait_until

RACKS = {0: "a", 1: "b", 2: "a", 3: "b", 4: "a"}
SPREAD = "spread"
SPREAD_PARTITIONS = 12
# What plans made moments apart share while records are produced: the sizes grow meanwhile, and
# they break ties between plans moving as many replicas.
SAME_PLAN = ("replicas_moved", "lower_bound")


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    running = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", tmp_path_factory.mktemp("membership"),
                      len(RACKS), settings=(*QUICK_SETTINGS, "--set", "auto.leader.rebalance.enable=false"))
    for broker_id, broker in running.brokers.items():
        broker.extra_args += ("--rack", RACKS[broker_id])
    try:
        for broker_id in range(4):
            running.brokers[broker_id].start()
        succeeded(replog("topics", "create", SPREAD, "--partitions", str(SPREAD_PARTITIONS), "--replication-factor",
                         "3", "--config", "min.insync.replicas=2", "--coord", running.coord_url))
        yield running
    finally:
        running.stop()


def coord(cluster) -> tuple[str, str]:
    return "--coord", cluster.coord_url


def status(*door: str) -> dict:
    return json.loads(succeeded(replog("cluster", "status", "--output", "json", *door)).stdout)


def partitions(cluster, topic: str) -> dict[int, dict]:
    document = json.loads(succeeded(replog("topics", "describe", topic, "--output", "json", *coord(cluster))).stdout)
    return {partition["partition"]: partition for partition in document["topics"][0]["partitions"]}


def settled(cluster) -> dict[tuple[str, int], dict] | None:
    """Every topic's partitions, once none is moving, under-replicated or leaderless. The planner
    balances them all: __consumer_offsets too, which the read-back consumer's group creates."""
    document = json.loads(succeeded(replog("topics", "describe", "--output", "json", *coord(cluster))).stdout)
    described = {(topic["name"], part["partition"]): part for topic in document["topics"] for part in topic["partitions"]}
    if any(part["flags"] or part["adding_replicas"] or part["removing_replicas"] for part in described.values()):
        return None
    return described


def within_one(counts: collections.Counter, brokers) -> bool:
    values = [counts[broker] for broker in brokers]
    return max(values) - min(values) <= 1


def assert_balanced(described: dict[tuple[str, int], dict], brokers) -> None:
    replicas = collections.Counter(broker for part in described.values() for broker in part["replicas"])
    preferred = collections.Counter(part["replicas"][0] for part in described.values())
    assert set(replicas) == set(brokers), replicas
    assert within_one(replicas, brokers), replicas
    assert within_one(preferred, brokers), preferred
    for index, part in described.items():
        assert {RACKS[broker] for broker in part["replicas"]} == {"a", "b"}, (index, part["replicas"])


def bootstrap(cluster) -> tuple[str, str]:
    return "--bootstrap-server", cluster.bootstrap


def plan(cluster, command: str, ids: str, *flags: str, door=coord) -> dict:
    return json.loads(succeeded(replog("cluster", command, ids, *flags, "--output", "json", *door(cluster))).stdout)


def test_a_topic_spans_both_racks_with_balanced_preferred_leaders_and_status_shows_the_brokers(cluster):
    assert_balanced(wait_until(lambda: settled(cluster), "the topics settled", FAILOVER_WAIT_S), range(4))
    shown = status(*coord(cluster))
    assert [(b["broker"], b["rack"], b["alive"], b["replicas"]) for b in shown["brokers"]] == [
        (broker, RACKS[broker], True, 9) for broker in range(4)]
    assert all(b["queue_depth"] is not None for b in shown["brokers"])
    assert (shown["partitions"], shown["under_replicated"], shown["offline"], shown["reassignments"]) == (12, 0, 0, 0)
    through_broker = status("--bootstrap-server", cluster.bootstrap)
    assert [(b["broker"], b["rack"], b["replicas"], b["queue_depth"]) for b in through_broker["brokers"]] == [
        (broker, RACKS[broker], 9, None) for broker in range(4)]
    assert through_broker["reassignments"] is None
    kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        described = kafka_python.describe_cluster()
    finally:
        kafka_python.close()
    assert sorted((broker["broker_id"], broker["rack"], broker["is_fenced"]) for broker in described["brokers"]) == [
        (broker, RACKS[broker], False) for broker in range(4)]


def test_adding_a_broker_moves_the_lower_bound_and_balances_within_one(cluster):
    cluster.brokers[4].start()
    with TimedProducer(cluster.bootstrap, SPREAD, SPREAD_PARTITIONS) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        dry = plan(cluster, "add-brokers", "4", "--dry-run")
        assert not dry["executed"] and dry["plan"]["replicas_moved"] == dry["plan"]["lower_bound"] > 0
        through_broker = plan(cluster, "add-brokers", "4", "--dry-run", door=bootstrap)["plan"]
        for planned in (dry["plan"], through_broker):  # either door asks the brokers for the sizes
            moves = planned["moves"]
            assert all(move["size_bytes"] > 0 for move in moves if move["added"]), "each partition's size"
            assert planned["bytes_moved"] == sum(move["size_bytes"] * len(move["added"]) for move in moves)
        assert [through_broker[key] for key in SAME_PLAN] == [dry["plan"][key] for key in SAME_PLAN]
        done = plan(cluster, "add-brokers", "4", "--yes", door=bootstrap)
        assert [done["plan"][key] for key in SAME_PLAN] == [dry["plan"][key] for key in SAME_PLAN]
        described = wait_until(lambda: settled(cluster), "every move in sync", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert_balanced(described, range(5))
    missing = missing_after_read_back(cluster.bootstrap, SPREAD, acknowledged)
    assert all(not numbers for numbers in missing.values()), missing


def test_removing_a_broker_leaves_nothing_on_it_and_deletes_its_state_path(cluster):
    with TimedProducer(cluster.bootstrap, SPREAD, SPREAD_PARTITIONS) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        through_broker = plan(cluster, "remove-brokers", "4", "--dry-run", door=bootstrap)["plan"]
        through_store = plan(cluster, "remove-brokers", "4", "--dry-run")["plan"]
        assert [through_broker[key] for key in SAME_PLAN] == [through_store[key] for key in SAME_PLAN]
        done = plan(cluster, "remove-brokers", "4", "--yes", door=bootstrap)
        assert (done["queues_deleted"], done["deletions_finished"]) == ([4], None), "the broker cannot say which"
        described = wait_until(lambda: settled(cluster), "every partition in sync", FAILOVER_WAIT_S)
        acknowledged = producer.stop()
    assert_balanced(described, range(4))
    missing = missing_after_read_back(cluster.bootstrap, SPREAD, acknowledged)
    assert all(not numbers for numbers in missing.values()), missing
    cluster.brokers[4].stop()
    shown = status(*coord(cluster))
    assert [b["broker"] for b in shown["brokers"]] == [0, 1, 2, 3], "broker 4 is known without its state path"


def test_removing_brokers_below_the_replication_factor_is_refused(cluster):
    line = one_line_error(replog("cluster", "remove-brokers", "1,2", "--yes", *coord(cluster)), 1)
    assert "cannot remove brokers 1, 2" in line and "needs 3 replicas" in line
    assert status(*coord(cluster))["reassignments"] == 0
    through_broker = replog("cluster", "remove-brokers", "1,2", "--yes", *bootstrap(cluster))
    assert one_line_error(through_broker, 1) == line
    unknown = replog("cluster", "remove-brokers", "9", *bootstrap(cluster))
    assert "brokers [9] are not in the cluster" in one_line_error(unknown, 1)


def test_unregistering_a_broker_that_holds_replicas_is_refused_and_deletes_nothing(cluster):
    answer = asyncio.run(unregister(cluster, 3))
    assert answer.error_code == ErrorCode.reassignment_in_progress, answer
    assert answer.error_message.startswith("brokers [3] still hold a replica of "), answer.error_message
    assert 3 in [b["broker"] for b in status(*coord(cluster))["brokers"]]
    gone = asyncio.run(unregister(cluster, 9))
    assert gone.error_code == ErrorCode.broker_id_not_registered and "broker 9 has no state-change path" in gone.error_message


async def unregister(cluster, broker_id: int):
    """Kafka's UnregisterBroker, asked of broker 0."""
    connection = await BrokerConnection.open("127.0.0.1", cluster.brokers[0].port)
    try:
        return await connection.request(ApiKey.UNREGISTER_BROKER, None, {"broker_id": broker_id})
    finally:
        connection.close()


def leader(cluster, topic: str, partition: int) -> int | None:
    return partitions(cluster, topic)[partition]["leader"]


def in_sync_again(cluster, topic: str) -> bool:
    return all(len(part["isr"]) == len(part["replicas"]) and part["leader"] is not None
               for part in partitions(cluster, topic).values())


def test_preferred_election_after_a_restart_moves_leadership_back(cluster):
    topic = "preferred"
    succeeded(replog("topics", "create", topic, "--replica-assignment", "0:1:2,1:2:3", *coord(cluster)))
    wait_until(lambda: in_sync_again(cluster, topic), "the topic in sync", FAILOVER_WAIT_S)
    with TimedProducer(cluster.bootstrap, topic, 2) as producer:
        wait_until(producer.acknowledged_on_every_partition, "an acknowledgement on every partition", WAIT_S)
        # Broker 1 goes first: partition 0 fails over when broker 0 goes, after broker 1 is back,
        # so neither restart can hand a partition back to its preferred leader by chance.
        for broker in (1, 0):
            cluster.brokers[broker].stop()
            cluster.brokers[broker].restart()
        wait_until(lambda: in_sync_again(cluster, topic), "the restarted brokers in sync", FAILOVER_WAIT_S)
        assert leader(cluster, topic, 0) != 0 and leader(cluster, topic, 1) != 1
        done = json.loads(succeeded(replog("cluster", "elect-leaders", "--preferred", "--topic", topic,
                                           "--partition", "0", "--output", "json", *coord(cluster))).stdout)
        assert [(p["partition"], p["outcome"], p["leader"]) for p in done["partitions"]] == [(0, "elected", 0)]
        # Kafka's admin client, through a broker: ElectLeaders.
        kafka_admin = quiet_admin(cluster.bootstrap)  # kept: a collected client fails its futures
        result = kafka_admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 1)]).result(timeout=FAILOVER_WAIT_S)
        assert list(result.values()) == [None], result
        assert (leader(cluster, topic, 0), leader(cluster, topic, 1)) == (0, 1)
        again = json.loads(succeeded(replog("cluster", "elect-leaders", "--preferred", "--topic", topic, "--output",
                                            "json", "--bootstrap-server", cluster.bootstrap)).stdout)
        assert [p["outcome"] for p in again["partitions"]] == ["not needed", "not needed"]
        kafka_python = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
        try:  # raises on any error but ELECTION_NOT_NEEDED
            kafka_python.elect_leaders(0, {topic: [0, 1]})
        finally:
            kafka_python.close()
        acknowledged = producer.stop()
    missing = missing_after_read_back(cluster.bootstrap, topic, acknowledged)
    assert all(not numbers for numbers in missing.values()), missing


def test_unclean_election_happens_only_when_asked_and_is_reported(cluster):
    """Broker 3 falls out of the ISR, then broker 2, the last in-sync replica, stops: broker 3
    back does not lead until asked."""
    topic = "unclean"
    succeeded(replog("topics", "create", topic, "--replica-assignment", "2:3", "--config", "min.insync.replicas=1",
                     *coord(cluster)))
    wait_until(lambda: in_sync_again(cluster, topic), "the topic in sync", FAILOVER_WAIT_S)
    cluster.brokers[3].stop()
    wait_until(lambda: partitions(cluster, topic)[0]["isr"] == [2], "broker 3 out of the ISR", FAILOVER_WAIT_S)
    cluster.brokers[2].stop()
    cluster.brokers[3].restart()  # returns once its election is lost: it is not in sync
    assert leader(cluster, topic, 0) is None
    refused = replog("cluster", "elect-leaders", "--preferred", "--topic", topic, *coord(cluster))
    assert "preferred replica 2 is not registered" in one_line_error(refused, 1)
    done = replog("cluster", "elect-leaders", "--unclean", "--topic", topic, "--output", "json", *coord(cluster))
    elected = json.loads(succeeded(done).stdout)["partitions"]
    assert [(p["outcome"], p["leader"]) for p in elected] == [("elected", 3)]
    assert "unclean election: broker 3 leads unclean-0; records acknowledged since it fell out of the ISR [2]" \
        in done.stderr
    assert leader(cluster, topic, 0) == 3
    cluster.brokers[2].restart()
    wait_until(lambda: in_sync_again(cluster, topic), "broker 2 following broker 3", FAILOVER_WAIT_S)
