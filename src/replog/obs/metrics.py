"""A broker's Prometheus metrics, in a registry of its own (tests run several brokers in one
process, so the global default registry is never used).

Two kinds, as Kafka's and Redpanda's brokers keep them:

- Events (requests, ISR changes, elections, flushes, store operations, bytes) move counters and
  histograms where they happen. The hot path pays a dictionary lookup and a few increments per
  request and per partition (each takes prometheus_client's uncontended lock), never per
  record: labelled children are cached here by their label values, since `Counter.labels()`
  formats and locks on every call. A broker serving no metrics does not count its requests
  (`UnservedMetrics`).
- State (partitions hosted, led, under-replicated, offline; connections; the store session;
  the data directory's free space; consumer group lag; transactions open and markers pending) is computed at scrape time by `StateCollector`, on the event loop that
  owns that state (the endpoint, obs/metrics_http.py, serves from the broker's loop), so no
  task keeps gauges up to date and nothing reads the broker's state from another thread. What
  only a store read can tell (the state-change queue) is set by the broker just before each
  scrape, as are the high watermarks of the partitions its consumer groups committed, which
  only their leaders know.

Cardinality is bounded by what the operator creates: series per topic (bytes and records),
per API and version, per API and error code, per consumer group; per partition only with
`metrics.per.partition.enable` (follower lag, each group's committed offsets and lag, the LSO's
lag behind the high watermark). Series
per client quota entity are bounded by the quota managers, which drop an entity's series with it.

This module imports nothing of replog's but what it reads through `StateSources`, so any
layer may hold a `BrokerMetrics` (as any may use config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

# Request latencies from half a millisecond (a metadata answer) to the longest Fetch long poll
# and acks=all timeout clients use (30 s).
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# An fsync: tens of microseconds on a quiet SSD to seconds on a saturated disk.
FLUSH_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0)
# A coordination store operation: tens of microseconds in the embedded store, a round trip to
# ZooKeeper or etcd, up to a session timeout (9 s by default) when the server does not answer.
STORE_BUCKETS_S = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Request phases: waiting for the event loop after the frame was read; in the handler;
# from the handler's answer to its write, behind the connection's earlier responses (Kafka
# answers a connection in request order); all three (what the client waited, less the network).
PHASES = ("queued", "processing", "sending", "total")
# Part of processing, for acks=all produce requests only (no other request waits for the ISR).
PHASE_REPLICATION = "replication"

# (name, help) of the consumer group gauges: by group, and by group and partition.
GROUP_LAG_FAMILIES = (
    ("replog_consumer_group_lag_records", "records a consumer group has yet to consume, summed over its committed partitions"),
    ("replog_consumer_group_max_lag_records", "the largest lag of one of a consumer group's committed partitions"),
    ("replog_consumer_group_lag_unknown_partitions",
     "a consumer group's committed partitions left out of its lag: no leader, or the leader did not answer this scrape"),
)
GROUP_PARTITION_LAG_FAMILIES = (
    ("replog_consumer_group_committed_offset", "a consumer group's committed offset of a partition"),
    ("replog_consumer_group_partition_lag_records", "records a consumer group has yet to consume of a partition"),
)

NO_LEADER = -1  # the metadata cache's leader of a partition that has none


class HostedPartition(Protocol):
    """What the collector reads of a replica (replica/partition.py's Partition)."""

    topic: str
    partition_id: int
    leader_id: int | None
    isr: frozenset[int]
    assigned_replicas: tuple[int, ...]
    high_watermark: int
    last_stable_offset: int  # below it, no transaction is open (docs/design.md §16.3)
    open_transaction_count: int

    def follower_lags(self, now_ms: int) -> Iterable[tuple[int, int, int]]: ...


class Cleaned(Protocol):
    """What the collector reads of a cleaning pass's outcome (storage/cleaner.py's Cleaned)."""

    @property
    def bytes_removed(self) -> int: ...

    @property
    def records_removed(self) -> int: ...


class PartitionState(Protocol):
    """What the collector reads of the metadata cache's view of a partition."""

    replicas: tuple[int, ...]
    leader: int


@dataclasses.dataclass(frozen=True)
class StateSources:
    """The broker state behind the scrape-time gauges, read on the broker's event loop."""

    broker_id: int
    partitions: Callable[[], Collection[HostedPartition]]
    min_insync_replicas: Callable[[HostedPartition], int]
    cluster_partitions: Callable[[], Mapping[str, Mapping[int, PartitionState]]]  # the metadata cache's view
    registered_brokers: Callable[[], Collection[int] | None]  # None: not read yet
    connections: Callable[[], int]
    store_session_state: Callable[[], str]
    store_session_states: tuple[str, ...]
    now_ms: Callable[[], int]
    # (group, topic, partition, offset) of each group coordinated here
    committed_offsets: Callable[[], Iterable[tuple[str, str, int, int]]]
    high_watermarks: Callable[[], Mapping[tuple[str, int], int]]  # as learnt for this scrape
    fetch_sessions: Callable[[], tuple[int, int]] = lambda: (0, 0)  # (sessions, partitions they cache)
    # (free bytes, or None before the first check; the state's name) of the data directory, and
    # every state's name (storage/disk_space.py)
    log_dir_space: Callable[[], tuple[int | None, str]] = lambda: (None, "ok")
    log_dir_space_states: tuple[str, ...] = ()
    queued_request_bytes: Callable[[], int] = lambda: 0  # what queued.max.request.bytes bounds
    # Transactions coordinated here and not complete (Ongoing, PrepareCommit, PrepareAbort), and
    # the partitions whose marker the coordinator is waiting to see written (docs/design.md §16.7).
    ongoing_transactions: Callable[[], int] = lambda: 0
    markers_pending: Callable[[], int] = lambda: 0


class BrokerMetrics:
    def __init__(self, per_partition: bool = False):
        self.registry = CollectorRegistry(auto_describe=True)
        self.per_partition = per_partition
        registry = self.registry
        self.isr_shrinks = Counter("replog_isr_shrinks", "ISR shrinks written by leaders on this broker",
                                   registry=registry)
        self.isr_expands = Counter("replog_isr_expands", "ISR expansions written by leaders on this broker",
                                   registry=registry)
        self._elections = Counter("replog_leader_elections",
                                  "leader elections this broker ran, by outcome (lost: another broker won, or this "
                                  "one was not eligible)",
                                  ["outcome"], registry=registry)
        self.elections_won = self._elections.labels(outcome="won")
        self.elections_lost = self._elections.labels(outcome="lost")
        self._requests = Counter("replog_requests", "requests handled, by API and version", ["api", "version"],
                                 registry=registry)
        self._request_errors = Counter(
            "replog_request_errors",
            "error codes answered, by API and error: the request's own, or each refused partition's (produce, fetch)",
            ["api", "error"], registry=registry)
        self._request_duration = Histogram(
            "replog_request_duration_seconds",
            "request latency by API and phase: queued (read, waiting for the event loop), processing (the "
            "handler, an acks=all wait for replication included), sending (answered, waiting behind the "
            "connection's earlier responses to be written), total (all three); and replication, the part of "
            "an acks=all produce's processing spent waiting for the ISR",
            ["api", "phase"], buckets=LATENCY_BUCKETS_S, registry=registry)
        self._bytes_in = Counter("replog_bytes_in", "record batch bytes appended by producers, by topic", ["topic"],
                                 registry=registry)
        self._records_in = Counter("replog_records_in", "records appended by producers, by topic", ["topic"],
                                   registry=registry)
        self._bytes_out = Counter("replog_bytes_out", "record batch bytes sent to consumers, by topic", ["topic"],
                                  registry=registry)
        self._replication_bytes_out = Counter(
            "replog_replication_bytes_out", "record batch bytes sent to follower replicas, by topic", ["topic"],
            registry=registry)
        self.log_flushes = Counter(
            "replog_log_flushes",
            "log flushes: fsyncs of a partition log, in the background (recovery point) or on the append path "
            "(flush.messages, flush.ms) or at close", registry=registry)
        self.log_flush_duration = Histogram("replog_log_flush_duration_seconds", "time a log flush took",
                                            buckets=FLUSH_BUCKETS_S, registry=registry)
        self._log_cleaner_passes = Counter(
            "replog_log_cleaner_passes", "cleaning passes of compacted logs, by outcome (failed: the log could not "
            "be read or written; the next pass tries again)", ["outcome"], registry=registry)
        self.log_cleaner_duration = Histogram("replog_log_cleaner_duration_seconds",
                                              "time a cleaning pass of a compacted log took", buckets=FLUSH_BUCKETS_S,
                                              registry=registry)
        self.log_cleaner_removed_bytes = Counter("replog_log_cleaner_removed_bytes",
                                                 "bytes the log cleaner removed from compacted logs", registry=registry)
        self.log_cleaner_removed_records = Counter(
            "replog_log_cleaner_removed_records", "records the log cleaner removed from compacted logs: superseded, "
            "keyless, or tombstones past delete.retention.ms", registry=registry)
        self._store_operation_duration = Histogram(
            "replog_store_operation_seconds",
            "coordination store operations by kind, as the broker waited for them, failed ones included",
            ["operation"], buckets=STORE_BUCKETS_S, registry=registry)
        # Errors in a counter of their own rather than an outcome label on the histogram: the
        # histogram's count is every operation, so an error ratio is one division, and six error
        # kinds would multiply its buckets for a latency that says little.
        self._store_operation_errors = Counter(
            "replog_store_operation_errors",
            "coordination store operations that failed, by kind and error: NoNode, NodeExists, BadVersion and "
            "NotEmpty are answers (a lost compare-and-set, a node already gone); CoordinationUnavailable and "
            "SessionLost are the store's trouble",
            ["operation", "error"], registry=registry)
        self.state_change_queue_requests = Gauge(
            "replog_state_change_queue_requests", "requests waiting in this broker's state-change queue", registry=registry)
        self.state_change_queue_oldest_seconds = Gauge(
            "replog_state_change_queue_oldest_seconds",
            "how long the oldest request in this broker's state-change queue has waited, as seen by the scrapes",
            registry=registry)
        # An SSL listener's certificate, set when it is loaded and on every reload (net/tls.py).
        self._certificate_expiry = Gauge(
            "replog_tls_certificate_expiry_timestamp_seconds",
            "when the certificate an SSL listener serves expires (its notAfter), by listener", ["listener"],
            registry=registry)
        # The Kafka listener's limits (net/connection_limits.py, net/framing.py).
        self._connections_refused = Counter(
            "replog_connections_refused", "connections closed as soon as accepted, by the limit they passed "
            "(max.connections.per.ip)", ["limit"], registry=registry)
        self._accept_pauses = Counter(
            "replog_accept_pauses", "times the Kafka listener stopped accepting until a connection closed, by the "
            "limit reached: max.connections, descriptors (the file descriptor limit, less a headroom for the "
            "broker's own files), accept_failed (an accept failed, e.g. EMFILE; tried again after a pause)",
            ["limit"], registry=registry)
        self._connections_closed = Counter(
            "replog_connections_closed", "connections the broker closed, by why: connections.max.idle.ms "
            "(no complete request nor answer for that long), descriptors (the broker's own files needed the file "
            "descriptors they held; the connections idle longest go), max.connections (the broker-wide limit reached "
            "as the inter-broker listener took one; the connection idle longest on another listener goes), "
            "tls_handshake (an SSL listener's handshake failed or timed out), tls_handshakes_pending (a handshake "
            "under way closed for a newer one, past the listener's bound on those)", ["reason"], registry=registry)
        # SASL listeners (net/sasl_session.py), as Kafka's successful-authentication-total and
        # failed-authentication-total; mechanism "unknown" for a handshake naming none enabled.
        self._sasl_authentications = Counter(
            "replog_sasl_authentications", "SASL authentications and re-authentications that succeeded, by "
            "listener, mechanism and kind (authentication, reauthentication)", ["listener", "mechanism", "kind"],
            registry=registry)
        self._sasl_authentication_failures = Counter(
            "replog_sasl_authentication_failures", "SASL authentications that failed (the connection is closed), by "
            "listener and mechanism", ["listener", "mechanism"], registry=registry)
        # Client quotas (security/quota_manager.py), as Kafka's throttle-time and byte-rate /
        # request-time per user and client-id: one series per entity tracked, dropped with it.
        quota_labels = ["type", "user", "client_id"]
        self._quota_throttle_time = Gauge(
            "replog_quota_throttle_time_ms", "the throttle time last answered to a quota entity, by quota type "
            "(produce, fetch, request) and the entity's user and client id", quota_labels, registry=registry)
        self._quota_rate = Gauge(
            "replog_quota_rate", "a quota entity's measured rate: bytes/s for produce and fetch, percent of one "
            "handler's time for request", quota_labels, registry=registry)
        # Transactions this broker's coordinator ended (docs/design.md §16.7).
        self.transaction_commits = Counter("replog_transaction_commits", "transactions committed by this broker's "
                                           "coordinator", registry=registry)
        self._transaction_aborts = Counter(
            "replog_transaction_aborts", "transactions aborted by this broker's coordinator, by cause: client (EndTxn), "
            "timeout (open past its transaction.timeout.ms), fenced (InitProducerId of the same transactional id "
            "while it was open)", ["cause"], registry=registry)
        self._children: dict[tuple, Any] = {}
        self._request_phases: dict[str, tuple[Any, ...]] = {}  # by API: its histograms, in PHASES order

    def watch(self, sources: StateSources) -> None:
        """Have the scrape-time gauges read `sources` (once, when the broker is built)."""
        self.registry.register(StateCollector(sources, self.per_partition))

    # events, by the code that sees them
    def request_handled(self, api: str, version: int, received_s: float, started_s: float, handled_s: float) -> None:
        """Times from time.perf_counter(): the frame read, the handler started and done."""
        self._child(self._requests, api, str(version)).inc()
        queued, processing, _, _ = self._phases(api)
        queued.observe(started_s - received_s)
        processing.observe(handled_s - started_s)

    def request_sent(self, api: str, received_s: float, handled_s: float, sent_s: float) -> None:
        """The response written to the connection (or, without one, its turn come)."""
        _, _, sending, total = self._phases(api)
        sending.observe(sent_s - handled_s)
        total.observe(sent_s - received_s)

    def replication_waited(self, api: str, duration_s: float) -> None:
        """An acks=all request's wait for the ISR, from its last partition's local append."""
        self._child(self._request_duration, api, PHASE_REPLICATION).observe(duration_s)

    def request_error(self, api: str, error: str) -> None:
        self._child(self._request_errors, api, error).inc()

    def produced(self, topic: str, size_bytes: int, record_count: int) -> None:
        self._child(self._bytes_in, topic).inc(size_bytes)
        self._child(self._records_in, topic).inc(record_count)

    def fetched(self, topic: str, size_bytes: int, by_follower: bool) -> None:
        self._child(self._replication_bytes_out if by_follower else self._bytes_out, topic).inc(size_bytes)

    def log_flushed(self, duration_s: float) -> None:
        self.log_flushes.inc()
        self.log_flush_duration.observe(duration_s)

    def log_cleaned(self, duration_s: float, cleaned: Cleaned | None) -> None:
        """A cleaning pass that changed a log, or failed (None)."""
        self._child(self._log_cleaner_passes, "failed" if cleaned is None else "cleaned").inc()
        self.log_cleaner_duration.observe(duration_s)
        if cleaned is not None:
            self.log_cleaner_removed_bytes.inc(cleaned.bytes_removed)
            self.log_cleaner_removed_records.inc(cleaned.records_removed)

    def store_operation(self, operation: str, duration_s: float, error: str | None) -> None:
        """An operation of the coordination store (coord_backends/observed.py), ended with `error`
        (a StoreError's class name) or None."""
        self._child(self._store_operation_duration, operation).observe(duration_s)
        if error is not None:
            self._child(self._store_operation_errors, operation, error).inc()

    def transaction_committed(self) -> None:
        self.transaction_commits.inc()

    def transaction_aborted(self, cause: str) -> None:
        self._child(self._transaction_aborts, cause).inc()

    def connection_refused(self, limit: str) -> None:
        self._child(self._connections_refused, limit).inc()

    def accept_paused(self, limit: str) -> None:
        self._child(self._accept_pauses, limit).inc()

    def certificate_loaded(self, listener: str, not_after_s: float) -> None:
        self._certificate_expiry.labels(listener).set(not_after_s)

    def connection_closed(self, reason: str) -> None:
        self._child(self._connections_closed, reason).inc()

    def sasl_authenticated(self, listener: str, mechanism: str, reauthentication: bool) -> None:
        kind = "reauthentication" if reauthentication else "authentication"
        self._child(self._sasl_authentications, listener, mechanism, kind).inc()

    def sasl_authentication_failed(self, listener: str, mechanism: str) -> None:
        self._child(self._sasl_authentication_failures, listener, mechanism).inc()

    def quota_measured(self, quota_type: str, user: str, client_id: str, rate: float, throttle_ms: int) -> None:
        self._quota_rate.labels(quota_type, user, client_id).set(rate)
        self._quota_throttle_time.labels(quota_type, user, client_id).set(throttle_ms)

    def quota_expired(self, quota_type: str, user: str, client_id: str) -> None:
        for family in (self._quota_rate, self._quota_throttle_time):
            try:
                family.remove(quota_type, user, client_id)
            except KeyError:  # never measured (the controller mutation quota reports none)
                pass

    def _phases(self, api: str) -> tuple[Any, ...]:
        phases = self._request_phases.get(api)
        if phases is None:
            phases = self._request_phases[api] = tuple(self._request_duration.labels(api, phase) for phase in PHASES)
        return phases

    def _child(self, family, *labels: str):
        key = (id(family), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = family.labels(*labels)
        return child


class UnservedMetrics(BrokerMetrics):
    """A broker's metrics when it serves none (metrics.listeners is empty): nothing can read them,
    so requests and bytes, on the produce and fetch path, are not counted; the rare events
    (ISR changes, elections, flushes, store operations) are, as they cost nothing measurable."""

    def request_handled(self, api: str, version: int, received_s: float, started_s: float, handled_s: float) -> None:
        pass

    def request_sent(self, api: str, received_s: float, handled_s: float, sent_s: float) -> None:
        pass

    def replication_waited(self, api: str, duration_s: float) -> None:
        pass

    def request_error(self, api: str, error: str) -> None:
        pass

    def produced(self, topic: str, size_bytes: int, record_count: int) -> None:
        pass

    def fetched(self, topic: str, size_bytes: int, by_follower: bool) -> None:
        pass


class StateCollector:
    """The gauges of state, computed from the broker's state at each scrape."""

    def __init__(self, sources: StateSources, per_partition: bool):
        self._sources = sources
        self._per_partition = per_partition

    def describe(self) -> list[Metric]:
        return []  # computed at collect time; registering must not read the broker

    def collect(self) -> Iterator[Metric]:
        sources = self._sources
        partitions = sources.partitions()
        led = [partition for partition in partitions if partition.leader_id == sources.broker_id]
        yield _gauge("replog_partitions", "partition replicas hosted by this broker", len(partitions))
        yield _gauge("replog_leader_partitions", "partitions this broker leads", len(led))
        yield _gauge("replog_under_replicated_partitions",
                     "partitions this broker leads whose ISR is smaller than their replica set",
                     sum(len(partition.isr) < len(partition.assigned_replicas) for partition in led))
        yield _gauge("replog_under_min_isr_partitions",
                     "partitions this broker leads whose ISR is smaller than min.insync.replicas (acks=all fails)",
                     sum(len(partition.isr) < sources.min_insync_replicas(partition) for partition in led))
        yield _gauge("replog_offline_partitions",
                     "partitions without a live leader that this broker counts: their lowest live replica, or the "
                     "lowest live broker when no replica lives (so the cluster's sum counts each once)",
                     self._offline_partitions())
        yield _gauge("replog_connections", "open client and replica connections to the Kafka listener",
                     sources.connections())
        yield _gauge("replog_queued_request_bytes",
                     "bytes of requests being read (past each connection's first 64 KiB) or waiting for their answer, "
                     "over all connections: what queued.max.request.bytes bounds", sources.queued_request_bytes())
        fetch_sessions, cached_partitions = sources.fetch_sessions()
        yield _gauge("replog_fetch_sessions", "fetch sessions (KIP-227) this broker keeps for its fetchers",
                     fetch_sessions)
        yield _gauge("replog_fetch_session_partitions", "partitions cached in this broker's fetch sessions",
                     cached_partitions)
        session = GaugeMetricFamily("replog_store_session_state",
                                    "the coordination store session's state: 1 for the current one",
                                    labels=["state"])
        current = sources.store_session_state()
        for state in sources.store_session_states:
            session.add_metric([state], 1 if state == current else 0)
        yield session
        yield from self._log_dir_space()
        yield from self._consumer_group_lags()
        yield from self._transactions(led)
        if self._per_partition:
            yield from self._follower_lags(led)

    def _log_dir_space(self) -> Iterator[Metric]:
        free_bytes, current = self._sources.log_dir_space()
        if free_bytes is not None:
            yield _gauge("replog_log_dir_free_bytes",
                         "free space of the data directory's file system for the broker, as of its last check",
                         free_bytes)
        state = GaugeMetricFamily("replog_log_dir_space_state",
                                  "what the data directory's free space lets the broker write, 1 for the current state: "
                                  "ok; produce_refused (below log.dir.min.free.bytes); appends_refused (below half of "
                                  "it: follower appends and group commits too)", labels=["state"])
        for name in self._sources.log_dir_space_states:
            state.add_metric([name], 1 if name == current else 0)
        yield state

    def _offline_partitions(self) -> int:
        registered = self._sources.registered_brokers()
        if not registered:
            return 0  # not known yet: no broker can say who is alive
        me = self._sources.broker_id
        lowest_live_broker = min(registered)
        count = 0
        for views in self._sources.cluster_partitions().values():  # bounded by the cluster's partitions
            for view in views.values():
                if view.leader != NO_LEADER and view.leader in registered:
                    continue
                live_replicas = [replica for replica in view.replicas if replica in registered]
                count += (min(live_replicas) if live_replicas else lowest_live_broker) == me
        return count

    def _follower_lags(self, led: list[HostedPartition]) -> Iterator[Metric]:
        labels = ["topic", "partition", "replica"]
        records = GaugeMetricFamily("replog_follower_lag_records",
                                    "records a follower is behind its leader's log end, as of its last fetch", labels=labels)
        lag_ms = GaugeMetricFamily("replog_follower_lag_seconds",
                                   "time since a follower was last caught up with its leader's log end", labels=labels)
        now_ms = self._sources.now_ms()
        for partition in led:  # bounded by the partitions led here, times the replication factor
            for replica, behind_records, behind_ms in partition.follower_lags(now_ms):
                label_values = [partition.topic, str(partition.partition_id), str(replica)]
                records.add_metric(label_values, behind_records)
                lag_ms.add_metric(label_values, behind_ms / 1000)
        yield records
        yield lag_ms

    def _transactions(self, led: list[HostedPartition]) -> Iterator[Metric]:
        yield _gauge("replog_ongoing_transactions",
                     "transactions this broker coordinates that are not complete: ongoing, or preparing to commit or "
                     "abort", self._sources.ongoing_transactions())
        yield _gauge("replog_transaction_markers_pending",
                     "partitions whose commit or abort marker this broker's coordinator waits to see written",
                     self._sources.markers_pending())
        yield _gauge("replog_open_transactions",
                     "transactions open in the partitions this broker leads, one per producer and partition",
                     sum(partition.open_transaction_count for partition in led))
        if not self._per_partition:
            return
        lso_lag = GaugeMetricFamily("replog_last_stable_offset_lag_records",
                                    "records of a partition this broker leads that read_committed consumers cannot "
                                    "read yet: its high watermark less its last stable offset",
                                    labels=["topic", "partition"])
        for partition in led:  # bounded by the partitions led here
            lso_lag.add_metric([partition.topic, str(partition.partition_id)],
                               partition.high_watermark - partition.last_stable_offset)
        yield lso_lag

    def _consumer_group_lags(self) -> Iterator[Metric]:
        """Each group's lag, exported by its coordinator alone, so that a sum over the cluster
        counts each group once. A partition's lag is its high watermark less the committed
        offset, never below 0 (a commit past the end, or an end truncated below a commit, is no
        backlog); a partition whose high watermark was not learnt counts as unknown, not 0."""
        total, largest, unknown = (GaugeMetricFamily(name, documentation, labels=["group"])
                                   for name, documentation in GROUP_LAG_FAMILIES)
        committed, partition_lag = (GaugeMetricFamily(name, documentation, labels=["group", "topic", "partition"])
                                    for name, documentation in GROUP_PARTITION_LAG_FAMILIES)
        high_watermarks = self._sources.high_watermarks()
        by_group: dict[str, list[int]] = {}  # group: [total, largest, unknown]
        for group, topic, partition, offset in self._sources.committed_offsets():  # bounded by the groups' commits
            lags = by_group.setdefault(group, [0, 0, 0])
            labels = [group, topic, str(partition)]
            if self._per_partition:
                committed.add_metric(labels, offset)
            high_watermark = high_watermarks.get((topic, partition))
            if high_watermark is None:
                lags[2] += 1
                continue
            lag = max(0, high_watermark - offset)
            lags[0] += lag
            lags[1] = max(lags[1], lag)
            if self._per_partition:
                partition_lag.add_metric(labels, lag)
        for group, (lag_sum, lag_max, unknown_count) in by_group.items():
            total.add_metric([group], lag_sum)
            largest.add_metric([group], lag_max)
            unknown.add_metric([group], unknown_count)
        yield from (total, largest, unknown)
        if self._per_partition:
            yield from (committed, partition_lag)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)
