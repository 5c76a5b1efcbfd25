"""The broker's store wrapper (ObservedStore): every operation of every backend reaches the
metrics once, with its kind and, when it failed, its error; the session is the backend's."""

from __future__ import annotations

from replog.coord_backends import NoNode, NodeExists, ObservedStore, SessionState, open_store
from replog.coord_backends.observed import OPERATIONS
from replog.obs import BrokerMetrics

from .conftest import SESSION_TIMEOUT_MS


def timed(metrics: BrokerMetrics, operation: str) -> float:
    return metrics.registry.get_sample_value("replog_store_operation_seconds_count", {"operation": operation}) or 0


def failed(metrics: BrokerMetrics, operation: str, error: str) -> float:
    return metrics.registry.get_sample_value("replog_store_operation_errors_total",
                                             {"operation": operation, "error": error}) or 0


async def test_each_operation_is_timed_once_by_kind_and_failures_are_counted_by_error(url):
    metrics = BrokerMetrics()
    store = ObservedStore(open_store(url, session_timeout_ms=SESSION_TIMEOUT_MS), metrics.store_operation)
    await store.start()
    try:
        assert store.session_state is SessionState.CONNECTED
        await store.create("/a/b", b"1", make_parents=True)  # one create, its parent made inside it
        version = (await store.get("/a/b"))[1]
        await store.set("/a/b", b"2", version)
        assert [node is None for node in await store.get_many(["/a/b", "/a/x"])] == [False, True]  # one timed read
        assert await store.exists("/a/b") is not None
        assert await store.children("/a") == ["b"]
        await store.transaction().create("/a/c").set("/a/b", b"3").commit()
        async with await store.watch_data("/a/b"):
            pass
        async with await store.watch_children("/a"):
            pass
        await store.delete("/a", recursive=True)
        for operation in OPERATIONS:
            assert timed(metrics, operation) == 1, operation
        assert not any(failed(metrics, operation, "NoNode") for operation in OPERATIONS)

        try:
            await store.get("/a/b")
        except NoNode:
            pass
        await store.create("/d")
        try:
            await store.transaction().create("/e").create("/d").commit()
        except NodeExists:
            pass
        assert (timed(metrics, "get"), failed(metrics, "get", "NoNode")) == (2, 1)
        assert (timed(metrics, "transaction"), failed(metrics, "transaction", "NodeExists")) == (2, 1)
        assert await store.exists("/e") is None  # the failed transaction applied nothing
    finally:
        await store.close()
    assert store.session_state is SessionState.LOST
