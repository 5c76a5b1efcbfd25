"""Leader election across broker processes: leaderElection (docs/design.md §4) over a real store."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic

from replog.coord_backends import NoNode, open_store, paths
from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.net.client import BrokerConnection
from tests.cluster.test_replication import WAIT_S
from tests.support.polling import eventually, wait_until


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

    wait_until(all_in_sync, "every replica of every partition in the ISR", WAIT_S)


def test_the_preferred_leader_returns_after_a_restart(cluster):
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("preferred", 1, 3)])["preferred"].result(timeout=60)
    preferred = admin.list_topics("preferred", timeout=30).topics["preferred"].partitions[0].replicas[0]

    def leader(client: AdminClient) -> int:
        return client.list_topics("preferred", timeout=30).topics["preferred"].partitions[0].leader

    cluster.brokers[preferred].stop()
    others = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: leader(others) not in (-1, preferred), "another replica to lead", WAIT_S)
    cluster.brokers[preferred].restart()
    wait_until(lambda: leader(AdminClient({"bootstrap.servers": cluster.bootstrap})) == preferred,
               "leadership to return to the preferred replica (checkLoadBalancing)", WAIT_S)


async def test_a_killed_broker_is_deposed_and_leaves_every_isr_before_its_session_expires(long_session_cluster):
    """A broker killed outright keeps its registration and leader nodes until its session
    expires (here: longer than the test waits). Its followers, refused on reconnecting, depose
    it where it led, and the leaders it followed, refused when they probe it after its
    connections closed, shrink it out of their ISRs: the partitions it led get a successor and
    acks=all stops waiting for it, while the store still holds its session."""
    cluster = long_session_cluster
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("orphaned", 3, 3)])["orphaned"].result(timeout=60)

    def all_in_sync() -> bool:  # every follower fetching: each has a connection to each leader
        described = admin.list_topics("orphaned", timeout=30).topics["orphaned"].partitions
        return all(sorted(meta.isrs) == [0, 1, 2] for meta in described.values())

    wait_until(all_in_sync, "every replica of every partition in the ISR", WAIT_S)
    leaders = {index: meta.leader for index, meta in admin.list_topics("orphaned", timeout=30).topics["orphaned"].partitions.items()}
    victim = leaders[0]
    assert sorted(leaders.values()) == [0, 1, 2]  # it leads one partition and follows the others
    survivors = [broker for broker_id, broker in cluster.brokers.items() if broker_id != victim]
    store = open_store(cluster.coord_url)
    await store.start()
    try:
        cluster.brokers[victim].kill()

        async def victim_gone_from_every_partition() -> bool:
            for index in leaders:
                try:  # the leader node comes and goes while the replicas elect
                    leader = LeaderRecord.decode((await store.get(paths.leader("orphaned", index)))[0]).leader
                except NoNode:
                    return False
                isr = IsrRecord.decode((await store.get(paths.isr("orphaned", index)))[0]).isr
                if victim in (leader, *isr):
                    return False
            return True

        await eventually(victim_gone_from_every_partition, WAIT_S, f"broker {victim} deposed and out of every ISR")
        assert await store.exists(paths.broker(victim)) is not None  # its session still lives

        async def successor_named(broker) -> bool:
            async with await BrokerConnection.open("127.0.0.1", broker.port) as connection:
                leader = (await connection.metadata(["orphaned"])).topics["orphaned"].partitions[0].leader_id
            return leader not in (-1, victim)

        for broker in survivors:
            await eventually(lambda: successor_named(broker), WAIT_S, f"broker {broker.port} to name a successor")
    finally:
        await store.close()
