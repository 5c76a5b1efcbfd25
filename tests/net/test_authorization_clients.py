"""Real clients against one broker process with an authorizer, on SASL_SSL (PLAIN, certificates
made with trustme): ACLs created with confluent-kafka's AdminClient by a super user decide what
the others may do. alice, allowed only Write on the prefix orders-, produces to orders-1 and is
refused payments (confluent-kafka, kcat, kafka-python); bob, allowed Read on a group and on
orders-1, consumes it with the group, and does not see payments in Metadata; a Deny beats
alice's Allow; carol, who may only look at payments, is refused every admin API, through
confluent-kafka's AdminClient, `replog --command-config` and Kafka's own kafka-cluster
unregister, with the error Kafka answers; the super user gets past the authorizer each time."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from typing import NamedTuple

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until
from tests.support.secured_broker import TlsFiles, sasl_ssl_address, sasl_ssl_properties, write_properties
from tests.support.secured_broker import tls  # noqa: F401 (a fixture)

pytestmark = pytest.mark.cluster  # one broker process, shared by the module

PASSWORDS = {"broker": "s3cret-broker-19", "admin": "s3cret-admin-44", "alice": "s3cret-alice-61",
             "bob": "s3cret-bob-27", "carol": "s3cret-carol-83"}
JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="broker" password="{PASSWORDS["broker"]}" '
        + " ".join(f'user_{user}="{password}"' for user, password in PASSWORDS.items()) + ";")
WAIT_S = 30
GROUP = "readers"
TOPICS = ("orders-1", "orders-secret", "payments")


class Secured(NamedTuple):
    process: BrokerProcess
    tls: TlsFiles

    @property
    def address(self) -> str:
        return sasl_ssl_address(self.process)


@pytest.fixture(scope="module")
def broker(tmp_path_factory, tls):  # noqa: F811
    """The broker, its topics made and its ACLs in its authorizer's memory."""
    settings = {"ssl.keystore.location": str(tls.broker), "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN", "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": "User:broker;User:admin", "offsets.topic.replication.factor": "1"}
    process = BrokerProcess(tmp_path_factory.mktemp("authz-broker") / "data", listeners=("SASL_SSL",),
                            extra_args=tuple(arg for name, value in settings.items() for arg in ("--set", f"{name}={value}")))
    process.start()
    broker = Secured(process, tls)
    try:
        admin = AdminClient(as_user(broker, "admin"))
        for future in admin.create_topics([NewTopic(name, 1, 1) for name in TOPICS], request_timeout=WAIT_S).values():
            future.result(WAIT_S)
        # The Deny first: the feed applies changes in order, so once the Allows show, it holds.
        deny = binding("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "orders-secret", permission=AclPermissionType.DENY)
        admin.create_acls([deny], request_timeout=WAIT_S)[deny].result(WAIT_S)
        allows = [
            binding("User:alice", AclOperation.WRITE, ResourceType.TOPIC, "orders-", ResourcePatternType.PREFIXED),
            binding("User:bob", AclOperation.READ, ResourceType.TOPIC, "orders-1"),
            binding("User:bob", AclOperation.READ, ResourceType.GROUP, GROUP),
            # carol may look at payments, as `replog reassign` does first, and do nothing else
            binding("User:carol", AclOperation.DESCRIBE, ResourceType.TOPIC, "payments"),
            binding("User:carol", AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, "payments"),
        ]
        for future in admin.create_acls(allows, request_timeout=WAIT_S).values():
            future.result(WAIT_S)
        for user, topic in (("alice", "orders-1"), ("bob", "orders-1"), ("carol", "payments")):
            wait_until(lambda user=user, topic=topic: topic in topics_seen(broker, user), f"{user}'s ACLs in the authorizer",
                       WAIT_S)
        yield broker
    finally:
        output = "".join(process.output)
        process.stop()
    assert all(password not in output for password in PASSWORDS.values()), "no password reaches the broker's log"


def as_user(broker: Secured, user: str, **more) -> dict:
    """librdkafka's settings for `user`."""
    return {"bootstrap.servers": broker.address, "security.protocol": "SASL_SSL", "ssl.ca.location": str(broker.tls.ca),
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": PASSWORDS[user], **more}


def binding(principal: str, operation: AclOperation, resource_type: ResourceType, name: str,
            pattern_type: ResourcePatternType = ResourcePatternType.LITERAL,
            permission: AclPermissionType = AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(resource_type, name, pattern_type, principal, "*", operation, permission)


def topics_seen(broker: Secured, user: str) -> set[str]:
    return set(AdminClient(as_user(broker, user)).list_topics(timeout=WAIT_S).topics)


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


def test_confluent_kafka_clients_do_what_their_acls_allow_and_nothing_else(broker):
    alice = as_user(broker, "alice")
    assert produce(alice, "orders-1") is None
    refused = produce(alice, "payments")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    denied = produce(alice, "orders-secret")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    bob = as_user(broker, "bob", **{"client.id": f"bob-{uuid.uuid4().hex[:6]}"})
    assert consume_one(bob, "orders-1") == b"value-orders-1"
    seen = topics_seen(broker, "bob")
    assert "orders-1" in seen and "payments" not in seen and "orders-secret" not in seen

    assert produce(as_user(broker, "admin"), "payments") is None


def kcat(broker: Secured, user: str, *arguments: str, records: str = "") -> subprocess.CompletedProcess:
    settings = {"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN", "sasl.username": user,
                "sasl.password": PASSWORDS[user], "ssl.ca.location": str(broker.tls.ca)}
    options = [arg for name, value in settings.items() for arg in ("-X", f"{name}={value}")]
    return subprocess.run(["kcat", "-b", broker.address, *options, *arguments], input=records,
                          capture_output=True, text=True, timeout=WAIT_S * 2)


def test_kcat_produces_where_allowed_and_lists_only_what_it_may_describe(broker):
    assert (done := kcat(broker, "alice", "-P", "-t", "orders-1", records="by-kcat\n")).returncode == 0, done.stderr
    refused = kcat(broker, "alice", "-P", "-t", "payments", records="refused\n")
    assert refused.returncode != 0 and "Topic authorization failed" in refused.stderr, refused.stderr
    listed = kcat(broker, "alice", "-L", "-J")
    assert listed.returncode == 0, listed.stderr
    assert {topic["topic"] for topic in json.loads(listed.stdout)["topics"]} == {"orders-1", "orders-secret"}


def kafka_python(broker: Secured, user: str) -> dict:
    """kafka-python's settings for `user`."""
    return {"bootstrap_servers": broker.address, "security_protocol": "SASL_SSL", "ssl_cafile": str(broker.tls.ca),
            "sasl_mechanism": "PLAIN", "sasl_plain_username": user, "sasl_plain_password": PASSWORDS[user]}


def test_kafka_python_producer_and_group_consumer_get_kafkas_errors(broker):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError

    producer = KafkaProducer(**kafka_python(broker, "alice"), acks="all", max_block_ms=WAIT_S * 1000)
    try:
        producer.send("orders-1", b"by-kafka-python").get(WAIT_S)
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send("payments", b"refused").get(WAIT_S)
    finally:
        producer.close()

    def first_record(group: str) -> bytes:
        consumer = KafkaConsumer("orders-1", **kafka_python(broker, "bob"), group_id=group, auto_offset_reset="earliest",
                                 consumer_timeout_ms=WAIT_S * 1000)
        try:
            return next(consumer).value  # bounded: StopIteration after consumer_timeout_ms
        finally:
            consumer.close()

    # orders-1's first record, whichever client's test ran first
    assert first_record(GROUP) in {b"value-orders-1", b"by-kcat", b"by-kafka-python"}
    with pytest.raises(GroupAuthorizationFailedError):
        first_record("not-bobs")


def admin_calls(admin: AdminClient, topic: str) -> dict[str, Callable[[], object]]:
    """Each admin API on `topic` (and the broker's configs, and an ACL), name -> what asks it and
    returns its future or futures."""
    acl = binding("User:nobody", AclOperation.READ, ResourceType.TOPIC, topic)
    return {"CreateTopics": lambda: admin.create_topics([NewTopic(topic, 1, 1)])[topic],
             "CreatePartitions": lambda: admin.create_partitions([NewPartitions(topic, 2)])[topic],
             "DescribeConfigs topic": lambda: admin.describe_configs([ConfigResource("topic", topic)]),
             "IncrementalAlterConfigs topic": lambda: admin.incremental_alter_configs([ConfigResource(
                 "topic", topic, incremental_configs=[ConfigEntry("retention.ms", "86400000",
                                                                  incremental_operation=AlterConfigOpType.SET)])]),
             "DescribeConfigs broker": lambda: admin.describe_configs([ConfigResource("broker", "0")]),
             "IncrementalAlterConfigs broker": lambda: admin.incremental_alter_configs([ConfigResource(
                 "broker", "0", incremental_configs=[ConfigEntry("leader.replication.throttled.rate", "50000000",
                                                                 incremental_operation=AlterConfigOpType.SET)])]),
             "CreateAcls": lambda: admin.create_acls([acl])[acl],
             "DeleteAcls": lambda: next(iter(admin.delete_acls([AclBindingFilter(
                 ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, "User:nobody", "*", AclOperation.ANY,
                 AclPermissionType.ANY)]).values())),
             "DeleteTopics": lambda: admin.delete_topics([topic])[topic]}


def error_of(future_or_map) -> int | None:
    """The Kafka error code an admin call ended with, None if it succeeded."""
    futures = future_or_map.values() if isinstance(future_or_map, dict) else [future_or_map]
    try:
        for future in futures:
            future.result(WAIT_S)
    except KafkaException as refused:
        return refused.args[0].code()
    return None


EXPECTED_REFUSALS = {
    "CreateTopics": KafkaError.TOPIC_AUTHORIZATION_FAILED, "CreatePartitions": KafkaError.TOPIC_AUTHORIZATION_FAILED,
    "DescribeConfigs topic": KafkaError.TOPIC_AUTHORIZATION_FAILED,
    "IncrementalAlterConfigs topic": KafkaError.TOPIC_AUTHORIZATION_FAILED,
    "DescribeConfigs broker": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    "IncrementalAlterConfigs broker": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    "CreateAcls": KafkaError.CLUSTER_AUTHORIZATION_FAILED, "DeleteAcls": KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    "DeleteTopics": KafkaError.TOPIC_AUTHORIZATION_FAILED,
}


def test_every_admin_api_is_refused_without_its_permission_and_passes_for_a_super_user(broker):
    topic = f"admin-{uuid.uuid4().hex[:6]}"
    carol = admin_calls(AdminClient(as_user(broker, "carol")), topic)
    admin = admin_calls(AdminClient(as_user(broker, "admin")), topic)
    refused, passed = {}, {}
    for name in EXPECTED_REFUSALS:  # in order: the topic exists for the super user's calls after CreateTopics
        refused[name] = error_of(carol[name]())
        passed[name] = error_of(admin[name]())
    assert refused == EXPECTED_REFUSALS
    assert passed == dict.fromkeys(EXPECTED_REFUSALS)


def test_replogs_admin_commands_are_refused_without_their_permission_and_pass_for_a_super_user(broker, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "payments", "partition": 0, "replicas": [0]}]}))
    commands = {
        "reassign": ("reassign", "execute", "--reassignment-json-file", str(plan)),
        # AlterPartitionReassignments itself: the plan moves nothing, so execute stops at ListPartitionReassignments
        "reassign cancel": ("reassign", "cancel", "--reassignment-json-file", str(plan)),
        "elect-leaders": ("cluster", "elect-leaders", "--preferred", "--topic", "payments"),
        "remove-brokers": ("cluster", "remove-brokers", "0", "--dry-run"),
        "quotas alter": ("quotas", "alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
                         "producer_byte_rate=1048576"),
        "acls add": ("acls", "add", "--allow-principal", "User:carol", "--operation", "Read", "--topic", "payments"),
    }

    configs = {user: write_properties(tmp_path / f"{user}.properties",
                                      sasl_ssl_properties(broker.tls, "PLAIN", user, PASSWORDS[user]))
               for user in ("carol", "admin")}

    def run(user: str, command: tuple[str, ...]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "replog", *command, "--bootstrap-server", broker.address,
                               "--command-config", str(configs[user])], capture_output=True, text=True, timeout=WAIT_S * 2)

    with ThreadPoolExecutor(2) as pool:  # two cores: two replog processes at a time
        refused = dict(zip(commands, pool.map(lambda command: run("carol", command), commands.values())))
        passed = dict(zip(commands, pool.map(lambda command: run("admin", command), commands.values())))
    for name, done in refused.items():
        assert done.returncode == 1 and "cluster authorization failed" in said(done), (name, done.stderr)
    for name, done in passed.items():
        assert "authorization failed" not in said(done), (name, done.stderr)
    assert all(done.returncode == 0 for name, done in passed.items() if name != "remove-brokers"), passed
    # the planner's own refusal, past the authorizer: the broker holds the only replica
    assert "cannot remove brokers 0" in passed["remove-brokers"].stderr, passed["remove-brokers"].stderr


def said(done: subprocess.CompletedProcess) -> str:
    """What a command printed, Kafka's error names and messages alike in lower case and words."""
    return (done.stdout + done.stderr).lower().replace("_", " ")


KAFKA = pathlib.Path(__file__).resolve().parents[2] / "bench" / "peers" / "kafka" / "kafka"


@pytest.mark.skipif(shutil.which("java") is None, reason="java is not installed")
def test_kafkas_own_kafka_cluster_unregister_is_refused_without_alter_on_the_cluster(broker, tmp_path):
    classpath = subprocess.run([str(KAFKA), "classpath"], capture_output=True, text=True, check=True).stdout.strip()

    def unregister(user: str) -> subprocess.CompletedProcess:
        config = write_properties(tmp_path / f"{user}.properties", sasl_ssl_properties(broker.tls, "PLAIN", user, PASSWORDS[user]))
        return subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.ClusterTool", "unregister",
                               "--bootstrap-server", broker.address, "--command-config", str(config), "--id", "0"],
                              capture_output=True, text=True, timeout=WAIT_S * 2)

    with ThreadPoolExecutor(2) as pool:
        refused, passed = pool.map(unregister, ("carol", "admin"))
    assert refused.returncode == 1 and "ClusterAuthorizationException" in refused.stderr, refused.stderr
    # past the authorizer, the broker's own refusal: it holds the only replicas
    assert "AuthorizationException" not in passed.stderr and "still hold a replica" in passed.stderr, passed.stderr
