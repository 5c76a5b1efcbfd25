"""`replog produce` and `replog consume` against a real broker: round trips, start
positions, stopping conditions, and one-line errors."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from tests.clients.conftest import create_topic
from tests.tools.conftest import CLIENT_TIMEOUT_S, produce_records, read_partition, replog

# Bytes a text-minded tool would mangle: non-UTF-8, carriage return, tab, an empty value.
LINES = [b"k1::v1", b"caf\xc3\xa9::cr\r", b"\xff\xfe::bin\tary", b"empty::", b"k5::a::b"]


def produce_to_partition_0(broker, topic: str, lines: list[bytes], *extra: str) -> subprocess.CompletedProcess:
    return replog(
        "produce", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--partition", "0", *extra,
        stdin=b"".join(line + b"\n" for line in lines),
    )


def consume(broker, topic: str, *options: str) -> subprocess.CompletedProcess:
    return replog("consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, *options)


def values(done: subprocess.CompletedProcess) -> list[bytes]:
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_keys_and_values_come_back_byte_identical_with_headers(broker, topic):
    produced = produce_to_partition_0(broker, topic, LINES, "--key-separator", "::", "--header", "origin=test", "--header", "n=1")
    assert produced.returncode == 0, produced.stderr

    done = consume(broker, topic, "--from-beginning", "--print-key", "--key-separator", "::", "--max-messages", str(len(LINES)))
    assert done.stdout == b"".join(line + b"\n" for line in LINES)
    assert done.returncode == 0 and f"Processed a total of {len(LINES)} messages".encode() in done.stderr
    records = read_partition(broker.bootstrap, topic, 0, len(LINES))
    assert [(message.key(), message.value()) for message in records] == [tuple(line.split(b"::", 1)) for line in LINES]
    assert all(message.headers() == [("origin", b"test"), ("n", b"1")] for message in records)


def test_without_a_separator_the_whole_line_is_the_value(broker, topic):
    assert produce_to_partition_0(broker, topic, [b"a\tb", b"c"]).returncode == 0
    records = read_partition(broker.bootstrap, topic, 0, 2)
    assert [(message.key(), message.value()) for message in records] == [(None, b"a\tb"), (None, b"c")]


def test_from_beginning_reads_every_partition(broker, topic):
    produce_records(broker.bootstrap, topic, [{"value": b"p0", "partition": 0}, {"value": b"p1", "partition": 1}])
    assert sorted(values(consume(broker, topic, "--from-beginning", "--timeout-ms", "2000"))) == [b"p0", b"p1"]


def test_default_start_is_the_end_so_only_later_records_print(broker, topic):
    produce_records(broker.bootstrap, topic, [{"value": b"old", "partition": 0}])
    command = [sys.executable, "-m", "replog", "consume", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--max-messages", "1"]
    reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        # The reader's "latest" is fixed when it starts, at a moment this test cannot see:
        # keep producing new records until it has printed one.
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while reader.poll() is None:
            assert time.monotonic() < deadline, "consumer never printed a new record"
            produce_records(broker.bootstrap, topic, [{"value": b"new", "partition": 0}])
            try:
                reader.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
        assert reader.returncode == 0
        assert reader.stdout.read() == b"new\n"
    finally:
        reader.kill()
        reader.wait()
        reader.stdout.close()
        reader.stderr.close()


def test_latest_on_an_idle_topic_prints_nothing(broker, topic):
    produce_records(broker.bootstrap, topic, [{"value": b"old", "partition": 0}])
    done = consume(broker, topic, "--offset", "latest", "--timeout-ms", "1000")
    assert values(done) == []
    assert b"Processed a total of 0 messages" in done.stderr


def test_offset_starts_at_that_record_of_the_partition(broker, topic):
    produce_records(broker.bootstrap, topic, [{"value": b"%d" % n, "partition": 1} for n in range(5)])
    assert values(consume(broker, topic, "--partition", "1", "--offset", "2", "--timeout-ms", "2000")) == [b"2", b"3", b"4"]
    assert values(consume(broker, topic, "--partition", "1", "--offset", "earliest", "--max-messages", "1")) == [b"0"]


def test_timestamp_starts_at_the_first_record_at_or_after_it(broker, topic):
    stamps_ms = [1_700_000_000_000 + step * 1000 for step in range(4)]
    produce_records(broker.bootstrap, topic, [{"value": b"%d" % ms, "partition": 0, "timestamp": ms} for ms in stamps_ms])
    done = consume(broker, topic, "--timestamp", str(stamps_ms[2] - 1), "--timeout-ms", "2000")
    assert values(done) == [b"%d" % ms for ms in stamps_ms[2:]]


def test_max_messages_stops_after_that_many(broker, topic):
    produce_records(broker.bootstrap, topic, [{"value": b"%d" % n, "partition": 0} for n in range(10)])
    assert values(consume(broker, topic, "--from-beginning", "--max-messages", "3")) == [b"0", b"1", b"2"]


def test_idle_timeout_ends_a_read_of_an_empty_topic(broker, topic):
    done = consume(broker, topic, "--from-beginning", "--timeout-ms", "500")
    assert values(done) == []
    assert b"Processed a total of 0 messages" in done.stderr


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def assert_one_line_error(done: subprocess.CompletedProcess, status: int, *fragments: str) -> None:
    assert done.returncode == status, done.stderr
    assert done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert all(fragment in lines[0] for fragment in fragments), lines[0]


@pytest.mark.parametrize("command", [["produce"], ["consume"], ["perf", "produce", "--num-records", "1"], ["perf", "consume", "--num-records", "1"],
                                     ["perf", "end-to-end", "--num-records", "1"]])
def test_unknown_topic_is_one_line_with_status_1(broker, topic_name, command):
    done = replog(*command, "--bootstrap-server", broker.bootstrap, "--topic", topic_name, stdin=b"x\n")
    assert_one_line_error(done, 1, topic_name, "Unknown topic")


@pytest.mark.parametrize("command", [["produce"], ["consume"]])
def test_unreachable_broker_is_one_line_with_status_1(command):
    address = f"127.0.0.1:{closed_port()}"
    done = replog(*command, "--bootstrap-server", address, "--topic", "t", stdin=b"x\n")
    assert_one_line_error(done, 1, "cannot reach a broker", address)


def test_partition_outside_the_topic_is_one_line_with_status_1(broker, topic):
    assert_one_line_error(consume(broker, topic, "--partition", "7"), 1, "not 7")


def test_a_line_without_the_separator_is_one_line_with_status_1(broker, topic):
    done = produce_to_partition_0(broker, topic, [b"k::v", b"no separator"], "--key-separator", "::")
    assert_one_line_error(done, 1, "line 2")


LINE_OVER_LIBRDKAFKAS_LIMIT = b"x" * 2_000_000  # librdkafka's message.max.bytes is 1000000


def test_a_line_over_the_producers_limit_is_one_line_naming_the_setting_to_raise(broker, topic):
    """One line, not the Python traceback ending in KafkaException: MSG_SIZE_TOO_LARGE it once was."""
    done = produce_to_partition_0(broker, topic, [b"small", LINE_OVER_LIBRDKAFKAS_LIMIT])
    assert_one_line_error(done, 1, "line 2", "2000000 bytes", "message.max.bytes (1000000)",
                          "--producer-property message.max.bytes=", "max.message.bytes")


def test_a_record_over_the_topics_limit_is_one_line_naming_the_topic_setting(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, {"max.message.bytes": "1000"})
    done = produce_to_partition_0(broker, topic_name, [b"y" * 5000])
    assert_one_line_error(done, 1, "not delivered", "the topic's max.message.bytes", "broker's message.max.bytes")


def test_raising_both_limits_sends_the_line(broker, topic_name):
    create_topic(broker.bootstrap, topic_name, {"max.message.bytes": "3000000"})
    done = produce_to_partition_0(broker, topic_name, [LINE_OVER_LIBRDKAFKAS_LIMIT], "--producer-property", "message.max.bytes=3000000")
    assert done.returncode == 0, done.stderr
    assert read_partition(broker.bootstrap, topic_name, 0, 1)[0].value() == LINE_OVER_LIBRDKAFKAS_LIMIT


def test_a_producer_property_librdkafka_refuses_is_one_line_with_status_2(broker, topic):
    done = produce_to_partition_0(broker, topic, [b"x"], "--producer-property", "no.such.property=1")
    assert_one_line_error(done, 2, "produce", "no.such.property")


@pytest.mark.parametrize(
    "args, named",
    [
        (["produce"], "--topic"),
        (["produce", "--topic", "t", "--header", "novalue"], "--header"),
        (["produce", "--topic", "t", "--producer-property", "novalue"], "--producer-property"),
        (["produce", "--topic", "t", "--acks", "2"], "--acks"),
        (["consume", "--topic", "t", "--offset", "soon"], "--offset"),
        (["consume", "--topic", "t", "--offset", "3"], "--partition"),
        (["consume", "--topic", "t", "--from-beginning", "--timestamp", "5"], "--timestamp"),
        (["consume", "--topic", "t", "--max-messages", "0"], "--max-messages"),
        (["perf", "produce", "--topic", "t"], "--num-records"),
        (["perf", "consume", "--topic", "t", "--num-records", "many"], "--num-records"),
        (["perf", "end-to-end", "--topic", "t"], "--num-records"),
        (["perf", "end-to-end", "--topic", "t", "--num-records", "1", "--throughput", "0"], "--throughput"),
        (["perf", "end-to-end", "--topic", "t", "--num-records", "1", "--record-size", "4"], "--record-size"),
    ],
)
def test_bad_arguments_are_one_line_with_status_2(args, named):
    # No broker: arguments are judged before anything connects.
    assert_one_line_error(replog(*args, "--bootstrap-server", f"127.0.0.1:{closed_port()}"), 2, named)
