"""The nemesis's topic delete and create again, through replog's own admin commands
(admin/topics.py) on the observer's store client, as `replog topics delete` then `create` run.

Delete: the topic is marked for deletion and a close-replica goes to every assigned broker
through its state-change queue; the delete waits at most ADMIN_TIMEOUT_S for the registered
brokers to consume theirs, and the topic's nodes go once every broker did, whoever sees it last
(replication/topic_deletion.py): a broker crashed, paused or cut off from the store acts on its
requests when it runs again. Create: the same name, an explicit assignment and the topic's
overrides. A create refused because the name is still being deleted, or whose registered
brokers did not consume their start-replicas in time (REQUEST_TIMED_OUT, its partitions left
staged), is tried again after a pause, as an operator would; the next attempt closes what a
failed one staged before it stages its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence

from replog import admin
from replog.config import BrokerConfig
from replog.coord_backends import Store

# Far below Kafka's 30 s request timeout: the fault phase lasts 20 s, and a short wait leaves
# more brokers to hear of the change late, through their queues.
ADMIN_TIMEOUT_S = 3.0
CREATE_RETRY_PAUSE_S = 1.0


async def recreate_topic(store: Store, topic: str, assignment: Mapping[int, Sequence[int]], overrides: Mapping[str, str],
                         note: Callable[[str], None], broker_config: BrokerConfig) -> None:
    """Delete `topic` and create it again; returns in the step whose transaction created it.
    Retries the create until it succeeds: the caller bounds it (brokers down now are back after
    the heal, and then consume in time)."""
    limits = admin.StateChangeLimits(timeout_s=ADMIN_TIMEOUT_S)
    try:
        await admin.delete_topic(store, topic, limits=limits)
    except admin.RequestTimedOut as late:
        note(f"recreate: {late.message}")
    note(f"recreate: {topic} deleted")
    while True:  # bounded by the caller
        try:
            await admin.create_topic(store, topic, None, None, overrides, replica_assignment=assignment, limits=limits,
                                     broker_config=broker_config)
            return
        except (admin.RequestTimedOut, admin.TopicAlreadyExists) as refused:  # the latter: still being deleted
            note(f"recreate: {refused.message}")
        await asyncio.sleep(CREATE_RETRY_PAUSE_S)
