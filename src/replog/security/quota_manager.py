"""Client quotas enforced as Kafka's ClientQuotaManager and ControllerMutationQuotaManager do:
what each quota entity used, and for how long a client over its quota must wait.

A byte rate or request-time quota is a windowed rate (`Rate`): `quota.window.num` samples of
`quota.window.size.seconds`, summed and divided by the time they span. A request's value is
recorded first, then the rate measured; over the limit, the client waits the time that would
bring the rate back to it had nothing more come, (rate - limit) / limit x window (Kafka's
throttleTime). Request-time throttles are capped at one window, as Kafka's
ClientRequestQuotaManager caps them; byte-rate throttles are not, as in Kafka.

The controller mutation quota (KIP-599) is a token bucket (`TokenBucket`): it refills at the
quota's rate up to quota x controller.quota.window.num x controller.quota.window.size.seconds,
and each partition created or deleted takes a token. Below zero the entity is throttled for the
time the bucket needs to get back to zero; a strict request (`MutationQuota.strict`) is refused
while the bucket is below zero, a permissive one is accepted and throttled.

Memory is bounded: a manager tracks at most `entities_max` entities, evicting the one unused
longest (a client inventing client ids under a default quota meets the bound, not the heap's),
and drops an entity unused for INACTIVE_SENSOR_EXPIRATION_S as Kafka expires its sensors. The
managers are used from one event loop; time comes from an injected clock.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from .quota_limits import QuotaEntity, QuotaLimits, QuotaType

INACTIVE_SENSOR_EXPIRATION_S = 3600.0  # Kafka's ClientQuotaManagerConfig.InactiveSensorExpirationTimeSeconds
QUOTA_ENTITIES_MAX = 10_000  # per quota type
NANOS_TO_PERCENTAGE = 100.0  # a second of handler time is 100% of one handler's second
# The quota type as the metrics name it (obs/metrics.py), Kafka's QuotaType names in lower case.
METRIC_TYPES = {QuotaType.PRODUCE: "produce", QuotaType.FETCH: "fetch", QuotaType.REQUEST: "request",
                QuotaType.CONTROLLER_MUTATION: "controller_mutation"}


class QuotaObserver(Protocol):
    """Where a manager reports each entity's measured rate and throttle (obs/metrics.py)."""

    def quota_measured(self, quota_type: str, user: str, client_id: str, rate: float, throttle_ms: int) -> None: ...

    def quota_expired(self, quota_type: str, user: str, client_id: str) -> None: ...


class Rate:
    """Kafka's Rate over a SampledStat of sums: `samples` windows of `window_ms` each, the
    current one advancing once its window has passed, a window older than all of them reset."""

    __slots__ = ("_samples", "_window_ms", "_starts_ms", "_sums", "_current")

    def __init__(self, samples: int, window_ms: float, now_ms: float):
        assert samples >= 1 and window_ms > 0
        self._samples = samples
        self._window_ms = window_ms
        self._starts_ms = [now_ms]
        self._sums = [0.0]
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        if now_ms - self._starts_ms[self._current] >= self._window_ms:
            self._current = (self._current + 1) % self._samples
            if self._current == len(self._starts_ms):
                self._starts_ms.append(now_ms)
                self._sums.append(0.0)
            else:
                self._starts_ms[self._current], self._sums[self._current] = now_ms, 0.0
        self._sums[self._current] += value

    def measure(self, now_ms: float) -> tuple[float, float]:
        """(the rate per second, the span in ms it was measured over) at `now_ms`."""
        expire_ms = self._samples * self._window_ms
        for index, start_ms in enumerate(self._starts_ms):  # bounded by samples
            if now_ms - start_ms >= expire_ms:
                self._starts_ms[index], self._sums[index] = now_ms, 0.0
        # As Kafka's Rate.windowSize: at least samples - 1 whole windows, so that a first burst
        # is not measured over a few milliseconds.
        span_ms = now_ms - min(self._starts_ms)
        full_windows = int(span_ms // self._window_ms)
        if full_windows < self._samples - 1:
            span_ms += (self._samples - 1 - full_windows) * self._window_ms
        return sum(self._sums) * 1000.0 / span_ms, span_ms


class TokenBucket:
    """Kafka's TokenBucket: refills at `rate` per second up to `rate` x `burst_s`; starts full."""

    __slots__ = ("tokens", "_updated_s")

    def __init__(self) -> None:
        self.tokens = math.inf
        self._updated_s = 0.0

    def refill(self, rate: float, burst_s: float, now_s: float) -> float:
        self.tokens = min(rate * burst_s, self.tokens + rate * (now_s - self._updated_s))
        self._updated_s = now_s
        return self.tokens


class _Entities:
    """The state kept per quota entity, at most `entities_max`, the one unused longest evicted,
    and those unused for INACTIVE_SENSOR_EXPIRATION_S dropped."""

    def __init__(self, quota_type: QuotaType, make: Callable[[float], Any], entities_max: int,
                 observer: QuotaObserver | None):
        self._quota_type = quota_type
        self._make = make
        self._entities_max = entities_max
        self._observer = observer
        self._by_entity: collections.OrderedDict[QuotaEntity, list] = collections.OrderedDict()  # [state, used_s]

    def __len__(self) -> int:
        return len(self._by_entity)

    def get(self, entity: QuotaEntity, now_s: float) -> Any:
        held = self._by_entity.get(entity)
        if held is None:
            held = self._by_entity[entity] = [self._make(now_s), now_s]
            self._expire(now_s)
        else:
            held[1] = now_s
            self._by_entity.move_to_end(entity)
        return held[0]

    def _expire(self, now_s: float) -> None:
        while self._by_entity:  # bounded by the entities held
            entity, (_, used_s) = next(iter(self._by_entity.items()))
            if len(self._by_entity) <= self._entities_max and now_s - used_s < INACTIVE_SENSOR_EXPIRATION_S:
                return
            del self._by_entity[entity]
            if self._observer is not None:
                self._observer.quota_expired(METRIC_TYPES[self._quota_type], *entity)


class ClientQuotaManager:
    """The byte rate or request-time quota of one QuotaType (PRODUCE, FETCH, REQUEST)."""

    def __init__(self, quota_type: QuotaType, limits: QuotaLimits, *, samples: int, window_s: float,
                 max_throttle_ms: int | None = None, clock: Callable[[], float] = time.monotonic,
                 entities_max: int = QUOTA_ENTITIES_MAX, observer: QuotaObserver | None = None):
        assert quota_type is not QuotaType.CONTROLLER_MUTATION
        self.quota_type = quota_type
        self._limits = limits
        self._max_throttle_ms = max_throttle_ms
        self._clock = clock
        self._observer = observer
        window_ms = window_s * 1000.0
        self._entities = _Entities(quota_type, lambda now_s: Rate(samples, window_ms, now_s * 1000.0), entities_max,
                                   observer)

    @property
    def entity_count(self) -> int:
        return len(self._entities)

    def record(self, user: str, client_id: str, value: float) -> int:
        """Record `value` against the quota that applies to `user` from `client_id`; the time in
        ms the client must now wait (0: within its quota, or none applies)."""
        applied = self._limits.quota(self.quota_type, user, client_id)
        if applied is None:
            return 0
        entity, limit = applied
        now_s = self._clock()
        rate = self._entities.get(entity, now_s)
        rate.record(value, now_s * 1000.0)
        measured, span_ms = rate.measure(now_s * 1000.0)
        throttle_ms = 0
        if measured > limit:
            throttle_ms = round((measured - limit) / limit * span_ms) if limit > 0 else span_ms
            if self._max_throttle_ms is not None:
                throttle_ms = min(throttle_ms, self._max_throttle_ms)
        if self._observer is not None:
            self._observer.quota_measured(METRIC_TYPES[self.quota_type], *entity, measured, throttle_ms)
        return int(throttle_ms)


class ThrottlingQuotaExceeded(Exception):
    """A strict mutation refused: the entity's bucket is below zero (THROTTLING_QUOTA_EXCEEDED)."""


class MutationQuota:
    """One request's view of the controller mutation quota: `record` the partitions each of its
    topics creates or deletes; `throttle_time_ms` is what the response carries."""

    def __init__(self, bucket: TokenBucket | None, limit: float, burst_s: float, strict: bool,
                 clock: Callable[[], float]):
        self._bucket = bucket
        self._limit = limit
        self._burst_s = burst_s
        self.strict = strict
        self._clock = clock
        self.throttle_time_ms = 0

    def record(self, permits: int) -> None:
        """Take `permits` tokens; strict, refuse (ThrottlingQuotaExceeded) while the bucket is
        below zero, without taking them. A request may take the bucket below zero: Kafka
        accepts a topic of any size while there are tokens left."""
        if self._bucket is None:
            return
        tokens = self._bucket.refill(self._limit, self._burst_s, self._clock())
        if self.strict and tokens < 0:
            self._throttled(tokens)
            raise ThrottlingQuotaExceeded(f"the controller mutation quota ({self._limit:g}/s) is exceeded")
        self._bucket.tokens = tokens - permits
        if self._bucket.tokens < 0:
            self._throttled(self._bucket.tokens)

    def _throttled(self, tokens: float) -> None:
        self.throttle_time_ms = max(self.throttle_time_ms, round(-tokens / self._limit * 1000))


class ControllerMutationQuotaManager:
    """KIP-599's quota on the partitions CreateTopics, CreatePartitions and DeleteTopics create
    or delete, per entity."""

    def __init__(self, limits: QuotaLimits, *, samples: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic, entities_max: int = QUOTA_ENTITIES_MAX,
                 observer: QuotaObserver | None = None):
        self._limits = limits
        self._burst_s = samples * window_s
        self._clock = clock
        self._entities = _Entities(QuotaType.CONTROLLER_MUTATION, lambda now_s: TokenBucket(), entities_max, observer)

    def quota(self, user: str, client_id: str, strict: bool) -> MutationQuota:
        applied = self._limits.quota(QuotaType.CONTROLLER_MUTATION, user, client_id)
        if applied is None:
            return MutationQuota(None, 0.0, self._burst_s, strict, self._clock)
        entity, limit = applied
        return MutationQuota(self._entities.get(entity, self._clock()), limit, self._burst_s, strict, self._clock)


class ClientQuotaManagers:
    """A broker's quota managers, built from its settings (quota.window.num and the others)."""

    def __init__(self, limits: QuotaLimits, settings: Mapping[str, Any], *,
                 clock: Callable[[], float] = time.monotonic, entities_max: int = QUOTA_ENTITIES_MAX,
                 observer: QuotaObserver | None = None):
        samples, window_s = settings["quota.window.num"], settings["quota.window.size.seconds"]

        def rate(quota_type: QuotaType, max_throttle_ms: int | None = None) -> ClientQuotaManager:
            return ClientQuotaManager(quota_type, limits, samples=samples, window_s=window_s,
                                      max_throttle_ms=max_throttle_ms, clock=clock, entities_max=entities_max,
                                      observer=observer)

        self.produce = rate(QuotaType.PRODUCE)
        self.fetch = rate(QuotaType.FETCH)
        self.request = rate(QuotaType.REQUEST, max_throttle_ms=int(window_s * 1000))
        self._limits = limits
        self.controller_mutation = ControllerMutationQuotaManager(
            limits, samples=settings["controller.quota.window.num"],
            window_s=settings["controller.quota.window.size.seconds"], clock=clock, entities_max=entities_max,
            observer=observer)

    def limit(self, user: str, client_id: str) -> bool:
        """Whether a byte rate or request-time quota applies to `user` from `client_id`. On every
        request's path: three lookups when no quota is set."""
        quota = self._limits.quota
        return (quota(QuotaType.PRODUCE, user, client_id) is not None or quota(QuotaType.FETCH, user, client_id)
                is not None or quota(QuotaType.REQUEST, user, client_id) is not None)
