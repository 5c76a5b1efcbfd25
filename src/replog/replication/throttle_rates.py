"""This broker's configured leader.replication.throttled.rate, kept current in its replication
throttle (replica/throttle.py): the broker's own dynamic config node's value, else the cluster
default's (admin/broker_configs.py), as Kafka resolves a dynamic broker config. Two data
watches per broker, whatever it leads, so that a rate set or removed applies to every move at
once without a watch per partition.
"""

from __future__ import annotations

import asyncio
import functools
import logging

from replog.config import LEADER_THROTTLE_RATE, ConfigError, parse_dynamic_broker_setting
from replog.coord_backends import Store
from replog.coord_backends import paths
from replog.coord_backends.paths import DynamicBrokerConfig
from replog.replica.throttle import ReplicationThrottle

from .node_watch import follow_node

logger = logging.getLogger(__name__)


class ThrottleRates:
    def __init__(self, store: Store, broker_id: int, throttle: ReplicationThrottle):
        self._store = store
        self._broker_id = broker_id
        self._throttle = throttle
        self._rates: dict[int | None, int | None] = {broker_id: None, None: None}  # by node: own, default

    async def run(self) -> None:
        """Until cancelled with the broker."""
        async with asyncio.TaskGroup() as group:
            for level in self._rates:
                group.create_task(follow_node(self._store, paths.broker_config(level),
                                              functools.partial(self._changed, level), "broker config"))

    def _changed(self, level: int | None, event) -> None:
        text = DynamicBrokerConfig.decode(event.data).configs.get(LEADER_THROTTLE_RATE) if event.exists else None
        try:
            self._rates[level] = None if text is None else parse_dynamic_broker_setting(LEADER_THROTTLE_RATE, text)
        except ConfigError as error:  # written by a tool that skipped validation: keep what runs
            logger.error("throttle rate refused, keeping the previous one broker=%d error=%s", self._broker_id, error)
            return
        own, default = self._rates[self._broker_id], self._rates[None]
        rate = own if own is not None else default
        if rate != self._throttle.configured_rate_bytes_per_s:
            self._throttle.configured_rate_bytes_per_s = rate
            logger.info("leader replication throttle rate=%s broker=%d", rate, self._broker_id)
