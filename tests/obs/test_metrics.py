"""Each metric against the event or state that moves it: the scrape-time gauges over a fake
broker state, the ISR counters over a real leader partition and the embedded store, the log
flush counters over a real replica manager, and the request, byte and election metrics of a
broker in this process, scraped through its endpoint as Prometheus would."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import uuid
from types import SimpleNamespace

from kio.schema.errors import ErrorCode
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from replog.broker import Broker
from replog.config import load_broker_config
from replog.coord_backends import SessionState, paths
from replog.coord_backends.memory import MemoryStore
from replog.coord_backends.paths import BrokerRegistration, ReplicaAssignment
from replog.net import high_watermarks
from replog.net.client import BrokerConnection
from replog.net.codec import ApiKey
from replog.net.handlers import HANDLERS
from replog.net.server import KafkaServer
from replog.spark_io.records import OutgoingRecord, encode_batch
from replog.obs import BrokerMetrics, MetricsServer, StateSources
from replog.replica.manager import ManagerConfig, ReplicaManager
from replog.replica.partition import Partition, PartitionConfig
from replog.replication import driver
from replog.replication.commit import IsrMaintainer
from replog.replication.driver import LeadershipContext
from replog.replication.leadership import NotElected
from replog.replication.state_changes import StateChangeListener, send_state_change
from replog.replication.election import leader_election
from replog.storage.disk_space import DiskSpace, DiskSpaceState
from replog.storage.log import Log, LogConfig
from tests.support.frames import api_versions_frame, read_response
from tests.support.polling import eventually
from tests.support.log_fixtures import ManualClock
from tests.support.batches import build_batch

ME, OTHER, THIRD = 1, 2, 3
WAIT_S = 20


def sample(metrics: BrokerMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


# --- scrape-time gauges --------------------------------------------------------------------------


def hosted(topic: str, leader: int, assigned: tuple[int, ...], isr: tuple[int, ...], min_isr: int = 1,
           high_watermark: int = 0, last_stable_offset: int = 0, open_transactions: int = 0):
    return SimpleNamespace(topic=topic, partition_id=0, leader_id=leader, local_broker_id=ME, isr=frozenset(isr),
                           assigned_replicas=assigned, config=PartitionConfig(min_insync_replicas=min_isr),
                           follower_lags=lambda now_ms: [(OTHER, 5, 1500)], high_watermark=high_watermark,
                           last_stable_offset=last_stable_offset, open_transaction_count=open_transactions)


def metrics_over(partitions=(), cluster=None, registered=(ME, OTHER, THIRD), per_partition=False, committed=(),
                 high_watermarks=None, ongoing_transactions=0, markers_pending=0) -> BrokerMetrics:
    metrics = BrokerMetrics(per_partition=per_partition)
    metrics.watch(StateSources(
        broker_id=ME,
        partitions=lambda: partitions,
        min_insync_replicas=lambda partition: partition.config.min_insync_replicas,
        cluster_partitions=lambda: cluster or {},
        registered_brokers=lambda: None if registered is None else frozenset(registered),
        connections=lambda: 7,
        store_session_state=lambda: "suspended",
        store_session_states=("connected", "suspended", "lost"),
        now_ms=lambda: 0,
        committed_offsets=lambda: committed,
        high_watermarks=lambda: high_watermarks or {},
        fetch_sessions=lambda: (2, 3300),
        ongoing_transactions=lambda: ongoing_transactions,
        markers_pending=lambda: markers_pending,
    ))
    return metrics


def test_hosted_led_under_replicated_and_under_min_isr_partitions_are_counted_by_their_leader():
    metrics = metrics_over([
        hosted("a", ME, (ME, OTHER, THIRD), (ME, OTHER, THIRD)),  # healthy
        hosted("b", ME, (ME, OTHER, THIRD), (ME, OTHER), min_isr=2),  # under-replicated only
        hosted("c", ME, (ME, OTHER, THIRD), (ME,), min_isr=2),  # both
        hosted("d", OTHER, (OTHER, ME), (OTHER,)),  # followed here: its leader counts it
    ])
    assert sample(metrics, "replog_partitions") == 4
    assert sample(metrics, "replog_leader_partitions") == 3
    assert sample(metrics, "replog_under_replicated_partitions") == 2
    assert sample(metrics, "replog_under_min_isr_partitions") == 1
    assert sample(metrics, "replog_connections") == 7
    assert (sample(metrics, "replog_fetch_sessions"), sample(metrics, "replog_fetch_session_partitions")) == (2, 3300)
    assert sample(metrics, "replog_store_session_state", state="suspended") == 1
    assert sample(metrics, "replog_store_session_state", state="connected") == 0


def test_transactions_open_in_led_partitions_and_their_lso_lag_are_counted_by_the_leader():
    partitions = [
        hosted("a", ME, (ME, OTHER), (ME, OTHER), high_watermark=120, last_stable_offset=100, open_transactions=2),
        hosted("b", ME, (ME, OTHER), (ME, OTHER), high_watermark=50, last_stable_offset=50),
        hosted("c", OTHER, (OTHER, ME), (OTHER, ME), high_watermark=9, last_stable_offset=1, open_transactions=4),
    ]
    metrics = metrics_over(partitions, ongoing_transactions=3, markers_pending=5)
    assert sample(metrics, "replog_ongoing_transactions") == 3
    assert sample(metrics, "replog_transaction_markers_pending") == 5
    assert sample(metrics, "replog_open_transactions") == 2  # "c" is its leader's to count
    assert sample(metrics, "replog_last_stable_offset_lag_records", topic="a", partition="0") is None  # per partition only
    per_partition = metrics_over(partitions, per_partition=True)
    assert sample(per_partition, "replog_last_stable_offset_lag_records", topic="a", partition="0") == 20
    assert sample(per_partition, "replog_last_stable_offset_lag_records", topic="b", partition="0") == 0
    assert sample(per_partition, "replog_last_stable_offset_lag_records", topic="c", partition="0") is None


def test_the_coordinator_s_commits_and_aborts_are_counted_by_cause():
    metrics = BrokerMetrics()
    metrics.transaction_commits.inc()
    for cause in ("client", "timeout", "timeout"):
        metrics.transaction_aborted(cause)
    assert sample(metrics, "replog_transaction_commits_total") == 1
    assert sample(metrics, "replog_transaction_aborts_total", cause="timeout") == 2
    assert sample(metrics, "replog_transaction_aborts_total", cause="client") == 1


def test_the_data_directory_s_free_space_and_state_are_gauges_read_at_scrape_time(tmp_path):
    space = DiskSpace(tmp_path, 1000)
    metrics = BrokerMetrics()
    metrics.watch(StateSources(ME, lambda: (), lambda p: 1, dict, lambda: None, lambda: 0, lambda: "connected",
                               ("connected",), lambda: 0, lambda: (), dict,
                               log_dir_space=lambda: (space.free_bytes, space.state.value),
                               log_dir_space_states=tuple(state.value for state in DiskSpaceState)))
    assert sample(metrics, "replog_log_dir_free_bytes") is None, "no figure before the first reading"
    assert sample(metrics, "replog_log_dir_space_state", state="ok") == 1
    space.update(700)
    assert sample(metrics, "replog_log_dir_free_bytes") == 700
    assert [sample(metrics, "replog_log_dir_space_state", state=state.value) for state in DiskSpaceState] == [0, 1, 0]


def test_an_offline_partition_is_counted_once_in_the_cluster_by_its_lowest_live_replica():
    view = SimpleNamespace
    cluster = {"t": {
        0: view(replicas=(THIRD, ME), leader=-1),  # leaderless: ME is its lowest live replica
        1: view(replicas=(ME, OTHER), leader=OTHER),  # led: not offline
        2: view(replicas=(OTHER, THIRD), leader=-1),  # OTHER counts it
        3: view(replicas=(ME, THIRD), leader=9),  # its leader is not registered: offline, ME counts it
        4: view(replicas=(8, 9), leader=-1),  # no live replica: the lowest live broker (ME) counts it
    }}
    assert sample(metrics_over(cluster=cluster), "replog_offline_partitions") == 3
    # Before the registrations are read, nobody can tell who is alive: no guess.
    assert sample(metrics_over(cluster=cluster, registered=None), "replog_offline_partitions") == 0


def test_the_cluster_wide_sum_of_offline_partitions_counts_each_once():
    view = SimpleNamespace
    cluster = {"t": {0: view(replicas=(THIRD, ME), leader=-1), 1: view(replicas=(OTHER, THIRD), leader=-1),
                     2: view(replicas=(8, 9), leader=-1)}}

    def offline_by(broker_id: int) -> float:
        metrics = BrokerMetrics()
        metrics.watch(StateSources(broker_id, lambda: (), lambda p: 1, lambda: cluster, lambda: frozenset((ME, OTHER, THIRD)),
                                   lambda: 0, lambda: "connected", ("connected",), lambda: 0, lambda: (), dict))
        return sample(metrics, "replog_offline_partitions")

    assert [offline_by(broker) for broker in (ME, OTHER, THIRD)] == [2, 1, 0]


def test_follower_lag_is_exported_only_when_per_partition_series_are_asked_for():
    led = [hosted("a", ME, (ME, OTHER), (ME,))]
    labels = {"topic": "a", "partition": "0", "replica": str(OTHER)}
    assert sample(metrics_over(led), "replog_follower_lag_records", **labels) is None
    per_partition = metrics_over(led, per_partition=True)
    assert sample(per_partition, "replog_follower_lag_records", **labels) == 5
    assert sample(per_partition, "replog_follower_lag_seconds", **labels) == 1.5


def test_a_groups_lag_sums_and_maximises_its_partitions_lags_and_leaves_out_those_of_unknown_end():
    committed = [("g", "a", 0, 10), ("g", "a", 1, 40), ("g", "b", 0, 7), ("g", "gone", 0, 3), ("h", "a", 0, 25)]
    ends = {("a", 0): 30, ("a", 1): 35, ("b", 0): 12}  # a-1: committed past its end, no backlog
    metrics = metrics_over(committed=committed, high_watermarks=ends)
    assert sample(metrics, "replog_consumer_group_lag_records", group="g") == 20 + 0 + 5
    assert sample(metrics, "replog_consumer_group_max_lag_records", group="g") == 20
    assert sample(metrics, "replog_consumer_group_lag_unknown_partitions", group="g") == 1
    assert sample(metrics, "replog_consumer_group_lag_records", group="h") == 5
    assert sample(metrics, "replog_consumer_group_lag_unknown_partitions", group="h") == 0
    assert sample(metrics, "replog_consumer_group_partition_lag_records", group="g", topic="a", partition="0") is None

    per_partition = metrics_over(committed=committed, high_watermarks=ends, per_partition=True)
    assert sample(per_partition, "replog_consumer_group_partition_lag_records", group="g", topic="a", partition="0") == 20
    assert sample(per_partition, "replog_consumer_group_committed_offset", group="g", topic="gone", partition="0") == 3
    assert sample(per_partition, "replog_consumer_group_partition_lag_records", group="g", topic="gone",
                  partition="0") is None


def test_a_partitions_follower_lags_are_its_followers_distance_from_its_log_end(tmp_path):
    clock = ManualClock(now_ms=0)
    partition = Partition(Log(tmp_path / "t-0", LogConfig(), clock), ME, 0, (ME, OTHER), (ME, OTHER), 0,
                          PartitionConfig(), now_ms=clock())
    partition.log.append(build_batch(record_count=3), 0)
    partition.record_follower_fetch(OTHER, 1, clock(), current_leader_epoch=0)
    clock.advance(700)
    assert list(partition.follower_lags(clock())) == [(OTHER, 2, 700)]
    partition.close()


def test_two_brokers_in_one_process_have_registries_of_their_own():
    first, second = BrokerMetrics(), BrokerMetrics()
    first.isr_shrinks.inc()
    assert sample(first, "replog_isr_shrinks_total") == 1
    assert sample(second, "replog_isr_shrinks_total") == 0


# --- ISR changes and log flushes ---------------------------------------------------------------


async def test_isr_shrinks_and_expands_are_counted_when_written(tmp_path):
    store = MemoryStore()
    await store.start()
    try:
        await store.create(paths.replicas("t", 0), ReplicaAssignment((ME, OTHER)).encode(), make_parents=True)
        await store.create(paths.broker(OTHER), ephemeral=True, make_parents=True)
        isr, _, leader_version, isr_version = await leader_election(store, "t", 0, ME)
        clock = ManualClock(now_ms=0)
        partition = Partition(Log(tmp_path / "t-0", LogConfig(), clock), ME, isr.leader_epoch, (ME, OTHER), isr.isr, 0,
                              PartitionConfig(), now_ms=clock())
        metrics = BrokerMetrics()

        async def fenced() -> None:
            raise AssertionError("not fenced here")

        maintainer = IsrMaintainer(store, partition, leader_version, isr_version, replica_lag_time_max_ms=100,
                                   clock_ms=clock, on_fenced=fenced, metrics=metrics)
        clock.advance(1000)  # OTHER never fetched: out of sync
        assert await maintainer.check() and partition.isr == {ME}
        assert sample(metrics, "replog_isr_shrinks_total") == 1
        assert sample(metrics, "replog_isr_expands_total") == 0
        assert await maintainer.check()  # nothing due: nothing counted
        assert sample(metrics, "replog_isr_shrinks_total") == 1

        partition.record_follower_fetch(OTHER, partition.log_end_offset, clock(), current_leader_epoch=isr.leader_epoch)
        assert await maintainer.check() and partition.isr == {ME, OTHER}
        assert sample(metrics, "replog_isr_expands_total") == 1
        assert sample(metrics, "replog_isr_shrinks_total") == 1
        partition.close()
    finally:
        await store.close()


async def test_a_background_flush_is_counted_and_timed_and_one_with_nothing_to_flush_is_not(tmp_path):
    clock = ManualClock(now_ms=0)
    metrics = BrokerMetrics()
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=ME), clock, log_flushed=metrics.log_flushed)
    partition = await manager.open_replica("t", 0, LogConfig(), (ME,), 0, (ME,), PartitionConfig())
    await partition.append_as_leader(build_batch(record_count=2), acks=1, timeout_ms=1000)
    await manager._flush_in_background()
    assert sample(metrics, "replog_log_flushes_total") == 1
    assert sample(metrics, "replog_log_flush_duration_seconds_count") == 1
    await manager._flush_in_background()  # flushed already
    assert sample(metrics, "replog_log_flushes_total") == 1
    await manager.shutdown()  # closing flushes nothing more: all was flushed
    assert sample(metrics, "replog_log_flushes_total") == 1


async def test_flushes_on_the_append_path_are_counted(tmp_path):
    clock = ManualClock(now_ms=0)
    metrics = BrokerMetrics()
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=ME), clock, log_flushed=metrics.log_flushed)
    every_append = LogConfig(flush_messages=1)
    partition = await manager.open_replica("t", 0, every_append, (ME,), 0, (ME,), PartitionConfig())
    for _ in range(3):
        await partition.append_as_leader(build_batch(record_count=2), acks=1, timeout_ms=1000)
    assert sample(metrics, "replog_log_flushes_total") == 3
    assert sample(metrics, "replog_log_flush_duration_seconds_count") == 3
    await manager.shutdown()


async def test_a_cleaning_pass_is_counted_with_what_it_removed_and_a_failed_one_by_its_outcome(tmp_path):
    clock = ManualClock(now_ms=0)
    metrics = BrokerMetrics()
    manager = ReplicaManager(ManagerConfig(data_dir=tmp_path, broker_id=ME), clock, log_cleaned=metrics.log_cleaned)
    compacted = LogConfig(compact=True, segment_bytes=1024)
    partition = await manager.open_replica("t", 0, compacted, (ME,), 0, (ME,), PartitionConfig())
    for round_ in range(20):  # the same two keys again and again, over several segments
        records = [OutgoingRecord(key, b"%d" % round_ + b"x" * 100, None) for key in (b"a", b"b")]
        await partition.append_as_leader(bytearray(encode_batch(records, "none", 0)), acks=1, timeout_ms=1000)
    await manager._flush_in_background()  # the cleaner reaches only what is flushed
    size_before = partition.log.size_bytes
    await manager._clean_compacted_logs()
    assert sample(metrics, "replog_log_cleaner_passes_total", outcome="cleaned") == 1
    assert sample(metrics, "replog_log_cleaner_duration_seconds_count") == 1
    assert sample(metrics, "replog_log_cleaner_removed_bytes_total") == size_before - partition.log.size_bytes > 0
    assert sample(metrics, "replog_log_cleaner_removed_records_total") > 0
    await manager._clean_compacted_logs()  # nothing new to clean: not a pass
    assert sample(metrics, "replog_log_cleaner_passes_total", outcome="cleaned") == 1
    metrics.log_cleaned(0.01, None)
    assert sample(metrics, "replog_log_cleaner_passes_total", outcome="failed") == 1
    await manager.shutdown()


# --- a broker in this process, scraped through its endpoint -----------------------------------


async def scrape(address: str, path: str = "/metrics") -> tuple[bytes, bytes]:
    """(status line and headers, body) of GET `path`."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {address}\r\n\r\n".encode())
    answer = await asyncio.wait_for(reader.read(), WAIT_S)
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return head, body


async def scraped_samples(address: str) -> dict[tuple[str, frozenset], float]:
    head, body = await scrape(address)
    assert head.startswith(b"HTTP/1.1 200"), head
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(body.decode()) for sample in family.samples}


@contextlib.asynccontextmanager
async def broker_leading_a_topic(tmp_path, metrics_listener: str):
    """(broker, connection, topic): a broker of its own in this process on the embedded store,
    a connection to it and a new one-partition topic it leads; the broker stopped at the end."""
    broker = Broker(load_broker_config(None, {
        "broker.id": str(ME), "log.dirs": str(tmp_path / "data"), "coord.url": f"memory://{tmp_path / 'store.db'}",
        "listeners": "127.0.0.1:0", "metrics.listeners": metrics_listener, "preferred.replica.election.wait.ms": "0",
    }))
    await broker.start()
    try:
        async with await BrokerConnection.open("127.0.0.1", broker.server.port, request_timeout_s=WAIT_S) as connection:
            yield broker, connection, await create_led_topic(broker, connection)
    finally:
        await broker.stop()


async def create_led_topic(broker: Broker, connection: BrokerConnection) -> str:
    """A new one-partition topic, once `broker` leads and serves it."""
    topic = f"t-{uuid.uuid4().hex[:8]}"
    created = await connection.request(ApiKey.CREATE_TOPICS, None, {
        "topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}],
        "timeout": WAIT_S * 1000, "validate_only": False})
    assert created.topics[0].error_code == ErrorCode.none

    async def led() -> bool:
        return broker.replicas.hosted(topic, 0) is not None and broker.serving(topic, 0)

    await eventually(led, WAIT_S, "the new partition led here")
    return topic


async def test_requests_bytes_records_errors_and_elections_of_a_broker_are_counted(tmp_path):
    async with broker_leading_a_topic(tmp_path, metrics_listener="127.0.0.1:0") as (broker, connection, topic):
        samples = await scraped_samples(broker.metrics_address)
        assert samples[("replog_leader_elections_total", frozenset({("outcome", "won")}))] == 1
        assert samples[("replog_leader_partitions", frozenset())] == 1
        assert samples[("replog_connections", frozenset())] == 1  # this client's (a scrape is no Kafka connection)
        assert ("replog_bytes_in_total", frozenset({("topic", topic)})) not in samples

        batch = build_batch(record_count=5)
        produced = await connection.produce(topic, 0, bytes(batch), acks=-1, timeout_ms=WAIT_S * 1000)
        assert produced.error_code == ErrorCode.none
        refused = await connection.produce(f"{topic}-absent", 0, bytes(batch), acks=1, timeout_ms=WAIT_S * 1000)
        assert refused.error_code == ErrorCode.unknown_topic_or_partition
        fetched = await connection.fetch(topic, 0, 0, max_bytes=1 << 20, max_wait_ms=0)

        samples = await scraped_samples(broker.metrics_address)
        by_topic = frozenset({("topic", topic)})
        assert samples[("replog_bytes_in_total", by_topic)] == len(batch)
        assert samples[("replog_records_in_total", by_topic)] == 5
        assert samples[("replog_bytes_out_total", by_topic)] == len(fetched.records)
        assert samples[("replog_request_errors_total",
                        frozenset({("api", "produce"), ("error", "unknown_topic_or_partition")}))] == 1
        produce_requests = sum(value for (name, labels), value in samples.items()
                               if name == "replog_requests_total" and ("api", "produce") in labels)
        assert produce_requests == 2
        for phase in ("queued", "processing", "sending", "total"):
            assert samples[("replog_request_duration_seconds_count", frozenset({("api", "produce"), ("phase", phase)}))] == 2
        # Only the acks=all request waited for the ISR (of one: at once).
        assert samples[("replog_request_duration_seconds_count", frozenset({("api", "produce"), ("phase", "replication")}))] == 1
        assert samples[("replog_state_change_queue_requests", frozenset())] == 0  # consumed at the create


async def test_high_watermarks_led_elsewhere_are_asked_of_their_leader_and_one_not_answering_is_left_out(tmp_path):
    async with broker_leading_a_topic(tmp_path, metrics_listener="") as (broker, connection, topic):
        produced = await connection.produce(topic, 0, bytes(build_batch(record_count=5)), acks=-1,
                                            timeout_ms=WAIT_S * 1000)
        assert produced.error_code == ErrorCode.none
        with socket.socket() as unused:  # a port nothing listens on once closed
            unused.bind(("127.0.0.1", 0))
            refusing_port = unused.getsockname()[1]
        addresses = {ME: BrokerRegistration("127.0.0.1", broker.server.port),
                     OTHER: BrokerRegistration("127.0.0.1", refusing_port)}
        learnt = await high_watermarks.learn(
            [(topic, 0), (topic, 1), ("elsewhere", 0), ("leaderless", 0)], led_here=lambda name, partition: None,
            leader_of=lambda name, partition: {topic: ME, "elsewhere": OTHER}.get(name),
            address_of=addresses.get, timeout_s=WAIT_S)
        assert learnt == {(topic, 0): 5}  # topic-1 does not exist: its leader's error leaves it out


# --- the endpoint itself -----------------------------------------------------------------------


async def test_the_endpoint_answers_only_get_metrics_and_survives_bad_input(tmp_path):
    metrics = BrokerMetrics()
    server = MetricsServer(metrics.registry, "127.0.0.1", 0)
    await server.start()
    address = f"127.0.0.1:{server.port}"
    try:
        head, body = await scrape(address)
        assert head.startswith(b"HTTP/1.1 200") and f"Content-Type: {CONTENT_TYPE_LATEST}".encode() in head
        assert b"replog_isr_shrinks_total 0.0" in body
        assert (await scrape(address, "/other"))[0].startswith(b"HTTP/1.1 404")
        assert (await scrape(address, "/metrics?name=x"))[0].startswith(b"HTTP/1.1 200")

        async def send(raw: bytes) -> bytes:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(raw)
            if writer.can_write_eof():
                writer.write_eof()
            answer = await asyncio.wait_for(reader.read(), WAIT_S)
            writer.close()
            return answer

        assert (await send(b"POST /metrics HTTP/1.1\r\n\r\n")).startswith(b"HTTP/1.1 405")
        assert (await send(b"\x00\xff garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        assert await send(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"y" * 20_000 + b"\r\n\r\n") == b""  # too long: closed
        assert await send(b"GET /metr") == b""  # cut short: closed
        head, _ = await scrape(address)
        assert head.startswith(b"HTTP/1.1 200"), "still serving after bad input"
    finally:
        await server.stop()


# --- elections -----------------------------------------------------------------------------------


async def test_an_election_another_broker_wins_is_counted_as_lost(monkeypatch):
    async def won_elsewhere(*args, **kwargs):
        return None

    monkeypatch.setattr(driver, "leader_election", won_elsewhere)
    metrics = BrokerMetrics()
    replicas = SimpleNamespace(of_another_topic=lambda topic, partition, topic_id: False)
    context = LeadershipContext(ME, SimpleNamespace(session_state=SessionState.CONNECTED, session_timeout_ms=9000), replicas=replicas, connections=None,
                                config={"preferred.replica.election.wait.ms": 0}, now_ms=lambda: 0,
                                leadership_changed=lambda: None, metrics=metrics)
    leadership = driver.PartitionLeadership(context, "t", 0, lambda: {"unclean.leader.election.enable": False})
    assert isinstance(await leadership._elect(), NotElected)
    assert sample(metrics, "replog_leader_elections_total", outcome="lost") == 1
    assert sample(metrics, "replog_leader_elections_total", outcome="won") == 0


def test_a_broker_serving_no_metrics_counts_no_requests(tmp_path):
    broker = Broker(load_broker_config(None, {"log.dirs": str(tmp_path), "metrics.listeners": ""}))
    try:
        assert broker.metrics_server is None and broker.metrics_address is None
        broker.metrics.request_handled("produce", 9, 0.0, 0.1, 0.2)
        broker.metrics.produced("t", 100, 5)
        assert sample(broker.metrics, "replog_requests_total", api="produce", version="9") is None
        assert sample(broker.metrics, "replog_bytes_in_total", topic="t") is None
    finally:
        broker.data_dir_lock.release()  # never started, so never stopped


# --- the state-change queue ----------------------------------------------------------------------


async def test_the_state_change_backlog_counts_the_queued_requests_and_ages_the_oldest_since_first_seen():
    store = MemoryStore()
    await store.start()
    try:
        async def nothing(request) -> None:
            raise AssertionError("not consumed here")

        listener = StateChangeListener(store, ME, nothing, nothing)
        assert await listener.backlog(now_ms=0) == (0, 0)
        first = await send_state_change(store, "start-replica", ME, "t", [0], 1, OTHER, queue_max_requests=10)
        assert await listener.backlog(now_ms=1000) == (1, 0)
        await send_state_change(store, "start-replica", ME, "t", [1], 1, OTHER, queue_max_requests=10)
        assert await listener.backlog(now_ms=4000) == (2, 3000)
        await store.delete(f"{paths.state_queue(ME)}/{first}")  # consumed: the other is the oldest now
        assert await listener.backlog(now_ms=5000) == (1, 1000)
    finally:
        await store.close()


async def test_a_response_behind_an_earlier_one_is_timed_as_sending_once_written(monkeypatch):
    release_first = asyncio.Event()
    original = HANDLERS[ApiKey.API_VERSIONS]

    async def first_waits(services, request):
        if request.correlation_id == 1:
            await release_first.wait()
        return await original(services, request)

    monkeypatch.setitem(HANDLERS, int(ApiKey.API_VERSIONS), first_waits)
    metrics = BrokerMetrics()
    server = KafkaServer(None, "127.0.0.1", 0, max_request_bytes=1 << 20, metrics=metrics)
    await server.start()

    def timed(phase: str) -> float:
        return sample(metrics, "replog_request_duration_seconds_count", api="api_versions", phase=phase) or 0

    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(api_versions_frame(1) + api_versions_frame(2))

        async def second_handled() -> bool:
            return timed("processing") == 1

        await eventually(second_handled, WAIT_S, "the second request handled")
        assert timed("sending") == 0 and timed("total") == 0  # answered, but behind the first
        release_first.set()
        assert [(await read_response(reader))[0] for _ in range(2)] == [1, 2]
        assert timed("processing") == timed("sending") == timed("total") == 2
        writer.close()
    finally:
        await server.stop()
