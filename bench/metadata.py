"""What one Metadata request of a large topic costs the broker's event loop, by version.

    .venv/bin/python bench/metadata.py [--partitions N] [--versions 0,1,8,9,12] [--rounds R]

The broker's Metadata handler runs, in this process, over a metadata cache of one topic of N
partitions (RF=3 over 3 live brokers), and its response is encoded: the time from the request to
the response's bytes, which no other client of that broker is served in. Prints the fastest of
--rounds runs per version, and the response's size. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import pathlib
import sys
import time
import types

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from replog.replication.metadata_cache import PartitionView  # noqa: E402
from replog.net import codec  # noqa: E402
from replog.net.handlers.metadata import metadata  # noqa: E402

TOPIC = "scale"
BROKERS = 3


def services(partitions: int):
    views = {partition: PartitionView(replicas=tuple((partition + i) % BROKERS for i in range(BROKERS)),
                                      leader=partition % BROKERS, leader_epoch=2,
                                      isr=tuple((partition + i) % BROKERS for i in range(BROKERS)))
             for partition in range(partitions)}
    registration = types.SimpleNamespace(host="127.0.0.1", port=9092, rack=None)
    return types.SimpleNamespace(
        metadata=types.SimpleNamespace(topics={TOPIC: views}, brokers=dict.fromkeys(range(BROKERS), registration)),
        leader_connections=types.SimpleNamespace(presumed_gone=lambda broker_id: False),
        serving=lambda topic, partition: True, cluster_id="bench", broker_id=0)


def request(version: int) -> codec.Request:
    body = codec.build(codec.request_schema(codec.ApiKey.METADATA, version),
                       {"topics": [{"name": TOPIC, "topic_id": None}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False, "include_cluster_authorized_operations": False})
    return codec.decode_request(memoryview(codec.encode_request(codec.ApiKey.METADATA, version, 7, "bench", body))[4:])


async def measure(partitions: int, versions: list[int], rounds: int) -> None:
    cache = services(partitions)
    for version in versions:
        asked = request(version)
        fastest_s, size = float("inf"), 0
        for _ in range(rounds):
            started_s = time.perf_counter()
            parts = codec.encode_response(codec.ApiKey.METADATA, version, 7, await metadata(cache, asked))
            fastest_s = min(fastest_s, time.perf_counter() - started_s)
            size = sum(map(len, parts))
        print(f"Metadata v{version}, one topic of {partitions} partitions: {fastest_s * 1000:.1f} ms, {size} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--versions", default="0,1,8,9,12", help="comma-separated Metadata versions")
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(measure(options.partitions, [int(version) for version in options.versions.split(",")], options.rounds))


if __name__ == "__main__":
    main()
