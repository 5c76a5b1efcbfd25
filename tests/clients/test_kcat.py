"""kcat (librdkafka's command-line client) against a replog broker process: produce with -P -K -H,
consume with -C -J, seek by timestamp with -Q. kcat has no admin mode, and reads lines, so its
records are text, carry one header set per run, and are stamped by the producer."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from .records import MESSAGE_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION, Record, records
from .suite import Adapter, ClientSuite, ProduceFailed

pytestmark = pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (scripts/install-test-deps.sh)")

TIMEOUT_S = 30
HEADERS = (("source", b"kcat"), ("empty", b""), ("source", b"again"))
ERRORS = {"Broker: Unknown topic or partition": UNKNOWN_TOPIC_OR_PARTITION,
          "Broker: Message size too large": MESSAGE_TOO_LARGE}


def kcat(*arguments: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(["kcat", *arguments], input=stdin, capture_output=True, text=True, timeout=TIMEOUT_S)


class Kcat(Adapter):
    admin = "kcat has no admin mode"

    def sample(self, count):
        return records(count, text=True, headers=HEADERS, start_ms=-1)

    def produce(self, bootstrap, topic, batch, *, acks="all", compression=None, idempotent=False):
        assert all(r.headers == batch[0].headers and r.timestamp_ms is None for r in batch), "kcat sets no per-record headers or timestamps"
        headers = [f"-H{name}={value.decode()}" for name, value in batch[0].headers]
        done = kcat("-P", "-b", bootstrap, "-t", topic, "-p", "0", "-K", "\t", *headers,
                    "-X", f"acks={acks}", "-X", f"compression.codec={compression or 'none'}",
                    "-X", f"enable.idempotence={str(idempotent).lower()}", "-X", "topic.metadata.propagation.max.ms=1000",
                    "-X", "message.timeout.ms=10000",
                    stdin="".join(f"{r.key.decode()}\t{r.value.decode()}\n" for r in batch))
        if done.returncode != 0:
            codes = [code for text, code in ERRORS.items() if text in done.stderr]
            raise ProduceFailed(codes[0] if codes else -1, done.stderr)
        return [None] * len(batch)

    def read(self, bootstrap, topic, count, start=0):
        done = kcat("-C", "-b", bootstrap, "-t", topic, "-p", "0", "-o", str(start), "-c", str(count), "-J")
        assert done.returncode == 0, done.stderr
        got = []
        for line in done.stdout.splitlines():
            message = json.loads(line)
            flat = message.get("headers") or []
            headers = tuple((flat[i], flat[i + 1].encode()) for i in range(0, len(flat), 2))
            got.append(Record(message["key"].encode(), message["payload"].encode(), headers, message["ts"],
                              message["offset"]))
        return got

    def offset_for_time(self, bootstrap, topic, timestamp_ms):
        done = kcat("-Q", "-b", bootstrap, "-t", f"{topic}:0:{timestamp_ms}", "-J")
        assert done.returncode == 0, done.stderr
        offset = json.loads(done.stdout)[topic]["0"]["offset"]
        return offset if offset >= 0 else None


class TestKcat(ClientSuite):
    client = Kcat()
