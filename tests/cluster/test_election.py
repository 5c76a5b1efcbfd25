"""Leader election across broker processes: the seed's leaderElection over a real store."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode

from replog.coord_backends import open_store, paths
from replog.coord_backends.paths import LeaderRecord
from replog.net.client import BrokerConnection
from tests.cluster.test_replication import WAIT_S, wait_until
from tests.polling import eventually


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


async def test_metadata_stops_naming_a_killed_leader_before_its_session_expires(cluster):
    """A leader killed outright stays in the store until its session expires; its followers,
    refused on reconnecting, stop naming it in Metadata meanwhile (so that clients keep asking
    instead of waiting at a dead port), and name its successor once elected."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic("orphaned", 3, 3)])["orphaned"].result(timeout=60)

    def all_in_sync() -> bool:  # every follower fetching: each has a connection to each leader
        described = admin.list_topics("orphaned", timeout=30).topics["orphaned"].partitions
        return all(sorted(meta.isrs) == [0, 1, 2] for meta in described.values())

    wait_until(all_in_sync, "every replica of every partition in the ISR")
    leaders = {index: meta.leader for index, meta in admin.list_topics("orphaned", timeout=30).topics["orphaned"].partitions.items()}
    victim = leaders[0]
    survivors = [broker for broker_id, broker in cluster.brokers.items() if broker_id != victim]
    store = open_store(cluster.coord_url)
    await store.start()
    try:
        cluster.brokers[victim].kill()

        async def described_by(broker):
            async with await BrokerConnection.open("127.0.0.1", broker.port) as connection:
                return await connection.metadata(["orphaned"])

        async def victim_hidden_while_registered(broker) -> bool:
            answer = await described_by(broker)
            partitions = answer.topics["orphaned"].partitions
            return victim in answer.brokers and all(
                (partitions[index].leader_id, partitions[index].error_code) == (-1, ErrorCode.leader_not_available)
                if leader == victim else partitions[index].leader_id == leader
                for index, leader in leaders.items())

        for broker in survivors:
            await eventually(lambda: victim_hidden_while_registered(broker), WAIT_S, f"broker {broker.port} to stop naming broker {victim}")
        # The store still held the victim's session: the brokers knew better than the store.
        assert await store.exists(paths.broker(victim)) is not None
        assert LeaderRecord.decode((await store.get(paths.leader("orphaned", 0)))[0]).leader == victim

        async def successor_named(broker) -> bool:
            leader = (await described_by(broker)).topics["orphaned"].partitions[0].leader_id
            return leader not in (-1, victim)

        for broker in survivors:
            await eventually(lambda: successor_named(broker), WAIT_S, f"broker {broker.port} to name a successor")
    finally:
        await store.close()
