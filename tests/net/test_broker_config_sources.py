"""DescribeConfigs of a broker says where each static setting came from, as Kafka does: a
setting left at its default is DEFAULT_CONFIG, one given at start-up STATIC_BROKER_CONFIG."""

from __future__ import annotations

import asyncio

import pytest

from replog.admin import ConfigSource
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from tests.net.served_broker import served_broker  # noqa: F401  (the fixture)

pytestmark = pytest.mark.cluster  # each test asks the module's broker process (served_broker)

BROKER_RESOURCE = 4


async def _described(port: int) -> dict:
    async with await BrokerConnection.open("127.0.0.1", port) as connection:
        answer = await connection.request(ApiKey.DESCRIBE_CONFIGS, 4, {
            "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": "0", "configuration_keys": None}],
            "include_synonyms": False, "include_documentation": False})
    (resource,) = answer.results
    return {config.name: config.config_source for config in resource.configs}


def test_defaults_and_start_up_settings_are_told_apart(served_broker):
    described = asyncio.run(_described(served_broker.port))
    assert described["num.partitions"] == ConfigSource.DEFAULT_CONFIG
    assert described["listeners"] == ConfigSource.STATIC_BROKER_CONFIG, "given by --listen"
