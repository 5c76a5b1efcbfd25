"""`replog groups` as an operator runs it: real `replog` processes through both doors (--coord
finds the brokers by their registrations in a real ZooKeeper), against a broker process, with
confluent-kafka consumers in the groups."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Producer

from tests.support.polling import wait_until
from tests.support.group_clients import GROUP_SETTINGS, confluent_consumer
from tests.support.cluster import QUICK_SETTINGS, Cluster
from tests.support.servers import unique_root
from tests.cli.test_topics_cli import SETTLE_S, assert_help_with_examples, one_line_error, replog, settled, succeeded

RECORDS_PER_PARTITION = 5
PARTITIONS = 2


@pytest.fixture(scope="module")
def cluster(zookeeper_server, tmp_path_factory):
    running = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", tmp_path_factory.mktemp("groups-cli"), 1,
                      settings=(*QUICK_SETTINGS, *GROUP_SETTINGS))
    try:
        running.start()
        yield running
    finally:
        running.stop()


@pytest.fixture(params=["--bootstrap-server", "--coord"])
def door(request, cluster) -> list[str]:
    return [request.param, cluster.bootstrap if request.param == "--bootstrap-server" else cluster.coord_url]


def groups(*args: str) -> dict:
    return json.loads(succeeded(replog("groups", *args, "--output", "json")).stdout)


def described(door: list[str], group: str) -> dict:
    document = groups("describe", group, *door)
    document["offsets"] = {part["partition"]: (part["committed"], part["log_end_offset"], part["lag"])
                           for part in document["partitions"]}
    return document


def topic_with_records(cluster) -> str:
    topic = f"g-{uuid.uuid4().hex[:8]}"
    door = ["--coord", cluster.coord_url]
    succeeded(replog("topics", "create", topic, "--partitions", str(PARTITIONS), "--replication-factor", "1", *door))
    settled(door, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for partition in range(PARTITIONS):
        for number in range(RECORDS_PER_PARTITION):
            producer.produce(topic, f"{partition}-{number}".encode(), partition=partition)
    assert producer.flush(SETTLE_S) == 0
    return topic


def consume_all(cluster, group: str, topic: str) -> list[str]:
    """Read with a group member until every record arrived, commit, leave; what it read."""
    consumer = confluent_consumer(cluster.bootstrap, group, topic)
    read: list[str] = []
    try:
        def everything() -> bool:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                read.append(message.value().decode())
                consumer.commit(message, asynchronous=False)
            return len(read) >= PARTITIONS * RECORDS_PER_PARTITION

        wait_until(everything, "every record read", SETTLE_S)
    finally:
        consumer.close()
    return read


def test_describe_shows_lag_and_reset_to_earliest_makes_the_next_consumer_read_again(cluster, door):
    topic = topic_with_records(cluster)
    group = f"app-{uuid.uuid4().hex[:6]}"
    consumer = confluent_consumer(cluster.bootstrap, group, topic)
    try:
        wait_until(lambda: consumer.poll(0.2) is not None and described(door, group)["members"], "a member", SETTLE_S)
        live = described(door, group)
        assert live["state"] == "Stable" and len(live["members"]) == 1, live
        assert {group: "Stable"} == {entry["group"]: entry["state"] for entry in groups("list", *door)["groups"]
                                     if entry["group"] == group}
        refused = replog("groups", "reset-offsets", group, "--to-earliest", *door)
        assert f"group {group!r} has 1 live members" in one_line_error(refused, 1)
    finally:
        consumer.close()

    assert sorted(consume_all(cluster, group, topic)) == sorted(
        f"{partition}-{number}" for partition in range(PARTITIONS) for number in range(RECORDS_PER_PARTITION))
    done = described(door, group)
    assert done["state"] == "Empty" and done["offsets"] == {p: (5, 5, 0) for p in range(PARTITIONS)}, done

    plan = groups("reset-offsets", group, "--to-earliest", "--dry-run", *door)
    assert (plan["executed"], [(p["partition"], p["before"], p["after"]) for p in plan["partitions"]]) == (
        False, [(0, 5, 0), (1, 5, 0)])
    assert described(door, group)["offsets"] == {p: (5, 5, 0) for p in range(PARTITIONS)}, "a dry run changes nothing"
    groups("reset-offsets", group, "--to-earliest", *door)
    assert described(door, group)["offsets"] == {p: (0, 5, 5) for p in range(PARTITIONS)}
    assert len(consume_all(cluster, group, topic)) == PARTITIONS * RECORDS_PER_PARTITION, "read again from the start"


def test_reset_to_an_offset_a_shift_or_a_time_is_clamped_to_each_log(cluster, door):
    topic = topic_with_records(cluster)
    group = f"reset-{uuid.uuid4().hex[:6]}"

    def after(*how: str) -> list[int]:
        reset = groups("reset-offsets", group, "--topic", topic, *how, *door)
        return [partition["after"] for partition in reset["partitions"]]

    assert after("--to-offset", "3") == [3, 3], "a group that never existed gets offsets"
    assert after("--shift-by", "-2") == [1, 1]
    assert after("--shift-by", "10") == [5, 5], "clamped to the log end"
    assert after("--to-offset", "-4") == [0, 0], "clamped to the log start"
    assert after("--to-timestamp", "0") == [0, 0]
    assert after("--to-timestamp", str(2**41)) == [5, 5], "no record that late: the log end"
    assert after("--to-latest") == [5, 5]
    succeeded(replog("groups", "delete", group, *door))
    assert group not in [entry["group"] for entry in groups("list", *door)["groups"]]


def test_bad_group_commands_are_one_line_errors(cluster):
    door = ["--bootstrap-server", cluster.bootstrap]
    both = replog("groups", "reset-offsets", "g", "--to-earliest", "--shift-by", "1", *door)
    assert "give exactly one of --to-earliest" in one_line_error(both, 2)
    ghost = replog("groups", "describe", "no-such-group", *door)
    assert "group 'no-such-group' does not exist" in one_line_error(ghost, 1)
    nothing = replog("groups", "reset-offsets", "no-such-group", "--to-earliest", *door)
    assert "committed no offsets to reset" in one_line_error(nothing, 1)


def test_every_command_has_help_with_an_example():
    assert_help_with_examples("groups", ("list", "describe", "reset-offsets", "delete"))
