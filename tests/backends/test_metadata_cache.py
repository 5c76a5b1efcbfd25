"""The broker's metadata cache follows the store on every backend."""

from __future__ import annotations

from replog.coord_backends import paths
from replog.coord_backends.paths import BrokerRegistration, IsrRecord, LeaderRecord, ReplicaAssignment, TopicDeletion, TopicId
from replog.replication.metadata_cache import LIVES_KEPT_PER_BROKER, NO_LEADER, MetadataCache, PartitionView
from replog.replication.election import SeenPartition

WAIT_S = 10


async def test_cache_follows_brokers_topics_leaders_and_isr(connect):
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.TOPICS, b"", make_parents=True)
    await admin.create(paths.replicas("orders", 0), ReplicaAssignment((1, 2)).encode(), make_parents=True)
    cache = MetadataCache(broker_side)
    await cache.start()
    try:
        assert cache.topics == {"orders": {0: PartitionView(replicas=(1, 2))}}
        assert cache.brokers == {}

        await admin.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9092, "r1").encode(), ephemeral=True)
        assert await cache.wait_for(lambda: 1 in cache.brokers, WAIT_S)
        assert cache.brokers[1].rack == "r1"

        await admin.create(paths.leader("orders", 0), LeaderRecord(leader=1, leader_epoch=4).encode(), ephemeral=True)
        await admin.create(paths.isr("orders", 0), IsrRecord(isr=(1, 2), leader_epoch=4).encode())
        expected = PartitionView(replicas=(1, 2), leader=1, leader_epoch=4, isr=(1, 2))
        assert await cache.wait_for(lambda: cache.topics["orders"][0] == expected, WAIT_S)

        await admin.create(paths.replicas("orders", 1), ReplicaAssignment((2, 1)).encode(), make_parents=True)
        await admin.create(paths.replicas("events", 0), ReplicaAssignment((1,)).encode(), make_parents=True)
        assert await cache.wait_for(lambda: 1 in cache.topics["orders"] and "events" in cache.topics, WAIT_S)

        await admin.delete(paths.leader("orders", 0))
        assert await cache.wait_for(lambda: cache.topics["orders"][0].leader == NO_LEADER, WAIT_S)

        await admin.delete(paths.topic("orders"), recursive=True)
        assert await cache.wait_for(lambda: "orders" not in cache.topics, WAIT_S)
        assert "events" in cache.topics
    finally:
        await cache.close()


async def test_wait_for_gives_up_at_its_deadline(store):
    await store.create(paths.BROKER_IDS, b"", make_parents=True)
    await store.create(paths.TOPICS, b"", make_parents=True)
    cache = MetadataCache(store)
    await cache.start()
    try:
        assert await cache.wait_for(lambda: "never" in cache.topics, 0.2) is False
    finally:
        await cache.close()


async def started_cache_hearing_assignments(store) -> tuple[MetadataCache, list[tuple[str, list[int]]]]:
    """A started cache, and the assignment changes it reports to the broker, in order."""
    cache = MetadataCache(store)
    heard: list[tuple[str, list[int]]] = []

    async def record(topic: str, partitions: list[int]) -> None:
        heard.append((topic, partitions))

    cache.on_assignment_changed = record
    await cache.start()
    return cache, heard


async def test_the_broker_hears_of_every_change_of_assignment(connect):
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.replicas("orders", 0), ReplicaAssignment((1, 2)).encode(), make_parents=True)
    cache, heard = await started_cache_hearing_assignments(broker_side)
    try:
        assert heard == [("orders", [0])]  # before start() returns: the broker's startReplica

        async def hears(change: tuple[str, list[int]]) -> None:
            assert await cache.wait_for(lambda: change in heard, WAIT_S), f"{change} in {heard}"
            heard.clear()

        await admin.create(paths.replicas("orders", 1), ReplicaAssignment((2, 1)).encode(), make_parents=True)
        await hears(("orders", [1]))
        await admin.set(paths.replicas("orders", 1), ReplicaAssignment((2, 3)).encode())
        await hears(("orders", [1]))
        await admin.delete(paths.partition("orders", 1), recursive=True)  # a partition alone
        await hears(("orders", [1]))
        await admin.delete(paths.topic("orders"), recursive=True)
        await hears(("orders", [0]))
    finally:
        await cache.close()


async def test_a_topic_marked_for_deletion_leaves_the_view_and_its_partitions_count_as_gone(connect):
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.replicas("doomed", 0), ReplicaAssignment((1, 2)).encode(), make_parents=True)
    await admin.create(paths.replicas("kept", 0), ReplicaAssignment((1,)).encode(), make_parents=True)
    cache, heard = await started_cache_hearing_assignments(broker_side)
    try:
        assert set(cache.topics) == {"doomed", "kept"}
        heard.clear()
        await admin.create(paths.topic_deletion("doomed"), TopicDeletion({"1": ["0000000003"]}).encode(), make_parents=True)
        assert await cache.wait_for(lambda: "doomed" not in cache.topics, WAIT_S)
        assert await cache.wait_for(lambda: heard == [("doomed", [0])], WAIT_S), heard
        assert set(cache.topics) == {"kept"}
    finally:
        await cache.close()


def make_registration_unreadable(store, broker_id: int) -> None:
    """From now on, watching `broker_id`'s registration through `store` fails as a lost connection."""
    from replog.coord_backends import CoordinationUnavailable

    original_watch_data = store.watch_data

    async def registration_unreadable(path, *args, **kwargs):
        if path == paths.broker(broker_id):
            raise CoordinationUnavailable("injected: connection lost", path)
        return await original_watch_data(path, *args, **kwargs)

    store.watch_data = registration_unreadable


async def started_with_broker_1_registered(connect):
    """An admin's store client, a broker's, and the broker's cache started over it, with
    broker 1 registered at 127.0.0.1:9092."""
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.TOPICS, b"", make_parents=True)
    await admin.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9092, None).encode(), ephemeral=True, make_parents=True)
    cache = MetadataCache(broker_side)
    await cache.start()
    return admin, broker_side, cache


async def test_a_registration_that_cannot_be_read_is_not_taken_for_a_broker_gone(connect):
    """A failed read of /brokers/ids/[id] is not the broker's death."""
    admin, broker_side, cache = await started_with_broker_1_registered(connect)
    try:
        assert await cache.wait_for(lambda: 1 in cache.brokers, WAIT_S)
        make_registration_unreadable(broker_side, 1)
        await admin.create(paths.broker(2), BrokerRegistration("127.0.0.1", 9093, None).encode(), ephemeral=True)
        assert await cache.wait_for(lambda: 2 in cache.brokers, WAIT_S)
        assert cache.brokers[1] == BrokerRegistration("127.0.0.1", 9092, None)
    finally:
        await cache.close()


async def test_a_registration_replaced_in_one_step_is_seen(connect):
    """A broker restarted deletes its registration and creates the next; read after both, the
    names are unchanged, and the new registration (here a new port) must be seen all the same.
    One transaction makes the names' watch see no change on every backend."""
    admin, _, cache = await started_with_broker_1_registered(connect)
    try:
        assert await cache.wait_for(lambda: 1 in cache.brokers, WAIT_S)
        next_life = BrokerRegistration("127.0.0.1", 9093, None)
        txn = admin.transaction()
        txn.delete(paths.broker(1))
        txn.create(paths.broker(1), next_life.encode(), ephemeral=True)
        await txn.commit()
        assert await cache.wait_for(lambda: cache.brokers.get(1) == next_life, WAIT_S), cache.brokers
        assert cache.registered == frozenset({1})
        await admin.delete(paths.broker(1))
        assert await cache.wait_for(lambda: cache.registered == frozenset() and cache.brokers == {}, WAIT_S)
    finally:
        await cache.close()


async def test_a_brokers_lives_seen_registered_are_remembered_past_their_registration(connect):
    """What tells a follower's fetch sent by an earlier life of its broker (answered, not
    recorded) from one naming a life never registered (refused: net/leader_connections.py)."""
    admin, _, cache = await started_with_broker_1_registered(connect)
    try:
        lives = [f"life-{number}" for number in range(LIVES_KEPT_PER_BROKER + 1)]
        for life in lives:
            await admin.delete(paths.broker(1))
            assert await cache.wait_for(lambda: 1 not in cache.brokers, WAIT_S)
            await admin.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9092, None, life).encode(), ephemeral=True)
            assert await cache.wait_for(lambda: 1 in cache.brokers and cache.brokers[1].life_id == life, WAIT_S)
        await admin.delete(paths.broker(1))
        assert await cache.wait_for(lambda: 1 not in cache.brokers, WAIT_S)
        assert list(cache.lives[1]) == lives[1:], "the latest lives, the latest last, at most LIVES_KEPT_PER_BROKER"
    finally:
        await cache.close()


async def test_a_broker_registered_is_counted_even_before_its_registration_could_be_read(connect):
    """Leaders shrink out followers that are not registered (docs/design.md §5.3): a broker whose
    registration's first read failed is registered all the same (found by the simulator: a
    follower kept out of the ISR for good, and acks=all refused, after one failed read)."""
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.TOPICS, b"", make_parents=True)
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    cache = MetadataCache(broker_side)
    await cache.start()
    try:
        assert cache.registered == frozenset()
        make_registration_unreadable(broker_side, 1)
        await admin.create(paths.broker(1), BrokerRegistration("127.0.0.1", 9092, None).encode(), ephemeral=True)
        assert await cache.wait_for(lambda: cache.registered == frozenset({1}), WAIT_S)
        assert 1 not in cache.brokers  # no address known yet for clients
        broker_side.watch_data = type(broker_side).watch_data.__get__(broker_side)  # the store answers again
        # Read again without any further change of /brokers/ids (found by the simulator: a
        # follower that never learned its restarted leader's address).
        assert await cache.wait_for(lambda: 1 in cache.brokers, WAIT_S)
    finally:
        await cache.close()


async def test_only_the_partitions_below_the_topics_count_are_seen(connect):
    """A topic's node holds its partition count, written last by an admin adding partitions in
    many transactions: a partition above it, or a topic of count 0, is not seen yet."""
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.topic("growing"), TopicId("abc", 0).encode(), make_parents=True)
    for partition in (0, 1):
        await admin.create(paths.replicas("growing", partition), ReplicaAssignment((1,)).encode(), make_parents=True)
    cache, heard = await started_cache_hearing_assignments(broker_side)
    try:
        assert "growing" not in cache.topics and heard == []
        _, version = await admin.get(paths.topic("growing"))
        version = await admin.set(paths.topic("growing"), TopicId("abc", 1).encode(), version)
        assert await cache.wait_for(lambda: set(cache.topics.get("growing", {})) == {0}, WAIT_S)
        assert await cache.wait_for(lambda: heard == [("growing", [0])], WAIT_S), heard
        await admin.set(paths.topic("growing"), TopicId("abc", 2).encode(), version)
        assert await cache.wait_for(lambda: set(cache.topics["growing"]) == {0, 1}, WAIT_S)
        assert await cache.wait_for(lambda: heard == [("growing", [0]), ("growing", [1])], WAIT_S), heard
        assert cache.topics["growing"][1].replicas == (1,)
    finally:
        await cache.close()


async def test_a_topic_of_count_0_has_its_partition_names_followed_only_once_counted(connect):
    """A creation writes its partitions under a count of 0, a transaction at a time: the names
    are not followed (each transaction would have all of them read again) until the count is."""
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.topic("creating"), TopicId("abc", 0).encode(), make_parents=True)
    await admin.create(paths.replicas("creating", 0), ReplicaAssignment((1,)).encode(), make_parents=True)
    followed: list[str] = []
    watch_children = broker_side.watch_children

    async def following(path: str):
        followed.append(path)
        return await watch_children(path)

    broker_side.watch_children = following
    cache, heard = await started_cache_hearing_assignments(broker_side)
    try:
        assert paths.topic("creating") not in followed
        await admin.create(paths.replicas("creating", 1), ReplicaAssignment((1,)).encode(), make_parents=True)
        _, version = await admin.get(paths.topic("creating"))
        await admin.set(paths.topic("creating"), TopicId("abc", 2).encode(), version)
        assert await cache.wait_for(lambda: set(cache.topics.get("creating", {})) == {0, 1}, WAIT_S)
        assert await cache.wait_for(lambda: heard == [("creating", [0, 1])], WAIT_S), heard
        assert followed.count(paths.topic("creating")) == 1
    finally:
        await cache.close()


async def test_a_partition_is_seen_with_the_versions_an_election_checks(connect):
    """An election starts from the assignment and ISR as seen, and its transaction checks their
    versions (replication/election.py): they must be the store's versions of what was seen."""
    admin, broker_side = await connect(), await connect()
    await admin.create(paths.BROKER_IDS, b"", make_parents=True)
    await admin.create(paths.replicas("orders", 0), ReplicaAssignment((1, 2)).encode(), make_parents=True)
    cache = MetadataCache(broker_side)
    await cache.start()
    try:
        assigned_version = (await admin.get(paths.replicas("orders", 0)))[1]
        assert cache.seen_partition("orders", 0) == SeenPartition((1, 2), assigned_version, (), None)
        assert cache.seen_partition("orders", 1) is None
        await admin.create(paths.isr("orders", 0), IsrRecord(isr=(1, 2), leader_epoch=0).encode())
        isr_version = (await admin.get(paths.isr("orders", 0)))[1]
        seen = SeenPartition((1, 2), assigned_version, (1, 2), isr_version)
        assert await cache.wait_for(lambda: cache.seen_partition("orders", 0) == seen, WAIT_S)
        await admin.set(paths.replicas("orders", 0), ReplicaAssignment((2, 1)).encode())
        assigned_version = (await admin.get(paths.replicas("orders", 0)))[1]
        seen = SeenPartition((2, 1), assigned_version, (1, 2), isr_version)
        assert await cache.wait_for(lambda: cache.seen_partition("orders", 0) == seen, WAIT_S)
    finally:
        await cache.close()
