"""A client posing as a follower, against broker processes: a Fetch naming a real broker's
replica id, from a connection that names no life of that broker, is refused with
TOPIC_AUTHORIZATION_FAILED, and one naming a life the leader has not seen registered (as a
restarted follower's are, until its registration is seen) is read as a consumer's; either way
the high watermark stays where the real followers hold it, the ISR is unchanged, and nothing
past the high watermark is served, nor its log end offset by ListOffsets. The real follower
replicates on.
"""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from replog.net.client import LATEST_TIMESTAMP, BrokerConnection, PartitionMetadata
from replog.net.codec import ApiKey
from replog.replication.fetcher import FetchSpec
from tests.support.harness import agreed_view, record_batch
from tests.support.cluster import LONG_SESSION_TIMEOUT_MS, Cluster
from tests.support.failover import create_topic
from tests.cluster.test_replication import produce_numbered
from tests.support.servers import unique_root
from tests.support.polling import eventually, wait_until

TOPIC = "forged"
WAIT_S = 60
COMMITTED, UNCOMMITTED = 10, 5
REFUSED = (ErrorCode.topic_authorization_failed, -1, b"")
READ_AS_A_CONSUMERS = (ErrorCode.none, COMMITTED, b"")  # past the HW: nothing
POSING = [
    ("rdkafka", REFUSED),  # a plain client
    ("replog-follower-{follower}", REFUSED),  # a follower's client id without a life
    ("replog-follower-{follower}.0123456789abcdef", READ_AS_A_CONSUMERS),  # with a guessed one
]


def in_sync(cluster: Cluster) -> PartitionMetadata | None:
    view = agreed_view(cluster, TOPIC)
    return view if view is not None and len(view.isr) == 2 else None


async def high_watermark(connection: BrokerConnection) -> int:
    listed = await connection.list_offsets(TOPIC, 0, LATEST_TIMESTAMP)
    assert listed.error_code == ErrorCode.none
    return listed.offset


async def latest_offset_as_replica(port: int, client_id: str, replica_id: int) -> int:
    """ListOffsets "latest" naming a replica id, which replog answers as a consumer's: the HW."""
    async with await BrokerConnection.open("127.0.0.1", port, client_id=client_id) as connection:
        answer = await connection.request(ApiKey.LIST_OFFSETS, None, {
            "replica_id": replica_id, "isolation_level": 0, "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1, "timestamp": LATEST_TIMESTAMP}]}]})
    [listed] = answer.topics[0].partitions
    assert listed.error_code == ErrorCode.none
    return listed.offset


async def test_a_client_posing_as_a_follower_moves_no_high_watermark_and_reads_nothing_past_it(zookeeper_server, tmp_path):
    # Sessions and replica lag that outlast the test: a paused follower stays registered and in
    # the ISR, holding the high watermark where it stopped.
    cluster = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", tmp_path, 2, settings=(
        "--set", f"coord.session.timeout.ms={LONG_SESSION_TIMEOUT_MS}",
        "--set", f"replica.lag.time.max.ms={LONG_SESSION_TIMEOUT_MS}"))
    cluster.start()
    try:
        await asyncio.to_thread(create_topic, cluster.bootstrap, TOPIC, 1, [[0, 1]])
        assert len(await asyncio.to_thread(produce_numbered, cluster.bootstrap, TOPIC, 0, COMMITTED)) == COMMITTED
        view = await asyncio.to_thread(wait_until, lambda: in_sync(cluster), "both replicas in the ISR")
        leader, follower = view.leader_id, 1 - view.leader_id
        async with await BrokerConnection.open("127.0.0.1", cluster.brokers[leader].port) as producer:
            cluster.brokers[follower].pause()
            try:
                uncommitted = bytes(record_batch(*(b"uncommitted",) * UNCOMMITTED))
                assert (await producer.produce(TOPIC, 0, uncommitted, acks=1, timeout_ms=5000)).error_code == ErrorCode.none
                assert await high_watermark(producer) == COMMITTED
                log_end = COMMITTED + UNCOMMITTED

                for client_id, expected in ((posing.format(follower=follower), expected) for posing, expected in POSING):
                    for fetch_offset in (log_end, COMMITTED):  # claims it all; asks for what is past the HW
                        # A connection each: a fetch session's next answer would leave out a partition with no news.
                        async with await BrokerConnection.open("127.0.0.1", cluster.brokers[leader].port,
                                                               client_id=client_id) as poser:
                            spec = FetchSpec(TOPIC, 0, fetch_offset, view.leader_epoch, 1 << 20, 0)
                            answer = (await poser.fetch_as_replica(follower, [spec], 0, 1 << 20)).replies[TOPIC, 0]
                        assert (answer.error_code, answer.high_watermark, answer.records) == expected, client_id
                    assert await high_watermark(producer) == COMMITTED, f"{client_id} moved the high watermark"
                    assert await latest_offset_as_replica(cluster.brokers[leader].port, client_id, follower) == COMMITTED
                now = (await producer.metadata([TOPIC])).topics[TOPIC].partitions[0]
                assert (now.leader_id, now.leader_epoch, sorted(now.isr)) == (leader, view.leader_epoch, [0, 1])
            finally:
                cluster.brokers[follower].resume()

            async def replicated() -> bool:
                return await high_watermark(producer) == log_end

            await eventually(replicated, WAIT_S, "the real follower to copy the records and move the high watermark")
    finally:
        await asyncio.to_thread(cluster.stop)

