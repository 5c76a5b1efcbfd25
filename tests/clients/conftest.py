"""Client tests run real Kafka clients against a real broker process."""

from __future__ import annotations

import uuid

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def broker(tmp_path):
    process = BrokerProcess(tmp_path / "data")
    process.start()
    yield process
    process.stop()


@pytest.fixture
def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"
