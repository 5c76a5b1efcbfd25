"""Leader election across broker processes: the seed's leaderElection over a real store."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic


def test_every_partition_gets_its_preferred_replica_as_leader(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("balanced", 6, 3)])["balanced"].result(timeout=60)
    partitions = admin.list_topics("balanced", timeout=30).topics["balanced"].partitions
    assert {index: meta.leader for index, meta in partitions.items()} == {index: meta.replicas[0] for index, meta in partitions.items()}
    assert all(sorted(meta.isrs) == [0, 1, 2] for meta in partitions.values())
