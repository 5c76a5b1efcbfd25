"""What security costs one broker: produce and consume throughput with confluent-kafka over
PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-512), at 1 KiB and 16 KiB records, the broker's CPU per
megabyte of each, and how many SCRAM connections a second the broker takes.

    .venv/bin/python bench/security.py [--rounds R] [--sizes 1024,16384] [--handshakes N] [--quick]

Starts one `replog broker start` process (stopped at the end) with a PLAINTEXT, an SSL and a
SASL_SSL listener, its certificate made here by trustme (an ECDSA P-256 key, as trustme issues;
TLS 1.3 and AES-GCM are what librdkafka and Python's ssl agree on), and a SCRAM-SHA-512 user of
4,096 iterations (Kafka's default) made through the PLAINTEXT listener, as an operator would.

Throughput: for each record size, R rounds, the listeners' order rotating between rounds (so
that a machine growing busier or quieter weighs on all alike): a fresh topic of one partition,
its records produced by one confluent-kafka producer (acks=1) and read back by one consumer,
timed from the first record handed over to the last acknowledged or received; the broker's CPU
time (user + system, from /proc) over each is divided by the megabytes moved. Prints each run,
then the medians and each listener's share of PLAINTEXT's.

Connections: N connections one after the other, each a TCP connect, a TLS handshake, SaslHandshake
and the two SaslAuthenticate rounds of SCRAM-SHA-512 (scramp, the client side), then a close;
and as many TLS handshakes alone (ApiVersions on the SSL listener), for what TLS takes of it.
Prints the rate, the broker's CPU per connection, and the client's PBKDF2 (4,096 iterations of
HMAC-SHA-512: the client derives its key from the password, the broker only checks proofs
against the stored keys). Figures are printed, never asserted; the broker and the clients share
this machine's CPUs, so read them with `nproc` in mind.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import pathlib
import socket
import ssl
import statistics
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import scramp  # noqa: E402
import trustme  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (AdminClient, NewTopic, ScramCredentialInfo, ScramMechanism,  # noqa: E402
                                   UserScramCredentialUpsertion)

from bench.replication import cpu_seconds  # noqa: E402
from replog.net import codec  # noqa: E402
from replog.net.codec import ApiKey  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402

MODES = ("PLAINTEXT", "SSL", "SASL_SSL")
MECHANISM = "SCRAM-SHA-512"
ITERATIONS = 4096
USER, PASSWORD = "bench", "bench-Scram-pw-4096"
HANDSHAKES = 500
BYTES_FOR_SIZE = 256 << 20  # each run moves about this much
QUICK_BYTES = 4 << 20
ADMIN_TIMEOUT_S = 30
RUN_TIMEOUT_S = 600
CONSUME_BATCH = 1000


@contextlib.contextmanager
def secured_broker(work_dir: pathlib.Path) -> Iterator[tuple[BrokerProcess, pathlib.Path]]:
    """The broker, with a listener of each mode and the SCRAM user, and the CA file its clients trust."""
    ca = trustme.CA()
    ca_file, keystore = work_dir / "ca.pem", work_dir / "broker.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(keystore))
    broker = BrokerProcess(work_dir / "data", listeners=MODES, extra_args=(
        "--metrics-listen", "", "--set", f"ssl.keystore.location={keystore}",
        "--set", f"sasl.enabled.mechanisms={MECHANISM}"))
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held until the answer
        upsertion = UserScramCredentialUpsertion(USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, ITERATIONS),
                                                 PASSWORD.encode())
        for future in admin.alter_user_scram_credentials([upsertion]).values():
            future.result(ADMIN_TIMEOUT_S)
        yield broker, ca_file
    finally:
        broker.stop()


def client_settings(broker: BrokerProcess, ca_file: pathlib.Path, mode: str) -> dict[str, str]:
    settings = {"bootstrap.servers": f"127.0.0.1:{broker.ports[mode]}"}
    if mode != "PLAINTEXT":
        settings |= {"security.protocol": mode.lower(), "ssl.ca.location": str(ca_file)}
    if mode == "SASL_SSL":
        settings |= {"sasl.mechanism": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD}
    return settings


def new_topic(settings: dict[str, str]) -> str:
    topic = f"security-{uuid.uuid4().hex[:10]}"
    admin = AdminClient(settings)  # held until the answer: a client destroyed meanwhile fails it
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(ADMIN_TIMEOUT_S)
    return topic


def produce(settings: dict[str, str], topic: str, size: int, count: int) -> float:
    """Seconds from the first record handed to the producer to the last acknowledged."""
    producer = Producer(settings | {"acks": "1", "linger.ms": 5, "queue.buffering.max.kbytes": 1 << 20})
    value = os.urandom(size)
    started_s = time.perf_counter()
    for _ in range(count):  # bounded by the count; each turn hands one record over or waits for room
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(RUN_TIMEOUT_S) != 0:
        raise RuntimeError("records left unacknowledged")
    return time.perf_counter() - started_s


def consume(settings: dict[str, str], topic: str, count: int) -> float:
    """Seconds from subscribing to the last of `count` records received."""
    consumer = Consumer(settings | {"group.id": topic, "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                                    "max.partition.fetch.bytes": 16 << 20})
    started_s = time.perf_counter()
    consumer.assign([TopicPartition(topic, 0, 0)])
    received = 0
    deadline_s = started_s + RUN_TIMEOUT_S
    try:
        while received < count and time.perf_counter() < deadline_s:  # bounded by the deadline
            batch = consumer.consume(min(CONSUME_BATCH, count - received), 1.0)  # returns once it has them all
            received += sum(message.error() is None for message in batch)
    finally:
        consumer.close()
    if received < count:
        raise RuntimeError(f"{received} of {count} records read back")
    return time.perf_counter() - started_s


def measure(broker: BrokerProcess, ca_file: pathlib.Path, mode: str, size: int, count: int) -> dict[str, float]:
    settings = client_settings(broker, ca_file, mode)
    topic = new_topic(settings)
    megabytes = size * count / 1e6
    figures = {}
    for name, run in (("produce", lambda: produce(settings, topic, size, count)),
                      ("consume", lambda: consume(settings, topic, count))):
        cpu_before_s = cpu_seconds(broker.process.pid)
        seconds = run()
        figures[f"{name} MB/s"] = megabytes / seconds
        figures[f"{name} broker CPU ms/MB"] = (cpu_seconds(broker.process.pid) - cpu_before_s) / megabytes * 1e3
    admin = AdminClient(settings)  # held until the answer, as in new_topic
    admin.delete_topics([topic])[topic].result(ADMIN_TIMEOUT_S)
    return figures


class _Wire:
    """Requests on one blocking connection, for the connections' measurement."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.correlation_id = 0

    def ask(self, api_key: int, version: int, values: dict):
        self.correlation_id += 1
        body = codec.build(codec.request_schema(api_key, version), values)
        self.sock.sendall(codec.encode_request(api_key, version, self.correlation_id, "bench-security", body))
        (size,) = struct.unpack(">i", self._exactly(4))
        return codec.decode_response(api_key, version, self._exactly(size))[1]

    def _exactly(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:  # bounded by `size`; each recv returns bytes or ends it
            chunk = self.sock.recv(size - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return bytes(data)


def connect_once(port: int, context: ssl.SSLContext, scram: bool) -> None:
    """One connection: TLS, then SCRAM-SHA-512 (or ApiVersions alone); closed."""
    with context.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=ADMIN_TIMEOUT_S),
                             server_hostname="127.0.0.1") as sock:
        wire = _Wire(sock)
        if not scram:
            wire.ask(ApiKey.API_VERSIONS, 3, {"client_software_name": "bench", "client_software_version": "1"})
            return
        if wire.ask(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM}).error_code:
            raise RuntimeError("SaslHandshake refused")
        client = scramp.ScramClient([MECHANISM], USER, PASSWORD)
        first = wire.ask(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_first().encode()})
        client.set_server_first(first.auth_bytes.decode())
        final = wire.ask(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.get_client_final().encode()})
        if final.error_code:
            raise RuntimeError(f"SCRAM refused: {final.error_message}")
        client.set_server_final(final.auth_bytes.decode())


def measure_connections(broker: BrokerProcess, ca_file: pathlib.Path, count: int) -> None:
    context = ssl.create_default_context(cafile=str(ca_file))
    for label, mode, scram in (("TLS handshake + ApiVersions", "SSL", False),
                               (f"TLS + {MECHANISM} ({ITERATIONS} iterations)", "SASL_SSL", True)):
        cpu_before_s = cpu_seconds(broker.process.pid)
        started_s = time.perf_counter()
        for _ in range(count):  # bounded by the count
            connect_once(broker.ports[mode], context, scram)
        seconds = time.perf_counter() - started_s
        broker_ms = (cpu_seconds(broker.process.pid) - cpu_before_s) / count * 1e3
        print(f"connections, {label:40}: {count / seconds:8,.1f}/s one after another; broker CPU "
              f"{broker_ms:.2f} ms each", flush=True)
    salt = os.urandom(16)
    started_s = time.perf_counter()
    for _ in range(20):
        hashlib.pbkdf2_hmac("sha512", PASSWORD.encode(), salt, ITERATIONS)
    print(f"connections, the client's PBKDF2-HMAC-SHA-512 of {ITERATIONS} iterations: "
          f"{(time.perf_counter() - started_s) / 20 * 1e3:.2f} ms (client side only)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1024,16384", help="record sizes in bytes, comma-separated")
    parser.add_argument("--handshakes", type=int, default=HANDSHAKES, help="connections made for the rate")
    parser.add_argument("--quick", action="store_true", help="a few megabytes a run, one round: does it all work?")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.rounds
    moved_bytes = QUICK_BYTES if args.quick else BYTES_FOR_SIZE
    print(f"{os.cpu_count()} CPUs; broker and clients share them", flush=True)
    with tempfile.TemporaryDirectory(prefix="replog-bench-security-") as scratch, \
            secured_broker(pathlib.Path(scratch)) as (broker, ca_file):
        for size in (int(size) for size in args.sizes.split(",")):
            count = moved_bytes // size
            runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
            for round_index in range(rounds):
                for mode in MODES[round_index % len(MODES):] + MODES[:round_index % len(MODES)]:
                    runs[mode].append(measure(broker, ca_file, mode, size, count))
                    shown = ", ".join(f"{key} {value:,.1f}" for key, value in runs[mode][-1].items())
                    print(f"{size} B x {count:,} {mode:9}: {shown}", flush=True)
            for key in runs[MODES[0]][0]:
                medians = {mode: statistics.median(run[key] for run in runs[mode]) for mode in MODES}
                shown = "  ".join(f"{mode} {value:8,.1f}" for mode, value in medians.items())
                ratios = "  ".join(f"{mode}/PLAINTEXT {medians[mode] / medians['PLAINTEXT']:6.1%}"
                                   if medians["PLAINTEXT"] else f"{mode}/PLAINTEXT -" for mode in MODES[1:])
                print(f"{size} B {key:26} median {shown}  {ratios}", flush=True)
        measure_connections(broker, ca_file, 20 if args.quick else args.handshakes)


if __name__ == "__main__":
    main()
