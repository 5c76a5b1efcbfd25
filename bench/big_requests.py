"""What a request's frame check costs, and how long one big request keeps other clients waiting.

    .venv/bin/python bench/big_requests.py [--decode] [--stall] [--items N] [--cases a,b,...] [--rounds R]

--decode (in this process): the time kio's reader takes to decode a request, the frame check's
(net/frame_check.py, each implementation built here), and codec.decode_request's (the check
and kio, or on a tree without the check, kio and what it did after); fastest of R rounds, per
request: ApiVersions v3, Metadata v12 of one topic, a consumer's Fetch v11 of 3 partitions, a
follower's Fetch v13 of 3,333 partitions, OffsetCommit v8 of 100 partitions.

--stall: starts one `replog broker start` process (fresh data directory, embedded store) with a
topic `big` of 100 partitions and a topic `ten` of 10, then sends, one case at a time on a
connection of its own, the largest request of each API that the broker admits: N items
(frame_check.ITEMS_MAX, or 200,000 on a tree without it), all in one frame (well within
socket.request.max.bytes), and a Metadata v1 request naming 1,000,000 topics. Meanwhile another
connection sends ApiVersions v3, the next 2 ms after each answer. Printed per case: the frame's size, how long its
answer took (or "closed" if the broker refused it), the answer's size, and the ApiVersions
answers during it: how many, their median and their longest wait. The longest wait is how long
the broker's event loop was held by that one request. Figures are printed, never asserted.

Run it on two trees to compare, e.g. `PYTHONPATH=/path/to/other/src .venv/bin/python bench/big_requests.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import pathlib
import statistics
import struct
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Callable

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from replog.net import codec  # noqa: E402
from replog.net.codec import ApiKey  # noqa: E402

from tests.support.broker_process import BrokerProcess  # noqa: E402

try:
    from replog.net import frame_check
except ImportError:  # a tree from before the check
    frame_check = None

ITEMS_DEFAULT = frame_check.ITEMS_MAX if frame_check else 200_000
BIG_PARTITIONS, TEN_PARTITIONS = 100, 10
ANSWER_TIMEOUT_S = 600
_SIZE = struct.Struct(">i")


# -- --decode ------------------------------------------------------------------------------------------


def _fetch(replica_id: int, partitions: int) -> dict:
    return {"replica_id": replica_id, "max_wait": 500, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
            "topics": [{"topic": "orders", "topic_id": uuid.uuid4(), "partitions": [
                {"partition": index, "current_leader_epoch": 3, "fetch_offset": 1000, "last_fetched_epoch": 3,
                 "log_start_offset": 0, "partition_max_bytes": 1 << 20} for index in range(partitions)]}]}


DECODE_CASES = [
    ("ApiVersions v3", ApiKey.API_VERSIONS, 3, {"client_software_name": "librdkafka", "client_software_version": "2.3.0"}),
    ("Metadata v12, one topic", ApiKey.METADATA, 12, {"topics": [{"name": "orders", "topic_id": None}],
                                                      "allow_auto_topic_creation": False,
                                                      "include_topic_authorized_operations": False}),
    ("Fetch v11, consumer, 3 partitions", ApiKey.FETCH, 11, _fetch(-1, 3)),
    ("Fetch v13, follower, 3,333 partitions", ApiKey.FETCH, 13, _fetch(1, 3333)),
    ("OffsetCommit v8, 100 partitions", ApiKey.OFFSET_COMMIT, 8, {
        "group_id": "group", "generation_id_or_member_epoch": 1, "member_id": "member", "group_instance_id": None,
        "topics": [{"name": "orders", "partitions": [{"partition_index": index, "committed_offset": 5, "committed_leader_epoch": 1,
                                                      "committed_metadata": ""} for index in range(100)]}]}),
]


def _fastest_us(function, rounds: int) -> float:
    number = 1
    while timeit.timeit(function, number=number) < 0.05:
        number *= 2
    return min(timeit.repeat(function, number=number, repeat=rounds)) / number * 1e6


def measure_decode(rounds: int) -> None:
    checkers = [frame_check.PURE_PYTHON] + ([frame_check.COMPILED] if frame_check and frame_check.COMPILED else []) \
        if frame_check else []
    print(f"decode of one request, fastest of {rounds} rounds (microseconds):")
    for name, api_key, version, values in DECODE_CASES:
        frame = codec.encode_request(api_key, version, 7, "bench", codec.build(codec.request_schema(api_key, version), values))[4:]
        read_header, read_body = codec._request_codec(api_key, version)[:2]

        def kio_only():
            read_body(frame, read_header(frame, 0)[1])

        kio_us = _fastest_us(kio_only, rounds)
        line = f"  {name:38} {len(frame):7} bytes  kio {kio_us:8.2f}"
        for checker in checkers:
            program = codec._request_codec(api_key, version)[2]
            check_us = _fastest_us(lambda: checker.check(program, frame, 0, frame_check.ITEMS_MAX), rounds)
            line += f"  check ({checker.name}) {check_us:8.2f} = {check_us / kio_us * 100:5.1f}% of kio"
        line += f"  decode_request {_fastest_us(lambda: codec.decode_request(frame), rounds):8.2f}"
        print(line, flush=True)


# -- --stall ---------------------------------------------------------------------------------------------


def _request_frame(api_key: int, version: int, values: dict, correlation_id: int = 1) -> bytes:
    return codec.encode_request(api_key, version, correlation_id, "bench", codec.build(codec.request_schema(api_key, version), values))


def _partitions(items: int, row) -> list:
    """`items - 1` partitions of one topic (the topic is an item too), spread over `big`'s."""
    return [row(index % (BIG_PARTITIONS * 2)) for index in range(items - 1)]


def stall_cases(items: int) -> dict[str, Callable[[], bytes]]:
    """The largest request of each API the broker admits, by name."""
    def topics(name, rows):
        return [{"name": name, "topic": name, "partitions": rows}]

    group = {"group_id": "bench-group", "generation_id": -1, "member_id": "", "group_instance_id": None}
    return {
        "metadata-unknown": lambda: _request_frame(ApiKey.METADATA, 12, {
            "topics": [{"name": f"absent-{index}", "topic_id": None} for index in range(items)],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}),
        "metadata-repeated": lambda: _request_frame(ApiKey.METADATA, 12, {
            "topics": [{"name": "ten", "topic_id": None}] * items, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}),
        "metadata-1M-v1": lambda: codec.encode_request(ApiKey.METADATA, 1, 1, "bench", codec.build(
            codec.request_schema(ApiKey.METADATA, 1), {"topics": [{"name": "a"}] * 1_000_000})),
        "list-offsets": lambda: _request_frame(ApiKey.LIST_OFFSETS, 7, {
            "replica_id": -1, "isolation_level": 0, "topics": topics("big", _partitions(items, lambda index: {
                "partition_index": index, "current_leader_epoch": -1, "timestamp": -1}))}),
        "offset-for-leader-epoch": lambda: _request_frame(ApiKey.OFFSET_FOR_LEADER_EPOCH, 4, {
            "replica_id": -1, "topics": topics("big", _partitions(items, lambda index: {
                "partition": index, "current_leader_epoch": -1, "leader_epoch": 0}))}),
        "offset-commit": lambda: _request_frame(ApiKey.OFFSET_COMMIT, 8, group | {
            "generation_id_or_member_epoch": -1, "retention_time": -1, "topics": topics("big", _partitions(items, lambda index: {
                "partition_index": index, "committed_offset": 1, "committed_leader_epoch": -1, "committed_metadata": ""}))}),
        "offset-fetch": lambda: _request_frame(ApiKey.OFFSET_FETCH, 7, group | {
            "require_stable": False, "topics": [{"name": "big", "partition_indexes": list(range(items - 1))}]}),
        "fetch": lambda: _request_frame(ApiKey.FETCH, 11, {
            "replica_id": -1, "max_wait": 0, "min_bytes": 0, "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0,
            "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "", "topics": topics("big", _partitions(items, lambda index: {
                "partition": index, "current_leader_epoch": -1, "fetch_offset": 0, "last_fetched_epoch": -1,
                "log_start_offset": -1, "partition_max_bytes": 1024}))}),
        "produce": lambda: _request_frame(ApiKey.PRODUCE, 9, {
            "transactional_id": None, "acks": 1, "timeout": 1000, "topic_data": [{"name": "big", "partition_data": _partitions(
                items, lambda index: {"index": index, "records": None})}]}),
        "describe-configs": lambda: _request_frame(ApiKey.DESCRIBE_CONFIGS, 4, {
            "include_synonyms": False, "include_documentation": False,
            "resources": [{"resource_type": 2, "resource_name": "ten", "configuration_keys": None}] * items}),
        "describe-groups": lambda: _request_frame(ApiKey.DESCRIBE_GROUPS, 5, {
            "groups": [f"group-{index}" for index in range(items)], "include_authorized_operations": False}),
        "delete-groups": lambda: _request_frame(ApiKey.DELETE_GROUPS, 2, {"groups_names": [f"group-{index}" for index in range(items)]}),
        "find-coordinator": lambda: _request_frame(ApiKey.FIND_COORDINATOR, 4, {
            "key_type": 0, "coordinator_keys": [f"group-{index}" for index in range(items)]}),
        "describe-log-dirs": lambda: _request_frame(ApiKey.DESCRIBE_LOG_DIRS, 4, {
            "topics": [{"topic": "big", "partitions": list(range(items - 1))}]}),
        "create-topics": lambda: _request_frame(ApiKey.CREATE_TOPICS, 7, {"timeout": 30_000, "validate_only": True, "topics": [
            {"name": f"new-{index}", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []}
            for index in range(items)]}),
        "delete-topics": lambda: _request_frame(ApiKey.DELETE_TOPICS, 6, {"timeout": 30_000, "topics": [
            {"name": f"absent-{index}", "topic_id": None} for index in range(items)]}),
        "elect-leaders": lambda: _request_frame(ApiKey.ELECT_LEADERS, 2, {"election_type": 0, "timeout": 30_000,
            "topic_partitions": [{"topic": "big", "partitions": list(range(items - 1))}]}),
        "list-partition-reassignments": lambda: _request_frame(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout": 30_000,
            "topics": [{"name": "big", "partition_indexes": list(range(items - 1))}]}),
        "leave-group": lambda: _request_frame(ApiKey.LEAVE_GROUP, 5, {"group_id": "bench-group", "members": [
            {"member_id": f"member-{index}", "group_instance_id": None, "reason": None} for index in range(items)]}),
        "join-group": lambda: _request_frame(ApiKey.JOIN_GROUP, 9, group | {
            "session_timeout": 10_000, "rebalance_timeout": 10_000, "protocol_type": "consumer", "reason": None,
            "protocols": [{"name": f"protocol-{index}", "metadata": b""} for index in range(items)]}),
        "sync-group": lambda: _request_frame(ApiKey.SYNC_GROUP, 5, group | {
            "generation_id": 1, "member_id": "member", "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": f"member-{index}", "assignment": b""} for index in range(items)]}),
        "offset-delete": lambda: _request_frame(ApiKey.OFFSET_DELETE, 0, {"group_id": "bench-group", "topics": topics(
            "big", _partitions(items, lambda index: {"partition_index": index}))}),
        "list-groups": lambda: _request_frame(ApiKey.LIST_GROUPS, 4, {"states_filter": [f"state-{index}" for index in range(items)]}),
        "incremental-alter-configs": lambda: _request_frame(ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"validate_only": True, "resources": [
            {"resource_type": 2, "resource_name": "ten", "configs": [
                {"name": "retention.ms", "config_operation": 0, "value": "1000"}]}] * (items // 2)}),
        "create-partitions": lambda: _request_frame(ApiKey.CREATE_PARTITIONS, 3, {"timeout": 30_000, "validate_only": True, "topics": [
            {"name": f"absent-{index}", "count": 2, "assignments": None} for index in range(items)]}),
        "alter-partition-reassignments": lambda: _request_frame(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, {"timeout": 30_000, "topics": [
            {"name": "absent", "partitions": [{"partition_index": index, "replicas": None} for index in range(items - 1)]}]}),
    }


class Prober:
    """ApiVersions v3 every 2 ms after an answer, on a connection of its own; remembers (sent, answered) times."""

    def __init__(self) -> None:
        self.answers: list[tuple[float, float]] = []
        self._stop = False

    async def run(self, port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        frame = _request_frame(ApiKey.API_VERSIONS, 3, {"client_software_name": "bench", "client_software_version": "1"})
        try:
            while not self._stop:  # bounded by stop()
                sent = time.perf_counter()
                writer.write(frame)
                (size,) = _SIZE.unpack(await reader.readexactly(_SIZE.size))
                await reader.readexactly(size)
                self.answers.append((sent, time.perf_counter()))
                await asyncio.sleep(0.002)
        finally:
            writer.close()

    def stop(self) -> None:
        self._stop = True

    def between(self, start: float, end: float) -> list[float]:
        """The waits (seconds) of the probes that were waiting at some time in [start, end]."""
        return [answered - sent for sent, answered in self.answers if answered >= start and sent <= end]


async def send_one(port: int, frame: bytes) -> tuple[float, int | None]:
    """(seconds until answered or closed, the answer's size or None if the broker closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 30)
    started = time.perf_counter()
    try:
        writer.write(frame)
        (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(_SIZE.size), ANSWER_TIMEOUT_S))
        await reader.readexactly(size)
        return time.perf_counter() - started, size
    except (asyncio.IncompleteReadError, ConnectionError):
        return time.perf_counter() - started, None
    finally:
        writer.close()


async def measure_stall(port: int, cases: dict, names: list[str]) -> None:
    prober = Prober()
    probing = asyncio.ensure_future(prober.run(port))
    await asyncio.sleep(0.5)
    print(f"{'case':30} {'frame':>10} {'answer':>10} {'answered in':>12}   ApiVersions meanwhile: count, median, longest")
    try:
        for name in names:
            frame = cases[name]()  # this holds the loop the prober shares: it catches up before the start
            await asyncio.sleep(0.2)
            start = time.perf_counter()
            took_s, size = await send_one(port, frame)
            await asyncio.sleep(0.3)  # the probe waiting at the end answers
            waits = prober.between(start, start + took_s)
            answer = "closed" if size is None else f"{size}"
            median = statistics.median(waits) * 1000 if waits else float("nan")
            longest = max(waits) * 1000 if waits else float("nan")
            print(f"{name:30} {len(frame):>10} {answer:>10} {took_s * 1000:>9.0f} ms   {len(waits):5} {median:8.1f} ms {longest:8.1f} ms",
                  flush=True)
            if probing.done():
                raise SystemExit(f"the ApiVersions connection ended: {probing.exception()!r}")
    finally:
        prober.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(probing, 10)


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for topic, count in (("big", BIG_PARTITIONS), ("ten", TEN_PARTITIONS)):
        admin.create_topics([NewTopic(topic, count, 1)])[topic].result(timeout=60)


def run_stall(items: int, names: list[str] | None) -> None:
    cases = stall_cases(items)
    names = names or list(cases)
    with tempfile.TemporaryDirectory() as data_dir:
        broker = BrokerProcess(pathlib.Path(data_dir) / "data")
        broker.start()
        try:
            create_topics(broker.bootstrap)
            print(f"broker on port {broker.port}; {items} items per request")
            asyncio.run(measure_stall(broker.port, cases, names))
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode", action="store_true", help="only the decode costs")
    parser.add_argument("--stall", action="store_true", help="only the big requests")
    parser.add_argument("--items", type=int, default=ITEMS_DEFAULT)
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    parser.add_argument("--rounds", type=int, default=7)
    options = parser.parse_args()
    if not options.stall:
        measure_decode(options.rounds)
    if not options.decode:
        run_stall(options.items, [name for name in options.cases.split(",") if name])


if __name__ == "__main__":
    main()
