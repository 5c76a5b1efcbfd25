"""A controlled shutdown's hand-overs, committed together (joined.commit_together), over memory,
ZooKeeper and etcd."""

from __future__ import annotations

from replog.coord_backends import BadVersion, paths
from replog.coord_backends.base import DeleteOp, SetOp
from replog.coord_backends.paths import IsrRecord, LeaderRecord
from replog.coord_backends.joined import commit_together
from replog.replication.hosted import HAND_OVERS_PER_TRANSACTION
from tests.backends.conftest import backend, connect, counting_transactions, security, store, url  # noqa: F401  (fixtures)

TOPIC = "orders"
LEADER, FOLLOWER = 1, 2


async def led(store, partition: int) -> list:
    """The partition led by LEADER with FOLLOWER in sync: its hand-over's writes."""
    await store.create(paths.leader(TOPIC, partition), LeaderRecord(LEADER, 0).encode(), make_parents=True)
    await store.create(paths.isr(TOPIC, partition), IsrRecord((LEADER, FOLLOWER), 0).encode())
    leader_version, isr_version = await store.exists(paths.leader(TOPIC, partition)), await store.exists(paths.isr(TOPIC, partition))
    return [SetOp(paths.isr(TOPIC, partition), IsrRecord((FOLLOWER,), 0).encode(), isr_version),
            DeleteOp(paths.leader(TOPIC, partition), leader_version)]


async def handed_over(store, partition: int) -> bool:
    isr = IsrRecord.decode((await store.get(paths.isr(TOPIC, partition)))[0]).isr
    return isr == (FOLLOWER,) and await store.exists(paths.leader(TOPIC, partition)) is None


async def test_a_batch_of_hand_overs_is_one_transaction(store):
    batch = [(partition, await led(store, partition)) for partition in range(HAND_OVERS_PER_TRANSACTION)]
    committed = counting_transactions(store)
    outcomes = await commit_together(store, batch)
    assert [(partition, len(results)) for partition, results in outcomes] == [(partition, 2) for partition in range(HAND_OVERS_PER_TRANSACTION)]
    assert committed == [2 * HAND_OVERS_PER_TRANSACTION]
    for partition in range(HAND_OVERS_PER_TRANSACTION):
        assert await handed_over(store, partition)


async def test_a_fenced_hand_over_fails_alone(store):
    batch = [(partition, await led(store, partition)) for partition in range(3)]
    # Partition 1's ISR was written by someone else since its leader last saw it.
    data, version = await store.get(paths.isr(TOPIC, 1))
    await store.set(paths.isr(TOPIC, 1), data, version)
    outcomes = dict(await commit_together(store, batch))
    assert not isinstance(outcomes[0], BaseException) and not isinstance(outcomes[2], BaseException)
    assert isinstance(outcomes[1], BadVersion)
    assert await handed_over(store, 0) and await handed_over(store, 2)
    assert await store.exists(paths.leader(TOPIC, 1)) is not None
