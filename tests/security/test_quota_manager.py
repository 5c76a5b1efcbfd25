"""The quota managers' arithmetic, on a clock the test moves: Kafka's throttle times for a
windowed rate, the request-time cap, the controller mutation token bucket (strict and
permissive), and the bound on the entities tracked."""

from __future__ import annotations

import pytest

from replog.config import defaults
from replog.security.client_quotas import ClientQuotaEntity, ClientQuotas
from replog.security.quota_limits import QuotaType
from replog.security.quota_manager import (
    INACTIVE_SENSOR_EXPIRATION_S,
    ClientQuotaManager,
    ClientQuotaManagers,
    Rate,
    ThrottlingQuotaExceeded,
)


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


class Observer:
    def __init__(self) -> None:
        self.measured: dict[tuple[str, str, str], tuple[float, int]] = {}
        self.expired: list[tuple[str, str, str]] = []

    def quota_measured(self, quota_type: str, user: str, client_id: str, rate: float, throttle_ms: int) -> None:
        self.measured[(quota_type, user, client_id)] = (rate, throttle_ms)

    def quota_expired(self, quota_type: str, user: str, client_id: str) -> None:
        self.expired.append((quota_type, user, client_id))
        self.measured.pop((quota_type, user, client_id), None)


def quotas(**by_client: dict[QuotaType, float]) -> ClientQuotas:
    limits = ClientQuotas()
    for client_id, values in by_client.items():
        limits.set_entity(ClientQuotaEntity(None, client_id), values)
    return limits


def test_a_first_burst_is_measured_over_the_windows_kafka_assumes():
    rate = Rate(samples=11, window_ms=1000, now_ms=0)
    rate.record(10_000, 0)
    # As Kafka's Rate.windowSize: never less than samples - 1 windows.
    assert rate.measure(0) == (1000.0, 10_000)
    rate.record(10_000, 15_000)  # every earlier window expired
    assert rate.measure(15_000) == (1000.0, 10_000)


def test_throttle_time_brings_the_rate_back_to_the_quota():
    clock = Clock()
    manager = ClientQuotaManager(QuotaType.PRODUCE, quotas(app={QuotaType.PRODUCE: 1000}), samples=11, window_s=1,
                                 clock=clock)
    assert manager.record("alice", "app", 10_000) == 0  # 1000/s over 10 s: at the quota
    # 15,000 over 10 s is 1500/s: (1500 - 1000) / 1000 x 10 s.
    assert manager.record("alice", "app", 5_000) == 5_000
    assert manager.record("alice", "other", 1_000_000) == 0  # no quota applies to it


def test_request_time_throttles_are_capped_at_one_window():
    clock = Clock()
    managers = ClientQuotaManagers(quotas(app={QuotaType.REQUEST: 1.0}), defaults(), clock=clock)
    assert managers.request.record("", "app", 500.0) == 1000  # far over, capped
    assert managers.produce.record("", "app", 1 << 30) == 0  # no byte-rate quota set


def test_controller_mutations_strict_refused_below_zero_and_permissive_throttled():
    clock = Clock()
    managers = ClientQuotaManagers(quotas(app={QuotaType.CONTROLLER_MUTATION: 2.0}), defaults(), clock=clock)
    mutations = managers.controller_mutation
    first = mutations.quota("", "app", strict=True)
    first.record(30)  # the bucket holds 2 x 11 x 1 = 22: accepted while it has tokens, then 8 below zero
    assert first.throttle_time_ms == 4000
    second = mutations.quota("", "app", strict=True)
    with pytest.raises(ThrottlingQuotaExceeded):
        second.record(1)
    assert second.throttle_time_ms == 4000
    permissive = mutations.quota("", "app", strict=False)
    permissive.record(2)
    assert permissive.throttle_time_ms == 5000
    clock.now_s += 5  # refilled to zero
    mutations.quota("", "app", strict=True).record(1)
    unlimited = mutations.quota("", "no-quota", strict=True)
    unlimited.record(1_000_000)
    assert unlimited.throttle_time_ms == 0


def test_entities_are_bounded_and_expire_with_their_metrics():
    clock = Clock()
    observer = Observer()
    limits = ClientQuotas()
    limits.set_entity(ClientQuotaEntity(None, "<default>"), {QuotaType.FETCH: 1000})
    manager = ClientQuotaManager(QuotaType.FETCH, limits, samples=11, window_s=1, clock=clock, entities_max=100,
                                 observer=observer)
    for index in range(1000):  # a client inventing client ids
        manager.record("", f"invented-{index}", 1)
    assert manager.entity_count == 100
    assert len(observer.measured) == 100
    assert ("fetch", "", "invented-0") in observer.expired
    assert ("fetch", "", "invented-999") in observer.measured
    clock.now_s += INACTIVE_SENSOR_EXPIRATION_S
    manager.record("", "late", 1)
    assert manager.entity_count == 1
    assert list(observer.measured) == [("fetch", "", "late")]
