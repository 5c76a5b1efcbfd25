"""Real clients against a broker with an authorizer, on SASL_PLAINTEXT (PLAIN): ACLs created
with confluent-kafka's AdminClient by a super user decide what the others may do. alice, allowed
only Write on the prefix orders-, produces to orders-1 and is refused payments; bob, allowed Read
on a group and on orders-1, consumes it with the group, and does not see payments in Metadata; a
Deny beats alice's Allow; the super user does everything."""

from __future__ import annotations

import asyncio
import uuid

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

PASSWORDS = {"broker": "s3cret-broker-19", "admin": "s3cret-admin-44", "alice": "s3cret-alice-61",
             "bob": "s3cret-bob-27"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{PASSWORDS["broker"]}" '
        + " ".join(f'user_{user}="{password}"' for user, password in PASSWORDS.items()) + ";")
WAIT_S = 30
GROUP = "readers"


def as_user(port: int, user: str, **more) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": PASSWORDS[user], **more}


def allow(principal: str, operation: AclOperation, resource_type: ResourceType, name: str,
          pattern_type: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource_type, name, pattern_type, principal, "*", operation, permission)


def produce(config: dict, topic: str) -> KafkaError | None:
    """The delivery error of one record, None once delivered."""
    outcome = []
    producer = Producer(config | {"message.timeout.ms": WAIT_S * 1000})
    producer.produce(topic, b"value-" + topic.encode(), on_delivery=lambda error, message: outcome.append(error))
    producer.flush(WAIT_S)
    assert outcome, f"no delivery report for {topic}"
    return outcome[0]


def consume_one(config: dict, topic: str) -> bytes:
    consumer = Consumer(config | {"group.id": GROUP, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([topic])
        for _ in range(WAIT_S * 2):  # bounded: half a second a poll
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                consumer.commit(message, asynchronous=False)
                return message.value()
        raise AssertionError(f"nothing consumed from {topic}")
    finally:
        consumer.close()


async def test_real_clients_do_what_their_acls_allow_and_nothing_else(tmp_path):
    async with in_process_broker(tmp_path, **{
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0", "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:broker;User:admin", "offsets.topic.replication.factor": "1",
    }) as broker:
        port = broker.server.port
        admin = AdminClient(as_user(port, "admin"))
        topics = ["orders-1", "orders-secret", "payments"]
        for future in admin.create_topics([NewTopic(name, 1, 1) for name in topics], request_timeout=WAIT_S).values():
            await asyncio.wrap_future(future)
        acls = [
            allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED),
            allow("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "orders-secret", permission=AclPermissionType.DENY),
            allow("User:bob", AclOperation.READ, ResourceType.TOPIC, "orders-1"),
            allow("User:bob", AclOperation.READ, ResourceType.GROUP, GROUP),
        ]
        for future in admin.create_acls(acls, request_timeout=WAIT_S).values():
            await asyncio.wrap_future(future)
        await eventually(lambda: broker.authorizer.acl_count == len(acls), WAIT_S, "the ACLs in the broker's authorizer")

        alice = as_user(port, "alice")
        assert await asyncio.to_thread(produce, alice, "orders-1") is None
        refused = await asyncio.to_thread(produce, alice, "payments")
        assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        denied = await asyncio.to_thread(produce, alice, "orders-secret")
        assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

        bob = as_user(port, "bob", **{"client.id": f"bob-{uuid.uuid4().hex[:6]}"})
        assert await asyncio.to_thread(consume_one, bob, "orders-1") == b"value-orders-1"
        seen = await asyncio.to_thread(lambda: AdminClient(bob).list_topics(timeout=WAIT_S).topics)
        assert "orders-1" in seen and "payments" not in seen and "orders-secret" not in seen

        assert await asyncio.to_thread(produce, as_user(port, "admin"), "payments") is None
