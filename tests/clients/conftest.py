"""Client tests run real Kafka clients against a real broker process.

`broker` is one process per test module (each test uses its own topics); tests that stop or kill
the broker use `own_broker`, a process of their own."""

from __future__ import annotations

import uuid

import pytest

pytest.register_assert_rewrite("tests.clients.suite", "tests.clients.records")

from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess


def _started(data_dir, extra_args: tuple[str, ...] = ()):
    process = BrokerProcess(data_dir, extra_args=extra_args)
    process.start()
    return process


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    process = _started(tmp_path_factory.mktemp("broker") / "data")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def group_broker(tmp_path_factory):
    """A broker per test module with the group settings that keep rebalances short."""
    from tests.support.group_clients import GROUP_SETTINGS

    process = _started(tmp_path_factory.mktemp("groups") / "data", GROUP_SETTINGS)
    yield process
    process.stop()


@pytest.fixture
def own_broker(tmp_path):
    """A broker of its own, on which clients may make segments of 1 KiB and more: several
    segments from a few records, for tests of what a restart reads back."""
    process = _started(tmp_path / "data", ("--set", "internal.segment.bytes.min=1024"))
    yield process
    process.stop()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def create_topic(bootstrap: str, name: str, config: dict[str, str] | None = None, partitions: int = 1) -> str:
    """Set-up for tests of other things: a topic made with confluent-kafka's AdminClient."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])[name].result(30)
    return name


@pytest.fixture
def make_topic(broker):
    """`make_topic(config=None)`: a new one-partition topic on the module's broker."""
    return lambda config=None: create_topic(broker.bootstrap, f"t-{uuid.uuid4().hex[:10]}", config)
