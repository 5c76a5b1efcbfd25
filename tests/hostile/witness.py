"""Well-behaved clients on the broker a fuzzer attacks: what must keep working whatever the
hostile ones send.

`Witness`: a confluent-kafka producer (acks=all) writing numbered records to a topic of its own
at a steady rate, from a thread it owns, and a confluent-kafka consumer that reads back every
record acknowledged so far whenever asked (`check`). A delivery error, a record acknowledged
and not read back, or the thread ending early is a problem it reports.

`PartitionProbe`: whether one partition still takes and serves records after a case wrote to
it: a record produced there (acks=all) must be read by a consumer starting where the case
began, as a librdkafka consumer would; one that receives nothing and no error never gets there.
"""

from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

RATE_PER_S = 200
DELIVERY_TIMEOUT_MS = 120_000
READ_BACK_TIMEOUT_S = 30.0
PROBE_TIMEOUT_S = 5.0
POLL_S = 0.05
_CLIENT_SETTINGS = {"socket.connection.setup.timeout.ms": 5000, "reconnect.backoff.max.ms": 500,
                    "topic.metadata.refresh.interval.ms": 2000}


class Witness:
    def __init__(self, bootstrap: str, topic: str, rate_per_s: int = RATE_PER_S):
        self.topic = topic
        self._interval_s = 1.0 / rate_per_s
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                                   "message.timeout.ms": DELIVERY_TIMEOUT_MS, **_CLIENT_SETTINGS})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"witness-{uuid.uuid4().hex[:8]}",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 50, **_CLIENT_SETTINGS})
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self._lock = threading.Lock()
        self._acknowledged: set[int] = set()
        self._delivery_errors: list[str] = []
        self._read: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="witness-producer", daemon=True)
        self._thread_error: BaseException | None = None
        self.produced = 0

    def __enter__(self) -> Witness:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=DELIVERY_TIMEOUT_MS / 1000 + 10)
        self._consumer.close()

    @property
    def acknowledged(self) -> int:
        with self._lock:
            return len(self._acknowledged)

    def _produce(self) -> None:
        try:
            next_s = time.monotonic()
            while not self._stop.is_set():  # bounded by the stop event, set on leaving the `with`
                now_s = time.monotonic()
                if now_s >= next_s:
                    self._send(self.produced)
                    self.produced += 1
                    next_s += self._interval_s
                self._producer.poll(max(0.0, min(next_s - time.monotonic(), POLL_S)))
            self._producer.flush(DELIVERY_TIMEOUT_MS / 1000)
        except BaseException as error:  # noticed by check(): the witness must not stop silently
            self._thread_error = error

    def _send(self, number: int) -> None:
        def delivered(error, message) -> None:
            with self._lock:
                if error is None:
                    self._acknowledged.add(number)
                else:
                    self._delivery_errors.append(f"record {number}: {error}")

        for _ in range(100):  # librdkafka's queue is full while the broker does not answer: wait for room
            try:
                self._producer.produce(self.topic, value=b"%d" % number, on_delivery=delivered)
                return
            except BufferError:
                self._producer.poll(POLL_S)
        with self._lock:
            self._delivery_errors.append(f"record {number}: the producer's queue stayed full")

    def check(self, timeout_s: float = READ_BACK_TIMEOUT_S) -> list[str]:
        """Problems so far: delivery errors, a stopped producer, and acknowledged records the
        consumer does not read back within `timeout_s`."""
        problems = []
        with self._lock:
            expected = set(self._acknowledged)
            if self._delivery_errors:
                problems.append(f"the well-behaved producer's records failed: {self._delivery_errors[:5]} "
                                f"({len(self._delivery_errors)} in all)")
                self._delivery_errors.clear()
        if self._thread_error is not None or (not self._thread.is_alive() and not self._stop.is_set()):
            problems.append(f"the well-behaved producer's thread ended: {self._thread_error!r}")
        deadline = time.monotonic() + timeout_s
        while not expected <= self._read and time.monotonic() < deadline:  # bounded by the deadline
            message = self._consumer.poll(POLL_S)
            if message is not None and message.error() is None:
                self._read.add(int(message.value()))
        missing = expected - self._read
        if missing:
            problems.append(f"{len(missing)} of {len(expected)} acknowledged records were not read back within "
                            f"{timeout_s:.0f} s (first: {sorted(missing)[:5]})")
        return problems


class PartitionProbe:
    """A producer (acks=all) and a consumer for `PartitionProbe.readable`, reused across cases."""

    def __init__(self, bootstrap: str):
        self._producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                                   "message.timeout.ms": int(PROBE_TIMEOUT_S * 1000), **_CLIENT_SETTINGS})
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"probe-{uuid.uuid4().hex[:8]}",
                                   "enable.auto.commit": False, "fetch.wait.max.ms": 50, **_CLIENT_SETTINGS})

    def close(self) -> None:
        self._producer.flush(PROBE_TIMEOUT_S)
        self._consumer.close()

    def readable(self, topic: str, partition: int, from_offset: int) -> list[str]:
        """Produce a record to the partition; a consumer starting at `from_offset` must read it."""
        value = f"probe {uuid.uuid4().hex}".encode()
        delivered: list = []
        self._producer.produce(topic, key=b"probe", value=value, partition=partition,
                               on_delivery=lambda error, message: delivered.append((error, message.offset())))
        self._producer.flush(PROBE_TIMEOUT_S)
        if not delivered or delivered[0][0] is not None:
            return [f"a well-behaved producer's record to {topic}-{partition} failed: "
                    f"{delivered[0][0] if delivered else 'no delivery report'}"]
        acknowledged_offset = delivered[0][1]
        self._consumer.assign([TopicPartition(topic, partition, from_offset)])
        errors: list[str] = []
        last_offset = None
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        try:
            while time.monotonic() < deadline:  # bounded by the deadline
                message = self._consumer.poll(POLL_S)
                if message is None:
                    continue
                if message.error() is not None:
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        errors.append(str(message.error()))
                    continue
                last_offset = message.offset()
                if message.value() == value:
                    return []
        finally:
            self._consumer.unassign()
        return [f"{topic}-{partition} is unreadable: a consumer from offset {from_offset} did not reach the record "
                f"acknowledged at offset {acknowledged_offset} within {PROBE_TIMEOUT_S:.0f} s (last offset read: "
                f"{last_offset}, errors: {errors[:3]})"]
