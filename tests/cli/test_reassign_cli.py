"""`replog reassign` as an operator runs it: real `replog` processes through both doors (--coord on
a real ZooKeeper, --bootstrap-server through Kafka's AlterPartitionReassignments and
ListPartitionReassignments, and a throttle as the dynamic broker config Kafka's tool sets),
against four broker processes that the module's tests share (each test works on topics of its
own)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from replog.admin.topic_configs import ConfigSource
from replog.coord_backends import open_store, paths
from replog.coord_backends.paths import PartitionReassignment
from tests.support.polling import wait_until
from tests.support.failover import quiet_admin
from tests.cli.test_topics_cli import (  # noqa: F401 (door: the fixture, over this module's cluster)
    SETTLE_S,
    assert_help_with_examples,
    described_when,
    door,
    one_line_error,
    replog,
    running_cluster,
    settled,
    succeeded,
    unique,
)

BROKERS = 4
COMMANDS = ("generate", "execute", "verify", "cancel")


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    yield from running_cluster(zookeeper_server, tmp_path_factory.mktemp("reassign-cli"), BROKERS)


@pytest.fixture(scope="module")
def resting(cluster) -> str:
    """A topic no test moves: partition 0 on brokers 0, 1 and partition 1 on 1, 2."""
    topic = unique("resting")
    door = ["--coord", cluster.coord_url]
    succeeded(replog("topics", "create", topic, "--replica-assignment", "0:1,1:2", *door))
    settled(door, topic)
    return topic


def produce(cluster, topic: str, count: int, size_bytes: int = 0, *flags: str) -> None:
    """`count` records "record N", padded to `size_bytes`."""
    lines = "".join(f"record {number}".ljust(size_bytes) + "\n" for number in range(count))
    done = subprocess.run([sys.executable, "-m", "replog", "produce", "--topic", topic, "--bootstrap-server", cluster.bootstrap,
                           *flags],
                          input=lines, capture_output=True, text=True, timeout=120,
                          env={name: value for name, value in os.environ.items() if not name.startswith("REPLOG_")})
    succeeded(done)


def plan_file(directory, name: str, partitions: dict[tuple[str, int], list[int]]) -> str:
    path = directory / name
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": partition, "replicas": replicas} for (topic, partition), replicas in partitions.items()]}))
    return str(path)


def verified(door: list[str], plan: str, *args: str) -> dict[tuple[str, int], dict]:
    document = json.loads(succeeded(replog("reassign", "verify", "--reassignment-json-file", plan, "--output", "json",
                                           *args, *door)).stdout)
    return {(partition["topic"], partition["partition"]): partition for partition in document["partitions"]}


async def throttles(cluster, partitions) -> list[int | None]:
    store = open_store(cluster.coord_url)
    await store.start()
    try:
        return [PartitionReassignment.decode((await store.get(paths.reassigned_partition(*key)))[0]).throttle_bytes_per_s
                for key in partitions]
    finally:
        await store.close()


def log_dirs(cluster, broker: int, topic: str) -> list[str]:
    data_dir = cluster.brokers[broker].data_dir
    return sorted(entry.name for entry in data_dir.iterdir() if entry.name.startswith(f"{topic}-")) if data_dir.exists() else []


def test_generate_execute_verify_moves_the_topic_off_a_broker(cluster, door, tmp_path):
    topic = unique("moving")
    succeeded(replog("topics", "create", topic, "--replica-assignment", "0:1,1:2,2:0", *door))
    settled(door, topic)
    produce(cluster, topic, 300)
    topics_file = tmp_path / "topics.json"
    topics_file.write_text(json.dumps({"version": 1, "topics": [{"topic": topic}]}))

    generated = json.loads(succeeded(replog("reassign", "generate", "--topics-to-move-json-file", str(topics_file),
                                            "--broker-list", "1,2,3", "--output", "json", *door)).stdout)
    before = {0: [0, 1], 1: [1, 2], 2: [2, 0]}
    assert generated["current"] == {"version": 1, "partitions": [
        {"topic": topic, "partition": index, "replicas": replicas, "log_dirs": ["any", "any"]} for index, replicas in before.items()]}
    targets = {entry["partition"]: entry["replicas"] for entry in generated["proposed"]["partitions"]}
    assert all(len(replicas) == 2 and 0 not in replicas for replicas in targets.values()), targets
    assert sorted(broker for replicas in targets.values() for broker in replicas) == [1, 1, 2, 2, 3, 3], "balanced"
    assert generated["replicas_moved"] == generated["lower_bound"] == 2, "only broker 0's two replicas move"
    copied = {index: set(targets[index]) - set(before[index]) for index in targets}
    assert generated["bytes_moved"] == sum(log_bytes(cluster, before[index][0], topic, index) * len(added)
                                           for index, added in copied.items()), "the moved partitions' sizes"
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(generated["proposed"]))

    throttle = ["--throttle", "10000000"] if door[0] == "--coord" else []  # Kafka's API carries none
    executed = succeeded(replog("reassign", "execute", "--reassignment-json-file", str(plan), *throttle, *door))
    assert json.dumps(generated["current"], separators=(",", ":")) in executed.stdout.splitlines(), "the rollback plan"
    moved = sorted(index for index in targets if targets[index] != before[index])
    assert f"Successfully started partition reassignments for {','.join(f'{topic}-{index}' for index in moved)}" in executed.stdout

    progress = verified(door, str(plan), "--wait")
    assert {key[1]: (status["status"], status["replicas"]) for key, status in progress.items()} == {
        index: ("done", replicas) for index, replicas in targets.items()}
    table = succeeded(replog("reassign", "verify", "--reassignment-json-file", str(plan), *door)).stdout
    assert max(len(line) for line in table.splitlines()) <= 80, table
    assert [line.split()[:2] for line in table.splitlines() if line.startswith(topic)] == [
        [f"{topic}-{index}", "done"] for index in targets]
    described_when(door, topic, lambda described: {p["partition"]: p["replicas"] for p in described["partitions"]} == targets
                   and all(sorted(p["isr"]) == sorted(p["replicas"]) for p in described["partitions"]),
                   "every partition on its target, all in sync")
    wait_until(lambda: not log_dirs(cluster, 0, topic), "broker 0's replicas deleted", SETTLE_S)


def test_cancel_puts_back_moves_that_cannot_finish(cluster, tmp_path):
    """Broker 3 is down, so the moves to it wait; cancelled, the partitions are on their old
    replicas, and broker 3 deletes what it was sent once it is back."""
    coord = ["--coord", cluster.coord_url]
    topic = unique("stuck")
    succeeded(replog("topics", "create", topic, "--replica-assignment", "0:1,1:0", *coord))
    settled(coord, topic)
    produce(cluster, topic, 50)
    targets = {(topic, 0): [0, 3], (topic, 1): [1, 3]}
    plan = plan_file(tmp_path, "plan.json", targets)
    cluster.brokers[3].stop()
    try:
        bootstrap = ["--bootstrap-server", cluster.bootstrap]
        executed = json.loads(succeeded(replog("reassign", "execute", "--reassignment-json-file", plan, "--throttle", "1000000",
                                               "--output", "json", *coord)).stdout)
        assert executed["started"] == [{"topic": topic, "partition": 0}, {"topic": topic, "partition": 1}]
        assert asyncio.run(throttles(cluster, targets)) == [1_000_000, 1_000_000], "the leaders' limit, in the moves' nodes"
        rollback = tmp_path / "rollback.json"
        rollback.write_text(json.dumps(executed["rollback"]))

        def waiting_for_broker_3(door: list[str]) -> dict | None:
            progress = verified(door, plan)
            waiting = all(status["status"] == "in progress" and [replica["broker"] for replica in status["adding"]] == [3]
                          for status in progress.values())
            return progress if waiting else None

        for door in (coord, bootstrap):
            waiting = wait_until(lambda: waiting_for_broker_3(door), "broker 3 being added", SETTLE_S)
            assert sum(status["leader_log_end_offset"] for status in waiting.values()) == 50, "asked of the leaders"
            assert [status["adding"] for status in waiting.values()] == [
                [{"broker": 3, "in_sync": False, "offsets_behind": None, "bytes_behind": None}]] * 2, "broker 3 is down"
        again = replog("reassign", "execute", "--reassignment-json-file", plan, *coord)
        assert f"partition {topic}-0 is being moved already (and 1 more)" in one_line_error(again, 1)

        cancelled = succeeded(replog("reassign", "cancel", "--reassignment-json-file", plan, *bootstrap))
        assert cancelled.stdout.strip() == f"Successfully cancelled partition reassignments for {topic}-0,{topic}-1"
        assert {status["status"] for status in verified(coord, str(rollback), "--wait").values()} == {"done"}
        not_moved = replog("reassign", "verify", "--reassignment-json-file", plan, *coord)
        assert (f"partition {topic}-0 is on [0, 1], not its target [0, 3], and no move is in flight (and 1 more partitions)"
                in one_line_error(not_moved, 1))
        idle = succeeded(replog("reassign", "cancel", "--reassignment-json-file", plan, *coord))
        assert idle.stdout.strip() == f"No reassignment in flight for {topic}-0,{topic}-1"
    finally:
        cluster.brokers[3].restart()
    settled(coord, topic)
    wait_until(lambda: not log_dirs(cluster, 3, topic), "broker 3 without a replica of the cancelled moves", SETTLE_S)


THROTTLED_RECORDS = 3000
THROTTLED_RECORD_BYTES = 1000  # 3 MB: 30 s at the throttle, well under a second without it
THROTTLE_BYTES_PER_S = 100_000
RATE = "leader.replication.throttled.rate"


def broker_rates(cluster) -> dict[int, tuple[str, str]]:
    """Each broker's throttle rate, as Kafka's admin client describes it (it cannot name the
    default, ""): (value, "own" or "default"), where it has one."""
    admin = quiet_admin(cluster.bootstrap)
    described = {}
    for broker in cluster.brokers:  # one BROKER resource a call, says librdkafka
        resource = ConfigResource(ResourceType.BROKER, str(broker))
        described[broker] = admin.describe_configs([resource])[resource].result(timeout=SETTLE_S)
    kinds = {ConfigSource.DYNAMIC_BROKER_CONFIG: "own", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: "default"}
    return {broker: (entries[RATE].value, kinds[entries[RATE].source]) for broker, entries in described.items()
            if RATE in entries}


def log_bytes(cluster, broker: int, topic: str, partition: int = 0) -> int:
    log_dir = cluster.brokers[broker].data_dir / f"{topic}-{partition}"
    return sum(path.stat().st_size for path in log_dir.glob("*.log")) if log_dir.exists() else 0


def test_a_throttle_through_a_broker_holds_the_move_back_and_verify_removes_it(cluster, tmp_path):
    """execute --throttle through a broker sets the cluster's default rate, which partition 0's
    leader applies to the replica the move adds: broker 2 copies, but far slower than it could.
    Kafka's admin client raises the leader's own rate; the move completes and verify removes
    both rates."""
    bootstrap = ["--bootstrap-server", cluster.bootstrap]
    topic = unique("throttled")
    succeeded(replog("topics", "create", topic, "--replica-assignment", "0:1", *bootstrap))
    settled(bootstrap, topic)
    produce(cluster, topic, THROTTLED_RECORDS, THROTTLED_RECORD_BYTES, "--producer-property", "batch.size=16384")
    total_bytes = log_bytes(cluster, 0, topic)
    plan = plan_file(tmp_path, "plan.json", {(topic, 0): [0, 1, 2]})
    succeeded(replog("reassign", "execute", "--reassignment-json-file", plan, "--throttle", str(THROTTLE_BYTES_PER_S),
                     *bootstrap))
    throttled = {broker: (str(THROTTLE_BYTES_PER_S), "default") for broker in cluster.brokers}
    assert broker_rates(cluster) == throttled

    wait_until(lambda: log_bytes(cluster, 2, topic) >= 2 * THROTTLE_BYTES_PER_S, "broker 2 copying", SETTLE_S)
    for door in (bootstrap, ["--coord", cluster.coord_url]):  # both ask the brokers how far broker 2 is
        moving = verified(door, plan)[(topic, 0)]
        [added] = moving["adding"]
        assert (moving["status"], moving["leader_log_end_offset"]) == ("in progress", THROTTLED_RECORDS), moving
        assert (added["broker"], added["in_sync"]) == (2, False), moving
        assert 0 < added["offsets_behind"] < THROTTLED_RECORDS and 0 < added["bytes_behind"] < total_bytes, moving
    table = succeeded(replog("reassign", "verify", "--reassignment-json-file", plan, *bootstrap)).stdout
    assert "2: " in table and " offsets," in table and "B behind" in table, table
    assert log_bytes(cluster, 2, topic) < total_bytes / 2, "held back by the throttle"
    assert broker_rates(cluster) == throttled, "verify keeps the rate while the move goes on"

    admin = quiet_admin(cluster.bootstrap)
    raised = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[  # the leader's own, over the default
        ConfigEntry(RATE, str(1_000_000_000), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([raised])[raised].result(timeout=SETTLE_S)
    done = succeeded(replog("reassign", "verify", "--reassignment-json-file", plan, "--wait", *bootstrap))
    assert "Throttle removed: no partition is moving." in done.stdout, done.stdout
    assert broker_rates(cluster) == {}
    described_when(bootstrap, topic, lambda described: sorted(described["partitions"][0]["isr"]) == [0, 1, 2],
                   "broker 2 in sync")


def test_bad_broker_configs_are_refused_with_one_line_each(cluster):
    admin = quiet_admin(cluster.bootstrap)
    for name, value, says in [
        (RATE, "fast", f"{RATE}: 'fast' is not an integer"),
        (RATE, "0", f"{RATE}: '0' must be at least 1"),
        ("log.retention.ms", "1", "'log.retention.ms' cannot be changed while brokers run"),
    ]:
        resource = ConfigResource(ResourceType.BROKER, "1", incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(KafkaException) as refused:
            admin.incremental_alter_configs([resource])[resource].result(timeout=SETTLE_S)
        message = refused.value.args[0].str()
        assert says in message and "\n" not in message, message
    assert broker_rates(cluster) == {}


@pytest.mark.parametrize("command, plan, status, says", [
    ("execute", "not json", 2, "is not valid JSON"),
    ("verify", '{"version":1,"partitions":[{"topic":"RESTING","partition":0,"replicas":[0,1],"log_dirs":["/d","any"]}]}',
     2, 'log_dirs "/d" is not supported'),
    ("cancel", '{"version":2,"partitions":[]}', 2, "unsupported version 2"),
    ("execute", '{"partitions":[{"topic":"ghost","partition":0,"replicas":[0,1]}]}', 1,
     "'ghost' does not exist; `replog topics list` shows the topics"),
    ("verify", '{"partitions":[{"topic":"RESTING","partition":7,"replicas":[0,1]}]}', 1,
     "partition RESTING-7 does not exist (topic 'RESTING' has 2 partitions)"),
    ("execute", '{"partitions":[{"topic":"RESTING","partition":0,"replicas":[0,9]}]}', 1,
     "brokers [9] of target [0, 9] are not in the cluster"),
], ids=["not-json", "log-dir", "version", "unknown-topic", "unknown-partition", "unknown-broker"])
def test_bad_plans_and_unknown_partitions_are_one_line_errors(door, resting, tmp_path, command, plan, status, says):
    path = tmp_path / "plan.json"
    path.write_text(plan.replace("RESTING", resting))
    done = replog("reassign", command, "--reassignment-json-file", str(path), *door)
    assert says.replace("RESTING", resting) in one_line_error(done, status)


def test_bad_generate_arguments_are_one_line_errors(cluster, resting, tmp_path):
    door = ["--bootstrap-server", cluster.bootstrap]
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": resting}]}))

    def generate(*args: str) -> subprocess.CompletedProcess:
        return replog("reassign", "generate", "--topics-to-move-json-file", str(topics), *args, *door)

    assert "needs 2 replicas and only 1 brokers are given" in one_line_error(generate("--broker-list", "1"), 1)
    assert "brokers [9] are not registered" in one_line_error(generate("--broker-list", "1,9"), 1)
    assert "is not broker ids" in one_line_error(generate("--broker-list", "1,x"), 2)
    missing = replog("reassign", "generate", "--topics-to-move-json-file", str(tmp_path / "none.json"), "--broker-list", "1,2", *door)
    assert "No such file" in one_line_error(missing, 2)
    topics.write_text('{"version":1,"topics":[{"topic":"ghost"}]}')
    assert "'ghost' does not exist" in one_line_error(generate("--broker-list", "1,2"), 1)


def test_every_command_has_help_with_an_example():
    assert_help_with_examples("reassign", COMMANDS)
