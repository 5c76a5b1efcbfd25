"""Seeded chaos runs: 3 brokers over a real ZooKeeper or etcd, a topic with RF=3 and
min.insync.replicas=2, an idempotent acks=all producer of numbered records, and a schedule of
faults drawn from a seed: the leader SIGKILLed (twice) and restarted, the leader SIGSTOPped
past its session and resumed, a follower stopped and restarted (the ISR shrinks, writes go on,
it rejoins), the coordination server restarted, the leader stopped with SIGTERM (controlled
shutdown) and restarted. After the run every broker stops cleanly and checker.py reads every
replica's log.

The seed is printed (shown when a run fails); REPLOG_CHAOS_SEED=<seed> replays the schedule.
Timing under load still differs from run to run, so a replay repeats the faults, not every
interleaving.
"""

from __future__ import annotations

import os
import random
import time

from tests.support.harness import (
    WAIT_S,
    HighWatermarkSampler,
    NumberedProducer,
    create_topic,
    fully_in_sync,
    isr_of,
    leader_of,
    stop_and_check,
)
from tests.support.polling import wait_until

SEED_ENV = "REPLOG_CHAOS_SEED"
TOPIC = "chaos"
LEADER_KILLS = 2
ONE_EACH = ("pause_leader", "restart_follower", "restart_coordination", "terminate_leader")
WRITES_BEFORE_FAULT_S = (0.5, 2.0)


def draw_schedule(seed: int) -> list[tuple[str, float]]:
    """(fault, seconds of undisturbed writes before it), in an order drawn from `seed`."""
    rng = random.Random(seed)
    faults = ["kill_leader"] * LEADER_KILLS + list(ONE_EACH)
    rng.shuffle(faults)
    return [(fault, round(rng.uniform(*WRITES_BEFORE_FAULT_S), 2)) for fault in faults]


def other_leader(cluster, old_leader: int) -> bool:
    return leader_of(cluster, TOPIC, excluded=(old_leader,)) not in (-1, old_leader)


def agreed_leader(cluster) -> int:
    """The leader every live broker names, once they agree on one: after the previous fault
    their views may differ for a moment (an ISR change in flight), and then none is the leader."""
    def named() -> tuple[int] | None:  # a tuple: broker 0 is a leader too
        leader = leader_of(cluster, TOPIC)
        return (leader,) if leader in cluster.brokers else None

    return wait_until(named, "the live brokers to agree on a leader", WAIT_S)[0]


def kill_leader(cluster, producer, rng) -> None:
    leader = agreed_leader(cluster)
    cluster.brokers[leader].kill()
    wait_until(lambda: other_leader(cluster, leader), f"a new leader after SIGKILL of {leader}", WAIT_S)
    cluster.brokers[leader].restart()


def pause_leader(cluster, producer, rng) -> None:
    leader = agreed_leader(cluster)
    cluster.brokers[leader].pause()
    try:
        # A new leader is elected only once the paused one's session has expired.
        wait_until(lambda: other_leader(cluster, leader), f"a new leader while {leader} is paused", WAIT_S)
    finally:
        cluster.brokers[leader].resume()


def restart_follower(cluster, producer, rng) -> None:
    leader = agreed_leader(cluster)
    follower = rng.choice(sorted(broker for broker in cluster.brokers if broker != leader))
    cluster.brokers[follower].stop()
    wait_until(lambda: follower not in (isr_of(cluster, TOPIC) or (follower,)), f"follower {follower} to leave the ISR", WAIT_S)
    acknowledged = producer.acknowledged_count()
    wait_until(lambda: producer.acknowledged_count() > acknowledged, f"writes to go on without follower {follower}", WAIT_S)
    cluster.brokers[follower].restart()
    wait_until(lambda: follower in (isr_of(cluster, TOPIC) or ()), f"follower {follower} to rejoin the ISR", WAIT_S)


def restart_coordination(cluster, producer, rng) -> None:
    cluster.server.restart()


def terminate_leader(cluster, producer, rng) -> None:
    leader = agreed_leader(cluster)
    assert cluster.brokers[leader].stop() == 0
    wait_until(lambda: other_leader(cluster, leader), f"a new leader after controlled shutdown of {leader}", WAIT_S)
    cluster.brokers[leader].restart()


FAULTS = {fault.__name__: fault for fault in (kill_leader, pause_leader, restart_follower, restart_coordination, terminate_leader)}


def test_seeded_faults_lose_no_acknowledged_write_and_keep_replicas_identical(private_cluster):
    cluster = private_cluster
    seed = int(os.environ.get(SEED_ENV) or random.SystemRandom().randrange(2**32))
    schedule = draw_schedule(seed)
    print(f"chaos seed {seed} ({SEED_ENV}={seed} replays it) over {cluster.coord_url.split(':')[0]}: {schedule}")
    rng = random.Random(seed)
    create_topic(cluster, TOPIC)
    wait_until(lambda: fully_in_sync(cluster, TOPIC), "all three replicas in the ISR", WAIT_S)
    with HighWatermarkSampler(cluster.bootstrap, TOPIC) as sampler, NumberedProducer(cluster.bootstrap, TOPIC) as producer:
        for fault, writes_before_s in schedule:  # bounded by the schedule
            time.sleep(writes_before_s)  # the schedule itself: how long writes run undisturbed
            print(f"{time.strftime('%H:%M:%S')} {fault}")
            FAULTS[fault](cluster, producer, rng)
            wait_until(lambda: fully_in_sync(cluster, TOPIC), f"every replica back in the ISR after {fault} (seed {seed})", WAIT_S)
        acknowledged = producer.acknowledged_count()
        wait_until(lambda: producer.acknowledged_count() > acknowledged, f"writes to go on after the faults (seed {seed})", WAIT_S)
        acknowledged = producer.stop()
        samples = sampler.stop()
    print(f"acknowledged {len(acknowledged)} records, sampled the HW {len(samples)} times")
    problems = stop_and_check(cluster, TOPIC, acknowledged, samples)
    assert problems == [], f"seed {seed}, schedule {schedule}:\n" + "\n".join(problems)
