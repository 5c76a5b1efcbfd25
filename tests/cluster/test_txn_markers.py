"""Transaction markers between real brokers (three in this process, tests/cluster/test_embedded.py):
a broker's marker channel (net/txn_markers.py), as its transaction coordinator uses it, writes a
marker into a partition led by another broker, follows the partition to its next leader when
the first stops, and gives up on a partition once its topic is deleted."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient

from replog.storage.control_batches import ControlType, Marker
from tests.cluster.test_embedded import EmbeddedCluster
from tests.support.harness import WAIT_S, create_topic, fully_in_sync, leader_of, settled_view
from tests.support.polling import wait_until

CLUSTER_SIZE = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = EmbeddedCluster(tmp_path_factory.mktemp("txn-markers"), CLUSTER_SIZE)
    try:
        cluster.start()
        yield cluster
    finally:
        leftovers = cluster.close()
    assert leftovers == [], "tasks still running after every broker stopped"


def write_markers(cluster, sender: int, marker: Marker, topic: str) -> None:
    cluster.call(cluster.brokers[sender].node.txn_markers.write_markers(marker, [(topic, 0)]))


def coordinator_epochs(cluster, broker_id: int, topic: str) -> dict[int, int]:
    """The coordinator epoch of each producer's last marker in the broker's replica of the
    topic's partition 0."""
    partition = cluster.brokers[broker_id].node.replicas.hosted(topic, 0)
    return {} if partition is None else {state.producer_id: state.coordinator_epoch for state in partition.producer_states()}


def test_markers_reach_the_leader_on_another_broker_and_follow_it_when_it_stops(cluster):
    topic = "txn-markers"
    create_topic(cluster, topic)
    wait_until(lambda: fully_in_sync(cluster, topic), "all three replicas in the ISR", WAIT_S)
    leader = settled_view(cluster, topic).leader_id
    sender = min(broker_id for broker_id in cluster.brokers if broker_id != leader)

    write_markers(cluster, sender, Marker(1001, 0, ControlType.COMMIT, 5), topic)
    assert coordinator_epochs(cluster, leader, topic) == {1001: 5}

    cluster.brokers[leader].stop()  # a controlled shutdown: another replica leads
    try:
        # Sent at once: the sender's metadata may still name the stopped leader.
        write_markers(cluster, sender, Marker(1002, 0, ControlType.ABORT, 6), topic)
        wait_until(lambda: leader_of(cluster, topic) not in (-1, leader), "a new leader", WAIT_S)
        successor = leader_of(cluster, topic)
        assert coordinator_epochs(cluster, successor, topic) == {1001: 5, 1002: 6}
    finally:
        cluster.brokers[leader].restart()


def test_a_marker_for_a_deleted_topic_is_given_up(cluster):
    topic = "txn-markers-deleted"
    create_topic(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=WAIT_S)
    # Returns, rather than retrying until the call's timeout fails the test.
    write_markers(cluster, 0, Marker(2001, 0, ControlType.COMMIT, 1), topic)
