"""Removing brokers (admin/cluster.py) on every backend: what the cluster tests cannot reach
quickly, a topic deletion held by a broker that never comes back."""

from __future__ import annotations

import pytest

from replog.admin import StateChangeLimits, create_topic, delete_topic, finish_removal, plan_membership
from replog.admin.errors import InvalidReplicaAssignment
from replog.coord_backends import paths


async def test_removing_a_broker_that_is_gone_completes_the_deletion_that_waited_for_it(store, register_brokers):
    await register_brokers({2: None})
    await create_topic(store, "doomed", None, None, replica_assignment={0: [1, 2]})  # broker 1: a queue, never started
    await delete_topic(store, "doomed")  # waits for the registered brokers only
    assert await store.exists(paths.topic_deletion("doomed")) is not None, "the deletion waits for broker 1"

    removal = await finish_removal(store, [1], StateChangeLimits(timeout_s=0.3))

    assert (removal.queues_deleted, removal.deletions_finished) == ((1,), ("doomed",))
    for path in (paths.state_queue(1), paths.topic("doomed"), paths.topic_deletion("doomed")):
        assert await store.exists(path) is None, path


async def test_a_broker_the_cluster_does_not_know_cannot_be_removed(store, register_brokers):
    await register_brokers({0: None, 1: None})
    with pytest.raises(InvalidReplicaAssignment, match=r"brokers \[7\] are not in the cluster"):
        await plan_membership(store, remove=[7])
