"""Quota metrics per entity: a series appears when a quota entity is measured and goes with it."""

from __future__ import annotations

from replog.obs import BrokerMetrics


def test_a_quota_entitys_series_go_when_it_expires():
    metrics = BrokerMetrics()
    labels = {"type": "produce", "user": "alice", "client_id": "app"}
    metrics.quota_measured("produce", "alice", "app", 2_000_000.0, 250)
    assert metrics.registry.get_sample_value("replog_quota_throttle_time_ms", labels) == 250
    assert metrics.registry.get_sample_value("replog_quota_rate", labels) == 2_000_000.0
    metrics.quota_expired("produce", "alice", "app")
    metrics.quota_expired("controller_mutation", "alice", "app")  # never measured
    assert metrics.registry.get_sample_value("replog_quota_throttle_time_ms", labels) is None
    assert metrics.registry.get_sample_value("replog_quota_rate", labels) is None
