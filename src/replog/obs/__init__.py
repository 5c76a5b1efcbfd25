"""Observability: the broker's Prometheus metrics (metrics.py) and their HTTP endpoint (metrics_http.py)."""

from replog.obs.metrics import BrokerMetrics, StateSources, UnservedMetrics
from replog.obs.metrics_http import CannotServeMetrics, MetricsServer

__all__ = ["BrokerMetrics", "CannotServeMetrics", "MetricsServer", "StateSources", "UnservedMetrics"]
