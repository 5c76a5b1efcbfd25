"""End to end: a real Prometheus server scrapes three broker processes (over
ZooKeeper and over etcd: the `cluster` fixture); after a follower is SIGKILLed, PromQL's sum
of under-replicated partitions counts the partitions it followed within a few scrape
intervals, and returns to 0 once it is back in their ISRs."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import urllib.request

import pytest

from tests.support.failover import create_topic
from tests.support.servers import ServerProcess
from tests.support.polling import eventually

TOPIC = "watched"
FOLLOWER = 2
# Broker 2 follows both partitions (the first replica is the preferred leader).
ASSIGNMENT = [[0, 1, FOLLOWER], [1, 0, FOLLOWER]]
WAIT_S = 60  # a few 1 s scrape intervals after the ISR changed, which takes a session timeout at most
QUERY_TIMEOUT_S = 5


@pytest.fixture
def prometheus(cluster, tmp_path):
    """Prometheus scraping the cluster's brokers every second (scripts/prometheus.sh)."""
    server = ServerProcess("prometheus", tmp_path / "prometheus")
    server.state_dir.mkdir()
    targets = [broker.metrics_address for broker in cluster.brokers.values()]
    (server.state_dir / "targets.json").write_text(json.dumps([{"targets": targets}]))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def query(prometheus: ServerProcess, promql: str) -> float | None:
    """The value of a PromQL expression giving one number; None while it gives none."""
    url = f"http://{prometheus.address}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
    with urllib.request.urlopen(url, timeout=QUERY_TIMEOUT_S) as answer:
        result = json.load(answer)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


async def query_gives(prometheus: ServerProcess, promql: str, expected: float) -> None:
    async def gives() -> bool:
        return await asyncio.to_thread(query, prometheus, promql) == expected

    await eventually(gives, WAIT_S, f"{promql} == {expected}")


async def test_under_replicated_partitions_follow_a_killed_follower_out_of_and_back_into_the_isr(cluster, prometheus):
    await asyncio.to_thread(create_topic, cluster.bootstrap, TOPIC, len(ASSIGNMENT), ASSIGNMENT)
    await query_gives(prometheus, 'count(up{job="replog"} == 1)', 3)
    await query_gives(prometheus, "sum(replog_partitions)", 6)
    await query_gives(prometheus, "sum(replog_under_replicated_partitions)", 0)
    # The followers fetch in sessions (KIP-227): the leaders cache at least this topic's 4 follower replicas.
    await query_gives(prometheus, f"sum(replog_fetch_session_partitions) >= bool {len(ASSIGNMENT) * 2}", 1)

    cluster.brokers[FOLLOWER].kill()
    await query_gives(prometheus, "sum(replog_under_replicated_partitions)", len(ASSIGNMENT))
    await query_gives(prometheus, "sum(replog_offline_partitions)", 0)  # both keep their leaders

    cluster.brokers[FOLLOWER].restart()
    await query_gives(prometheus, 'count(up{job="replog"} == 1)', 3)
    await query_gives(prometheus, "sum(replog_under_replicated_partitions)", 0)
    # Each leader wrote its shrink, and its expansion when the follower came back.
    await query_gives(prometheus, "sum(replog_isr_shrinks_total) >= bool 2", 1)
    await query_gives(prometheus, "sum(replog_isr_expands_total) >= bool 2", 1)
