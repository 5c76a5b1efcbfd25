"""The settings of the topics this broker hosts, kept current while they run.

A topic's settings are the broker's defaults under the overrides in `/config/topics/[topic]`,
which IncrementalAlterConfigs (and `replog topics alter`) rewrite. Kafka applies such a change
to the running partitions at once (its config-change notifications); here each hosted topic's
config node has one data watch, so a broker holds as many of these watches as it hosts topics,
not partitions, and none for topics it does not host. Every change is applied through
`on_change(topic, settings)` (the broker updates each hosted partition's log and partition
settings), and leaderships read `settings(topic)` at each election (unclean.leader.election).

Each watch runs in a task owned here: a store failure is logged and the watch opened again
after a pause; `forget` and `close` end them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from replog.config import BrokerConfig, TopicSettings, effective_topic_config
from replog.coord_backends import NoNode, Store
from replog.coord_backends import paths
from replog.coord_backends.paths import TopicConfig
from replog.replication.node_watch import follow_node
from replog.tasks import TaskOwner

logger = logging.getLogger(__name__)


class TopicConfigs:
    def __init__(self, store: Store, broker_config: BrokerConfig, on_change: Callable[[str, TopicSettings], None]):
        self._store = store
        self._broker_config = broker_config
        self._on_change = on_change
        self._settings: dict[str, TopicSettings] = {}  # bounded by the hosted topics
        self._followers = TaskOwner("topic config follower")  # one per topic, keyed by it

    def settings(self, topic: str) -> TopicSettings:
        return self._settings[topic]

    async def follow(self, topic: str) -> None:
        """Know the topic's settings now and follow their changes from here on."""
        if topic in self._settings:  # followed already
            return
        try:
            overrides = TopicConfig.decode((await self._store.get(paths.topic_config(topic)))[0]).configs
        except NoNode:
            overrides = {}
        self._settings[topic] = effective_topic_config(self._broker_config, overrides)
        self._followers.start(self._follow(topic), name=f"topic-config-{topic}", key=topic)

    async def forget(self, topic: str) -> None:
        self._settings.pop(topic, None)
        await self._followers.stop(topic)

    async def close(self) -> None:
        self._settings.clear()
        await self._followers.close()

    async def _follow(self, topic: str) -> None:
        """Until forgotten."""
        await follow_node(self._store, paths.topic_config(topic),
                          lambda event: self._apply(topic, TopicConfig.decode(event.data).configs if event.exists else {}),
                          "topic config")

    def _apply(self, topic: str, overrides: dict[str, str]) -> None:
        try:
            settings = effective_topic_config(self._broker_config, overrides)
        except ValueError as error:  # written by a tool that skipped validation: keep what runs
            logger.error("topic config refused, keeping the previous settings topic=%s error=%s", topic, error)
            return
        if settings == self._settings.get(topic):
            return
        self._settings[topic] = settings
        logger.info("topic config changed topic=%s overrides=%s", topic, overrides)
        self._on_change(topic, settings)
