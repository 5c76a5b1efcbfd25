"""A compacted topic replicated three ways: each replica cleans its own log, below its own high
watermark, and whichever replica leads serves the latest record of every key, through a leader's
SIGKILL and its return as preferred leader with a log truncated and refetched by epochs."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import NewTopic

from tests.cluster.conftest import SHARED_SERVERS, _running_cluster
from tests.support.failover import quiet_admin, wait_until_in_sync
from tests.support import compaction
from tests.support.compaction import WAIT_S, log_bytes
from tests.support.polling import wait_until

KEYS = 50


@pytest.fixture(params=["zk"])  # the store plays no part in cleaning: one backend suffices
def cleaning_cluster(request, tmp_path):
    yield from _running_cluster(request, tmp_path, SHARED_SERVERS, extra_args=compaction.CLEANER_SETTINGS)


def leader_of(bootstrap: str, topic: str) -> int:
    return quiet_admin(bootstrap).list_topics(topic, timeout=30).topics[topic].partitions[0].leader


def test_every_replica_compacts_and_any_leader_serves_the_latest_of_every_key(cleaning_cluster):
    cluster = cleaning_cluster
    topic = f"t-{uuid.uuid4().hex[:10]}"
    admin = quiet_admin(cluster.bootstrap)  # kept: a collected client fails what it has in flight
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[0, 1, 2]], config={
        **compaction.COMPACT_TOPIC_CONFIG, "min.insync.replicas": "2"})])[topic].result(WAIT_S)
    latest = {}
    compaction.overwrite(cluster.bootstrap, topic, KEYS, range(20), latest)
    written_bytes = log_bytes(cluster.brokers[0].data_dir / f"{topic}-0")
    wait_until(lambda: all(log_bytes(broker.data_dir / f"{topic}-0") < written_bytes / 3
                           for broker in cluster.brokers.values()), "every replica to compact its log", WAIT_S)

    cluster.brokers[0].kill()
    wait_until(lambda: leader_of(cluster.bootstrap, topic) in (1, 2), "a new leader", WAIT_S)
    assert compaction.last_per_key(compaction.read_from_start(cluster.bootstrap, topic)) == latest
    compaction.overwrite(cluster.bootstrap, topic, KEYS, range(20, 30), latest)

    cluster.brokers[0].restart()
    wait_until_in_sync(cluster.bootstrap, topic)
    wait_until(lambda: leader_of(cluster.bootstrap, topic) == 0, "the preferred replica to lead again", WAIT_S)
    assert compaction.last_per_key(compaction.read_from_start(cluster.bootstrap, topic)) == latest
