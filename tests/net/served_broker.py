"""A broker process with one topic, shared by the tests of a module that send it raw requests
and read its log lines."""

from __future__ import annotations

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.broker_process import BrokerProcess

SERVED_TOPIC = "served-topic"


@pytest.fixture(scope="module")
def served_broker(tmp_path_factory):
    broker = BrokerProcess(tmp_path_factory.mktemp("served") / "data")
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(SERVED_TOPIC, 1, 1)])[SERVED_TOPIC].result(timeout=30)
        yield broker
    finally:
        broker.stop()
