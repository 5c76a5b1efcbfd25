"""Through a broker, an admin command names a cluster's worth of partitions in several requests,
each within what a broker takes (net/frame_check.py's items): a move of 10,000 partitions at
replication factor 4 names 50,000 items, one past the limit with its topic."""

from __future__ import annotations

from types import SimpleNamespace

from kio.schema.errors import ErrorCode

from replog.cli import replica_logs
from replog.cli.kafka_admin import KafkaAdmin
from replog.cli.replica_logs import PARTITIONS_PER_REQUEST_MAX
from replog.net.client_properties import NO_PROPERTIES
from replog.net.codec import ApiKey

PARTITIONS = 2 * PARTITIONS_PER_REQUEST_MAX + 1


class Broker:
    """Answers AlterPartitionReassignments and ListPartitionReassignments, as asked, and keeps
    what each request named."""

    def __init__(self) -> None:
        self.named: list[int] = []

    async def request(self, api_key: int, version, body: dict):
        self.named.append(sum(len(topic["partitions" if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS
                                           else "partition_indexes"]) for topic in body["topics"]))
        if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
            return SimpleNamespace(error_code=ErrorCode.none, responses=[SimpleNamespace(name=topic["name"], partitions=[
                SimpleNamespace(partition_index=partition["partition_index"], error_code=ErrorCode.none, error_message=None)
                for partition in topic["partitions"]]) for topic in body["topics"]])
        return SimpleNamespace(error_code=ErrorCode.none, topics=[SimpleNamespace(name=topic["name"], partitions=[
            SimpleNamespace(partition_index=index, replicas=[1, 2], adding_replicas=[2], removing_replicas=[0])
            for index in topic["partition_indexes"]]) for topic in body["topics"]])


def door_to(broker: Broker) -> KafkaAdmin:
    door = KafkaAdmin("127.0.0.1:9092", NO_PROPERTIES)

    async def ask_any(ask):
        return await ask(broker)

    door._ask_any = ask_any
    return door


async def test_a_move_of_many_partitions_goes_in_requests_of_a_bounded_number_each():
    broker = Broker()
    targets = {("moving", partition): [0, 1, 2, 3] for partition in range(PARTITIONS)}
    outcomes = await door_to(broker).alter_reassignments(targets)
    assert outcomes == dict.fromkeys(targets)
    assert broker.named == [PARTITIONS_PER_REQUEST_MAX, PARTITIONS_PER_REQUEST_MAX, 1]


async def test_moves_of_many_partitions_are_listed_in_requests_of_a_bounded_number_each():
    broker = Broker()
    statuses = await door_to(broker).list_reassignments({("moving", partition) for partition in range(PARTITIONS)})
    assert [(status.topic, status.partition) for status in statuses] == [("moving", partition) for partition in range(PARTITIONS)]
    assert broker.named == [PARTITIONS_PER_REQUEST_MAX, PARTITIONS_PER_REQUEST_MAX, 1]


def test_partitions_are_split_in_sorted_runs():
    partitions = [("b", 1), ("a", 2), ("a", 1)]
    assert replica_logs.in_requests(partitions) == [[("a", 1), ("a", 2), ("b", 1)]]
    assert replica_logs.in_requests([]) == []


async def test_the_logs_of_many_replicas_are_asked_in_requests_of_a_bounded_number_each():
    asked: list[tuple[int, int]] = []  # (api key, partitions named)

    class Hosting:
        async def request(self, api_key: int, version, body: dict):
            topics = body["topics"]
            if api_key == ApiKey.DESCRIBE_LOG_DIRS:
                asked.append((api_key, sum(len(topic["partitions"]) for topic in topics)))
                return SimpleNamespace(results=[SimpleNamespace(error_code=ErrorCode.none, topics=[SimpleNamespace(
                    name=topic["topic"], partitions=[SimpleNamespace(partition_index=index, partition_size=100)
                                                     for index in topic["partitions"]]) for topic in topics])])
            asked.append((api_key, sum(len(topic["partitions"]) for topic in topics)))
            return SimpleNamespace(topics=[SimpleNamespace(name=topic["name"], partitions=[
                SimpleNamespace(partition_index=partition["partition_index"], error_code=ErrorCode.none, offset=7)
                for partition in topic["partitions"]]) for topic in topics])

    async def connect(broker: int) -> Hosting:
        return Hosting()

    hosted = {("hosted", partition) for partition in range(PARTITIONS)}
    logs = await replica_logs.replica_logs(connect, {1: hosted})
    assert logs == {(1, *key): replica_logs.ReplicaLog(100, 7) for key in hosted}
    runs = [PARTITIONS_PER_REQUEST_MAX, PARTITIONS_PER_REQUEST_MAX, 1]
    assert asked == [(ApiKey.DESCRIBE_LOG_DIRS, run) for run in runs] + [(ApiKey.LIST_OFFSETS, run) for run in runs]
