"""A deleted topic's nodes go only once every replica has closed (docs/design.md §9): deleteTopic,
whose deletePartition removes a partition's paths after waitTillStateChangeRequestConsumed, never
before (as Kafka's TopicDeletionManager waits for every replica however long it is away).

    /admin/delete_topics/[topic]  ->  TopicDeletion: the close-replica requests sent, by broker

Why not remove the nodes at once and let the brokers that are behind catch up through their
queues: a broker that is behind may still run the topic's leadership in memory (paused, cut off
from the store, its session expired and not yet noticed). Its writes are compare-and-sets keyed
by path and version, and the nodes of a topic created again under the same name start their
versions at 0 again: the old leader's ISR write could land on the new topic's ISR, naming a
replica that never had its records (the simulator's recreate fault found it). A broker that
has consumed its close-replica has stopped the partition and deleted its log, and does not
start it again while the topic is marked (hosted.py), so once every request is consumed no
broker holds anything of the old topic, and the name is free.

Whoever sees the last request consumed removes the topic: the admin command that waits for
them, the state-change listener of each broker right after it consumed an admin's close-replica
(so a broker that was down finishes the deletion when it starts), and a later create or delete
of the name. A broker that never comes back holds the deletion until it is removed from the
cluster; until then, the topic is hidden (the admin's listing, the brokers' metadata) and its
name refused to a create with "marked for deletion", as in Kafka.
"""

from __future__ import annotations

import asyncio
import logging

from replog.coord_backends import BadVersion, NodeExists, NoNode, NotEmpty, Store, commit_in_batches
from replog.coord_backends.base import DeleteOp
from replog.coord_backends import paths
from replog.coord_backends.paths import TopicDeletion

logger = logging.getLogger(__name__)

DELETION_ATTEMPTS_MAX = 8  # of listing and deleting what is left, against racing finishers


async def read_deletion(store: Store, topic: str) -> tuple[TopicDeletion, int] | None:
    """The topic's deletion mark and its version; None when the topic is not marked."""
    try:
        data, version = await store.get(paths.topic_deletion(topic))
    except NoNode:
        return None
    return TopicDeletion.decode(data), version


async def pending_close_replicas(store: Store, deletion: TopicDeletion) -> dict[int, list[str]]:
    """The close-replica requests the deletion names that are not consumed yet, by broker."""
    pending = {}
    for broker, names in sorted((deletion.close_replicas or {}).items()):  # bounded by the topic's replicas
        try:
            queued = set(await store.children(paths.state_queue(int(broker))))
        except NoNode:
            queued = set()
        left = [name for name in names if name in queued]
        if left:
            pending[int(broker)] = left
    return pending


async def finish_topic_deletion(store: Store, topic: str) -> bool:
    """Remove a topic marked for deletion, with its config, staging and mark, if every replica
    consumed its close-replica. True when no deletion of it is pending any more."""
    marked = await read_deletion(store, topic)
    if marked is None:
        return True
    deletion, marked_version = marked
    if deletion.close_replicas is None or await pending_close_replicas(store, deletion):
        return False
    for _ in range(DELETION_ATTEMPTS_MAX):
        doomed = []
        for root in (paths.topic(topic), paths.reassigned_topic(topic), paths.topic_config(topic)):
            doomed += await subtree(store, root)
        # The mark goes last, in the last transaction: until then the topic stays hidden, however
        # many transactions its nodes take (TRANSACTION_OPS_MAX).
        ops = [*(DeleteOp(path) for path in doomed), DeleteOp(paths.topic_deletion(topic), marked_version)]
        try:
            await commit_in_batches(store, ops)
        except (NoNode, BadVersion, NotEmpty, NodeExists):
            # Another finisher deleting the same nodes (each broker that consumed a close-replica
            # tries), or a broker that wrote under the topic since the listing (a leader node):
            # list what is left and go on, unless the other finisher is done.
            if await store.exists(paths.topic_deletion(topic)) is None:
                return True
            continue
        logger.info("topic deleted topic=%s", topic)
        return True
    return False  # whoever comes next finishes it


async def subtree(store: Store, path: str) -> list[str]:
    """`path` and everything below it, deepest first (the order a transaction can delete them);
    nothing if it does not exist."""
    try:
        children = await store.children(path)
    except NoNode:
        return []
    below = await asyncio.gather(*(subtree(store, f"{path}/{child}") for child in children))
    return [*(path for paths_below in below for path in paths_below), path]
