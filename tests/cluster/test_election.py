"""Leader election across broker processes: the seed's leaderElection over a real store."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.test_replication import wait_until


def test_every_partition_gets_its_preferred_replica_as_leader(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("balanced", 6, 3)])["balanced"].result(timeout=60)
    partitions = admin.list_topics("balanced", timeout=30).topics["balanced"].partitions
    assert {index: meta.leader for index, meta in partitions.items()} == {index: meta.replicas[0] for index, meta in partitions.items()}

    # A follower slow to start fetching on a busy machine may leave the ISR for a moment; all
    # three must be in sync once the fetchers run.
    def all_in_sync() -> bool:
        described = admin.list_topics("balanced", timeout=30).topics["balanced"].partitions
        return all(sorted(meta.isrs) == [0, 1, 2] for meta in described.values())

    wait_until(all_in_sync, "every replica of every partition in the ISR")
