"""The controller mutation quota (KIP-599) on an in-process broker: a client id allowed 1
partition a second (a bucket of 11) creates a topic of 30 partitions while it has tokens and is
throttled for the 19 it is short; then, strict (CreateTopics v6+, DeleteTopics v5+,
CreatePartitions v3+), every topic is refused with THROTTLING_QUOTA_EXCEEDED and left alone;
permissive (older versions), acted on and throttled. Each request on a connection of its own:
a throttled connection is muted."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from replog.security.client_quotas import ClientQuotaEntity
from replog.security.quota_limits import QuotaType
from tests.net.in_process_broker import in_process_broker

CLIENT_ID = "creator"
WAIT_S = 10


async def connected(broker, client_id: str = CLIENT_ID) -> BrokerConnection:
    return await BrokerConnection.open("127.0.0.1", broker.server.port, client_id=client_id)


async def create(broker, version: int, name: str, partitions: int):
    async with await connected(broker) as connection:
        return await connection.request(ApiKey.CREATE_TOPICS, version, {
            "topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1, "assignments": [],
                        "configs": []}], "timeout": WAIT_S * 1000, "validate_only": False})


async def test_partitions_created_and_deleted_past_the_quota_are_throttled_or_refused(tmp_path):
    async with in_process_broker(tmp_path) as broker:
        broker.client_quotas.set_entity(ClientQuotaEntity(None, CLIENT_ID), {QuotaType.CONTROLLER_MUTATION: 1.0})
        big, refused, permissive = (f"t-{uuid.uuid4().hex[:8]}" for _ in range(3))

        first = await create(broker, 7, big, 30)
        assert first.topics[0].error_code == ErrorCode.none
        assert first.throttle_time >= datetime.timedelta(seconds=15)  # 19 s less the refill meanwhile

        strict = await create(broker, 7, refused, 1)
        assert strict.topics[0].error_code == ErrorCode.throttling_quota_exceeded
        assert strict.throttle_time >= datetime.timedelta(seconds=15)
        assert refused not in broker.metadata.topics

        older = await create(broker, 5, permissive, 1)
        assert older.topics[0].error_code == ErrorCode.none
        assert older.throttle_time >= datetime.timedelta(seconds=15)

        async with await connected(broker) as connection:
            deleted = await connection.request(ApiKey.DELETE_TOPICS, 6, {
                "topics": [{"name": big, "topic_id": uuid.UUID(int=0)}], "timeout": WAIT_S * 1000})
            assert deleted.responses[0].error_code == ErrorCode.throttling_quota_exceeded
        async with await connected(broker) as connection:
            grown = await connection.request(ApiKey.CREATE_PARTITIONS, 3, {
                "topics": [{"name": permissive, "count": 2, "assignments": None}], "timeout": WAIT_S * 1000,
                "validate_only": False})
            assert grown.results[0].error_code == ErrorCode.throttling_quota_exceeded
        assert big in broker.metadata.topics and len(broker.metadata.topics[permissive]) == 1

        async with await connected(broker, "other") as connection:  # a client id with no quota
            deleted = await connection.request(ApiKey.DELETE_TOPICS, 6, {
                "topics": [{"name": big, "topic_id": uuid.UUID(int=0)}], "timeout": WAIT_S * 1000})
            assert deleted.responses[0].error_code == ErrorCode.none
            assert deleted.throttle_time == datetime.timedelta(0)
