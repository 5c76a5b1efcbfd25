"""Shutdown without the coordination store: a broker given SIGTERM while its ZooKeeper or etcd
server is down skips the hand-over it cannot make and still closes its logs cleanly."""

from __future__ import annotations

from replog.storage.clean_shutdown import recorded_cleanly_closed
from tests.support.harness import WAIT_S, create_topic, fully_in_sync, leader_of
from tests.cluster.test_replication import produce_numbered
from tests.support.polling import wait_until


def test_a_sigterm_during_a_coordination_outage_still_shuts_down_cleanly(private_cluster):
    cluster = private_cluster
    create_topic(cluster, "outage")
    assert len(produce_numbered(cluster.bootstrap, "outage", 0, 50)) == 50
    wait_until(lambda: fully_in_sync(cluster, "outage"), "all three replicas in the ISR", WAIT_S)
    leader = cluster.brokers[leader_of(cluster, "outage")]  # it has a hand-over to attempt
    cluster.server.stop()
    # BrokerProcess.stop waits a bounded time, then kills: a hung shutdown is not status 0.
    assert leader.stop() == 0, "".join(leader.output[-40:])
    assert "outage-0" in recorded_cleanly_closed(leader.data_dir), "the log was not closed cleanly"
    # The other two would each wait out the same outage again under the teardown's SIGTERM, and
    # nothing of theirs is checked.
    for broker in cluster.brokers.values():
        broker.kill()
