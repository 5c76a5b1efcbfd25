"""Observability: the broker's Prometheus metrics (metrics.py) and their HTTP endpoint
(metrics_http.py); its ring of state-change lifecycle events (state_change_events.py)."""

from replog.obs.metrics import BrokerMetrics, StateSources, UnservedMetrics
from replog.obs.metrics_http import CannotServeMetrics, MetricsServer
from replog.obs.state_change_events import EventKind, StateChangeEvent, StateChangeEvents

__all__ = ["BrokerMetrics", "CannotServeMetrics", "EventKind", "MetricsServer", "StateChangeEvent", "StateChangeEvents",
           "StateSources", "UnservedMetrics"]
