"""An adversarial fuzzer against a real broker process: no bytes a client sends may crash it,
exhaust its memory, stall other clients or make a partition unreadable.

The broker runs under a 2 GiB address-space limit and a 1,024 file limit (tests/hostile/arena.py),
so that unbounded memory or descriptors end in a failure the test sees rather than in a slow
machine. Throughout, a well-behaved confluent-kafka producer (acks=all) writes numbered records
to a topic of its own, and every acknowledged record must be read back by a consumer at the end
of each family of cases and every 20 s. After every case, the broker must be alive, answer
ApiVersions on a connection of its own, and have logged no internal error or traceback.

The cases (tests/hostile/catalog.py), one test per family, each the same in every run:
    malformed frames   every length, count and value of a valid request of every API and version
                       replog advertises set to hostile values, truncations, garbage tails,
                       lying size prefixes, unknown versions and API keys, forged follower fetches
    random frames      REPLOG_FUZZ_CASES (default 1,000) stacked random mutations from the seed
                       REPLOG_FUZZ_SEED (printed); REPLOG_FUZZ_CASES=100000 is the long run
    wide requests      every API's top-level array repeated to 1 MiB (100,000 topics, groups...):
                       another connection is served meanwhile
    wrong batches      record counts, offset and timestamp deltas, records past their batch,
                       control and transactional bits, legacy magics, 2,000 batches and 2,000
                       producer ids, garbage in every codec; valid batches of every codec too
    bombs              gzip, zstd, lz4, snappy (raw and xerial) inflating to GiBs or announcing
                       4 GiB, on a plain and a compacted topic; then a log cleaner pass
    slow senders       size prefixes announcing 100 MB and nothing more; a byte at a time
    descriptor flood   1,100 idle connections past the file limit, a topic created meanwhile
    connection limits  max.connections, max.connections.per.ip, connections.max.idle.ms and
                       queued.max.request.bytes, set small (skipped while the broker lacks them)
A family that kills the broker three times stops there (the broker is restarted after each).

Forged identities need two brokers: a plain client's Fetch posing as the follower must not move
the high watermark (its own test, over ZooKeeper).
"""

from __future__ import annotations

import os

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from replog.net.codec import ApiKey
from tests.support.cluster import Cluster
from tests.support.servers import unique_root
from tests.hostile import catalog
from tests.hostile.arena import Arena
from tests.hostile.cases import FRAME_WAIT_S
from tests.hostile.connection_cases import DescriptorFlood
from tests.hostile.seeds import Names, all_seeds, request_values
from tests.hostile.wire import Connection, Ending, high_watermark
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster  # each test runs against a broker process

DEATHS_MAX = 3  # per family: enough to show it is no accident, few enough to leave time for the rest
RANDOM_CASES = int(os.environ.get("REPLOG_FUZZ_CASES", "1000"))
RANDOM_SEED = int(os.environ.get("REPLOG_FUZZ_SEED", "43"))
PROGRESS_EVERY = 10_000  # a line for long runs (pytest -s shows it)


@pytest.fixture(scope="module")
def arena(tmp_path_factory):
    with Arena(tmp_path_factory.mktemp("fuzz") / "data") as arena:
        yield arena


@pytest.fixture(scope="module")
def witness(arena):
    with arena.witness() as witness:
        yield witness


def fuzz(arena: Arena, witness, cases, replay: str = "") -> None:
    report = arena.run(cases, witness, deaths_max=DEATHS_MAX, progress_every=PROGRESS_EVERY)
    print(report.summary())
    if report.failures:
        pytest.fail(f"{replay}{report.summary()}", pytrace=False)


def test_every_seed_reaches_its_handler(arena):
    """The seeds the mutations start from are requests the broker answers: a mutant then differs
    from a handled request in one field only."""
    unanswered = []
    for seed in all_seeds(arena.target.names):
        with Connection(arena.target.host, arena.target.port) as connection:
            if connection.exchange([seed.frame], 1, FRAME_WAIT_S).ending is not Ending.ANSWERED:
                unanswered.append(seed.label)
    assert not unanswered


def test_malformed_frames(arena, witness):
    fuzz(arena, witness, catalog.frame_cases(arena.target))


@pytest.mark.timeout(max(300, RANDOM_CASES // 10))  # the long runs: about 10 ms a case at the most
def test_random_frames(arena, witness):
    print(f"REPLOG_FUZZ_SEED={RANDOM_SEED} REPLOG_FUZZ_CASES={RANDOM_CASES}")
    fuzz(arena, witness, catalog.random_cases(arena.target, RANDOM_SEED, RANDOM_CASES),
         replay=f"REPLOG_FUZZ_SEED={RANDOM_SEED} REPLOG_FUZZ_CASES={RANDOM_CASES} replays it\n")


def test_wide_requests(arena, witness):
    fuzz(arena, witness, catalog.wide_family(arena.target))


def test_wrong_batches(arena, witness):
    fuzz(arena, witness, catalog.batch_family(arena.target))


def test_decompression_bombs(arena, witness):
    fuzz(arena, witness, catalog.bomb_family(arena.target))


def test_slow_senders(arena, witness):
    fuzz(arena, witness, catalog.slow_family(arena.target))


def test_connection_limits(arena, witness):
    if arena.limits is None:
        pytest.skip(f"{arena.limits_refused}: the cases of the connection and memory limits wait for them")
    fuzz(arena, witness, catalog.limit_family(arena.target))


def test_descriptor_flood(arena, witness):
    """Last: what the descriptors' exhaustion leaves behind should not be blamed on other cases."""
    fuzz(arena, witness, [DescriptorFlood()])


# Forged identities -----------------------------------------------------------------------------

FORGED_TOPIC = "forged-follower"
LONG_SESSION = ("--set", "coord.session.timeout.ms=120000", "--set", "replica.lag.time.max.ms=120000")


@pytest.fixture
def two_brokers(zookeeper_server, tmp_path):
    cluster = Cluster(f"zk://{zookeeper_server.address}{unique_root()}", tmp_path, 2, settings=LONG_SESSION)
    cluster.start()
    try:
        yield cluster
    finally:
        for broker in cluster.brokers.values():
            if broker.running:
                broker.resume()
        cluster.stop()


def test_a_plain_clients_fetch_posing_as_the_follower_does_not_move_the_high_watermark(two_brokers):
    admin = AdminClient({"bootstrap.servers": two_brokers.bootstrap})
    admin.create_topics([NewTopic(FORGED_TOPIC, 1, 2)])[FORGED_TOPIC].result(timeout=60)
    partition = wait_until(lambda: _in_sync(admin), "both replicas in the ISR")
    leader, follower = partition.leader, next(replica for replica in partition.replicas if replica != partition.leader)
    two_brokers.brokers[follower].pause()  # in the ISR for replica.lag.time.max.ms yet, and fetching nothing
    leader_broker = two_brokers.brokers[leader]
    producer = Producer({"bootstrap.servers": leader_broker.bootstrap, "acks": "1"})
    for index in range(5):
        producer.produce(FORGED_TOPIC, value=b"uncommitted %d" % index, partition=0)
    assert producer.flush(30) == 0

    with Connection("127.0.0.1", leader_broker.port) as connection:
        committed = high_watermark(connection, FORGED_TOPIC, 0)
        fetch = request_values(ApiKey.FETCH, 12, Names(topic=FORGED_TOPIC))
        fetch["replica_id"] = follower
        fetch["topics"][0]["partitions"][0]["fetch_offset"] = committed + 5  # the log end: all five "replicated"
        assert connection.request(ApiKey.FETCH, 12, fetch) is not None  # answered: recorded, if it is recorded
        assert high_watermark(connection, FORGED_TOPIC, 0) == committed


def _in_sync(admin: AdminClient):
    partition = admin.list_topics(FORGED_TOPIC, timeout=30).topics[FORGED_TOPIC].partitions[0]
    return partition if partition.leader >= 0 and len(partition.isrs) == 2 else None
