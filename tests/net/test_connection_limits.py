"""Connections and their memory, bounded, against real broker processes: what an attacker's
sockets cost the broker (the probes these tests are named after), what a client meets at each
limit, and that a well-behaved confluent-kafka producer and consumer keep working meanwhile and
afterwards. Clients on other loopback addresses (127.0.0.2, ...) meet their own per-address
limits: the whole of 127.0.0.0/8 is local."""

from __future__ import annotations

import resource
import socket
import struct
import threading
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from replog.net.codec import ApiKey
from tests.support.broker_process import BrokerProcess
from tests.support.polling import wait_until

pytestmark = pytest.mark.cluster  # each test runs against a broker process

ADDRESS_SPACE_BYTES = 2 << 30
ANNOUNCED_BYTES = 100 * 1024 * 1024  # socket.request.max.bytes, the most a frame may announce
WAIT_S = 30


def rss_bytes(broker: BrokerProcess) -> int:
    with open(f"/proc/{broker.process.pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def metric(broker: BrokerProcess, name: str, **labels: str) -> float:
    """The sample `name` with `labels` the broker's endpoint shows now (0 if absent)."""
    with urllib.request.urlopen(f"http://{broker.metrics_address}/metrics", timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items()):
                return sample.value
    return 0.0


def connect(broker: BrokerProcess, source: str = "127.0.0.1", listener: str = "PLAINTEXT") -> socket.socket:
    return socket.create_connection(("127.0.0.1", broker.ports.get(listener, broker.port)), timeout=WAIT_S,
                                    source_address=(source, 0))


def api_versions(correlation_id: int, padding_bytes: int = 0) -> bytes:
    """An ApiVersions v0 request, padded with trailing bytes (which the broker ignores)."""
    body = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, correlation_id, 4) + b"test" + bytes(padding_bytes)
    return struct.pack(">i", len(body)) + body


def answered(connection: socket.socket, correlation_id: int) -> bool:
    """Send ApiVersions and read its answer; False if the broker closed the connection instead."""
    try:
        connection.sendall(api_versions(correlation_id))
        return read_answer(connection) == correlation_id
    except (ConnectionError, EOFError):
        return False


def read_answer(connection: socket.socket) -> int:
    """The correlation id of the next response."""
    size, correlation_id = struct.unpack(">ii", read_exactly(connection, 8))
    read_exactly(connection, size - 4)
    return correlation_id


def read_exactly(connection: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:  # bounded by `size`; each recv returns bytes or ends it
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise EOFError("closed by the broker")
        data += chunk
    return bytes(data)


def closed_by_broker(connection: socket.socket) -> bool:
    """Whether the broker closes `connection` (within the socket's timeout)."""
    try:
        return connection.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def produce_and_consume(broker: BrokerProcess, records: int = 20) -> None:
    """A well-behaved client's round trip: a topic made, records produced (acks=all), read back."""
    topic = f"well-behaved-{uuid.uuid4().hex[:8]}"
    create_topic(broker, topic)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(records):
        producer.produce(topic, value=b"record %d" % i)
    assert producer.flush(WAIT_S) == 0
    assert consume(broker, topic, records) == [b"record %d" % i for i in range(records)]


def create_topic(broker: BrokerProcess, topic: str, partitions: int = 1) -> str:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=WAIT_S)[topic].result(WAIT_S)
    return topic


def consume(broker: BrokerProcess, topic: str, records: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": topic, "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    try:
        for _ in range(4 * WAIT_S):  # bounded: polls of up to 0.25 s
            message = consumer.poll(0.25)
            if message is not None and not message.error():
                values.append(message.value())
            if len(values) == records:
                break
    finally:
        consumer.close()
    return values


@pytest.fixture
def start_broker(tmp_path):
    """`start_broker(*settings, rlimits=...)`: a broker process with `--set` settings, stopped after."""
    brokers: list[BrokerProcess] = []

    def start(*settings: str, rlimits: dict[int, int] | None = None, listeners=("PLAINTEXT",)) -> BrokerProcess:
        extra_args = tuple(argument for setting in settings for argument in ("--set", setting))
        broker = BrokerProcess(tmp_path / f"data-{len(brokers)}", extra_args=extra_args, listeners=listeners,
                               rlimits={resource.RLIMIT_AS: ADDRESS_SPACE_BYTES, **(rlimits or {})})
        brokers.append(broker)
        broker.start()
        return broker

    yield start
    for broker in brokers:
        broker.stop()


@pytest.fixture
def sockets():
    """Sockets a test opens, closed after it."""
    opened: list[socket.socket] = []
    yield opened
    for connection in opened:
        connection.close()


def test_size_prefixes_announcing_100_mb_and_nothing_more_cost_the_broker_no_memory(start_broker, sockets):
    """Probe: a 4-byte size prefix grew the connection's buffer to the announced size at once,
    zero-filled and kept: 4 connections that sent only a prefix took RSS from 40 to 440 MB."""
    broker = start_broker()
    produce_and_consume(broker)
    before = rss_bytes(broker)
    for _ in range(200):
        connection = connect(broker)
        connection.sendall(struct.pack(">i", ANNOUNCED_BYTES))
        sockets.append(connection)
    prober = connect(broker)
    sockets.append(prober)
    assert answered(prober, 1), "the broker read the prefixes sent before"
    wait_until(lambda: metric(broker, "replog_connections") >= 201, "the broker to hold the 200 connections")
    grown = rss_bytes(broker) - before
    assert grown < 32 << 20, f"RSS grew by {grown >> 20} MiB for 200 prefixes"
    produce_and_consume(broker)
    assert rss_bytes(broker) - before < 32 << 20


def test_a_sender_that_stops_mid_frame_holds_about_what_it_sent(start_broker, sockets):
    broker = start_broker()
    produce_and_consume(broker)
    before = rss_bytes(broker)
    sent_bytes = 1 << 20
    for _ in range(16):
        connection = connect(broker)
        connection.sendall(api_versions(1, ANNOUNCED_BYTES - 14)[:4 + sent_bytes])
        sockets.append(connection)
    prober = connect(broker)
    sockets.append(prober)
    assert answered(prober, 1)
    grown = rss_bytes(broker) - before
    # Each buffer grows by doubling as bytes arrive: at most twice what came, and mapped pages
    # cost memory once written.
    assert grown < 16 * 2 * sent_bytes + (16 << 20), f"RSS grew by {grown >> 20} MiB for 16 MiB sent"


def test_queued_request_bytes_bound_many_slow_senders_of_big_requests(start_broker):
    """Probe: each connection could hold 64 decoded requests of up to 100 MB. Here 16 connections
    send 8 MiB requests slowly at once; the broker reads them within queued.max.request.bytes
    (the bytes in use pass it by at most one grant, a frame's growth and decoded size) and
    answers every one."""
    pool_bytes, frame_bytes, senders = 16 << 20, 8 << 20, 16
    broker = start_broker(f"queued.max.request.bytes={pool_bytes}")
    produce_and_consume(broker)
    before = rss_bytes(broker)
    answers: list[int] = []
    largest = {"queued": 0.0, "rss": 0}
    done = threading.Event()

    def send_slowly(correlation_id: int) -> None:
        with connect(broker) as connection:
            frame = api_versions(correlation_id, frame_bytes - 14)
            for start in range(0, len(frame), 256 << 10):  # paced, as a slow client sends
                connection.sendall(frame[start:start + (256 << 10)])
                done.wait(0.005)
            answers.append(read_answer(connection))

    def watch() -> None:
        while not done.is_set():  # bounded by the senders' end
            largest["queued"] = max(largest["queued"], metric(broker, "replog_queued_request_bytes"))
            largest["rss"] = max(largest["rss"], rss_bytes(broker))
            done.wait(0.05)

    threads = [threading.Thread(target=send_slowly, args=(i,)) for i in range(senders)]
    watcher = threading.Thread(target=watch)
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    watcher.join()
    assert sorted(answers) == list(range(senders))
    assert 0 < largest["queued"] <= pool_bytes + 2 * frame_bytes
    grown = largest["rss"] - before
    assert grown < pool_bytes + 4 * frame_bytes, f"RSS grew by {grown >> 20} MiB for {senders} x 8 MiB requests"
    produce_and_consume(broker)


def test_connections_past_max_connections_per_ip_are_closed_as_accepted(start_broker, sockets):
    broker = start_broker("max.connections.per.ip=5", "max.connections.per.ip.overrides=127.0.0.4:8")
    for _ in range(5):
        sockets.append(connect(broker, "127.0.0.2"))
    assert all(answered(connection, 1) for connection in sockets)
    refused = connect(broker, "127.0.0.2")
    sockets.append(refused)
    assert closed_by_broker(refused)
    produce_and_consume(broker)  # from 127.0.0.1, which has its own count
    others = [connect(broker, "127.0.0.3") for _ in range(5)] + [connect(broker, "127.0.0.4") for _ in range(8)]
    sockets.extend(others)
    assert all(answered(connection, 2) for connection in others), "other addresses, and an override of 8"
    assert metric(broker, "replog_connections_refused_total", limit="max.connections.per.ip") == 1
    sockets[0].close()
    wait_until(lambda: metric(broker, "replog_connections") <= 5 + 5 + 8 - 1, "the closed connection counted out")
    again = connect(broker, "127.0.0.2")
    sockets.append(again)
    assert answered(again, 3), "one closed: its address may open another"
    assert any("max.connections.per.ip=5" in line for line in broker.output)


def test_at_max_connections_the_broker_accepts_no_more_until_one_closes(start_broker, sockets):
    broker = start_broker("max.connections=12")
    topic = create_topic(broker, f"meanwhile-{uuid.uuid4().hex[:8]}")
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    producer.produce(topic, value=b"before")
    assert producer.flush(WAIT_S) == 0
    held = int(metric(broker, "replog_connections"))
    for _ in range(12 - held):
        sockets.append(connect(broker, "127.0.0.2"))
    wait_until(lambda: metric(broker, "replog_accept_pauses_total", limit="max.connections") >= 1,
               "accepting paused at max.connections")
    waiting = connect(broker, "127.0.0.3")  # the kernel completes the handshake; the broker does not accept
    waiting.settimeout(1)
    waiting.sendall(api_versions(5))
    with pytest.raises(TimeoutError):
        waiting.recv(1)
    producer.produce(topic, value=b"meanwhile")  # on its connection from before
    assert producer.flush(WAIT_S) == 0
    sockets.pop().close()
    waiting.settimeout(WAIT_S)
    assert read_answer(waiting) == 5, "accepted once a connection closed, and answered"
    waiting.close()
    for connection in sockets:
        connection.close()
    sockets.clear()
    assert consume(broker, topic, 2) == [b"before", b"meanwhile"]
    produce_and_consume(broker)


def not_accepted(connection: socket.socket, correlation_id: int) -> bool:
    """Whether a request on `connection` goes unanswered for a second: the broker has not
    accepted it (the kernel completed the handshake and holds it in the listen backlog)."""
    connection.settimeout(1)
    connection.sendall(api_versions(correlation_id))
    try:
        connection.recv(1)
    except TimeoutError:
        return True
    finally:
        connection.settimeout(WAIT_S)
    return False


TWO_LISTENERS = ("listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CLIENT:PLAINTEXT",)


def test_max_connections_is_the_brokers_over_every_listener_but_the_inter_broker_one(start_broker, sockets):
    broker = start_broker("max.connections=6", *TWO_LISTENERS, listeners=("PLAINTEXT", "CLIENT"))
    assert metric(broker, "replog_connections") == 0
    for listener in ("PLAINTEXT", "CLIENT") * 3:  # 6: the broker's limit, half on each listener
        sockets.append(connect(broker, listener=listener))
        assert answered(sockets[-1], 1)
    waiting = connect(broker, "127.0.0.3", listener="CLIENT")
    assert not_accepted(waiting, 7), "the client listener has 3 of its own, but the broker has 6"

    inter_broker = connect(broker, "127.0.0.4")  # the inter-broker listener is exempt...
    assert answered(inter_broker, 8)
    assert closed_by_broker(sockets[1]), "...and the client connection idle longest gives it room"
    assert answered(sockets[3], 9) and answered(sockets[5], 10), "the other client connections carry on"
    assert metric(broker, "replog_connections_closed_total", reason="max.connections") == 1

    inter_broker.close()
    sockets[0].close()  # 5 left once both are gone: room for the one waiting
    assert read_answer(waiting) == 7, "accepted once connections closed, and answered"
    waiting.close()
    produce_and_consume(broker)


def test_a_listener_holds_to_its_own_max_connections(start_broker, sockets):
    broker = start_broker("listener.name.client.max.connections=2", *TWO_LISTENERS, listeners=("PLAINTEXT", "CLIENT"))
    for correlation_id in range(2):
        sockets.append(connect(broker, listener="CLIENT"))
        assert answered(sockets[-1], correlation_id)
    waiting = connect(broker, "127.0.0.3", listener="CLIENT")
    assert not_accepted(waiting, 5)
    for correlation_id in range(3):  # past the client listener's limit, on the other listener
        sockets.append(connect(broker))
        assert answered(sockets[-1], correlation_id)
    assert any("listener.name.client.max.connections=2 on listener CLIENT" in line for line in broker.output)
    sockets[0].close()
    assert read_answer(waiting) == 5
    waiting.close()


def test_idle_connections_and_senders_that_trickle_a_frame_are_closed(start_broker, sockets):
    broker = start_broker("connections.max.idle.ms=1500")
    silent, trickler, chatty = connect(broker), connect(broker), connect(broker)
    sockets.extend([silent, trickler, chatty])
    frame = api_versions(1, 4096)
    stop = threading.Event()
    chatted: list[bool] = []

    def trickle() -> None:
        for byte in frame:  # a byte each 50 ms: a frame that would take 3 minutes
            if stop.wait(0.05):
                return
            try:
                trickler.sendall(bytes([byte]))
            except OSError:
                return

    def chat() -> None:
        while not stop.wait(0.3):  # a request every 0.3 s: never idle for 1.5 s
            chatted.append(answered(chatty, len(chatted)))

    threads = [threading.Thread(target=trickle), threading.Thread(target=chat)]
    for thread in threads:
        thread.start()
    try:
        assert closed_by_broker(silent)
        assert closed_by_broker(trickler), "bytes of a request still arriving are not activity"
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    # Open all along, past the idle time the silent connection was closed after.
    assert chatted and all(chatted) and answered(chatty, len(chatted)), "the connection sending requests stayed open"
    assert metric(broker, "replog_connections_closed_total", reason="connections.max.idle.ms") >= 2
    produce_and_consume(broker)


def test_a_partition_created_during_a_descriptor_flood_gets_its_leaders(start_broker, sockets):
    """Probe: with 1,100 idle connections under a 1,024 file limit the high-watermark checkpoint
    failed with EMFILE, and a partition created meanwhile stayed LEADER_NOT_AVAILABLE after the
    flood ended. Now accepting stops short of the limit, keeping descriptors for the logs. The
    topic made here needs more than that headroom, so some of its logs still meet EMFILE: the
    idle connections that hold the descriptors are closed, and the opens tried again."""
    limit, partitions = 1024, 200
    broker = start_broker(rlimits={resource.RLIMIT_NOFILE: limit})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    warm = f"before-{uuid.uuid4().hex[:8]}"  # the admin's connection is made before the flood
    admin.create_topics([NewTopic(warm, 1, 1)], request_timeout=WAIT_S)[warm].result(WAIT_S)
    for _ in range(1100):
        try:
            sockets.append(socket.create_connection(("127.0.0.1", broker.port), timeout=3))
        except TimeoutError:
            break  # not accepted: the backlog is full
    topic = f"flooded-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=2 * WAIT_S)[topic].result(2 * WAIT_S)
    for connection in sockets:
        connection.close()
    sockets.clear()

    def led() -> bool:
        described = admin.list_topics(topic, timeout=WAIT_S).topics[topic]
        return len(described.partitions) == partitions and all(
            view.leader >= 0 and view.error is None for view in described.partitions.values())

    wait_until(led, f"every partition of {topic} led", timeout_s=60)
    produce_and_consume(broker)
    assert metric(broker, "replog_connections_closed_total", reason="descriptors") > 0
    assert not any("metadata update failed" in line for line in broker.output)
