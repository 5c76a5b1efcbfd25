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


def test_the_preferred_leader_returns_after_a_restart(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("preferred", 1, 3)])["preferred"].result(timeout=60)
    preferred = admin.list_topics("preferred", timeout=30).topics["preferred"].partitions[0].replicas[0]

    def leader(client: AdminClient) -> int:
        return client.list_topics("preferred", timeout=30).topics["preferred"].partitions[0].leader

    cluster.brokers[preferred].stop()
    others = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: leader(others) not in (-1, preferred), "another replica to lead")
    cluster.brokers[preferred].restart()
    wait_until(lambda: leader(AdminClient({"bootstrap.servers": cluster.bootstrap})) == preferred,
               "leadership to return to the preferred replica (checkLoadBalancing)")
