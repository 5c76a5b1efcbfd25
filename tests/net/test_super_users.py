"""super.users: only brokers act as brokers. A follower's Fetch (replica_id >= 0) and an
OffsetForLeaderEpoch as a replica from an authenticated principal not in super.users are
refused as Kafka refuses a client without CLUSTER_ACTION (every partition
TOPIC_AUTHORIZATION_FAILED, nothing read); from the broker principal they are served; with
super.users empty, from anyone (Kafka without an authorizer), and the broker says so at start.
The forged follower here carries a follower's client id with a life id the leader has not seen
registered, which the leader otherwise answers as it does a consumer."""

from __future__ import annotations

import contextlib
import logging
import uuid

import pytest
from kio.schema.errors import ErrorCode

from replog.config import ConfigError, parse_setting
from replog.net.client import BrokerConnection
from replog.net.client_security import ClientSecurity
from replog.net.codec import ApiKey
from replog.net.leader_connections import follower_client_id
from replog.replication.fetcher import EpochAsk, FetchSpec
from replog.tls_settings import Secret
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

BROKER_PASSWORD = "s3cret-broker-72"
ALICE_PASSWORD = "s3cret-alice-35"
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{BROKER_PASSWORD}" user_broker="{BROKER_PASSWORD}" user_alice="{ALICE_PASSWORD}";')
WAIT_S = 10
FORGED_REPLICA = 2  # not a broker of this cluster: its fetches are read as a consumer's when allowed
REFUSED = ErrorCode.topic_authorization_failed


@contextlib.asynccontextmanager
async def plain_broker(tmp_path, super_users: str):
    async with in_process_broker(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "super.users": super_users,
    }) as broker:
        yield broker


def as_user(username: str, password: str) -> ClientSecurity:
    return ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", username, Secret(password))


async def led_topic(broker, connection: BrokerConnection) -> str:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    created = await connection.request(ApiKey.CREATE_TOPICS, None, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": WAIT_S * 1000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none
    await eventually(lambda: broker.serving(topic, 0), WAIT_S, "the new partition led here")
    return topic


async def as_replica(broker, topic: str, username: str, password: str) -> tuple[ErrorCode, ErrorCode]:
    """The error of a forged follower's Fetch and of its OffsetForLeaderEpoch, as `username`."""
    async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user(username, password),
                                           client_id=follower_client_id(FORGED_REPLICA, uuid.uuid4().hex[:16]),
                                           request_timeout_s=WAIT_S) as forged:
        fetched = await forged.fetch_as_replica(FORGED_REPLICA, [FetchSpec(topic, 0, 0, -1, 1 << 20, 0)], 0, 1 << 20)
        epochs = await forged.offsets_for_leader_epochs([EpochAsk(topic, 0, -1, 0)], FORGED_REPLICA)
    return fetched.replies[topic, 0].error_code, epochs[topic, 0].error_code


async def test_only_super_users_act_as_followers(tmp_path):
    async with plain_broker(tmp_path, "User:broker") as broker:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user("alice", ALICE_PASSWORD),
                                               request_timeout_s=WAIT_S) as alice:
            topic = await led_topic(broker, alice)
        assert await as_replica(broker, topic, "alice", ALICE_PASSWORD) == (REFUSED, REFUSED)
        assert await as_replica(broker, topic, "broker", BROKER_PASSWORD) == (ErrorCode.none, ErrorCode.none)


async def test_without_super_users_anyone_authenticated_acts_as_a_follower_and_the_broker_says_so(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="replog.broker"):
        async with plain_broker(tmp_path, "") as broker:
            async with await BrokerConnection.open("127.0.0.1", broker.server.port, security=as_user("alice", ALICE_PASSWORD),
                                                   request_timeout_s=WAIT_S) as alice:
                topic = await led_topic(broker, alice)
            assert await as_replica(broker, topic, "alice", ALICE_PASSWORD) == (ErrorCode.none, ErrorCode.none)
    warnings = [record.getMessage() for record in caplog.records if "super.users is empty" in record.getMessage()]
    assert len(warnings) == 1 and "SASL_PLAINTEXT" in warnings[0]


@pytest.mark.parametrize("text", ["alice", "User:", "User:a;;:b"])
def test_super_users_must_be_principals(text):
    with pytest.raises(ConfigError, match="super.users"):
        parse_setting("super.users", text)
