"""Dynamic broker configs (admin/broker_configs.py) on every backend: the throttle rates are the
only ones, validated before anything is written, each refusal one line naming the setting."""

from __future__ import annotations

import pytest

from replog.admin import AlterOp, ConfigOperation
from replog.admin.broker_configs import (
    alter_broker_config,
    broker_resource,
    dynamic_broker_config,
    remove_throttle_rates,
    replace_broker_config,
)
from replog.admin.errors import AdminError, InvalidConfig
from replog.admin.topic_configs import ConfigSource
from replog.coord_backends import paths

RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"


@pytest.mark.parametrize("operation, says", [
    (ConfigOperation(RATE, AlterOp.SET, "fast"), f"broker 1's config: {RATE}: 'fast' is not an integer"),
    (ConfigOperation(RATE, AlterOp.SET, "0"), f"broker 1's config: {RATE}: '0' must be at least 1"),
    (ConfigOperation(RATE, AlterOp.SET, None), f"broker 1's config: {RATE}: give a value in bytes per second"),
    (ConfigOperation(RATE, AlterOp.APPEND, "5"), f"broker 1's config: {RATE} is a number; SET or DELETE it"),
    (ConfigOperation("log.retention.ms", AlterOp.SET, "5"), "'log.retention.ms' cannot be changed while brokers run"),
], ids=["not-a-number", "zero", "no-value", "append", "static"])
async def test_bad_broker_configs_are_one_line_refusals_that_change_nothing(store, operation, says):
    good = ConfigOperation(FOLLOWER_RATE, AlterOp.SET, "5")
    with pytest.raises(InvalidConfig) as refused:
        await alter_broker_config(store, 1, [good, operation])
    assert says in refused.value.message and "\n" not in refused.value.message
    assert await store.exists(paths.broker_config(1)) is None


async def test_a_brokers_own_rate_overrides_the_default_and_removal_clears_both(store):
    await alter_broker_config(store, None, [ConfigOperation(RATE, AlterOp.SET, "100"),
                                            ConfigOperation(FOLLOWER_RATE, AlterOp.SET, "100")])
    await alter_broker_config(store, 2, [ConfigOperation(RATE, AlterOp.SET, "50")])
    assert await dynamic_broker_config(store, 2) == {RATE: ("50", ConfigSource.DYNAMIC_BROKER_CONFIG),
                                                     FOLLOWER_RATE: ("100", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)}
    assert await dynamic_broker_config(store, None) == {RATE: ("100", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                                                        FOLLOWER_RATE: ("100", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)}
    assert await remove_throttle_rates(store) == ["2", "<default>"]
    assert await dynamic_broker_config(store, 2) == {}
    assert await remove_throttle_rates(store) == []


def test_a_broker_resource_is_a_broker_id_or_the_default():
    assert (broker_resource(""), broker_resource("3")) == (None, 3)
    with pytest.raises(AdminError, match=r"broker resource 'x' is not a broker id; name one, or \"\" for the cluster's default"):
        broker_resource("x")


async def test_replacing_a_brokers_configs_deletes_the_rates_not_named(store):
    await alter_broker_config(store, 2, [ConfigOperation(RATE, AlterOp.SET, "50"),
                                         ConfigOperation(FOLLOWER_RATE, AlterOp.SET, "60")])
    await replace_broker_config(store, 2, {RATE: "70"}, validate_only=True)
    assert await dynamic_broker_config(store, 2) == {RATE: ("50", ConfigSource.DYNAMIC_BROKER_CONFIG),
                                                     FOLLOWER_RATE: ("60", ConfigSource.DYNAMIC_BROKER_CONFIG)}
    await replace_broker_config(store, 2, {RATE: "70"})
    assert await dynamic_broker_config(store, 2) == {RATE: ("70", ConfigSource.DYNAMIC_BROKER_CONFIG)}
    with pytest.raises(InvalidConfig, match="'log.retention.ms' cannot be changed while brokers run"):
        await replace_broker_config(store, 2, {"log.retention.ms": "5"})
    assert await dynamic_broker_config(store, 2) == {RATE: ("70", ConfigSource.DYNAMIC_BROKER_CONFIG)}
