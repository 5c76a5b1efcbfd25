"""Group consumers of each client for tests/clients/test_groups.py: confluent-kafka's, polled
by the test, and aiokafka's, kafka-python's and kcat's, which run on their own (a thread, a
process) and collect what they read until stopped. Each commits what it read: the Python ones
after every poll, kcat by its automatic commit, which it also does when it leaves."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import threading
import time

from confluent_kafka import Consumer

# Quick rebalances: a group that is empty waits little for more members, and short sessions
# are allowed so that the clients' heartbeats can be frequent.
GROUP_SETTINGS = (
    "--set", "group.initial.rebalance.delay.ms=300",
    "--set", "group.min.session.timeout.ms=1000",
    "--set", "offsets.topic.num.partitions=10",
)
SESSION_TIMEOUT_MS = 6000
HEARTBEAT_INTERVAL_MS = 300
STOP_TIMEOUT_S = 30
POLL_UNTIL_S = 60  # rebalances of a few consumers at SESSION_TIMEOUT_MS, and reading what moved


def confluent_consumer(bootstrap: str, group: str, topic: str, extra: dict | None = None, on_revoke=None) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "topic.metadata.refresh.interval.ms": 1000,
        **(extra or {}),
    })
    consumer.subscribe([topic], **({"on_revoke": on_revoke} if on_revoke else {}))
    return consumer


def poll_round(consumers: list[Consumer], read: dict[int, list[str]]) -> None:
    """One poll of each consumer; what it read is committed before its next poll, so a
    partition that moves at that poll moves with nothing read and uncommitted."""
    for index, consumer in enumerate(consumers):
        messages = consumer.consume(num_messages=100, timeout=0.1)
        for message in messages:
            assert message.error() is None, message.error()
            read.setdefault(index, []).append(message.value().decode())
        if messages:
            consumer.commit(asynchronous=False)


def poll_until(consumers: list[Consumer], read: dict[int, list[str]], condition, what: str) -> None:
    """Poll rounds until `condition()`; each round blocks on the consumers, so no sleep between."""
    deadline = time.monotonic() + POLL_UNTIL_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {POLL_UNTIL_S}s waiting for {what}; "
                                 f"read {sum(map(len, read.values()))}, "
                                 f"assignments {[sorted(p.partition for p in c.assignment()) for c in consumers]}")
        poll_round(consumers, read)


class _ThreadConsumer:
    def __init__(self, bootstrap: str, group: str, topic: str, session_timeout_ms: int = SESSION_TIMEOUT_MS):
        self.bootstrap, self.group, self.topic = bootstrap, group, topic
        self.session_timeout_ms = session_timeout_ms
        self._values: list[str] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def values(self) -> list[str]:
        if self.failure is not None:
            raise AssertionError(f"{type(self).__name__} failed") from self.failure
        with self._lock:
            return list(self._values)

    def _add(self, values: list[str]) -> None:
        with self._lock:
            self._values.extend(values)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(STOP_TIMEOUT_S)
        assert not self._thread.is_alive(), f"{type(self).__name__} did not stop"

    def _run(self) -> None:
        try:
            self._consume()
        except BaseException as failure:  # reported by values()
            self.failure = failure


class KafkaPythonConsumer(_ThreadConsumer):
    def _consume(self) -> None:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                                 metadata_max_age_ms=1000)
        try:
            while not self._stopping.is_set():  # until stopped
                batches = consumer.poll(timeout_ms=100)
                values = [message.value.decode() for messages in batches.values() for message in messages]
                if values:
                    self._add(values)
                    consumer.commit()
        finally:
            consumer.close()


class AiokafkaConsumer(_ThreadConsumer):
    def _consume(self) -> None:
        asyncio.run(self._consume_async())

    async def _consume_async(self) -> None:
        from aiokafka import AIOKafkaConsumer

        consumer = AIOKafkaConsumer(self.topic, bootstrap_servers=self.bootstrap, group_id=self.group,
                                    auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=SESSION_TIMEOUT_MS, heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS,
                                    metadata_max_age_ms=1000)
        await consumer.start()
        try:
            while not self._stopping.is_set():  # until stopped
                batches = await consumer.getmany(timeout_ms=100)
                values = [message.value.decode() for messages in batches.values() for message in messages]
                if values:
                    self._add(values)
                    await consumer.commit()
        finally:
            await consumer.stop()


class KcatConsumer(_ThreadConsumer):
    """`kcat -G`: a balanced consumer printing one value per line until SIGTERM."""

    def _consume(self) -> None:
        assert shutil.which("kcat"), "kcat is not installed (scripts/install-test-deps.sh)"
        self._process = subprocess.Popen(
            ["kcat", "-b", self.bootstrap, "-G", self.group, "-o", "beginning", "-f", "%s\n", "-u",
             "-X", f"session.timeout.ms={self.session_timeout_ms}", "-X", f"heartbeat.interval.ms={HEARTBEAT_INTERVAL_MS}",
             "-X", "auto.commit.interval.ms=100", "-X", "topic.metadata.refresh.interval.ms=1000", self.topic],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self._process.stdout:  # until the process ends
            self._add([line.rstrip("\n")])

    def kill(self) -> None:
        """SIGKILL: gone without leaving the group; only its session's end tells the coordinator."""
        self._process.kill()
        self._process.wait(STOP_TIMEOUT_S)
        super().stop()

    def stop(self) -> None:
        process = getattr(self, "_process", None)
        if process is not None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        super().stop()


FOREIGN_CONSUMERS = {"aiokafka": AiokafkaConsumer, "kafka-python": KafkaPythonConsumer, "kcat": KcatConsumer}
