"""Client quotas with real clients (confluent-kafka): on one broker, a producer whose client id
has producer_byte_rate 1 MB/s is throttled to about that while another producer is not, and
the same for consumers with consumer_byte_rate. Each rate is measured over 10 s and printed;
the test asserts only that the limited client was told a throttle time (librdkafka's
throttle_cb) and that its rate stayed below 2 MB/s.

The broker runs in the test's process; the quotas are set in the store, as `replog quotas`
sets them, and reach the broker by its quota feed. The clients run in threads of their own,
their calls blocking. The broker's rates
are measured over 2 windows of a second (quota.window.num): with Kafka's 11, a client's first
burst may carry 10 s worth of its quota before it is throttled, and a rate measured over the
first 10 s would show that burst rather than the rate the quota converges to."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import NamedTuple

from confluent_kafka import Consumer, Producer, TopicPartition

from replog.admin.client_quotas import QuotaAlteration, alter_client_quotas
from replog.security.quota_limits import QuotaType
from tests.clients.conftest import create_topic
from tests.net.in_process_broker import in_process_broker
from tests.support.polling import eventually

LIMIT_BYTES_PER_S = 1_000_000
MEASURED_S = 10.0
VALUE = b"q" * 10_000
FREE_BYTES_MAX = 40_000_000  # what the unlimited producer writes at most: disk, not rate, bounds it
ASSERTED_BYTES_PER_S = 2_000_000


class Measured(NamedTuple):
    bytes_per_s: float
    throttles_ms: list[int]


def _ms(event) -> int:
    return round(event.throttle_time * 1000)  # confluent-kafka's ThrottleEvent gives seconds


def _produce(bootstrap: str, client_id: str, topic: str) -> Measured:
    throttles: list[int] = []
    delivered = [0]

    def done(error, message) -> None:
        if error is None:
            delivered[0] += len(message.value())

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5, "acks": 1,
                         "queue.buffering.max.kbytes": 2048,
                         "throttle_cb": lambda event: throttles.append(_ms(event))})
    written = 0
    ends_s = time.monotonic() + MEASURED_S
    while time.monotonic() < ends_s:  # bounded by the measured time
        if written < FREE_BYTES_MAX:
            try:
                producer.produce(topic, VALUE, on_delivery=done)
                written += len(VALUE)
            except BufferError:  # the queue is full: the broker holds it back
                producer.poll(0.05)
                continue
        producer.poll(0 if written < FREE_BYTES_MAX else 0.1)
    measured = delivered[0] / MEASURED_S
    producer.purge(in_queue=True)
    producer.flush(30)
    return Measured(measured, throttles)


def _consume(bootstrap: str, client_id: str, topic: str) -> Measured:
    throttles: list[int] = []
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": client_id, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False,
                         "throttle_cb": lambda event: throttles.append(_ms(event))})
    read = 0
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        ends_s = time.monotonic() + MEASURED_S
        while time.monotonic() < ends_s:  # bounded by the measured time
            for message in consumer.consume(100, timeout=0.2):
                assert message.error() is None, message.error()
                read += len(message.value())
    finally:
        consumer.close()
    return Measured(read / MEASURED_S, throttles)


async def _compare(what: str, run, bootstrap: str, limited: tuple[str, str], free: tuple[str, str]) -> None:
    """Run the limited and the free client (client id, topic) at once; print both rates, check
    the limited one's."""
    on_limited, on_free = await asyncio.gather(asyncio.to_thread(run, bootstrap, *limited),
                                               asyncio.to_thread(run, bootstrap, *free))
    print(f"\n{what} over {MEASURED_S:g} s: {limited[0]} (quota {LIMIT_BYTES_PER_S} B/s) "
          f"{on_limited.bytes_per_s / 1e6:.2f} MB/s, throttled {len(on_limited.throttles_ms)} times, up to "
          f"{max(on_limited.throttles_ms, default=0)} ms; {free[0]} {on_free.bytes_per_s / 1e6:.2f} MB/s, throttled "
          f"{len(on_free.throttles_ms)} times (a producer writes at most {FREE_BYTES_MAX / 1e6:g} MB)")
    assert any(throttle_ms > 0 for throttle_ms in on_limited.throttles_ms)
    assert on_limited.bytes_per_s < ASSERTED_BYTES_PER_S


async def test_a_client_over_its_byte_rate_is_throttled_and_another_is_not(tmp_path):
    async with in_process_broker(tmp_path, **{"quota.window.num": "2"}) as broker:
        limited, free = f"limited-{uuid.uuid4().hex[:6]}", f"free-{uuid.uuid4().hex[:6]}"
        assert await alter_client_quotas(broker.store, [QuotaAlteration((("client-id", limited),), (
            (QuotaType.PRODUCE.value, LIMIT_BYTES_PER_S), (QuotaType.FETCH.value, LIMIT_BYTES_PER_S)))]) == [None]
        await eventually(lambda: broker.client_quotas.quota(QuotaType.FETCH, "ANONYMOUS", limited) is not None, 10,
                         "the quotas reached the broker")
        bootstrap = f"127.0.0.1:{broker.server.port}"
        limited_topic, free_topic = (await asyncio.gather(*(
            asyncio.to_thread(create_topic, bootstrap, f"t-{uuid.uuid4().hex[:10]}") for _ in range(2))))

        await _compare("produce", _produce, bootstrap, (limited, limited_topic), (free, free_topic))
        # Both read the unlimited producer's topic, which holds more than 10 s at the quota.
        await _compare("fetch", _consume, bootstrap, (limited, free_topic), (free, free_topic))
