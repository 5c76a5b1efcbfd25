"""The broker process's runtime (replog.runtime), around a broker that is not started."""

from __future__ import annotations

import asyncio
import gc

import pytest

from replog import broker, runtime


def test_a_serving_broker_collects_its_young_objects_less_often_than_python_by_default(monkeypatch):
    """At CPython's pace (every 700 allocations) the cycle collector's passes over a broker's
    long-lived objects took a fifth of its CPU while a topic of 1,000 partitions was created."""
    class NotStarted(Exception):
        pass

    def refuse(config):
        raise NotStarted

    monkeypatch.setattr(broker, "Broker", refuse)
    default = gc.get_threshold()
    try:
        with pytest.raises(NotStarted):
            asyncio.run(runtime.serve({}))
        assert gc.get_threshold() == (runtime.GC_YOUNG_GENERATION_THRESHOLD, *default[1:])
        assert runtime.GC_YOUNG_GENERATION_THRESHOLD > default[0]
    finally:
        gc.set_threshold(*default)
