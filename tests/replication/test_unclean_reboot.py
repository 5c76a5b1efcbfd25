"""A replica whose machine went down may have lost writes it acknowledged as an ISR member (the
page cache went with the machine): it leaves the ISR before its leadership starts, so that it is
not elected while the replica holding those writes is away (KIP-966's case). A process crash
loses nothing, so there it stays electable.

One broker runs in this process over the embedded store; a second client of the same store
plays the other replica. A crash is staged on disk as one leaves it: no record of a clean stop
(clean_shutdown.py), and, for a machine restart, a boot id recorded that is not this machine's.
"""

from __future__ import annotations

import pytest

from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import NoNode, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import IsrRecord, LeaderRecord, ReplicaAssignment
from replog.replication.election import leader_election
from replog.storage.checkpoint import write_checkpoint
from replog.storage.clean_shutdown import CLEAN_SHUTDOWN_FILE
from replog.storage.unclean_reboot import BOOT_ID_FILE, lost_unflushed_writes
from tests.support.polling import eventually

TOPIC = "reboot"
BROKER, OTHER = 0, 1
WAIT_S = 20


def start_broker(tmp_path) -> Broker:
    return Broker(load_broker_config(None, {
        "broker.id": str(BROKER), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}",
        "listeners": "127.0.0.1:0", "metrics.listeners": "127.0.0.1:0", "preferred.replica.election.wait.ms": "0", "auto.leader.rebalance.enable": "false",
    }))


async def restarted_after_crash(tmp_path, machine_restarted: bool) -> tuple[Broker, MemoryStore]:
    """BROKER led with OTHER in sync; both went down without a hand-over; BROKER is back first."""
    peer = MemoryStore(str(tmp_path / "store.db"))
    await peer.start()
    await peer.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER, OTHER)).encode(), make_parents=True)
    await peer.create(paths.broker(OTHER), b'{"host": "127.0.0.1", "port": 1, "rack": null}', ephemeral=True, make_parents=True)
    broker = start_broker(tmp_path)
    await broker.start()
    epoch = broker.replicas.get_partition(TOPIC, 0).leader_epoch
    await broker.stop()
    # What a crash leaves: no hand-over (both still in the ISR), no record of a clean stop.
    await peer.set(paths.isr(TOPIC, 0), IsrRecord((BROKER, OTHER), epoch).encode())
    await peer.delete(paths.broker(OTHER))
    (tmp_path / "data" / CLEAN_SHUTDOWN_FILE).unlink()
    if machine_restarted:
        write_checkpoint(tmp_path / "data" / BOOT_ID_FILE, ["a-boot-before-this-one"])
    broker = start_broker(tmp_path)
    await broker.start()
    return broker, peer


async def leader(peer: MemoryStore) -> LeaderRecord | None:
    try:
        return LeaderRecord.decode((await peer.get(paths.leader(TOPIC, 0)))[0])
    except NoNode:
        return None


async def isr(peer: MemoryStore) -> tuple[int, ...]:
    return IsrRecord.decode((await peer.get(paths.isr(TOPIC, 0)))[0]).isr


@pytest.mark.parametrize("machine_restarted", [True, False], ids=["machine-restarted", "process-crashed"])
async def test_a_replica_back_from_a_machine_restart_leaves_the_isr_before_it_can_be_elected(tmp_path, machine_restarted):
    broker, peer = await restarted_after_crash(tmp_path, machine_restarted)
    try:
        # start() returns once the partition's leadership settled: elected, or not eligible.
        if machine_restarted:
            assert await isr(peer) == (OTHER,)
            assert await leader(peer) is None
            assert not lost_unflushed_writes(tmp_path / "data" / f"{TOPIC}-0")  # the exit is done
        else:
            # The page cache outlived the process: nothing was lost, so the replica may lead.
            async def leads() -> bool:
                found = await leader(peer)
                return found is not None and found.leader == BROKER

            await eventually(leads, WAIT_S, "the broker back from a process crash elected")
            assert await isr(peer) == (BROKER,)
    finally:
        await broker.stop()
        await peer.close()


async def test_an_election_that_an_isr_exit_raced_runs_again(tmp_path, monkeypatch):
    """The exit is an ISR write by a replica that does not lead: an election that read the ISR
    just before it must read it again, not take itself for beaten (nobody else runs)."""
    store, peer = MemoryStore(str(tmp_path / "store.db")), MemoryStore(str(tmp_path / "store.db"))
    await store.start()
    await peer.start()
    try:
        await peer.create(paths.replicas(TOPIC, 0), ReplicaAssignment((BROKER, OTHER)).encode(), make_parents=True)
        await peer.create(paths.isr(TOPIC, 0), IsrRecord((BROKER, OTHER), 3).encode())
        read = store.get

        async def get_then_other_leaves(path: str):
            found = await read(path)
            if path == paths.isr(TOPIC, 0) and OTHER in IsrRecord.decode(found[0]).isr:
                await peer.set(path, IsrRecord((BROKER,), 3).encode(), found[1])
            return found

        monkeypatch.setattr(store, "get", get_then_other_leaves)
        won = await leader_election(store, TOPIC, 0, BROKER)
        assert won is not None and won.isr.isr == (BROKER,)
        assert (await leader(peer)).leader == BROKER
    finally:
        await store.close()
        await peer.close()
